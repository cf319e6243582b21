"""`tsdn bench nsi`: a tiny ledger-only run prints every figure as its last line, NSI and the gRPC
baseline alike, with every connection reserved to provisioned and terminated and none refused; the
onsa sample either ran every cycle or says why it was skipped."""

from __future__ import annotations

import json

from benchmarks.nsi import main

FIGURES = {"connections_per_s", "terminated_per_s", "reserve_to_provisioned_ms_p50", "reserve_to_provisioned_ms_p99",
           "reserve_to_provisioned_ms_max", "reserve_to_provision_confirmed_ms_p50"}


def test_a_tiny_run_prints_every_figure_as_its_last_line(capsys):
    assert main(connections=12, clients=4, ledger_only=True, onsa_cycles=2) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["bench"] == "nsi" and result["connections"] == 12 and result["clients"] == 4
    assert set(result) >= FIGURES and set(result["grpc"]) >= FIGURES
    assert result["openflow"] is None and result["openflow_skipped"] == "--ledger-only"
    assert result["times_measured_on"] == "ledger_only"
    ledger = result["ledger_only"]
    for run in (ledger["nsi"], ledger["grpc"]):
        assert run["provisioned"] == 12 and run["not_active"] == 0 and run["all_arrived"]
        for name, step in run["steps"].items():
            assert (step["ok"], step["errors"]) == (12, 0), (name, step["first_error"])
        for key in FIGURES:
            assert isinstance(run[key], int | float) and run[key] > 0, key
        # the data plane comes up after the call that provisions it is answered, never before the reserve
        assert run["reserve_to_provisioned_ms_max"] >= run["reserve_to_provisioned_ms_p50"]
    assert set(ledger["nsi"]["steps"]) == {"reserve_to_provisioned", "release_terminate"}
    assert set(ledger["nsi"]["operations_ms"]) == {"reserve", "reserve_commit", "provision", "provision_to_data_plane"}
    assert result["connections_per_s"] == ledger["nsi"]["connections_per_s"]
    assert result["grpc"]["connections_per_s"] == ledger["grpc"]["connections_per_s"]
    if result["onsa"] is None:
        assert result["onsa_skipped"], "a skipped onsa sample says why"
    else:
        onsa = result["onsa"]
        assert result["onsa_skipped"] is None
        assert (onsa["cycles"], onsa["ok"], onsa["errors"], onsa["not_active"]) == (2, 2, 0, 0), onsa["first_error"]
        assert onsa["reserve_to_provision_confirmed_ms_p50"] > 0 and onsa["all_arrived"]
