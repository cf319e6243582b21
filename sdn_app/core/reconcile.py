"""Reconciliation: the steps that make one switch hold exactly the tsdn entries it should.

After a switch reconnects, or the controller restarts, the switch may hold what the core no
longer wants (flows of a reservation released while the switch was away, a stale meter) and
lack what it wants (flows deleted by hand, an install that failed on a disconnected switch).
`reconcile(switch, expected, held)` compares what the reservations want there
(`ReservationBook.switch_plan(switch)`) with what the switch reports (decoded by the
OpenFlow adapter) and returns the ordered `Step`s, in the vocabulary of `plans.plan_steps`,
that remove the difference and nothing else:

1. delete the groups whose id is wanted but whose buckets (or type, or retag) differ (a group is never
   modified in place; the switch removes the flows using it, which step 3 adds back);
2. add missing meters and groups, modify meters whose rate or burst differ;
3. add missing flows and modify differing ones (same key, other action, meter or cookie),
   transit and egress first;
4. the ingress flows the same way (traffic enters only once its hops are in place);
5. delete the tsdn-cookie flows nobody owns (`plans.is_tsdn_cookie`; the base flows with
   cookie 0, table-miss drop and ARP to the controller, are never touched);
6. delete the groups and meters nobody uses (the controller alone manages the switch's
   meters and groups, so every one not expected is stale).
Each phase ends with a BARRIER on the switch; empty phases are left out, so a switch that
already holds the right entries gets no steps. An entry that is already right is never
deleted and added again (traffic does not blink on reconnect).

Meters are compared as the switch reports them: the adapter scales and rounds rates to
kbit/s and puts a floor under bursts, so `reconcile` takes `as_held`, the function giving
the meter a switch reports after installing a spec (`encoder.held_meter` with the scale);
the identity when specs are compared unchanged (simulated tables).

No os-ken here: the inputs and outputs are `plans` specs and steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from sdn_app.core.plans import (
    INGRESS,
    FlowSpec,
    GroupSpec,
    MeterSpec,
    Step,
    StepKind,
    SwitchPlan,
    is_tsdn_cookie,
)

S = TypeVar("S", FlowSpec, MeterSpec, GroupSpec)

# (step kind, what it does, the entry's word) in the order of `Reconciliation.summary`.
_SUMMARY = (
    (StepKind.ADD_FLOW, "added {n} missing flow{s}"),
    (StepKind.MODIFY_FLOW, "corrected {n} flow{s}"),
    (StepKind.DELETE_FLOW, "removed {n} stale flow{s}"),
    (StepKind.ADD_METER, "added {n} missing meter{s}"),
    (StepKind.MODIFY_METER, "corrected {n} meter{s}"),
    (StepKind.DELETE_METER, "removed {n} stale meter{s}"),
    (StepKind.ADD_GROUP, "added {n} missing group{s}"),
    (StepKind.DELETE_GROUP, "removed {n} stale or wrong group{s}"),
)


@dataclass(frozen=True)
class Reconciliation:
    """The steps that make `switch` hold exactly its expected tsdn entries."""

    switch: str
    steps: tuple[Step, ...]

    def count(self, kind: StepKind) -> int:
        """How many steps of `kind` there are."""
        return sum(1 for s in self.steps if s.kind is kind)

    @property
    def changes_anything(self) -> bool:
        """Whether the switch differs from what is expected."""
        return bool(self.steps)

    def summary(self) -> str:
        """`added 4 missing flows, removed 2 stale flows` (or `nothing to change`), for logs."""
        parts = [text.format(n=n, s="" if n == 1 else "s") for kind, text in _SUMMARY if (n := self.count(kind))]
        return ", ".join(parts) if parts else "nothing to change"


def _identity(meter: MeterSpec) -> MeterSpec:
    return meter


def _by_key(specs: Iterable[S], switch: str, what: str, side: str) -> dict[tuple, S]:
    out: dict[tuple, S] = {}
    for spec in specs:
        if spec.switch != switch:
            raise ValueError(f"reconciling {switch}: the {side} {what} {spec.describe()} is on another switch")
        other = out.get(spec.key)
        if other is not None and other != spec:
            raise ValueError(f"reconciling {switch}: two {side} {what}s share {spec.key[1:]}: "
                             f"{other.describe()} and {spec.describe()}")
        out[spec.key] = spec
    return out


def reconcile(switch: str, expected: SwitchPlan, held: SwitchPlan,
              as_held: Callable[[MeterSpec], MeterSpec] = _identity) -> Reconciliation:
    """Return the ordered steps that turn `held` (what `switch` reports) into `expected`.

    Only tsdn-cookie flows of `held` are considered (others are left alone); every meter and
    group of `held` is the controller's. `as_held(meter)` is how the switch reports a meter
    installed from `meter` (see the module docstring). Raises ValueError when a spec is on
    another switch, or when two different specs share a key on the same side (two
    reservations claiming one flow, meter or group).
    """
    want_flows = _by_key(expected.flows, switch, "flow", "expected")
    want_meters = _by_key(expected.meters, switch, "meter", "expected")
    want_groups = _by_key(expected.groups, switch, "group", "expected")
    have_flows = _by_key((f for f in held.flows if is_tsdn_cookie(f.cookie)), switch, "flow", "held")
    have_meters = _by_key(held.meters, switch, "meter", "held")
    have_groups = _by_key(held.groups, switch, "group", "held")

    def step(kind: StepKind, spec: FlowSpec | MeterSpec | GroupSpec, old=None) -> Step:
        return Step(kind, (switch,), spec, old)

    replaced = [key for key, group in want_groups.items() if key in have_groups
                and (have_groups[key].type, have_groups[key].buckets, have_groups[key].retag)
                != (group.type, group.buckets, group.retag)]
    replace_groups = [step(StepKind.DELETE_GROUP, have_groups[key]) for key in replaced]
    gone_group_ids = {key[1] for key in replaced}

    prepare: list[Step] = []
    for key, meter in want_meters.items():
        have = have_meters.get(key)
        if have is None:
            prepare.append(step(StepKind.ADD_METER, meter))
        else:
            reported = as_held(meter)
            if (have.rate_bps, have.burst_bits) != (reported.rate_bps, reported.burst_bits):
                prepare.append(step(StepKind.MODIFY_METER, meter, have))
    prepare += [step(StepKind.ADD_GROUP, group) for key, group in want_groups.items()
                if key not in have_groups or key[1] in gone_group_ids]

    downstream: list[Step] = []
    ingress: list[Step] = []
    for key, flow in want_flows.items():
        have = have_flows.get(key)
        if have is None or (have.group_id is not None and have.group_id in gone_group_ids):
            change = step(StepKind.ADD_FLOW, flow)  # missing, or removed with its replaced group
        elif have != flow:
            change = step(StepKind.MODIFY_FLOW, flow, have)
        else:
            continue
        (ingress if flow.role == INGRESS else downstream).append(change)

    stale_flows = [step(StepKind.DELETE_FLOW, flow) for key, flow in have_flows.items() if key not in want_flows
                   and not (flow.group_id is not None and flow.group_id in gone_group_ids)]
    release = [step(StepKind.DELETE_GROUP, g) for key, g in have_groups.items() if key not in want_groups]
    release += [step(StepKind.DELETE_METER, m) for key, m in have_meters.items() if key not in want_meters]

    steps: list[Step] = []
    for phase in (replace_groups, prepare, downstream, ingress, stale_flows, release):
        if phase:
            steps += phase
            steps.append(Step(StepKind.BARRIER, (switch,)))
    return Reconciliation(switch, tuple(steps))
