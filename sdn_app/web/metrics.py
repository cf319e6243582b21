"""The controller's Prometheus metrics (prometheus_client, a registry of its own per controller).

Families (all prefixed `tsdn_`):
- `link_measured_bits_per_second{link,src,dst}`: load measured on each link direction (on an
  emulated network, at the emulated scale); `link_nominal_bits_per_second`: the same divided
  by the emulation scale; `link_utilization_ratio`: measured / (capacity x scale);
  `link_capacity_bits_per_second`: the nominal capacity; `link_up{link}`: 1 up, 0 down.
  Directions with no measurement yet have no sample.
- `reservations{state}`: live reservations by state.
- `admissions_refused_total{reason}`: create requests the core refused (no_capacity,
  failed_precondition).
- `reroutes_total{cause}`: reservations moved to another route (link, congestion, rearrangement:
  moved to make room for a congested one, other).
- `reroute_decisions_total{verdict}`: decisions of rate-driven rerouting, from the typed decision
  of the reservation events (`core.decisions.Decision.verdict`, never their reason text): moved,
  rearranged, and not moved because the
  hosts are the limit (hosts), held down (held), the move budget is spent (budget), no path has
  measured headroom (no_room), the path is not measured (unmeasured), or the congestion is on a
  DTN's access link (access).
- `link_congested{link,src,dst}`: 1 while the controller judges a link direction congested, 0
  when it measured it clear (`LinkWatch`); `link_unowned_bits_per_second`: the load measured there
  beyond the controller's own reservations (nominal). Directions not measured have no sample.
- `reservation_setup_seconds`: histogram of the time from a reservation's creation to ACTIVE.
- `ledger_repairs_total{cause,action}`: reservations whose loaded booking no longer fit the
  topology (cause: capacity, link_removed, dtn_removed), and what was done (rerouted, degraded,
  failed); counted by the book when it loads (`ReservationBook.repairs`).
- `throughput_bits_per_second`: nominal bits/s delivered to DTNs (the aggregate throughput).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sdn_app.core import decisions
from sdn_app.core.rerouting.congestion import Condition
from sdn_app.core.reservation import Event, State
from sdn_app.core.utilization import DirectionLoad

__all__ = ["CONTENT_TYPE", "ControllerMetrics", "reroute_cause", "verdict"]

SETUP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
# (cause, action) of the load-time repairs that can happen, shown at 0 until they do
LEDGER_REPAIRS = (("capacity", "rerouted"), ("capacity", "degraded"), ("capacity", "failed"),
                  ("link_removed", "rerouted"), ("link_removed", "failed"), ("dtn_removed", "failed"))


def reroute_cause(event: Event) -> str | None:
    """Why `event` moved its reservation to another route (`core.decisions.CAUSES`), or None
    when it is no move: the cause of its typed decision (MOVING with switches, the same state on
    a ledger-only controller); the confirmation after is no decision and not counted again."""
    if event.previous is None:
        return None
    decision = event.decision
    return decision.cause if decision is not None else None


def verdict(event: Event) -> str | None:
    """The rate-driven rerouting verdict of `event`'s typed decision (`core.decisions.VERDICTS`), or None."""
    if event.previous is None:
        return None
    decision = event.decision
    return decision.verdict if decision is not None else None


class ControllerMetrics:
    """The metric families, updated by the live map (`sdn_app.web.live`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        labels = ("link", "src", "dst")
        self.link_measured = Gauge("tsdn_link_measured_bits_per_second",
                                   "Load measured on a link direction (emulated scale on Mininet)", labels, registry=r)
        self.link_nominal = Gauge("tsdn_link_nominal_bits_per_second",
                                  "Load of a link direction at nominal scale (measured / emulation scale)", labels,
                                  registry=r)
        self.link_ratio = Gauge("tsdn_link_utilization_ratio",
                                "Fraction of a link direction's capacity in use (measured / capacity x scale)", labels,
                                registry=r)
        self.link_capacity = Gauge("tsdn_link_capacity_bits_per_second", "Nominal capacity of a link direction",
                                   labels, registry=r)
        self.link_up = Gauge("tsdn_link_up", "1 when the link is up (or not known down), 0 when down", ("link",),
                             registry=r)
        self.reservations = Gauge("tsdn_reservations", "Live reservations by state", ("state",), registry=r)
        self.refused = Counter("tsdn_admissions_refused", "Reservation requests refused by the core",
                               ("reason",), registry=r)
        self.reroutes = Counter("tsdn_reroutes", "Reservations moved to another route", ("cause",), registry=r)
        self.decisions = Counter("tsdn_reroute_decisions", "Decisions of rate-driven rerouting, by verdict",
                                 ("verdict",), registry=r)
        self.link_congested = Gauge("tsdn_link_congested",
                                    "1 while a link direction is judged congested, 0 when measured clear", labels,
                                    registry=r)
        self.link_unowned = Gauge("tsdn_link_unowned_bits_per_second",
                                  "Load measured on a link direction beyond the controller's own reservations "
                                  "(nominal)", labels, registry=r)
        self.setup = Histogram("tsdn_reservation_setup_seconds",
                               "Time from a reservation's creation to ACTIVE", buckets=SETUP_BUCKETS, registry=r)
        self.ledger_repairs = Counter("tsdn_ledger_repairs",
                                      "Reservations whose loaded booking no longer fit the topology, by cause and "
                                      "what was done", ("cause", "action"), registry=r)
        self._repairs_seen: dict[tuple[str, str], int] = {}
        for cause, action in LEDGER_REPAIRS:
            self.ledger_repairs.labels(cause, action)
        self.share_changes = Counter("tsdn_share_changes",
                                     "Elastic reservations' meters changed by a re-solve of the shares, by direction "
                                     "(grew or shrank)", ("direction",), registry=r)
        for direction in ("grew", "shrank"):
            self.share_changes.labels(direction)
        self.throughput = Gauge("tsdn_throughput_bits_per_second",
                                "Nominal bits/s delivered to DTNs (aggregate throughput)", registry=r)
        for state in State:
            self.reservations.labels(state.value).set(0)
        self._refused_seen: dict[str, int] = {}
        for reason in ("no_capacity", "failed_precondition"):
            self.refused.labels(reason)
        for cause in decisions.CAUSES:
            self.reroutes.labels(cause)
        for kind in decisions.VERDICTS:
            self.decisions.labels(kind)

    def observe_events(self, events: Iterable[Event]) -> None:
        """Count reroutes and time setups from reservation events."""
        for event in events:
            cause = reroute_cause(event)
            if cause is not None:
                self.reroutes.labels(cause).inc()
            if (kind := verdict(event)) is not None:
                self.decisions.labels(kind).inc()
            if event.decision is not None and event.decision.kind is decisions.Kind.SHARED:
                change = event.decision.shares[0]
                self.share_changes.labels("grew" if change.after_bps > change.before_bps else "shrank").inc()
            if event.reservation.state is State.ACTIVE and event.previous is State.PROVISIONING:
                self.setup.observe(max(0.0, event.time - event.reservation.created))

    def set_links(self, loads: Mapping[str, DirectionLoad], up: Mapping[str, bool]) -> None:
        """Set the link gauges from the loads of the switch-to-switch directions and link states."""
        for load in loads.values():
            if load.is_access:
                continue
            key = (load.link, load.src, load.dst)
            self.link_capacity.labels(*key).set(load.capacity)
            if load.measured_bps is None:
                for gauge in (self.link_measured, self.link_nominal, self.link_ratio):
                    with contextlib.suppress(KeyError):
                        gauge.remove(*key)
                continue
            self.link_measured.labels(*key).set(load.measured_bps)
            self.link_nominal.labels(*key).set(load.nominal_bps or 0.0)
            self.link_ratio.labels(*key).set(load.fraction or 0.0)
        for link, is_up in up.items():
            self.link_up.labels(link).set(1 if is_up else 0)

    def set_congestion(self, conditions: Iterable[Condition], directions: Mapping[str, tuple[str, str, str]]) -> None:
        """Set the congestion gauges from the core's verdicts; `directions`: id -> (link, src, dst)
        of every direction shown. A direction no longer measured loses its samples."""
        measured = {c.direction: c for c in conditions}
        for direction, key in directions.items():
            condition = measured.get(direction)
            if condition is None:
                for gauge in (self.link_congested, self.link_unowned):
                    with contextlib.suppress(KeyError):
                        gauge.remove(*key)
                continue
            self.link_congested.labels(*key).set(1 if condition.congested else 0)
            self.link_unowned.labels(*key).set(condition.unowned_bps)

    def set_refusals(self, totals: Mapping[str, int]) -> None:
        """Bring the refusal counters up to the core's totals (`ReservationBook.refusals`)."""
        for reason, total in totals.items():
            if total > self._refused_seen.get(reason, 0):
                self.refused.labels(reason).inc(total - self._refused_seen.get(reason, 0))
                self._refused_seen[reason] = total

    def set_ledger_repairs(self, totals: Mapping[tuple[str, str], int]) -> None:
        """Bring the repair counters up to the core's totals (`ledger_repair.repair_counts` of the book's `repairs`)."""
        for key, total in totals.items():
            seen = self._repairs_seen.get(key, 0)
            if total > seen:
                self.ledger_repairs.labels(*key).inc(total - seen)
                self._repairs_seen[key] = total

    def set_reservations(self, counts: Mapping[str, int]) -> None:
        for state in State:
            self.reservations.labels(state.value).set(counts.get(state.value, 0))

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)
