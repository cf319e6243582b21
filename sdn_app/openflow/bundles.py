"""OpenFlow bundles for OpenFlow 1.3 switches: the ONF extension (experimenter 0x4F4E4600).

A bundle is a list of messages a switch applies as one: OPEN_REQUEST, one ADD per message,
COMMIT_REQUEST with `ONF_BF_ATOMIC | ONF_BF_ORDERED`. The switch answers OPEN and COMMIT with
a bundle control reply (os-ken parses it as `ONFBundleCtrlMsg`, event `EventONFBundleCtrlMsg`)
or an error. Pure functions, like `encoder`: they build messages, nothing is sent here.

What Open vSwitch 3.1 does with them (seen with a raw OpenFlow 1.3 connection):
- flow mods and group mods go in a bundle; a meter mod is refused when added (experimenter
  error ONFERR_ET_MSG_UNSUP) and is not part of the bundle, so `bundlable` says no to it and
  the fabric sends meter mods outside the bundle, before it;
- a message the switch refuses at commit (a flow to a group or meter that does not exist, a
  group that exists already) is reported with the xid of its ADD (os-ken gives the inner
  message the ADD's xid, so either one), then the COMMIT fails with ONFERR_ET_FAILED and
  nothing of the bundle is applied; only the first failing message is reported;
- a message refused when added (it cannot be decoded, or is not bundlable) is left out and
  the rest of the bundle still commits;
- a flow may use a group added earlier in the same bundle; an empty bundle commits.
"""

from __future__ import annotations

from typing import Any


def flags(ofp: Any) -> int:
    """The flags every bundle is opened, filled and committed with: atomic and ordered."""
    return ofp.ONF_BF_ATOMIC | ofp.ONF_BF_ORDERED


def open_request(dp: Any, bundle_id: int) -> Any:
    """ONF bundle control OPEN_REQUEST for `bundle_id`."""
    ofp = dp.ofproto
    return dp.ofproto_parser.ONFBundleCtrlMsg(dp, bundle_id, ofp.ONF_BCT_OPEN_REQUEST, flags(ofp), [])


def add_message(dp: Any, bundle_id: int, msg: Any) -> Any:
    """ONF bundle ADD of `msg` (a flow or group mod not yet sent; it takes the ADD's xid)."""
    return dp.ofproto_parser.ONFBundleAddMsg(dp, bundle_id, flags(dp.ofproto), msg, [])


def commit_request(dp: Any, bundle_id: int) -> Any:
    """ONF bundle control COMMIT_REQUEST for `bundle_id`."""
    ofp = dp.ofproto
    return dp.ofproto_parser.ONFBundleCtrlMsg(dp, bundle_id, ofp.ONF_BCT_COMMIT_REQUEST, flags(ofp), [])


def bundlable(dp: Any, msg: Any) -> bool:
    """Whether `msg` may go in a bundle: flow mods and group mods (Open vSwitch refuses meter mods)."""
    parser = dp.ofproto_parser
    return isinstance(msg, parser.OFPFlowMod | parser.OFPGroupMod)


def is_commit_reply(ofp: Any, reply_type: int) -> bool:
    """Whether a bundle control reply of type `reply_type` confirms a commit."""
    return reply_type == ofp.ONF_BCT_COMMIT_REPLY


def is_bundle_error(ofp: Any, type_: int, code: int | None) -> bool:
    """Whether an error answering a bundle ADD is about the bundle (the switch does not take the
    ADD itself: unknown extension, unsupported inner message...) rather than about its message."""
    if type_ == ofp.OFPET_EXPERIMENTER:
        return True
    return type_ == ofp.OFPET_BAD_REQUEST and code in (ofp.OFPBRC_BAD_TYPE, ofp.OFPBRC_BAD_EXPERIMENTER,
                                                      ofp.OFPBRC_BAD_EXP_TYPE)


def refuses_bundles(ofp: Any, type_: int, code: int | None) -> bool:
    """Whether an error answering a bundle OPEN means the switch does not do bundles as sent
    (unknown message, experimenter or type, or flags it cannot honour), as opposed to a refusal
    of this one write (a slave's, say)."""
    if type_ == ofp.OFPET_EXPERIMENTER:
        return code in (ofp.ONFERR_ET_UNKNOWN, ofp.ONFERR_ET_BAD_TYPE, ofp.ONFERR_ET_BAD_FLAGS,
                        ofp.ONFERR_ET_MSG_UNSUP)
    return type_ == ofp.OFPET_BAD_REQUEST and code in (ofp.OFPBRC_BAD_TYPE, ofp.OFPBRC_BAD_EXPERIMENTER,
                                                      ofp.OFPBRC_BAD_EXP_TYPE)


def describe_error(ofp: Any, type_: int, code: int | None, standard: Any) -> str:
    """`ONFERR_ET_FAILED` for an ONF experimenter error (its exp_type in `code`); any other error
    as `standard(ofp, type_, code)` words it (`encoder.describe_error`).

    >>> from os_ken.ofproto import ofproto_v1_3
    >>> describe_error(ofproto_v1_3, ofproto_v1_3.OFPET_EXPERIMENTER, 2313, None)
    'OFPET_EXPERIMENTER/ONFERR_ET_FAILED'
    """
    if type_ == ofp.OFPET_EXPERIMENTER:
        name = next((n for n in sorted(vars(ofp)) if n.startswith("ONFERR_ET_") and getattr(ofp, n) == code), None)
        return f"OFPET_EXPERIMENTER/{name or f'exp_type {code}'}"
    return standard(ofp, type_, code)
