"""core.utilization: port byte counters -> bits/s per link direction."""

from __future__ import annotations

import pytest

from sdn_app.core.topology import Topology
from sdn_app.core.utilization import PortCounters, UtilizationMeter, aggregate_bps
from topologies import builtin_topology

S1_TO_S2 = "s1:1->s2:2"
S2_TO_S1 = "s2:2->s1:1"


@pytest.fixture
def ring() -> Topology:
    return Topology.load(builtin_topology("ring8"))


def test_first_sample_gives_no_rate(ring):
    meter = UtilizationMeter(ring)
    meter.observe("s1", [PortCounters(1, 1000, 1000)], now=1.0)
    load = meter.loads(1.0)[S1_TO_S2]
    assert (load.measured_bps, load.nominal_bps, load.fraction) == (None, None, None)


def test_rate_from_two_samples_with_scale(ring):
    meter = UtilizationMeter(ring, scale=0.001)  # 100G links run at 100 Mbit/s
    meter.observe("s1", [PortCounters(1, 0, 0)], now=10.0)
    meter.observe("s1", [PortCounters(1, 2_500_000, 1_250_000)], now=12.0)  # 10 Mbit/s out, 5 in
    loads = meter.loads(12.0)
    assert loads[S1_TO_S2].measured_bps == 10_000_000
    assert loads[S1_TO_S2].nominal_bps == pytest.approx(10e9)
    assert loads[S1_TO_S2].fraction == pytest.approx(0.1)
    # s2 has not answered: the reverse direction falls back to what s1's port receives
    assert loads[S2_TO_S1].measured_bps == 5_000_000


def test_sender_counters_win_over_receiver(ring):
    meter = UtilizationMeter(ring)
    for t, sent, received in ((0.0, 0, 0), (1.0, 1000, 500)):
        meter.observe("s1", [PortCounters(1, sent, 0)], now=t)
        meter.observe("s2", [PortCounters(2, 0, received)], now=t)
    assert meter.loads(1.0)[S1_TO_S2].measured_bps == 8000


def test_counter_reset_rebases_without_a_negative_rate(ring):
    meter = UtilizationMeter(ring)
    meter.observe("s1", [PortCounters(1, 10_000, 0)], now=0.0)
    meter.observe("s1", [PortCounters(1, 20_000, 0)], now=1.0)
    meter.observe("s1", [PortCounters(1, 500, 0)], now=2.0)  # the switch restarted
    assert meter.loads(2.0)[S1_TO_S2].measured_bps is None  # a new base, not a negative rate
    meter.observe("s1", [PortCounters(1, 1500, 0)], now=3.0)
    assert meter.loads(3.0)[S1_TO_S2].measured_bps == 8000


def test_missing_replies_make_the_rate_unknown(ring):
    meter = UtilizationMeter(ring, stale_after=3.5)
    meter.observe("s1", [PortCounters(1, 0, 0)], now=0.0)
    meter.observe("s1", [PortCounters(1, 1000, 0)], now=1.0)
    assert meter.loads(4.0)[S1_TO_S2].measured_bps == 8000
    assert meter.loads(5.0)[S1_TO_S2].measured_bps is None
    meter.forget("s1")
    meter.observe("s1", [PortCounters(1, 0, 0)], now=6.0)  # after a reconnect: a new first sample
    assert meter.loads(6.0)[S1_TO_S2].measured_bps is None


def test_same_instant_samples_are_ignored(ring):
    meter = UtilizationMeter(ring)
    meter.observe("s1", [PortCounters(1, 0, 0)], now=1.0)
    meter.observe("s1", [PortCounters(1, 1000, 0)], now=1.0)
    meter.observe("s1", [PortCounters(1, 2000, 0)], now=2.0)
    assert meter.loads(2.0)[S1_TO_S2].measured_bps == 16_000


def test_access_links_and_aggregate(ring):
    meter = UtilizationMeter(ring, scale=0.5)
    # dtn1 on s1 port 3 sends 1 Mbit/s into the network and receives 2 Mbit/s
    meter.observe("s1", [PortCounters(3, 0, 0), PortCounters(1, 0, 0)], now=0.0)
    meter.observe("s1", [PortCounters(3, 250_000, 125_000), PortCounters(1, 125_000, 0)], now=1.0)
    loads = meter.loads(1.0)
    assert loads["dtn1->s1:3"].measured_bps == 1_000_000
    assert loads["s1:3->dtn1"].measured_bps == 2_000_000
    # each transfer counts once (where it reaches its DTN), not once per link crossed; nominal = measured / scale
    assert aggregate_bps(loads.values()) == 4_000_000


def test_every_direction_is_reported(ring):
    loads = UtilizationMeter(ring).loads(0.0)
    assert set(loads) == set(ring.directions)


def test_bad_scale():
    with pytest.raises(ValueError):
        UtilizationMeter(Topology.load(builtin_topology("ring8")), scale=0)
