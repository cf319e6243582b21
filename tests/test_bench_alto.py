"""`tsdn bench alto`: a tiny run against a real controller subprocess prints every figure as its
last line, with ALTO's answers agreeing with QueryAvailability's on every sc16 DTN pair."""

from __future__ import annotations

import json

from benchmarks.alto import main, spread


def test_a_tiny_run_prints_every_figure_as_its_last_line(capsys):
    assert main(clients=2, seconds=0.5, seed=7) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["bench"] == "alto" and result["quick"] is False and result["clients"] == 2
    assert result["agree"] is True and result["checked_pairs"] == 26 * 25 and result["differences"] == []
    for key in ("ecs_queries_per_s", "ecs_batched_pairs_per_s", "grpc_query_availability_per_s",
                "networkx_shortest_paths_per_s"):
        assert isinstance(result[key], int | float) and result[key] > 0, key
    assert result["ecs_errors"] == 0 and result["grpc_errors"] == 0 and result["failures"] == []
    assert result["ecs_p50_ms"] <= result["ecs_p99_ms"] and result["metric"] == "bw-available"
    assert set(result["controller_cpu_cores_busy"]) == {"alto", "alto_batched", "grpc"}


def test_the_clients_are_spread_over_processes_all_of_them_used():
    for clients in (1, 2, 3, 16, 17):
        shares = spread(clients)
        assert sum(shares) == clients and min(shares) >= 1 and max(shares) - min(shares) <= 1
