"""`tsdn bench northbound` with tiny phases: the shape of its JSON line (no timing asserts)."""

import json

from benchmarks import northbound
from tsdn.cli import build_parser

RATES = ("admissions_per_s", "rpcs_per_s", "availability_queries_per_s", "health_rpcs_per_s",
         "core_admissions_per_s", "batch_admissions_per_s", "single_admissions_per_s")


def test_last_line_is_the_result_object(capsys):
    assert northbound.main(quick=True, clients=2, seconds=0.3, seed=3, streams=100) == 0
    out, err = capsys.readouterr()
    result = json.loads(out.strip().splitlines()[-1])
    assert result["bench"] == "northbound"
    assert result["clients"] == 2
    assert result["quick"] is True
    for key in RATES:
        assert isinstance(result[key], int | float) and result[key] > 0, key
    for key in ("p50_ms", "p99_ms", "rpc_p99_ms", "availability_p99_ms", "health_p99_ms", "core_p99_ms"):
        assert isinstance(result[key], int | float) and result[key] >= 0, key
    assert result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    # Campaigns: at least one round of each kind, every reservation admitted; one batch of 1,000 timed.
    assert result["batch_size"] == 100 and result["batch_rounds"] >= 1 and result["single_rounds"] >= 1
    assert result["batch_refused"] == 0
    assert (result["batch_1000_admitted"], result["batch_1000_refused"]) == (1000, 0)
    assert isinstance(result["batch_1000_ms"], int | float) and result["batch_1000_ms"] > 0
    assert result["errors"] == 0, err
    assert isinstance(result["refused"], int)
    assert isinstance(result["meets_targets"], bool)
    assert result["targets"] == {"admissions_per_s": 1000, "p99_ms": 20, "unary_p99_ms_with_1000_streams": 50}
    assert set(result["cpu_cores_busy"]) == {"health", "admissions", "availability", "unary_baseline",
                                             "unary_with_streams"}
    # The streams phases: 100 streams really held open (and none refused), unary latency measured
    # with and without them; the 1000-stream figure is left out when another count was asked for.
    streams = result["streams"]
    assert (streams["requested"], streams["open"], streams["refused"]) == (100, 100, {}), streams
    assert streams["ended_early"] == {}, streams
    assert isinstance(streams["messages"], int)
    for key in ("unary_p50_ms_baseline", "unary_p99_ms_baseline", "unary_p50_ms_with_streams",
                "unary_p99_ms_with_streams"):
        assert isinstance(result[key], int | float) and result[key] > 0, key
    assert result["unary_p99_ms_with_1000_streams"] is None
    assert set(result["unary_by_kind"]["with_streams"]) == {"create", "heartbeat", "check", "delete"}
    assert isinstance(result["meets_streams_target"], bool)
    assert result["machine"]["cpu_count"] >= 1
    assert "controller subprocess listening on 127.0.0.1:" in err


def test_cli_registers_northbound():
    args = build_parser().parse_args(["bench", "northbound", "--quick", "--clients", "4", "--seconds", "2"])
    assert (args.quick, args.clients, args.seconds, args.seed, args.streams) == (True, 4, 2.0, 16, 1000)
    assert args.run.__name__ == "run_northbound"


def test_bad_options_exit_2(capsys):
    assert northbound.main(clients=0) == 2
    assert northbound.main(seconds=0) == 2
    assert northbound.main(streams=0) == 2
    assert capsys.readouterr().out == ""


def test_stream_plan_spreads_streams_within_the_default_limits():
    from northbound.streams import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_PRINCIPAL

    dtns = northbound.sc16_dtns()
    plan = northbound.stream_plan(1000, dtns, ["transfers/a", "transfers/b"])
    assert sum(spec["count"] for spec in plan) == 1000 <= DEFAULT_MAX_STREAMS
    per_token: dict[str, int] = {}
    for spec in plan:
        per_token[spec["token"]] = per_token.get(spec["token"], 0) + spec["count"]
    assert max(per_token.values()) <= DEFAULT_MAX_STREAMS_PER_PRINCIPAL
    assert {spec["kind"] for spec in plan} == {"watch", "agents", "transfer", "jobs"}
    assert {spec["fields"]["dtn"] for spec in plan if spec["kind"] == "jobs"} == set(dtns)


def test_percentiles():
    assert northbound.percentile_ms([], 0.5) is None
    samples = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert northbound.percentile_ms(samples, 0.5) == 50.0
    assert northbound.percentile_ms(samples, 0.99) == 99.0
    assert northbound.percentile_ms(samples, 1.0) == 100.0
