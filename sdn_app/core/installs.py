"""What the reservations want on the switches, and the changes that get it there.

`Installs` holds each installed reservation's `FlowPlan` (flows, meters, fast-failover groups,
with ids from one `IdAllocator`), queues the ordered OpenFlow steps from one plan to the next as
`Change`s for the provisioner (`take_changes`), and knows which change of each reservation is
the current one, so a late report on a superseded change is ignored. After a restart it knows
the plans again and which reservations were caught mid-change, until reconciliation has made
every switch of theirs hold them (`reconciled`).
"""

from __future__ import annotations

from sdn_app.core.plans import FlowPlan, IdAllocator, Step, SwitchPlan, plan_for, plan_steps
from sdn_app.core.reservation import Change, Reservation
from sdn_app.core.topology import Topology


class Installs:
    """The flow plans of the reservations on the switches and the queue of changes to them."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self._plans: dict[str, FlowPlan] = {}
        self._tokens: dict[str, int] = {}  # reservation -> token of its latest confirmed change
        self._awaiting_reconcile: dict[str, set[str]] = {}  # caught mid-change at start-up -> switches left
        self._ids = IdAllocator()
        self._changes: list[Change] = []

    def __contains__(self, reservation_id: str) -> bool:
        """Whether the reservation has flows planned on the switches."""
        return reservation_id in self._plans

    def plan(self, reservation_id: str) -> FlowPlan | None:
        """The reservation's flow plan as the switches should hold it now (None: not installed)."""
        return self._plans.get(reservation_id)

    def install(self, reservation: Reservation) -> None:
        """Plan the reservation's flows on its route and queue their installation (confirmed)."""
        self._plans[reservation.id] = plan = self._plan(reservation)
        self._queue(reservation.id, plan_steps(None, plan), confirm=True)

    def move(self, reservation: Reservation) -> None:
        """Queue the make-before-break steps from the installed plan to the reservation's route
        and bandwidth as they are now (confirmed: the move ends when every hop answered)."""
        plan = self._plan(reservation)
        self._ids.retain(plan)
        self._queue(reservation.id, plan_steps(self._plans[reservation.id], plan), confirm=True)
        self._plans[reservation.id] = plan

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
            self._ids.release(reservation_id)
        self._tokens.pop(reservation_id, None)
        self._awaiting_reconcile.pop(reservation_id, None)

    def is_current(self, reservation_id: str, token: int | None) -> bool:
        """Whether a report on the change with `token` is about the reservation's latest one
        (None: a report that names no change, e.g. after reconciliation)."""
        return token is None or token == self._tokens.get(reservation_id)

    def switch_plan(self, switch: str) -> SwitchPlan:
        """Every flow, meter and group the reservations want on `switch` now."""
        parts = [plan.for_switch(switch) for plan in self._plans.values()]
        return SwitchPlan(tuple(f for p in parts for f in p.flows), tuple(m for p in parts for m in p.meters),
                          tuple(g for p in parts for g in p.groups))

    def take_changes(self) -> list[Change]:
        """The changes queued since the last call, in the order they must be applied."""
        changes, self._changes = self._changes, []
        return changes

    def resume(self, reservation: Reservation, mid_change: bool) -> None:
        """After a restart: the reservation's plan is known again (its ids taken); one caught
        installing or moving (`mid_change`) waits for every switch of its plan to be reconciled."""
        self._plans[reservation.id] = plan = self._plan(reservation)
        if mid_change:
            self._awaiting_reconcile[reservation.id] = set(plan.switches)

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

    def _plan(self, reservation: Reservation) -> FlowPlan:
        assert reservation.route is not None
        q = reservation.request
        return plan_for(self.topology, reservation.id, q.src, q.dst, reservation.route, reservation.meter_bps,
                        self._ids, src_prefix=q.src_prefix, dst_prefix=q.dst_prefix)

    def _queue(self, reservation_id: str, steps: list[Step], confirm: bool) -> None:
        """Hand steps to the adapter; a confirmed change supersedes earlier reports."""
        token = 0
        if confirm:
            token = self._tokens[reservation_id] = self._tokens.get(reservation_id, 0) + 1
            self._awaiting_reconcile.pop(reservation_id, None)
        self._changes.append(Change(reservation_id, tuple(steps), confirm, token))
