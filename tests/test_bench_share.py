"""`tsdn bench share`: a tiny run prints every figure as its last line, and the networks it
builds are loaded the way the bench says: floors that fit, perturbations of every kind."""

from __future__ import annotations

import json

from benchmarks.share import FILL, KINDS, Network, largest_zoo, main
from sdn_app.core.sharing import solve
from sdn_app.core.topology import Topology
from topologies import builtin_topology

NETWORK_KEYS = {"topology", "switches", "directions", "claims_at_start", "claims", "resolves", "first_solve_ms",
                "resolve_ms_p50", "resolve_ms_p99", "meters_changed_mean", "baseline_ms_p50", "baseline_ms_p99",
                "baseline_meters_changed_mean", "highs_ms_p50", "highs_resolves", "highs_max_diff_bps", "extra_gbps",
                "claims_at_ceiling", "perturbations"}


def test_a_tiny_run_prints_every_figure_as_its_last_line(capsys):
    assert main(seed=7, claims=30, resolves=12) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["bench"] == "share" and result["quick"] is False
    assert {"networks", "resolve_ms_p99", "target_ms_p99", "meets_target", "seconds", "step"} <= set(result)
    sc16, zoo = result["networks"]["sc16"], result["networks"]["zoo"]
    for network in (sc16, zoo):
        assert set(network) == NETWORK_KEYS
        assert network["resolves"] == 12 and sum(network["perturbations"].values()) == 12
        for key in ("resolve_ms_p50", "resolve_ms_p99", "baseline_ms_p50", "meters_changed_mean"):
            assert isinstance(network[key], int | float) and network[key] >= 0, key
    assert sc16["claims_at_start"] == 30 and zoo["claims_at_start"] == 300
    assert zoo["topology"] == "Esnet" and zoo["switches"] == 68
    assert sc16["highs_resolves"] == 10 and sc16["highs_max_diff_bps"] == 0 and zoo["highs_ms_p50"] is None
    assert result["resolve_ms_p99"] == sc16["resolve_ms_p99"]


def test_floors_fit_and_every_perturbation_keeps_the_spare_capacities_true():
    topology = Topology.load(builtin_topology("sc16"))
    network = Network.build("sc16", topology, 300, seed=3)
    capacities = topology.capacities()
    seen = set()
    for _ in range(60):
        seen.add(network.perturb())
        floors = {d: sum(c.floor for c in network.claims.values() if d in c.directions) for d in capacities}
        assert all(0 <= network.spare[d] <= capacities[d] - floors[d] for d in capacities)
    assert seen == set(KINDS)
    fresh = Network.build("sc16", topology, 300, seed=3)
    floors = {d: sum(c.floor for c in fresh.claims.values() if d in c.directions) for d in capacities}
    assert all(floors[d] <= FILL * capacities[d] for d in capacities)
    assert all(fresh.spare[d] == capacities[d] - floors[d] for d in capacities)
    # Loaded: some direction is used up by the extras.
    shares = solve(list(fresh.claims.values()), fresh.spare)
    used = {d: sum(shares[c.id] - c.floor for c in fresh.claims.values() if d in c.directions) for d in capacities}
    assert any(fresh.spare[d] > 0 and used[d] >= fresh.spare[d] - 300 for d in capacities)  # rounding: < 1 each


def test_the_largest_zoo_wan_is_picked_by_node_count():
    label, load = largest_zoo()
    assert label == "Esnet" and len(load().switches) == 68
