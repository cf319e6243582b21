"""`tsdn bench sense`: a tiny ledger-only run prints every figure as its last line, SENSE and the gRPC
baseline alike, with every instance provisioned and none refused."""

from __future__ import annotations

import json

from benchmarks.sense import main

FIGURES = {"created_per_s", "provisioned_per_s", "cancelled_per_s", "provision_to_flows_ms_p50",
           "provision_to_flows_ms_p99"}


def test_a_tiny_run_prints_every_figure_as_its_last_line(capsys):
    assert main(instances=12, clients=4, ledger_only=True) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["bench"] == "sense" and result["instances"] == 12 and result["clients"] == 4
    assert set(result) >= FIGURES and set(result["grpc"]) >= FIGURES
    assert result["openflow"] is None and result["openflow_skipped"] == "--ledger-only"
    assert result["provision_to_flows_measured_on"] == "ledger_only"
    for run in (result["ledger_only"]["sense"], result["ledger_only"]["grpc"]):
        assert run["active"] == 12 and run["not_active"] == 0 and run["all_arrived"]
        for name, step in run["steps"].items():
            assert (step["ok"], step["errors"]) == (12, 0), (name, step["first_error"])
        for key in FIGURES:
            assert isinstance(run[key], int | float) and run[key] > 0, key
    assert set(result["ledger_only"]["sense"]["steps"]) == {"create", "provision", "cancel", "delete"}
