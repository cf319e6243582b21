"""Scenario files, expectation checks and the report, without Mininet: bad files are refused
with every problem named (and nothing started), the shipped scenarios are valid, expectations
pass and fail on synthetic recordings, and the report folder is written from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tsdn.cli import main
from tsdn.demo.console import Console, render
from tsdn.demo.expectations import crosses, evaluate
from tsdn.demo.record import BookingSample, Flow, RateSample, Recording
from tsdn.demo.report import write_report
from tsdn.demo.scenario import ScenarioError, builtin_scenarios, load_scenario, transfer_bytes

G = 10**9

SMOKE = {
    "name": "tiny",
    "topology": "ring8",
    "emulation_scale": 0.001,
    "agents": ["dtn1", "dtn3"],
    "duration": 20,
    "timeline": [
        {"at": 0, "action": "transfer", "name": "east", "src": "dtn1", "dst": "dtn3", "bandwidth": "20G",
         "until": "release"},
        {"at": 5, "action": "fail_link", "link": "s2-s3"},
        {"at": 10, "action": "restore_link", "link": "s2-s3"},
        {"at": 12, "action": "congest_link", "link": "s1-s2", "from": "s1", "rate": "5G"},
        {"at": 15, "action": "clear_link", "link": "s1-s2", "from": "s1"},
        {"at": 18, "action": "release", "name": "east"},
    ],
    "expectations": {"aggregate_rate": 0.5, "resume_within": 5, "never_overbooked": True, "reroutes_at_least": 1},
}


def write(tmp_path: Path, data, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    return caught.value.problems


def changed(**changes) -> dict:
    data = json.loads(json.dumps(SMOKE))
    for key, value in changes.items():
        data[key] = value
    return data


def test_a_good_scenario_loads(tmp_path):
    loaded = load_scenario(write(tmp_path, SMOKE))
    assert loaded.scenario.name == "tiny"
    assert loaded.topology.name == "ring8"
    assert loaded.scenario.timeline[0].bandwidth == 20 * G
    assert loaded.scenario.timeline[3].from_ == "s1"


@pytest.mark.parametrize("name", ["smoke", "ring-reroute", "sc16-terabit", "host-limited", "sc16-nsi"])
def test_the_shipped_scenarios_validate_against_their_topologies(name):
    assert name in builtin_scenarios()
    loaded = load_scenario(name)
    assert loaded.scenario.name == name
    assert loaded.topology.name == {"smoke": "ring8", "ring-reroute": "ring8", "sc16-terabit": "sc16",
                                    "host-limited": "ring8", "sc16-nsi": "sc16-nsi"}[name]


@pytest.mark.parametrize("name", ["ring-reroute", "sc16-terabit"])
def test_the_demos_with_congestion_judge_why_flows_moved(name):
    expect = load_scenario(name).scenario.expectations
    assert expect.unexplained_moves_at_most == 0 and expect.never_onto_congested
    assert (expect.reacted_within.congestion, expect.reacted_within.failure) == (5, 2)


def test_the_host_limited_scenario_paces_below_the_booking_and_expects_no_move():
    scenario = load_scenario("host-limited").scenario
    [transfer] = [a for a in scenario.timeline if a.action == "transfer"]
    assert transfer.pace is not None and transfer.pace <= transfer.bandwidth // 2
    assert scenario.expectations.reroutes_at_most == 0 and scenario.expectations.unexplained_moves_at_most == 0


def test_the_smoke_scenario_is_short():
    assert load_scenario("smoke").scenario.end <= 40


@pytest.mark.parametrize(("data", "expected"), [
    (changed(timeline=[{**SMOKE["timeline"][0], "bandwidth": "lots"}, SMOKE["timeline"][-1]]),
     "timeline[0].bandwidth: cannot read 'lots' as a bandwidth"),
    (changed(timeline=[{**SMOKE["timeline"][0], "colour": "red"}, SMOKE["timeline"][-1]]),
     "timeline[0].colour: unknown field"),
    (changed(timeline=[{"at": 1, "action": "explode"}]), "timeline[0]: unknown action 'explode'"),
    (changed(timeline=[{"at": 1, "link": "s1-s2"}]), "timeline[0]: every timeline entry needs an action"),
    (changed(timeline=[{"at": -1, "action": "fail_link", "link": "s1-s2"}]), "timeline[0].at:"),
    (changed(emulation_scale=0.5), "emulation_scale: 0.5 runs"),
    (changed(agents=["dtn1", "dtn99"]), "agents[1]: 'dtn99' is not a DTN of topology ring8"),
    (changed(topology="nowhere.yaml"), "topology:"),
    (changed(timeline=[{"at": 1, "action": "fail_link", "link": "s1-s9"}]),
     "timeline[0].link: 's1-s9' is not a link of topology ring8"),
    (changed(timeline=[{"at": 1, "action": "restore_link", "link": "s1-s2"}]),
     "timeline[0].link: s1-s2 is not down"),
    (changed(timeline=[{"at": 1, "action": "clear_link", "link": "s1-s2"}]),
     "timeline[0].link: s1-s2 is not congested"),
    (changed(timeline=[{"at": 1, "action": "congest_link", "link": "s1-s2", "from": "s5", "rate": "5G"}]),
     "timeline[0].from: 's5' is not an end of link s1-s2"),
    (changed(timeline=[{"at": 1, "action": "congest_link", "link": "s1-s2", "rate": "200G"}]),
     "timeline[0].rate: 200G is not below the capacity"),
    (changed(timeline=[{"at": 1, "action": "congest_link", "link": "s1-s2"}]),
     "timeline[0]: give exactly one of rate"),
    (changed(timeline=[{**SMOKE["timeline"][0], "until": None}, SMOKE["timeline"][-1]]),
     "timeline[0]: give exactly one of size"),
    (changed(timeline=[SMOKE["timeline"][0]]), "timeline[0].until: no later release of 'east'"),
    (changed(timeline=[{**SMOKE["timeline"][0], "dst": "dtn4"}, SMOKE["timeline"][-1]]),
     "timeline[0].dst: dtn4 runs no agent"),
    (changed(timeline=[{**SMOKE["timeline"][0], "engine": "warp"}, SMOKE["timeline"][-1]]),
     "timeline[0].engine: 'warp' is unknown"),
    (changed(timeline=[{**SMOKE["timeline"][0], "pace": "20G"}, SMOKE["timeline"][-1]]),
     "timeline[0].pace: 20G is not below the bandwidth (20G)"),
    (changed(timeline=[{**SMOKE["timeline"][0], "pace": "fast"}, SMOKE["timeline"][-1]]),
     "timeline[0].pace: cannot read 'fast' as a bandwidth"),
    (changed(timeline=[SMOKE["timeline"][0], {**SMOKE["timeline"][0], "at": 1}, SMOKE["timeline"][-1]]),
     "timeline[1].name: 'east' is already used by timeline[0]"),
    (changed(timeline=[{"at": 1, "action": "release", "name": "ghost"}]),
     "timeline[0].name: no transfer or reservation 'ghost' starts before it"),
    (changed(timeline=[{**SMOKE["timeline"][0], "at": 30}, {"at": 31, "action": "release", "name": "east"}]),
     "timeline[0].at: 30 s is after the end of the run"),
    (changed(timeline=[SMOKE["timeline"][0], SMOKE["timeline"][-1]]),
     "expectations.resume_within: the timeline fails no link"),
    (changed(expectations={"aggregate_rate": 0}), "expectations.aggregate_rate:"),
    (changed(expectations={"sometimes": True}), "expectations.sometimes: unknown field"),
    (changed(name="bad name!"), "name: 'bad name!' is not a valid name"),
])
def test_a_bad_scenario_names_file_field_and_problem(tmp_path, data, expected):
    path = write(tmp_path, data)
    problems = problems_of(path)
    assert any(p.startswith(f"{path}: ") and expected in p for p in problems), problems


def test_every_problem_of_a_file_is_listed(tmp_path):
    data = changed(agents=["dtn1", "nobody"], timeline=[{"at": 1, "action": "fail_link", "link": "nowhere"}])
    problems = problems_of(write(tmp_path, data))
    assert any("agents[1]" in p for p in problems)
    assert any("timeline[0].link" in p for p in problems)


def test_yaml_errors_and_missing_files_are_scenario_errors(tmp_path):
    assert "not valid YAML at line 2" in problems_of(write(tmp_path, "name: x\n  bad: [\n"))[0]
    assert "required field is missing" in " ".join(problems_of(write(tmp_path, {"name": "x"})))
    with pytest.raises(Exception, match="no such scenario file"):
        load_scenario(tmp_path / "absent.yaml")


def test_tsdn_demo_refuses_a_bad_scenario_with_exit_2_before_starting_anything(tmp_path, capsys, monkeypatch):
    import tsdn.demo.runner as runner

    def never(*args, **kwargs):
        raise AssertionError("a bad scenario must start nothing")

    monkeypatch.setattr(runner.DemoRunner, "run", never)
    monkeypatch.setattr(runner, "check_machine", never)
    path = write(tmp_path, changed(agents=["dtn1", "dtn99"]))
    assert main(["demo", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: agents[1]: 'dtn99' is not a DTN of topology ring8" in err
    assert not (tmp_path / "out").exists()


def test_tsdn_demo_check_validates_only(capsys):
    assert main(["demo", "--check", "smoke"]) == 0
    assert "scenario smoke is valid" in capsys.readouterr().out


def test_an_until_release_transfer_moves_enough_bytes():
    action = load_scenario("smoke").scenario.timeline[0]
    assert transfer_bytes(action, 0.001, 26) >= 20 * G * 0.001 / 8 * 26


# -- expectations on synthetic recordings ---------------------------------------------------

def recording(rate_share: float = 0.95, resume_after: float = 2.0, overbooked: bool = False,
              reroutes: int = 1) -> Recording:
    """east dtn1->dtn3 on s1 s2 s3 at 20G, s2-s3 cut at 5 s, back after `resume_after` s on the long way."""
    rec = Recording("tiny")
    rec.links = {"s2-s3": ("s2", "s3"), "s1-s2": ("s1", "s2")}
    rec.flows["east"] = Flow("east", "transfer", "dtn1", "dtn3", 20 * G, state="CANCELLED",
                             path=("s1", "s2", "s3"))
    rec.event(0.0, "transfer", timeline=0, name="east", message="transfer east")
    long_way = ("s1", "s8", "s7", "s6", "s5", "s4", "s3")
    for t in range(1, 19):
        before = t <= 5
        down = 5 < t < 5 + resume_after
        rate = 0.0 if down else rate_share * 20 * G
        rec.rate(RateSample(float(t), "east", rate, 20 * G, ("s1", "s2", "s3") if before else long_way))
    rec.event(5.0, "fail_link", timeline=1, link="s2-s3", ends=["s2", "s3"], message="link s2-s3 cut")
    for i in range(reroutes):
        rec.event(5.2 + i, "reroute", flow="east", message="east: moved")
    rec.event(10.0, "restore_link", timeline=2, link="s2-s3", ends=["s2", "s3"], message="link s2-s3 repaired")
    for t in range(0, 19):
        over = (("s1:1->s2:2", 120 * G, 100 * G),) if overbooked and t == 7 else ()
        rec.booking(BookingSample(float(t), "s1:1->s2:2", 0.2, over))
    rec.ended = 18.0
    return rec


def by_name(results):
    return {r.name: r for r in results}


def test_every_expectation_passes_on_a_good_run(tmp_path):
    scenario = load_scenario(write(tmp_path, SMOKE)).scenario
    results = by_name(evaluate(scenario, recording()))
    assert set(results) == {"aggregate_rate", "resume_within", "never_overbooked", "reroutes_at_least", "timeline"}
    assert all(r.passed for r in results.values()), [r.line() for r in results.values()]
    assert results["resume_within"].measured == "2.0 s at worst"


@pytest.mark.parametrize(("kwargs", "failing", "words"), [
    ({"rate_share": 0.5}, "aggregate_rate", "of booked"),
    ({"resume_after": 9.0}, "resume_within", "east took"),
    ({"overbooked": True}, "never_overbooked", "s1:1->s2:2 booked 120G of 100G at 7.0 s"),
    ({"reroutes": 0}, "reroutes_at_least", "0 reroute(s)"),
])
def test_a_failing_expectation_is_named_with_measured_and_expected(tmp_path, kwargs, failing, words):
    scenario = load_scenario(write(tmp_path, SMOKE)).scenario
    results = by_name(evaluate(scenario, recording(**kwargs)))
    assert [name for name, r in results.items() if not r.passed] == [failing]
    line = results[failing].line()
    assert line.startswith(f"FAIL {failing}: measured ") and "expected" in line
    assert words in line


def test_refused_actions_and_failed_transfers_fail_the_timeline_check(tmp_path):
    scenario = load_scenario(write(tmp_path, SMOKE)).scenario
    rec = recording()
    rec.event(3.0, "refused", action="transfer", name="west", timeline=4, message="no path has 20G free")
    result = by_name(evaluate(scenario, rec))["timeline"]
    assert not result.passed and "no path has 20G free" in result.detail


def test_a_path_crosses_a_link_either_way():
    assert crosses(("s1", "s2", "s3"), ("s3", "s2"))
    assert not crosses(("s1", "s8", "s7"), ("s2", "s3"))


# -- report and console ----------------------------------------------------------------------

def test_the_report_folder_is_written_from_samples(tmp_path):
    scenario = load_scenario(write(tmp_path, SMOKE)).scenario
    rec = recording(reroutes=2)
    results = evaluate(scenario, rec)
    out = tmp_path / "report"
    report = write_report(out, scenario, rec, results, started=1_800_000_000.0)
    page = report.read_text()
    for name in ("aggregate_rate", "resume_within", "never_overbooked", "reroutes_at_least"):
        assert name in page
    assert page.count("passed") >= 5 and "FAILED" not in page
    assert "throughput.png" in page and "aggregate.png" in page
    for png in ("throughput.png", "aggregate.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert {"time", "kind", "details"} == set(events[0])
    assert [e["kind"] for e in events].count("fail_link") == 1
    assert sum(1 for _ in (out / "samples.jsonl").open()) == len(rec.rates) + len(rec.bookings)


def test_a_failed_expectation_shows_in_the_report(tmp_path):
    scenario = load_scenario(write(tmp_path, SMOKE)).scenario
    results = evaluate(scenario, recording(reroutes=0))
    page = write_report(tmp_path / "r", scenario, recording(reroutes=0), results).read_text()
    assert "FAILED" in page and "some expectation failed: reroutes_at_least" in page


def test_the_console_table_and_plain_lines(tmp_path):
    import io

    rec = recording()
    rec.flows["east"].nominal_bps = 19 * G
    screen = render(rec, 6.0, 20.0)
    assert "east" in screen and "19G / 20G (95%)" in screen and "link s2-s3 cut" in screen
    stream = io.StringIO()
    console = Console(stream, tty=False)
    console.update(rec, 6.0, 20.0)
    console.update(rec, 7.0, 20.0)
    text = stream.getvalue()
    assert "\x1b[" not in text
    assert text.count("link s2-s3 cut") == 1  # each event once
    stream = io.StringIO()
    Console(stream, tty=True).update(rec, 6.0, 20.0)
    assert stream.getvalue().startswith("\x1b[H\x1b[2J")


# -- the SC16 NSI demo: its neighbours and the report's NSI segments section --------------------------

def test_the_nsi_demo_sends_wan_transfers_to_both_neighbours_and_keeps_the_terabit_demos_local():
    loaded = load_scenario("sc16-nsi")
    topology, scenario = loaded.topology, loaded.scenario
    assert scenario.expectations.nsi_segments
    flows = [a for a in scenario.timeline if a.action in ("transfer", "reserve")]
    remote = {topology.domain_of(a.dst) for a in flows if a.action == "transfer" and topology.is_remote(a.dst)}
    assert remote == {"urn:ogf:network:rnp.sc16:nsa", "urn:ogf:network:i2.sc16:nsa"}
    assert any(not topology.is_remote(a.src) and not topology.is_remote(a.dst) for a in flows)
    assert {"saopaulo-dtn1", "annarbor-dtn1"} <= set(scenario.agents)


def test_the_neighbours_opennsa_serves_the_stps_the_topology_names():
    from sdn_app.core.topology import Topology
    from tsdn.demo.peers import neighbours, nrm

    topology = load_scenario("sc16-nsi").topology
    found = {n.nsa: n for n in neighbours(topology)}
    rnp = found["urn:ogf:network:rnp.sc16:nsa"]
    assert (rnp.domain, rnp.port) == ("rnp.sc16", 9081)
    assert nrm(rnp) == ("ethernet scinet - vlan:1780-1799 100000 em0 -\n"
                        "ethernet saopaulo - vlan:1780-1799 100000 em1 -\n")
    i2 = found["urn:ogf:network:i2.sc16:nsa"]
    assert [s[0] for s in i2.stps] == ["scinet", "annarbor"] and i2.stps[0][1:3] == (1800, 1819)
    assert neighbours(Topology.load(Path(__file__).resolve().parents[1] / "topologies" / "sc16.yaml")) == []


@pytest.mark.parametrize(("change", "words"), [
    (("url", "https://nsa.rnp.example:9443/NSI/services/CS2"), "is not an http URL on 127.0.0.1"),
    (("stp", "urn:ogf:network:other.net:topology:scinet"), "is not a port of urn:ogf:network:rnp.sc16:topology"),
])
def test_a_neighbour_opennsa_cannot_stand_in_for_is_refused_naming_it(tmp_path, change, words):
    from sdn_app.core.topology import Topology
    from tsdn.demo.peers import PeerSetupError, neighbours

    source = Path(__file__).resolve().parents[1] / "topologies" / "sc16-nsi.yaml"
    data = yaml.safe_load(source.read_text())
    data["interdomain"][0]["peer"][change[0]] = change[1]
    path = tmp_path / "sc16-nsi.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(PeerSetupError) as caught:
        neighbours(Topology.load(path))
    assert words in str(caught.value)


def test_without_the_opennsa_recipe_the_demo_setup_says_where_it_looked(tmp_path, monkeypatch):
    from tsdn.demo.peers import PeerSetupError, require_recipe

    monkeypatch.setenv("TSDN_OPENNSA", str(tmp_path / "nowhere"))
    with pytest.raises(PeerSetupError) as caught:
        require_recipe()
    assert f"{tmp_path / 'nowhere' / 'setup.sh'} is not a file" in str(caught.value)
    assert "TSDN_OPENNSA" in str(caught.value)


def nsi_recording() -> Recording:
    from tsdn.demo.record import NsiSegment

    rec = Recording("sc16-nsi")
    rec.remote_dtns = {"saopaulo-dtn1": ("to-rnp", "urn:ogf:network:rnp.sc16:nsa")}
    rec.flows["wan"] = Flow("wan", "transfer", "pasadena-dtn1", "saopaulo-dtn1", 40 * G, state="CANCELLED")
    rec.flows["tcp"] = Flow("tcp", "transfer", "caltech-a-dtn2", "caltech-b-dtn2", 400 * G, state="CANCELLED")
    rec.segments["wan"] = NsiSegment("wan", "r1", "saopaulo-dtn1", "urn:ogf:network:rnp.sc16:nsa", "RN-4b129c142a",
                                     "to-rnp", 1780, 2.2, "Terminated", 31.0)
    for t in range(3, 10):
        rec.rate(RateSample(float(t), "wan", 38 * G, 40 * G))
    return rec


def test_the_report_marks_what_was_requested_over_nsi_and_what_stayed_tsdns(tmp_path):
    scenario = load_scenario("sc16-nsi").scenario
    rec = nsi_recording()
    out = tmp_path / "report"
    page = write_report(out, scenario, rec, evaluate(scenario, rec)).read_text()
    section = page[page.index("<h2>NSI segments</h2>"):page.index("<h2>Final state</h2>")]
    wan = section[section.index("<td>wan</td>"):]
    wan = wan[:wan.index("</tr>")]
    for cell in ("urn:ogf:network:rnp.sc16:nsa", "RN-4b129c142a", "to-rnp", "1780", "2.2", "Terminated"):
        assert f"<td>{cell}" in wan, wan
    tcp = section[section.index("<td>tcp</td>"):]
    assert "tsdn&#x27;s switches only" in tcp[:tcp.index("</tr>")]
    rows = [json.loads(line) for line in (out / "segments.jsonl").read_text().splitlines()]
    assert rows == [{"flow": "wan", "reservation": "r1", "remote_dtn": "saopaulo-dtn1",
                     "nsa": "urn:ogf:network:rnp.sc16:nsa", "connection_id": "RN-4b129c142a", "interdomain": "to-rnp",
                     "vlan": 1780, "confirmed": 2.2, "end": "Terminated", "ended": 31.0}]


def test_a_report_without_remote_dtns_has_no_nsi_section(tmp_path):
    scenario = load_scenario(write(tmp_path, SMOKE)).scenario
    page = write_report(tmp_path / "r", scenario, recording(), evaluate(scenario, recording())).read_text()
    assert "NSI segments" not in page and not (tmp_path / "r" / "segments.jsonl").exists()


def test_two_live_flows_to_one_remote_dtn_are_refused(tmp_path):
    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "scenarios" / "sc16-nsi.yaml").read_text())
    data["topology"] = str(Path(__file__).resolve().parents[1] / "topologies" / "sc16-nsi.yaml")
    data["timeline"].insert(5, {"at": 3, "action": "reserve", "name": "back", "src": "saopaulo-dtn1",
                                "dst": "caltech-a-dtn3", "bandwidth": "10G"})
    path = write(tmp_path, data)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.problems == [f"{path}: timeline[5]: remote DTN saopaulo-dtn1 still has wan-saopaulo; the demo "
                                     "delivers one NSI circuit (one VLAN) at a time to a remote DTN (release it first)"]
    data["timeline"][5]["at"] = 31
    load_scenario(write(tmp_path, data))  # after wan-saopaulo's release at 30 s
