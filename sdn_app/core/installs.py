"""What the reservations want on the switches, and the changes that get it there.

`Installs` holds each installed reservation's `FlowPlan` (flows, meters, fast-failover groups,
with ids from one `IdAllocator`), queues the ordered OpenFlow steps from one plan to the next as
`Change`s for the provisioner (`take_changes`), and knows which change of each reservation is
the current one, so a late report on a superseded change is ignored. After a restart it knows
the plans again and which reservations were caught mid-change, until reconciliation has made
every switch of theirs hold them (`reconciled`).
"""

from __future__ import annotations

import collections
import math

from sdn_app.core.clock import Clock
from sdn_app.core.errors import FailedPrecondition, NoCapacity
from sdn_app.core.label_plans import PathKey, edge_plan, path_keys
from sdn_app.core.labels import DEFAULT_GRACE, DEFAULT_LABELS, PathTable
from sdn_app.core.paths import Route
from sdn_app.core.plans import DEFAULT_MAX_METER_ID, FlowPlan, IdAllocator, Step, SwitchPlan, plan_for, plan_steps
from sdn_app.core.reservation import Change, Reservation
from sdn_app.core.topology import Topology

LABELS = "labels"  # label-switched paths (`label_plans`): the default
PER_HOP = "per-hop"  # every reservation's own flows on every switch of its path (`plans.plan_for`)
FLOW_DESIGNS = (LABELS, PER_HOP)


class Installs:
    """The flow plans of the reservations on the switches and the queue of changes to them.

    With the `LABELS` design a reservation's plan holds only its ingress entries and meters;
    the shared entries of the paths it uses are `paths`' (a `PathTable`), and its changes name
    the labels they rely on (`Change.needs`)."""

    def __init__(self, topology: Topology, clock: Clock | None = None, design: str = LABELS,
                 labels: tuple[int, int] = DEFAULT_LABELS, grace: float = DEFAULT_GRACE,
                 max_meters: int = DEFAULT_MAX_METER_ID):
        if design not in FLOW_DESIGNS:
            raise ValueError(f"flow design {design!r}: one of {', '.join(FLOW_DESIGNS)}")
        self.topology = topology
        self.design = design
        self._clock = clock
        self._plans: dict[str, FlowPlan] = {}
        self._tokens: dict[str, int] = {}  # reservation -> token of its latest confirmed change
        self._awaiting_reconcile: dict[str, set[str]] = {}  # caught mid-change at start-up -> switches left
        self._ids = IdAllocator(max_meter_id=max_meters)
        self._changes: list[Change] = []
        self.paths = PathTable(topology, self._ids, labels, grace) if design == LABELS else None

    def __contains__(self, reservation_id: str) -> bool:
        """Whether the reservation has flows planned on the switches."""
        return reservation_id in self._plans

    def plan(self, reservation_id: str) -> FlowPlan | None:
        """The reservation's flow plan as the switches should hold it now (None: not installed)."""
        return self._plans.get(reservation_id)

    def install(self, reservation: Reservation) -> None:
        """Plan the reservation's flows on its route and queue their installation (confirmed)."""
        self._plans[reservation.id] = plan = self._plan(reservation)
        self._queue(reservation.id, plan_steps(None, plan), confirm=True, needs=self._needs(reservation))

    def move(self, reservation: Reservation) -> None:
        """Queue the make-before-break steps from the installed plan to the reservation's route
        and bandwidth as they are now (confirmed: the move ends when every hop answered). With
        labels: the new paths' entries first (usually in place already), then one steer change
        per direction at the ingress; the old paths are let go (kept for their grace)."""
        plan = self._plan(reservation)
        self._ids.retain(plan)
        self._queue(reservation.id, plan_steps(self._plans[reservation.id], plan), confirm=True,
                    needs=self._needs(reservation))
        self._plans[reservation.id] = plan
        self._drop_paths(reservation)

    def resize(self, reservation: Reservation) -> None:
        """Queue the meter change of an installed reservation whose meter rate changed on the same
        route (nothing to confirm: its traffic keeps flowing throughout)."""
        plan = self._plans.get(reservation.id)
        if plan is None:
            return
        self._plans[reservation.id] = replan = self._plan(reservation)
        self._queue(reservation.id, plan_steps(plan, replan), confirm=False)

    def uninstall(self, reservation_id: str) -> None:
        """Queue the removal of the reservation's flows and forget it."""
        plan = self._plans.pop(reservation_id, None)
        if plan is not None:
            self._queue(reservation_id, plan_steps(plan, None), confirm=False)
        self._ids.release(reservation_id)  # also what an install that ran out of ids took
        if self.paths is not None:
            for owner in _owners(reservation_id):
                self.paths.drop(owner, self._now())
        self._tokens.pop(reservation_id, None)
        self._awaiting_reconcile.pop(reservation_id, None)

    def check_room(self, route: Route, src_vlan: int | None = None, dst_vlan: int | None = None) -> None:
        """Raise `NoCapacity` when installing a reservation on `route` (with VLANs `src_vlan` and
        `dst_vlan` at its ends, None: untagged) would need meter ids or path labels that are not
        free (checked before anything is booked)."""
        ends = collections.Counter((route.primary.hops[0].switch, route.primary.hops[-1].switch))
        for switch, meters in sorted(ends.items()):  # a meter per direction at its ingress
            if self._ids.free(switch, "meter") < meters:
                raise NoCapacity(f"switch {switch} has no free meter id: all {self._ids.limits['meter']} are in use "
                                 "(--max-meters)")
        if self.paths is not None:
            self.paths.check_room([key for key in path_keys(route, src_vlan, dst_vlan).values() if key is not None])

    def is_current(self, reservation_id: str, token: int | None) -> bool:
        """Whether a report on the change with `token` is about the reservation's latest one
        (None: a report that names no change, e.g. after reconciliation)."""
        return token is None or token == self._tokens.get(reservation_id)

    def switch_plan(self, switch: str) -> SwitchPlan:
        """Every flow, meter and group the reservations want on `switch` now."""
        plans = [*self._plans.values(), *(self.paths.plans() if self.paths is not None else ())]
        parts = [plan.for_switch(switch) for plan in plans]
        return SwitchPlan(tuple(f for p in parts for f in p.flows), tuple(m for p in parts for m in p.meters),
                          tuple(g for p in parts for g in p.groups))

    def take_changes(self) -> list[Change]:
        """The changes queued since the last call, in the order they must be applied."""
        changes, self._changes = self._changes, []
        return changes

    def expire_paths(self) -> None:
        """Queue the removal of the shared paths nobody used for their grace period."""
        if self.paths is not None:
            self.paths.expire(self._now())
            self._changes.extend(self.paths.take_changes())

    def next_path_expiry(self) -> float:
        """When `expire_paths` next has something to do (math.inf: nothing waits)."""
        return self.paths.next_expiry() if self.paths is not None else math.inf

    def labels(self, reservation_id: str) -> dict[str, int]:
        """The path label of each direction of an installed reservation ({} with per-hop flows, or
        when both DTNs share a switch)."""
        if self.paths is None:
            return {}
        found = {}
        for owner in _owners(reservation_id):
            for key in self.paths.keys_of(owner):
                label = self.paths.label(key)
                if label is not None:
                    found[owner.split("/")[1]] = label
        return found

    def resume(self, reservation: Reservation, mid_change: bool) -> None:
        """After a restart: the reservation's plan is known again (its ids taken); one caught
        installing or moving (`mid_change`) waits for every switch of its plan to be reconciled."""
        self._plans[reservation.id] = plan = self._plan(reservation)
        if self.paths is not None:
            self.paths.take_changes()  # the switches hold them already, or reconciliation puts them there
        if mid_change:
            switches = set(plan.switches)
            if self.paths is not None:
                for owner in _owners(reservation.id):
                    for key in self.paths.keys_of(owner):
                        switches |= {h.switch for h in key.hops} | {h.switch for h in key.backup or ()}
            self._awaiting_reconcile[reservation.id] = switches

    def reconciled(self, switch: str) -> list[str]:
        """`switch` now holds exactly its `switch_plan`: the reservations caught mid-change by a
        restart whose every switch has now been reconciled."""
        done = []
        for reservation_id, waiting in list(self._awaiting_reconcile.items()):
            waiting.discard(switch)
            if not waiting:
                del self._awaiting_reconcile[reservation_id]
                done.append(reservation_id)
        return done

    def _now(self) -> float:
        return self._clock.now() if self._clock is not None else 0.0

    def _plan(self, reservation: Reservation) -> FlowPlan:
        assert reservation.route is not None
        q = reservation.request
        if self.paths is None:
            if q.src_vlan is not None or q.dst_vlan is not None:
                raise FailedPrecondition(f"{reservation.id}: VLANs at a reservation's ends need the label flow "
                                         f"design (--flow-design {LABELS}), not {self.design}")
            return plan_for(self.topology, reservation.id, q.src, q.dst, reservation.route, reservation.meter_bps,
                            self._ids, src_prefix=q.src_prefix, dst_prefix=q.dst_prefix)
        now = self._now()
        uses = {direction: self.paths.use(f"{reservation.id}/{direction}", key, now) if key is not None else None
                for direction, key in _keys(reservation).items()}
        return edge_plan(self.topology, reservation.id, q.src, q.dst, reservation.route, reservation.meter_bps,
                         self._ids, uses, src_prefix=q.src_prefix, dst_prefix=q.dst_prefix, src_vlan=q.src_vlan,
                         dst_vlan=q.dst_vlan)

    def _drop_paths(self, reservation: Reservation) -> None:
        """Let go of the paths the reservation used before its route changed."""
        if self.paths is None:
            return
        assert reservation.route is not None
        keys = _keys(reservation)
        for owner in _owners(reservation.id):
            key = keys[owner.split("/")[1]]
            self.paths.drop(owner, self._now(), keep=frozenset({key}) if key is not None else frozenset())

    def _queue(self, reservation_id: str, steps: list[Step], confirm: bool,
               needs: frozenset[int] = frozenset()) -> None:
        """Hand steps to the adapter, after the shared paths they need; a confirmed change
        supersedes earlier reports."""
        token = 0
        if confirm:
            token = self._tokens[reservation_id] = self._tokens.get(reservation_id, 0) + 1
            self._awaiting_reconcile.pop(reservation_id, None)
        if self.paths is not None:
            self._changes.extend(self.paths.take_changes())
        self._changes.append(Change(reservation_id, tuple(steps), confirm, token, needs=needs))

    def _needs(self, reservation: Reservation) -> frozenset[int]:
        """The labels of the paths the reservation's route uses (none with per-hop flows)."""
        if self.paths is None or reservation.route is None:
            return frozenset()
        return frozenset(label for key in _keys(reservation).values()
                         if key is not None and (label := self.paths.label(key)) is not None)


def _keys(reservation: Reservation) -> dict[str, PathKey | None]:
    """The path key of each direction of the reservation on its route, with its ends' VLANs."""
    assert reservation.route is not None
    return path_keys(reservation.route, reservation.request.src_vlan, reservation.request.dst_vlan)


def _owners(reservation_id: str) -> tuple[str, str]:
    """The path users of a reservation: its two directions."""
    return (f"{reservation_id}/forward", f"{reservation_id}/reverse")

