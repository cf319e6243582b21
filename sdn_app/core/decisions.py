"""What kind of rerouting decision a reservation event tells, read from its reason.

The book records every decision as an event whose reason carries the evidence
(`ReservationBook._relieve`, `_verdict`, `_rearrange`, `_continue_rearrangement`,
`advisor.attribute`). The live map, /metrics and the demo report name the decision from that
reason, with these two functions, so they agree with one another and with `tsdn path show`.
"""

from __future__ import annotations

# Every verdict of rate-driven rerouting, in the order people read them.
VERDICTS = ("moved", "rearranged", "hosts", "held", "budget", "no_room", "unmeasured", "access")
# Every cause of a move to another route.
CAUSES = ("link", "congestion", "rearrangement", "other")

RELIEF_DONE = "(rearrangement made room)"  # the relieved one's own move, the end of an announced rearrangement
_NOT_MOVED = (("; not moved: held down: ", "held"), ("; not moved: move budget spent: ", "budget"),
              ("; not moved: no path avoiding ", "no_room"), ("; not moved: no load measured on ", "unmeasured"),
              ("; not moved: the congestion is on a DTN's access link", "access"),
              ("; limited by the hosts: ", "hosts"))


def verdict(reason: str) -> str | None:
    """The rerouting decision `reason` announces (one of `VERDICTS`), or None when it announces none.

    The move that ends a rearrangement is no new decision: the rearrangement was announced,
    with its evidence, when it began."""
    for marker, kind in _NOT_MOVED:
        if marker in reason:
            return kind
    if not reason.startswith("congested: "):
        return None
    if "; rearranging to make room: " in reason:
        return "rearranged"
    if "; moving to " in reason and not reason.endswith(RELIEF_DONE):
        return "moved"
    return None


def reroute_cause(reason: str) -> str | None:
    """Why an event with `reason` moved its reservation to another route (one of `CAUSES`), or
    None when the reason announces no move: the book's moves say `...: moving to <path>`."""
    if "moving to " not in reason:
        return None
    if reason.startswith("link "):
        return "link"
    if reason.startswith("congested: "):
        return "congestion"
    if reason.startswith("rearrangement for "):
        return "rearrangement"
    return "other"
