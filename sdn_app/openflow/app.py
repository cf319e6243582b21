"""The os-ken application: the only class here that subclasses the framework (Faucet's valve_ryuapp).

`TsdnOpenFlowApp` takes its `topology` and emulation `scale` as os-ken app kwargs
(`AppManager.instantiate_apps(topology=..., scale=...)`, which `fabric.start_openflow` does;
os-ken hands every app the same kwargs and its own `OFPHandler` ignores them). It decides
nothing about reservations; its handlers unpack an event and hand over:

- switch features (CONFIG_DISPATCHER): install the base flows, table-miss drop (default deny)
  and ARP to the controller;
- state changes: a datapath in MAIN_DISPATCHER is connected (tracked by dpid); in
  DEAD_DISPATCHER it is gone, and whoever waits on it is told;
- packet-in: ARP requests are answered for DTN addresses of the topology (`arp_answer`), with
  a packet-out on the port the request came in on; never flooded, everything else ignored;
- barrier replies, bundle control replies (OpenFlow bundles, `bundles`) and error messages go
  to the waiters registered for their (dpid, xid);
  the flow, meter-config and group-desc multipart replies (and errors) to `request`, which
  gathers every part until the last; `on_connected(dpid)` is told of each connect
  (reconciliation);
- link verification: the switch-features handler also installs LLDP to the controller; port
  descriptions (os-ken's handshake requests them), port status, switch connects and
  disconnects and LLDP packet-ins go to one `LinkMonitor` (sdn_app.core.links), the one owner
  of link observations; a sender thread packet-outs LLDP on every monitored port of every
  connected switch each `LLDP_INTERVAL` (and at once when a port comes up or a switch
  connects) and ticks the monitor. Each link change is logged (WARNING down, INFO up) and
  handed to `link_hook`, each wiring mismatch logged at WARNING.
- load: a poller thread sends every connected switch a port stats request each
  `STATS_INTERVAL`; each complete reply (every part gathered) goes to
  `port_stats_hook(dpid, counters, monotonic_time)` (the fabric's `UtilizationMeter`), and
  only while it is from the switch's current connection. `counters_reset_hook(dpid)` is told of
  each connect and disconnect: a switch's counters may restart then, so no rate may span it.
- roles (several controllers, `claim`): until a role is claimed nothing above changes. Once
  claimed, every switch that connects is sent the role request first; its base flows, LLDP
  and `on_connected` wait for the switch to confirm MASTER (a SLAVE gets none of them: Open
  vSwitch refuses a slave's flow-mods and packet-outs; `on_connected` comes once per
  connection, when it first confirms MASTER). A switch that answers a MASTER claim
  as stale (OFPRRFC_STALE), demotes this controller (the role status Open vSwitch sends when
  another controller claims MASTER) or refuses a write as from a slave (OFPBRC_IS_SLAVE)
  deposes it: logged at ERROR with the switch and the generation, and `write_refusal` says no
  to every write until a new claim. After a stale answer the switch is asked its generation
  (NOCHANGE) and this controller takes SLAVE at it, so the switch itself refuses its writes.
  Port stats, port status and multipart reads work in every role.

Threads: os-ken runs these handlers on the app's event thread; `Fabric.apply` runs on the
caller's. Shared state (datapaths, waiters, xids) is guarded by one lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_v1_3

from sdn_app.core.label_plans import STEER_TABLE
from sdn_app.core.links import Event, LinkChange, LinkMonitor, NetworkStatus
from sdn_app.core.topology import Topology
from sdn_app.core.utilization import PortCounters
from sdn_app.openflow import encoder

LOG = logging.getLogger("tsdn.openflow")
LLDP_INTERVAL = 1.0  # seconds between LLDP frames on each monitored port
SILENCE_TIMEOUT = 3.5  # seconds without LLDP on a link heard before: the link is down
STATS_INTERVAL = 1.0  # seconds between port stats requests to each switch (link load)
ROLE_NAMES = {ofproto_v1_3.OFPCR_ROLE_EQUAL: "equal", ofproto_v1_3.OFPCR_ROLE_MASTER: "master",
              ofproto_v1_3.OFPCR_ROLE_SLAVE: "slave", ofproto_v1_3.OFPCR_ROLE_NOCHANGE: "nochange"}
NO_GENERATION = (1 << 64) - 1  # what Open vSwitch reports while no generation was ever set


@dataclass(frozen=True)
class ArpAnswer:
    """What to answer: `target_ip` is at `target_mac`, to the asker at `asker_mac`/`asker_ip`."""

    asker_mac: str
    asker_ip: str
    target_mac: str
    target_ip: str


def arp_answer(topology: Topology, dpid: int, in_port: int, eth_src: str, opcode: int, src_mac: str,
               src_ip: str, dst_ip: str) -> ArpAnswer | None:
    """The answer to an ARP packet seen on switch `dpid` port `in_port`, or None to ignore it.

    Answered: requests whose sender is a DTN of the topology (its IPv4 and MAC, in the ARP
    header and the Ethernet source) arriving on that DTN's own access port, asking for
    another DTN's address. Everything else (replies, gratuitous ARP, strangers, requests
    from the wrong port, unknown targets) is ignored.
    """
    if opcode != arp.ARP_REQUEST or src_ip == dst_ip:
        return None
    asker = next((d for d in topology.dtns.values() if d.ipv4 == src_ip), None)
    target = next((d for d in topology.dtns.values() if d.ipv4 == dst_ip), None)
    if asker is None or target is None:
        return None
    if asker.mac.lower() != src_mac.lower() or asker.mac.lower() != eth_src.lower():
        return None
    if topology.switch_by_dpid(dpid) != asker.switch or in_port != asker.port:
        return None
    return ArpAnswer(asker_mac=asker.mac, asker_ip=asker.ipv4, target_mac=target.mac, target_ip=target.ipv4)


class Waiter:
    """Barrier replies and errors awaited for one batch: (dpid, xid) of each barrier, and the
    xids of the messages sent before it (whose errors are reported), bundle control messages
    among them (whose replies are kept)."""

    def __init__(self, lock: threading.RLock) -> None:
        self.cond = threading.Condition(lock)  # the app's lock: waiters change under it
        self.barriers: set[tuple[int, int]] = set()
        # (dpid, xid, type, code); an experimenter error (OFPET_EXPERIMENTER) carries its exp_type as code
        self.errors: list[tuple[int, int, int, int]] = []
        self.bundle_replies: dict[tuple[int, int], int] = {}  # (dpid, xid) -> ONF_BCT_* type of the reply
        self.gone: set[int] = set()

    def done(self) -> bool:
        return not self.barriers or bool(self.errors) or bool(self.gone)


class Replies:
    """The parts of the multipart reply to one request, until the last (no OFPMPF_REPLY_MORE)."""

    def __init__(self, lock: threading.RLock) -> None:
        self.cond = threading.Condition(lock)  # the app's lock
        self.body: list = []
        self.complete = False
        self.error: tuple[int, int] | None = None  # (type, code) of the switch's error
        self.gone = False


@dataclass
class RoleRequest:
    """One role request to one switch connection, and what came of it."""

    dp: object
    role: int  # OFPCR_ROLE_* asked for
    generation: int
    # "claim"; "query" (NOCHANGE after a stale answer, to learn the switch's generation);
    # "fallback" (SLAVE at that generation)
    stage: str = "claim"
    done: bool = False
    reason: str | None = None  # None: confirmed

    @property
    def role_name(self) -> str:
        return ROLE_NAMES.get(self.role, f"role {self.role}").upper()


class TsdnOpenFlowApp(app_manager.OSKenApp):
    """Base flows, ARP answers, datapath tracking and barrier/error routing for the fabric."""

    OFP_VERSIONS: ClassVar[list[int]] = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, topology: Topology | None = None, scale: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)
        if topology is None:
            raise ValueError("TsdnOpenFlowApp needs the topology (app kwarg topology=...)")
        self.topology = topology
        self.scale = scale
        self.lock = threading.RLock()
        self.datapaths: dict[int, object] = {}
        self.changed = threading.Condition(self.lock)
        # (dpid, xid) -> waiter, for every message of an apply batch and its barriers
        self._waiting: dict[tuple[int, int], Waiter] = {}
        self._replies: dict[tuple[int, int], Replies] = {}  # (dpid, xid) of a multipart request -> its reply
        self.on_connected: Callable[[int], None] | None = None  # dpid; called on the event thread, must not block
        self.links = LinkMonitor(topology, LLDP_INTERVAL, SILENCE_TIMEOUT)  # guarded by the lock
        self.link_hook: Callable[[LinkChange], None] | None = None  # called under the lock; must not block
        self._port_desc: dict[int, dict[int, bool]] = {}  # dpid -> ports of a multipart reply being gathered
        self._lldp_stop = threading.Event()
        # (dpid, counters, monotonic time) of each complete port stats reply; on the event thread, must not block
        self.port_stats_hook: Callable[[int, list[PortCounters], float], None] | None = None
        self._port_stats: dict[int, list[PortCounters]] = {}  # dpid -> parts of a reply being gathered
        # dpid of each connect and disconnect (its counters may restart); on the event thread, must not block
        self.counters_reset_hook: Callable[[int], None] | None = None
        # Roles (guarded by the lock). `wanted` stays None until `claim`: single-controller mode.
        self.wanted: str | None = None  # "master" or "slave": the role claimed
        self.role = "equal"  # the role held: "master" until a switch says otherwise
        self.generation = 0  # of the claim
        self.demoted: str | None = None  # why this controller no longer holds MASTER, in words
        self.newest_generation = 0  # the highest generation a switch reported
        self.switch_roles: dict[int, tuple[str, int]] = {}  # dpid -> (role, generation) its connection confirmed
        self._role_requests: dict[tuple[int, int], RoleRequest] = {}  # (dpid, xid) -> request in flight
        self._told: set[int] = set()  # dpids whose connection `on_connected` was called for

    def start(self):
        """Start the event loop, the LLDP sender and the port stats poller."""
        super().start()
        self.threads.append(hub.spawn(self._lldp_loop))
        self.threads.append(hub.spawn(self._stats_loop))

    def stop(self) -> None:
        """Stop the LLDP sender, the poller and the event loop."""
        self._lldp_stop.set()
        super().stop()

    # -- sending (one lock: datapath xids are not thread-safe in os-ken) -------------------

    def waiter(self) -> Waiter:
        """A new waiter for one batch of messages."""
        return Waiter(self.lock)

    def send(self, dp, msg, waiter: Waiter | None = None, barrier: bool = False) -> int:
        """Send `msg` to `dp` with a fresh xid; route its errors (and, for a `barrier`, its
        reply) to `waiter`. Raises ConnectionError when the datapath is closing."""
        with self.lock:
            xid = dp.set_xid(msg)
            if waiter is not None:
                self._waiting[(dp.id, xid)] = waiter
                if barrier:
                    waiter.barriers.add((dp.id, xid))
            if not dp.send_msg(msg):
                self._waiting.pop((dp.id, xid), None)
                if waiter is not None:
                    waiter.barriers.discard((dp.id, xid))
                raise ConnectionError(f"datapath {dp.id:#x} is closing")
            return xid

    def send_many(self, dp, msgs: list, waiter: Waiter | None = None) -> list[int]:
        """Send `msgs` to `dp` in order, written as one buffer, each with a fresh xid whose errors
        go to `waiter`; return their xids. Raises ConnectionError when the datapath is closing."""
        with self.lock:
            xids = [dp.set_xid(msg) for msg in msgs]
        for msg in msgs:  # serialized outside the lock: event handlers need it meanwhile
            msg.serialize()
        buf = b"".join(msg.buf for msg in msgs)
        with self.lock:
            if waiter is not None:
                for xid in xids:
                    self._waiting[(dp.id, xid)] = waiter
            if not dp.send(buf):
                for xid in xids:
                    self._waiting.pop((dp.id, xid), None)
                raise ConnectionError(f"datapath {dp.id:#x} is closing")
        return xids

    def request(self, dp, msg, timeout: float) -> list:
        """Send multipart request `msg` to `dp`; return the body entries of every part of its reply.

        Raises ConnectionError when the switch is or gets disconnected, TimeoutError when the
        last part has not come within `timeout` seconds, RuntimeError when the switch answers
        with an error.
        """
        replies = Replies(self.lock)
        with self.lock:
            xid = dp.set_xid(msg)
            key = (dp.id, xid)
            self._replies[key] = replies
            try:
                if not dp.send_msg(msg):
                    raise ConnectionError(f"switch {self.switch_name(dp.id)} (dpid {dp.id:#x}) is closing")
                deadline = time.monotonic() + timeout
                while not (replies.complete or replies.error or replies.gone):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"no complete reply from {self.switch_name(dp.id)} to "
                                           f"{type(msg).__name__} within {timeout:g}s")
                    replies.cond.wait(left)
            finally:
                self._replies.pop(key, None)
        if replies.error is not None:
            raise RuntimeError(f"switch {self.switch_name(dp.id)} refused {type(msg).__name__}: "
                               f"{encoder.describe_error(dp.ofproto, *replies.error)}")
        if replies.gone:
            raise ConnectionError(f"switch {self.switch_name(dp.id)} (dpid {dp.id:#x}) disconnected")
        return replies.body

    def forget(self, waiter: Waiter) -> None:
        """Drop every (dpid, xid) routed to `waiter`."""
        with self.lock:
            for key in [k for k, w in self._waiting.items() if w is waiter]:
                del self._waiting[key]

    def datapath(self, dpid: int):
        """The connected datapath `dpid`, or None."""
        with self.lock:
            return self.datapaths.get(dpid)

    def connected(self) -> set[int]:
        """Dpids of the connected switches."""
        with self.lock:
            return set(self.datapaths)

    def switch_name(self, dpid: int) -> str:
        return self.topology.switch_by_dpid(dpid) or f"dpid {dpid:#x}"

    # -- handlers ---------------------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev) -> None:
        dp = ev.msg.datapath
        if self.topology.switch_by_dpid(dp.id) is None:
            LOG.warning("switch with dpid %#x is not in topology %s; default deny only", dp.id, self.topology.name)
        with self.lock:
            if self.wanted is None:  # with a role claimed, they follow the switch's MASTER confirmation
                self._send_base_flows(dp)

    def _send_base_flows(self, dp) -> None:
        self.send(dp, encoder.table_miss_drop(dp))
        self.send(dp, encoder.table_miss_drop(dp, STEER_TABLE))  # OpenFlow 1.3 leaves a miss there to the switch
        self.send(dp, encoder.arp_to_controller(dp))
        self.send(dp, encoder.lldp_to_controller(dp))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev) -> None:
        dp = ev.datapath
        if dp.id is None:
            return
        with self.lock:
            claimed = self.wanted is not None
            if ev.state == MAIN_DISPATCHER:
                self.datapaths[dp.id] = dp
                self._port_stats.pop(dp.id, None)  # parts from an older connection
                self.switch_roles.pop(dp.id, None)
                self._told.discard(dp.id)
                LOG.info("switch %s (dpid %#x) connected from %s", self.switch_name(dp.id), dp.id, dp.address)
                self._link_events(self.links.switch_connected(dp.id, time.monotonic()))
                if claimed:  # the role first: what follows (reconciliation) writes to the switch
                    self._send_role(self._role_request(dp))
                else:
                    self._send_lldp(dp, [port for dpid, port in self.links.lldp_targets() if dpid == dp.id])
            elif ev.state == DEAD_DISPATCHER and self.datapaths.get(dp.id) is dp:
                del self.datapaths[dp.id]
                LOG.info("switch %s (dpid %#x) disconnected", self.switch_name(dp.id), dp.id)
                self._port_desc.pop(dp.id, None)
                self._port_stats.pop(dp.id, None)
                self.switch_roles.pop(dp.id, None)
                self._told.discard(dp.id)
                for key, request in list(self._role_requests.items()):
                    if request.dp is dp:
                        del self._role_requests[key]
                        request.done = True
                        request.reason = (request.reason
                                          or f"switch {self.switch_name(dp.id)} (dpid {dp.id:#x}) disconnected")
                self._link_events(self.links.switch_disconnected(dp.id, time.monotonic()))
                for (dpid, _), waiter in list(self._waiting.items()):
                    if dpid == dp.id:
                        waiter.gone.add(dpid)
                        waiter.cond.notify_all()
                for (dpid, _), replies in list(self._replies.items()):
                    if dpid == dp.id:
                        replies.gone = True
                        replies.cond.notify_all()
            else:
                return
            if ev.state == MAIN_DISPATCHER and not claimed:
                self._told.add(dp.id)
            self.changed.notify_all()
        self._tell_counters_reset(dp.id)
        if ev.state == MAIN_DISPATCHER and not claimed:
            self._tell_connected(dp.id)

    def _tell_counters_reset(self, dpid: int) -> None:
        hook = self.counters_reset_hook
        if hook is not None:
            try:
                hook(dpid)
            except Exception:
                LOG.exception("the counters-reset listener failed for %s", self.switch_name(dpid))

    def _tell_connected(self, dpid: int) -> None:
        hook = self.on_connected
        if hook is not None:
            try:
                hook(dpid)
            except Exception:
                LOG.exception("the switch-connected listener failed for %s", self.switch_name(dpid))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev) -> None:
        msg = ev.msg
        with self.lock:
            waiter = self._waiting.pop((msg.datapath.id, msg.xid), None)
            if waiter is not None:
                waiter.barriers.discard((msg.datapath.id, msg.xid))
                waiter.cond.notify_all()

    @set_ev_cls(ofp_event.EventONFBundleCtrlMsg, MAIN_DISPATCHER)
    def bundle_reply(self, ev) -> None:
        """A switch's reply to a bundle OPEN or COMMIT (ONF extension), for the waiter of its xid."""
        msg = ev.msg
        key = (msg.datapath.id, msg.xid)
        with self.lock:
            waiter = self._waiting.get(key)
            if waiter is not None:
                waiter.bundle_replies[key] = msg.type
                waiter.cond.notify_all()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error(self, ev) -> None:
        msg = ev.msg
        dpid = msg.datapath.id
        ofp = msg.datapath.ofproto
        with self.lock:
            request = self._role_requests.pop((dpid, msg.xid), None)
            if request is not None:
                self._role_refused(request, msg.type, msg.code)
                self.changed.notify_all()
                return
            if (msg.type, msg.code) == (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE):
                self._is_slave(msg.datapath)
            waiter = self._waiting.get((dpid, msg.xid))
            if waiter is not None:
                code = msg.exp_type if msg.type == ofp.OFPET_EXPERIMENTER else msg.code
                waiter.errors.append((dpid, msg.xid, msg.type, code))
                waiter.cond.notify_all()
                return
            replies = self._replies.get((dpid, msg.xid))
            if replies is not None:
                replies.error = (msg.type, msg.code)
                replies.cond.notify_all()
                return
        LOG.warning("switch %s: unsolicited error %s (xid %s)", self.switch_name(dpid),
                    encoder.describe_error(msg.datapath.ofproto, msg.type, msg.code), msg.xid)

    @set_ev_cls([ofp_event.EventOFPFlowStatsReply, ofp_event.EventOFPMeterConfigStatsReply,
                 ofp_event.EventOFPGroupDescStatsReply], MAIN_DISPATCHER)
    def multipart_reply(self, ev) -> None:
        msg = ev.msg
        with self.lock:
            replies = self._replies.get((msg.datapath.id, msg.xid))
            if replies is None:
                return
            replies.body.extend(msg.body)
            if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                replies.complete = True
            replies.cond.notify_all()

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev) -> None:
        msg = ev.msg
        dp = msg.datapath
        try:
            pkt = packet.Packet(msg.data)
        except Exception:  # a malformed frame is not ours to answer
            return
        eth = pkt.get_protocol(ethernet.ethernet)
        if eth is not None and eth.ethertype == encoder.ETH_TYPE_LLDP:
            self._lldp_in(dp, msg)
            return
        req = pkt.get_protocol(arp.arp)
        if eth is None or req is None:
            return
        in_port = msg.match.get("in_port")
        if in_port is None:
            return
        answer = arp_answer(self.topology, dp.id, in_port, eth.src, req.opcode, req.src_mac, req.src_ip, req.dst_ip)
        if answer is None or not self.may_packet_out(dp.id):
            return
        with contextlib.suppress(ConnectionError):
            self.send(dp, encoder.arp_reply(dp, in_port, asker_mac=answer.asker_mac, asker_ip=answer.asker_ip,
                                            target_mac=answer.target_mac, target_ip=answer.target_ip))

    # -- roles (several controllers) ---------------------------------------------------------

    def claim(self, leader: bool, generation: int) -> dict[int, RoleRequest]:
        """Claim MASTER (`leader`) or SLAVE with `generation` on every connected switch, and on every
        switch that connects from now on; the requests sent, by dpid (see `RoleRequest.done`)."""
        if not 0 <= generation < NO_GENERATION:
            raise ValueError(f"generation id {generation} is not a 64-bit unsigned number below 2^64-1")
        with self.lock:
            self.wanted = self.role = "master" if leader else "slave"
            self.generation = generation
            self.demoted = None
            self.switch_roles.clear()
            requests = {dpid: self._role_request(dp) for dpid, dp in self.datapaths.items()}
            for request in requests.values():
                self._send_role(request)
            return requests

    def may_packet_out(self, dpid: int) -> bool:
        """Whether this controller may send packet-outs to switch `dpid` (no role claimed, or its MASTER)."""
        with self.lock:
            return self.wanted is None or (self.role == "master"
                                           and self.switch_roles.get(dpid) == ("master", self.generation))

    def write_refusal(self, dpids: Iterable[int]) -> str | None:
        """Why this controller must not write to switches `dpids` now; None when it may."""
        with self.lock:
            if self.wanted is None:
                return None
            if self.role != "master":
                why = f": {self.demoted}" if self.demoted else ""
                return (f"this controller is not the OpenFlow master (role {self.role}, "
                        f"generation {self.generation}){why}")
            unconfirmed = sorted(d for d in set(dpids) if self.switch_roles.get(d) != ("master", self.generation))
            if unconfirmed:
                return "; ".join(f"switch {self.switch_name(d)} (dpid {d:#x}) has not confirmed this controller as "
                                 f"OpenFlow master (generation {self.generation})" for d in unconfirmed)
            return None

    def _role_request(self, dp) -> RoleRequest:
        """The request that claims this controller's role on `dp` (under the lock)."""
        ofp = dp.ofproto
        if self.role == "master":
            return RoleRequest(dp, ofp.OFPCR_ROLE_MASTER, self.generation)
        # a deposed master asks for SLAVE at the newest generation it knows of
        return RoleRequest(dp, ofp.OFPCR_ROLE_SLAVE, max(self.generation, self.newest_generation))

    def _send_role(self, request: RoleRequest) -> None:
        """Send `request` and route its reply or error to it (under the lock)."""
        dp = request.dp
        try:
            xid = self.send(dp, encoder.role_request(dp, request.role, request.generation))
        except ConnectionError:
            request.done = True
            request.reason = f"switch {self.switch_name(dp.id)} (dpid {dp.id:#x}) disconnected"
            return
        self._role_requests[(dp.id, xid)] = request

    def _saw_generation(self, generation: int) -> None:
        if generation != NO_GENERATION:
            self.newest_generation = max(self.newest_generation, generation)

    def _demote(self, dp, why: str, log: str) -> None:
        """Switch `dp` says this controller is not its master (`why`, for refusals; `log`, for the ERROR
        line): once it claimed MASTER, every write is refused from now on (under the lock)."""
        if self.wanted != "master":
            return
        if self.role == "master":
            self.role = "slave"
            self.demoted = why
            self.changed.notify_all()
            after = "was deposed and sends no more writes until a newer claim"
        else:
            after = "stays deposed"
        LOG.error("switch %s (dpid %#x): %s; this controller (OpenFlow MASTER claimed with generation %d) %s",
                  self.switch_name(dp.id), dp.id, log, self.generation, after)

    def _is_slave(self, dp) -> None:
        """Switch `dp` refused a write as from a slave (under the lock)."""
        if self.datapaths.get(dp.id) is dp:
            self.switch_roles[dp.id] = ("slave", self.switch_roles.get(dp.id, ("", self.generation))[1])
        self._demote(dp, f"switch {self.switch_name(dp.id)} considers this controller a SLAVE "
                         "(another controller took MASTER)",
                     "refused a write with OFPBRC_IS_SLAVE: another controller took the OpenFlow MASTER role")

    def _role_refused(self, request: RoleRequest, type_: int, code: int) -> None:
        """The switch answered `request` with an error (under the lock)."""
        dp = request.dp
        ofp = dp.ofproto
        name = self.switch_name(dp.id)
        if (type_, code) == (ofp.OFPET_ROLE_REQUEST_FAILED, ofp.OFPRRFC_STALE) and request.stage == "claim":
            request.reason = f"stale generation {request.generation}: the switch has seen a newer master"
            if request.role == ofp.OFPCR_ROLE_MASTER and request.generation == self.generation:
                self._demote(dp, f"switch {name} answered that generation {request.generation} is stale",
                             f"refused OpenFlow MASTER with generation {request.generation} as stale "
                             "(OFPRRFC_STALE): the switch has seen a newer master")
            # Learn the switch's generation, then take SLAVE at it (`role_reply` goes on).
            request.stage = "query"
            request.role = ofp.OFPCR_ROLE_NOCHANGE
            self._send_role(request)
            return
        what = encoder.describe_error(ofp, type_, code)
        if request.stage == "claim":
            request.reason = f"the switch refused OpenFlow role {request.role_name}: {what}"
        else:
            LOG.warning("switch %s (dpid %#x) refused role %s (generation %d) after a stale answer: %s", name, dp.id,
                        request.role_name, request.generation, what)
        request.done = True

    @set_ev_cls(ofp_event.EventOFPRoleReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def role_reply(self, ev) -> None:
        """A switch confirmed a role (or, after a stale answer, told its generation)."""
        msg = ev.msg
        dp = msg.datapath
        ofp = dp.ofproto
        connected = False
        with self.lock:
            request = self._role_requests.pop((dp.id, msg.xid), None)
            if request is None:
                return
            self._saw_generation(msg.generation_id)
            current = self.datapaths.get(dp.id) is dp
            role = ROLE_NAMES.get(msg.role, f"role {msg.role}")
            if request.stage == "query":
                newer = msg.generation_id
                request.reason = (f"stale generation {request.generation}: the switch has seen a newer master"
                                  + (f" (generation {newer})" if newer != NO_GENERATION else ""))
                request.done = True
                if current and newer != NO_GENERATION:
                    self._send_role(RoleRequest(dp, ofp.OFPCR_ROLE_SLAVE, newer, stage="fallback"))
            else:
                request.done = True
                if current:
                    self.switch_roles[dp.id] = (role, request.generation)
                if msg.role != request.role:
                    request.reason = f"the switch answered role {role.upper()} to a {request.role_name} request"
                if request.stage == "fallback":
                    LOG.warning("switch %s (dpid %#x): this controller is now OpenFlow %s at generation %d",
                                self.switch_name(dp.id), dp.id, role.upper(), request.generation)
                else:
                    LOG.info("switch %s (dpid %#x): OpenFlow role %s confirmed (generation %d)",
                             self.switch_name(dp.id), dp.id, role.upper(), request.generation)
                if current and role == "master" and self.role == "master" and request.generation == self.generation:
                    with contextlib.suppress(ConnectionError):
                        self._send_base_flows(dp)
                    self._send_lldp(dp, [port for dpid, port in self.links.lldp_targets() if dpid == dp.id])
                    # the switch is ready for writes: reconciliation may start (once per connection)
                    connected = dp.id not in self._told
                    self._told.add(dp.id)
            self.changed.notify_all()
        if connected:
            self._tell_connected(dp.id)

    @set_ev_cls(ofp_event.EventOFPExperimenter, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def experimenter(self, ev) -> None:
        """Open vSwitch's role status: another controller's MASTER claim made this one a SLAVE."""
        msg = ev.msg
        dp = msg.datapath
        status = encoder.role_status(msg.experimenter, msg.exp_type, msg.data)
        if status is None:
            return
        role, _, generation = status
        with self.lock:
            self._saw_generation(generation)
            name = ROLE_NAMES.get(role, f"role {role}")
            if self.datapaths.get(dp.id) is dp:
                self.switch_roles[dp.id] = (name, self.switch_roles.get(dp.id, ("", self.generation))[1])
            if role == dp.ofproto.OFPCR_ROLE_SLAVE:
                self._demote(dp, f"switch {self.switch_name(dp.id)} made it SLAVE: another controller claimed MASTER "
                                 f"with generation {generation}",
                             f"demoted this controller to SLAVE: another controller claimed MASTER with generation "
                             f"{generation}")
            self.changed.notify_all()

    # -- link verification ------------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def port_desc_reply(self, ev) -> None:
        """A switch's port descriptions (asked for by os-ken's handshake): every port's state."""
        msg = ev.msg
        dp = msg.datapath
        ofp = dp.ofproto
        with self.lock:
            gathered = self._port_desc.setdefault(dp.id, {})
            for port in msg.body:
                if port.port_no <= ofp.OFPP_MAX:
                    gathered[port.port_no] = encoder.port_is_up(ofp, port)
            if msg.flags & ofp.OFPMPF_REPLY_MORE:
                return
            del self._port_desc[dp.id]
            self._link_events(self.links.ports_described(dp.id, gathered, time.monotonic()))

    @set_ev_cls(ofp_event.EventOFPPortStatus, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def port_status(self, ev) -> None:
        """A port went up, down, or away; a monitored port coming up gets LLDP at once."""
        msg = ev.msg
        dp = msg.datapath
        ofp = dp.ofproto
        port = msg.desc.port_no
        removed = msg.reason == ofp.OFPPR_DELETE
        up = not removed and encoder.port_is_up(ofp, msg.desc)
        with self.lock:
            self._link_events(self.links.port_state(dp.id, port, up, time.monotonic(), removed=removed))
            if up and self.datapaths.get(dp.id) is dp and (dp.id, port) in self.links.lldp_targets():
                self._send_lldp(dp, [port])

    def _lldp_in(self, dp, msg) -> None:
        """An LLDP frame came in on `dp`: ours tells the monitor which link it crossed."""
        origin = encoder.lldp_origin(msg.data)
        in_port = msg.match.get("in_port")
        if origin is None or in_port is None:
            LOG.debug("switch %s: ignored an LLDP frame that tsdn did not send (in_port %s)",
                      self.switch_name(dp.id), in_port)
            return
        with self.lock:
            self._link_events(self.links.lldp_seen(origin[0], origin[1], dp.id, in_port, time.monotonic()))

    def _send_lldp(self, dp, ports: Iterable[int]) -> None:
        """Send tsdn's LLDP frame out of each of `ports` of `dp` and tell the monitor (not as a slave)."""
        with self.lock:
            if not self.may_packet_out(dp.id):
                return
            for port in ports:
                known = getattr(dp, "ports", None) or {}
                mac = known[port].hw_addr if port in known else _port_mac(dp.id, port)
                try:
                    self.send(dp, encoder.lldp_packet_out(dp, port, mac))
                except ConnectionError:
                    return
                self.links.lldp_sent(dp.id, port, time.monotonic())

    def lldp_round(self) -> None:
        """Send LLDP on every monitored port of every connected switch, then tick the monitor."""
        with self.lock:
            for dpid, port in self.links.lldp_targets():
                dp = self.datapaths.get(dpid)
                if dp is not None:
                    self._send_lldp(dp, [port])
            self._link_events(self.links.tick(time.monotonic()))

    def _lldp_loop(self) -> None:
        while not self._lldp_stop.wait(LLDP_INTERVAL):
            try:
                self.lldp_round()
            except Exception:  # one bad round must not end link verification
                LOG.exception("LLDP round failed")

    # -- load (port statistics) ---------------------------------------------------------------

    def stats_round(self) -> None:
        """Ask every connected switch for its port counters (the replies come to `port_stats_reply`)."""
        with self.lock:
            datapaths = list(self.datapaths.values())
        for dp in datapaths:
            with contextlib.suppress(ConnectionError):
                self.send(dp, encoder.port_stats_request(dp))

    def _stats_loop(self) -> None:
        while not self._lldp_stop.wait(STATS_INTERVAL):
            try:
                self.stats_round()
            except Exception:  # one bad round must not end load measurement
                LOG.exception("port stats round failed")

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats_reply(self, ev) -> None:
        """A part of a switch's port stats reply: gathered until the last, then handed on."""
        msg = ev.msg
        dp = msg.datapath
        now = time.monotonic()
        with self.lock:
            if self.datapaths.get(dp.id) is not dp:  # a connection gone or superseded: its counters are not the base
                return
            parts = self._port_stats.setdefault(dp.id, [])
            parts.extend(encoder.port_counters(dp.ofproto, msg.body))
            if msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
                return
            counters = self._port_stats.pop(dp.id)
        hook = self.port_stats_hook
        if hook is not None:
            try:
                hook(dp.id, counters, now)
            except Exception:
                LOG.exception("the port stats listener failed for %s", self.switch_name(dp.id))

    def _link_events(self, events: list[Event]) -> None:
        """Log each event; hand each link change to `link_hook` (called under the lock)."""
        for event in events:
            if isinstance(event, LinkChange):
                if event.up:
                    LOG.info("link %s up: %s", event.link, event.reason)
                else:
                    LOG.warning("link %s down: %s", event.link, event.reason)
                hook = self.link_hook
                if hook is not None:
                    try:
                        hook(event)
                    except Exception:
                        LOG.exception("the link listener failed on %s", event)
            else:
                LOG.warning("%s", event.message)

    def link_status(self) -> NetworkStatus:
        """A snapshot of switches, links and wiring mismatches now (`LinkMonitor.status`)."""
        with self.lock:
            return self.links.status(time.monotonic())


def _port_mac(dpid: int, port: int) -> str:
    """A locally administered source MAC for LLDP out of a port whose address is not known."""
    octets = [0x02, (dpid >> 16) & 0xFF, (dpid >> 8) & 0xFF, dpid & 0xFF, (port >> 8) & 0xFF, port & 0xFF]
    return ":".join(f"{o:02x}" for o in octets)
