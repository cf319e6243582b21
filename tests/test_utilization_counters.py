"""core.utilization with counters a switch cannot give: all ones (OpenFlow's "unavailable", what
Open vSwitch reports for a port being removed), a reconnect that restarts the counters, and jumps
no port could carry. Each is unknown, never load: not in the measured rates, the booth's total,
the congestion verdicts, or the live map (issue 22, item 7)."""

from __future__ import annotations

import pytest

from sdn_app.core.rerouting.congestion import LinkWatch
from sdn_app.core.rerouting.policy import ReroutePolicy
from sdn_app.core.topology import Topology
from sdn_app.core.utilization import COUNTER_MAX, PLAUSIBLE_FACTOR, PortCounters, UtilizationMeter, aggregate_bps
from sdn_app.web.live import LiveMap
from topologies import builtin_topology

ALL_ONES = 2**64 - 1
S1_TO_S2 = "s1:1->s2:2"  # ring8: s1 port 1 sends it, s2 port 2 receives it
G = 10**9


@pytest.fixture
def ring() -> Topology:
    return Topology.load(builtin_topology("ring8"))


@pytest.fixture
def sc16() -> Topology:
    return Topology.load(builtin_topology("sc16"))


def rate(meter: UtilizationMeter, direction: str, now: float) -> float | None:
    return meter.loads(now)[direction].measured_bps


@pytest.mark.parametrize("unavailable", [ALL_ONES, 2**64, -1], ids=["all-ones", "2^64", "negative"])
@pytest.mark.parametrize("which", ["tx", "rx"])
def test_an_unavailable_counter_makes_the_rate_unknown_and_the_next_two_samples_measure_again(ring, which,
                                                                                              unavailable):
    meter = UtilizationMeter(ring)
    meter.observe("s1", [PortCounters(1, 0, 0)], now=0.0)
    meter.observe("s1", [PortCounters(1, 1000, 1000)], now=1.0)
    assert rate(meter, S1_TO_S2, 1.0) == 8000

    bad = PortCounters(1, unavailable, 2000) if which == "tx" else PortCounters(1, 2000, unavailable)
    meter.observe("s1", [bad], now=2.0)
    loads = meter.loads(2.0)
    assert loads[S1_TO_S2].measured_bps is None, "an unavailable counter was taken as load"
    assert loads["s2:2->s1:1"].measured_bps is None  # the port's rx is not trusted either
    assert (loads[S1_TO_S2].nominal_bps, loads[S1_TO_S2].fraction) == (None, None)

    meter.observe("s1", [PortCounters(1, 50_000, 50_000)], now=3.0)  # a new base, not a rate from 1000
    assert rate(meter, S1_TO_S2, 3.0) is None
    meter.observe("s1", [PortCounters(1, 51_000, 50_500)], now=4.0)
    assert rate(meter, S1_TO_S2, 4.0) == 8000
    assert rate(meter, "s2:2->s1:1", 4.0) == 4000


def test_the_largest_real_counter_is_a_measurement(ring):
    meter = UtilizationMeter(ring)
    meter.observe("s1", [PortCounters(1, COUNTER_MAX - 1000, 0)], now=0.0)
    meter.observe("s1", [PortCounters(1, COUNTER_MAX, 0)], now=1.0)
    assert rate(meter, S1_TO_S2, 1.0) == 8000


def test_an_unavailable_first_sample_is_no_base(ring):
    meter = UtilizationMeter(ring)
    meter.observe("s1", [PortCounters(1, ALL_ONES, ALL_ONES)], now=0.0)
    meter.observe("s1", [PortCounters(1, 1000, 0)], now=1.0)
    assert rate(meter, S1_TO_S2, 1.0) is None
    meter.observe("s1", [PortCounters(1, 2000, 0)], now=2.0)
    assert rate(meter, S1_TO_S2, 2.0) == 8000


def test_an_unavailable_sender_falls_back_to_what_the_receiver_counted(ring):
    meter = UtilizationMeter(ring)
    for t, sent in ((0.0, 0), (1.0, 1000)):
        meter.observe("s1", [PortCounters(1, sent, 0)], now=t)
        meter.observe("s2", [PortCounters(2, 0, sent)], now=t)
    meter.observe("s1", [PortCounters(1, ALL_ONES, ALL_ONES)], now=2.0)
    meter.observe("s2", [PortCounters(2, 0, 1500)], now=2.0)
    assert rate(meter, S1_TO_S2, 2.0) == 4000  # s2's own count of what arrived


def test_other_ports_of_the_switch_keep_their_rates(ring):
    meter = UtilizationMeter(ring)
    meter.observe("s1", [PortCounters(1, 0, 0), PortCounters(3, 0, 0)], now=0.0)
    meter.observe("s1", [PortCounters(1, 1000, 0), PortCounters(3, 2000, 0)], now=1.0)
    meter.observe("s1", [PortCounters(1, 2000, 0), PortCounters(3, ALL_ONES, ALL_ONES)], now=2.0)
    loads = meter.loads(2.0)
    assert loads[S1_TO_S2].measured_bps == 8000
    assert loads["s1:3->dtn1"].measured_bps is None


def test_a_reconnect_drops_the_base_even_when_the_fresh_counter_is_above_it(ring):
    meter = UtilizationMeter(ring)
    meter.observe("s1", [PortCounters(1, 1000, 0)], now=0.0)
    meter.observe("s1", [PortCounters(1, 2000, 0)], now=1.0)
    assert rate(meter, S1_TO_S2, 1.0) == 8000
    meter.forget("s1")  # the adapter does this on each connect and disconnect
    # fresh counters that happen to be above the old base: without the forget, 3000 bytes in a second
    meter.observe("s1", [PortCounters(1, 5000, 0)], now=2.0)
    assert rate(meter, S1_TO_S2, 2.0) is None
    meter.observe("s1", [PortCounters(1, 5500, 0)], now=3.0)
    assert rate(meter, S1_TO_S2, 3.0) == 4000


def test_a_reconnect_with_counters_going_back_gives_no_rate_until_the_second_sample(ring):
    meter = UtilizationMeter(ring)
    meter.observe("s1", [PortCounters(1, 10_000, 0)], now=0.0)
    meter.observe("s1", [PortCounters(1, 20_000, 0)], now=1.0)
    meter.forget("s1")
    meter.observe("s1", [PortCounters(1, 100, 0)], now=2.0)
    assert rate(meter, S1_TO_S2, 2.0) is None
    meter.observe("s1", [PortCounters(1, 1100, 0)], now=3.0)
    assert rate(meter, S1_TO_S2, 3.0) == 8000


def test_a_jump_no_port_could_carry_is_unknown_and_rebases(ring):
    scale = 0.001  # ring8's 100G links run at 100 Mbit/s
    meter = UtilizationMeter(ring, scale=scale)
    wire = 100 * G * scale
    meter.observe("s1", [PortCounters(1, 0, 0)], now=0.0)
    jump = int(PLAUSIBLE_FACTOR * wire / 8) + 1000  # just beyond what the port could send in that second
    meter.observe("s1", [PortCounters(1, jump, 0)], now=1.0)
    assert rate(meter, S1_TO_S2, 1.0) is None
    meter.observe("s1", [PortCounters(1, jump + 6_250_000, 0)], now=2.0)  # 50 Mbit/s from the new base
    load = meter.loads(2.0)[S1_TO_S2]
    assert (load.measured_bps, load.fraction) == (50_000_000, 0.5)


def test_a_rate_somewhat_above_capacity_is_shown_as_measured(ring):
    meter = UtilizationMeter(ring, scale=0.001)
    meter.observe("s1", [PortCounters(1, 0, 0)], now=0.0)
    meter.observe("s1", [PortCounters(1, 18_750_000, 0)], now=1.0)  # 150 Mbit/s on a 100 Mbit/s wire
    assert meter.loads(1.0)[S1_TO_S2].fraction == pytest.approx(1.5)


def test_replies_handled_back_to_back_after_a_stall_give_no_spike(ring):
    meter = UtilizationMeter(ring, scale=0.001)
    meter.observe("s1", [PortCounters(1, 0, 0)], now=0.0)
    meter.observe("s1", [PortCounters(1, 6_250_000, 0)], now=1.0)  # 50 Mbit/s
    # the replies of two polls queued behind a busy event thread, handled 1 ms apart
    meter.observe("s1", [PortCounters(1, 12_500_000, 0)], now=3.000)
    meter.observe("s1", [PortCounters(1, 18_750_000, 0)], now=3.001)
    assert rate(meter, S1_TO_S2, 3.001) is None  # not 50 Gbit/s on a 100 Mbit/s wire
    meter.observe("s1", [PortCounters(1, 25_000_000, 0)], now=4.001)
    assert rate(meter, S1_TO_S2, 4.001) == pytest.approx(50_000_000)


def sc16_teardown(sc16: Topology, scale: float) -> UtilizationMeter:
    """SC16 with 300G (nominal) into every DTN, then every switch -> DTN port but caltech-a's port 21
    being removed (all ones), as in the demo's teardown; samples at 0, 1 and 2 s."""
    meter = UtilizationMeter(sc16, scale=scale)
    per_second = int(300 * G * scale / 8)
    for d in sc16.directions.values():
        if not (d.is_access and d.src in sc16.switches):
            continue
        removed = (d.src, d.src_port) != ("caltech-a", 21)
        for t, sent in ((0.0, 0), (1.0, per_second), (2.0, ALL_ONES if removed else 2 * per_second)):
            meter.observe(d.src, [PortCounters(d.src_port, sent, ALL_ONES if removed and t == 2.0 else 0)], now=t)
    return meter


def test_the_booth_total_and_congestion_do_not_see_ports_being_removed(sc16):
    loads = sc16_teardown(sc16, scale=0.001).loads(2.0)
    assert aggregate_bps(loads.values()) == pytest.approx(300 * G)  # the one port still counting
    assert loads["caltech-a:21->caltech-a-dtn1"].fraction == pytest.approx(0.75)
    removed = [d for d in loads.values() if d.is_access and d.src in sc16.switches
               and d.direction != "caltech-a:21->caltech-a-dtn1"]
    assert len(removed) > 10 and all(d.measured_bps is None and d.fraction is None for d in removed)

    watch = LinkWatch(sc16, ReroutePolicy())
    assert watch.observe(loads, owned={}, now=2.0) == []  # 75% is below congested_at; the rest is unknown
    assert all(watch.condition(d.direction) is None for d in removed)
    assert watch.congested_links() == set()


def test_congestion_is_still_judged_on_a_real_full_dtn_port(sc16):
    """The control for the test above: the same measurements without the teardown do congest."""
    meter = UtilizationMeter(sc16, scale=0.001)
    for t in (0.0, 1.0):
        meter.observe("caltech-a", [PortCounters(21, int(t * 390 * G * 0.001 / 8), 0)], now=t)
    watch = LinkWatch(sc16, ReroutePolicy())
    changed = watch.observe(meter.loads(1.0), owned={}, now=1.0)
    assert [c.direction for c in changed if c.congested] == ["caltech-a:21->caltech-a-dtn1"]


class _MeteredFabric:
    """What the live map reads of a fabric (`utilization`, `link_status`), over a real meter."""

    def __init__(self, meter: UtilizationMeter, now: float):
        self.meter, self.now = meter, now

    def utilization(self):
        return self.meter.loads(self.now)

    def link_status(self):
        return None


def test_the_live_map_shows_ports_being_removed_as_unknown_not_as_load(sc16):
    scale = 0.001
    meter = sc16_teardown(sc16, scale)
    core = next(d for d in sc16.directions.values() if not d.is_access)
    for t, sent in ((0.0, 0), (1.0, 1000), (2.0, ALL_ONES)):  # a switch-to-switch port removed too
        meter.observe(core.src, [PortCounters(core.src_port, sent, sent)], now=t)

    snapshot = LiveMap(None, sc16, _MeteredFabric(meter, 2.0), scale=scale).snapshot()
    assert snapshot["throughput"][-1]["measured_bps"] == pytest.approx(300 * G)  # not 8e24
    shown = {d["id"]: d for link in snapshot["links"] for d in link["directions"]}
    assert (shown[core.id]["measured_bps"], shown[core.id]["nominal_bps"], shown[core.id]["fraction"]) == \
        (None, None, None)
    assert not shown[core.id]["congested"]
    assert max(link["fraction"] for link in snapshot["links"]) <= PLAUSIBLE_FACTOR
