"""The expectations about why flows moved (unexplained_moves_at_most, never_onto_congested,
reacted_within, reroutes_at_most), judged on synthetic recordings of ring8 runs: each passes on a
run that behaves as an engineer would want, and fails, naming the flow, on one that does not."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sdn_app.core.decisions import Decision, Kind, PathTaken, to_dict
from tsdn.demo.expectations import (
    causes,
    evaluate,
    never_onto_congested,
    nsi_segments,
    reacted_within,
    reroutes_at_most,
    unexplained_moves_at_most,
)
from tsdn.demo.record import Flow, NsiSegment, RateSample, Recording
from tsdn.demo.scenario import ScenarioError, load_scenario

G = 10**9
SHORT = ("s1", "s2", "s3")
LONG = ("s1", "s8", "s7", "s6", "s5", "s4", "s3")
S6_S8 = ("s6", "s7", "s8")
S6_S8_AROUND = ("s6", "s5", "s4", "s3", "s2", "s1", "s8")
S7_TO_S8 = "s7:1->s8:2"
S8_TO_S7 = "s8:2->s7:1"


class Run:
    """A synthetic recording on ring8, written the way the runner records a run."""

    def __init__(self) -> None:
        self.rec = Recording("synthetic")
        self.rec.links = {f"s{i}-s{i % 8 + 1}": (f"s{i}", f"s{i % 8 + 1}") for i in range(1, 9)}
        self.rec.links["s8-s1"] = ("s8", "s1")
        self.ids = 0

    def flow(self, name: str, kind: str, src: str, dst: str, path: tuple[str, ...], at: float = 0.0,
             booked: int = 25 * G) -> str:
        self.ids += 1
        rid = f"{self.ids:032x}"
        self.rec.flows[name] = Flow(name, kind, src, dst, booked, state="ACTIVE", path=path,
                                    reservation=f"reservations/{rid}")
        self.rec.reservation_flows[rid] = name
        self.rec.event(at, kind if kind == "transfer" else "reserve", timeline=self.ids, name=name,
                       message=f"{kind} {name}")
        return rid

    def rates(self, name: str, start: float, end: float, share: float, path: tuple[str, ...]) -> None:
        booked = self.rec.flows[name].booked_bps
        t = start
        while t <= end:
            self.rec.rate(RateSample(t, name, share * booked, booked, path))
            t += 1.0

    def fail(self, link: str, at: float) -> None:
        self.rec.event(at, "fail_link", timeline=90, link=link, ends=list(self.rec.links[link]))

    def restore(self, link: str, at: float) -> None:
        self.rec.event(at, "restore_link", timeline=91, link=link, ends=list(self.rec.links[link]))

    def congest(self, link: str, at: float, directions: list[str]) -> None:
        self.rec.event(at, "congest_link", timeline=92, link=link, ends=list(self.rec.links[link]),
                       directions=directions, cross_traffic_bps=95 * G)

    def clear(self, link: str, at: float, directions: list[str]) -> None:
        self.rec.event(at, "clear_link", timeline=93, link=link, ends=list(self.rec.links[link]),
                       directions=directions)

    def move(self, name: str, at: float, old: tuple[str, ...], new: tuple[str, ...], reason: str = "",
             decision: Decision | None = None) -> None:
        typed = {"cause": decision.cause, "decision": to_dict(decision)} if decision is not None else {}
        self.rec.event(at, "reroute", flow=name, old=list(old), new=list(new), reason=reason,
                       message=f"{name}: {' '.join(old)} -> {' '.join(new)}", **typed)

    def release(self, name: str, at: float) -> None:
        self.rec.event(at, "release", timeline=99, name=name, message=f"release {name}")


def ring_reroute(move_at: float = 33.5, back_onto_congested: bool = False, extra_move: bool = False) -> Run:
    """ring-reroute as it should go: one-to-three moved off the cut s2-s3 at once; six-to-eight
    off the congested s7 -> s8 at `move_at`."""
    run = Run()
    run.flow("one-to-three", "transfer", "dtn1", "dtn3", SHORT)
    run.rates("one-to-three", 1, 9, 0.95, SHORT)
    run.fail("s2-s3", 10.0)
    run.move("one-to-three", 10.3, SHORT, LONG, "link s2-s3 is down: moving to s1 s8 ... s3")
    run.rates("one-to-three", 11, 57, 0.95, LONG)
    run.restore("s2-s3", 22.0)
    run.flow("six-to-eight", "transfer", "dtn6", "dtn8", S6_S8, at=25.0)
    run.rates("six-to-eight", 26, 32, 0.95, S6_S8)
    run.congest("s7-s8", 32.0, [S7_TO_S8])
    run.rates("six-to-eight", 33, move_at, 0.2, S6_S8)
    run.move("six-to-eight", move_at, S6_S8, S6_S8_AROUND, "congested: s7->s8 at 97%; moving to ...")
    run.rates("six-to-eight", move_at + 1, 57, 0.95, S6_S8_AROUND)
    if back_onto_congested:
        run.move("six-to-eight", 40.0, S6_S8_AROUND, S6_S8, "congested: ...; moving to s6 s7 s8")
    if extra_move:  # a move with no failure or congestion anywhere near the flow
        run.move("one-to-three", 52.0, LONG, SHORT, "underperforming: moving to s1 s2 s3")
    run.clear("s7-s8", 48.0, [S7_TO_S8])
    for name in ("one-to-three", "six-to-eight"):
        run.release(name, 58.0)
    run.rec.ended = 60.0
    return run


def test_a_run_that_moves_only_for_causes_passes_every_expectation():
    rec = ring_reroute().rec
    assert unexplained_moves_at_most(rec, 0).passed
    assert never_onto_congested(rec).passed
    result = reacted_within(rec, congestion=5, failure=2)
    assert result.passed, result.line()
    assert result.measured == "congestion 1.5 s at worst, failure 0.3 s at worst"


def test_the_causes_come_from_the_timeline_with_their_directions_and_ends():
    found = causes(ring_reroute().rec)
    assert [(c.kind, c.link, c.start, c.end) for c in found] == [("failure", "s2-s3", 10.0, 22.0),
                                                                  ("congestion", "s7-s8", 32.0, 48.0)]
    assert found[1].directions == {("s7", "s8")}
    assert found[0].directions == {("s2", "s3"), ("s3", "s2")}


def test_a_move_with_no_cause_is_unexplained_and_named():
    result = unexplained_moves_at_most(ring_reroute(extra_move=True).rec, 0)
    assert not result.passed
    assert result.measured == "1 unexplained of 3 move(s)"
    assert "one-to-three at 52.0 s: s1 s8 s7 s6 s5 s4 s3 -> s1 s2 s3" in result.detail
    assert unexplained_moves_at_most(ring_reroute(extra_move=True).rec, 1).passed


def test_the_sc16_flapping_is_unexplained():
    """Moves back and forth every 6 s between two routes, no failure and no congestion anywhere."""
    run = Run()
    run.flow("tcp-demo", "transfer", "dtn1", "dtn3", SHORT)
    for i, at in enumerate((5.0, 11.0, 17.0, 24.0)):
        old, new = (SHORT, LONG) if i % 2 == 0 else (LONG, SHORT)
        run.move("tcp-demo", at, old, new, "underperforming: moving")
    result = unexplained_moves_at_most(run.rec, 0)
    assert not result.passed and result.measured == "4 unexplained of 4 move(s)"


def test_a_move_off_the_reverse_of_a_congested_direction_is_explained():
    """TCP's acknowledgements cross the reverse direction: a flow on s8 -> s7 moving while s7 -> s8
    is congested has a cause."""
    run = ring_reroute()
    run.move("one-to-three", 36.0, LONG, SHORT, "congested: s7->s8 (reverse) at 97%; moving to s1 s2 s3")
    assert unexplained_moves_at_most(run.rec, 0).passed


def test_a_cause_stays_active_for_a_grace_after_it_ends_and_not_longer():
    run = ring_reroute()
    run.move("one-to-three", 49.5, LONG, SHORT, "congested: moving to s1 s2 s3")  # 1.5 s after the clear
    assert unexplained_moves_at_most(run.rec, 0).passed
    late = ring_reroute()
    late.move("one-to-three", 50.5, LONG, SHORT, "congested: moving to s1 s2 s3")  # 2.5 s after
    result = unexplained_moves_at_most(late.rec, 0)
    assert not result.passed and "one-to-three at 50.5 s" in result.detail


def test_a_failure_explains_moves_only_of_flows_that_crossed_it():
    run = Run()
    run.flow("east", "transfer", "dtn1", "dtn3", SHORT)
    run.flow("west", "transfer", "dtn5", "dtn7", ("s5", "s6", "s7"))
    run.fail("s2-s3", 8.0)
    run.move("east", 8.2, SHORT, LONG, "link s2-s3 is down")
    run.move("west", 8.3, ("s5", "s6", "s7"), ("s5", "s4", "s3", "s2", "s1", "s8", "s7"), "link s2-s3 is down")
    result = unexplained_moves_at_most(run.rec, 0)
    assert not result.passed and result.measured == "1 unexplained of 2 move(s)"
    assert result.detail.startswith("west at 8.3 s")


def rearrangement(relieved_path: tuple[str, ...], reason: str = "", typed: bool = True) -> Run:
    """big (dtn6 -> dtn8) is congested on s7 -> s8 when on `relieved_path`; the controller moves
    small out of the way first, its typed decision naming big as the one it makes room for
    (`typed`; with `reason` as the text, by default today's)."""
    run = Run()
    big = run.flow("big", "transfer", "dtn6", "dtn8", relieved_path, booked=90 * G)
    run.flow("small", "reservation", "dtn5", "dtn1", ("s5", "s4", "s3", "s2", "s1"), booked=20 * G)
    run.congest("s7-s8", 10.0, [S7_TO_S8])
    to = PathTaken(("dtn5", "s5", "s6", "s7", "s8", "s1", "dtn1"), ("s5-s6", "s6-s7", "s7-s8", "s8-s1"))
    run.move("small", 13.0, ("s5", "s4", "s3", "s2", "s1"), ("s5", "s6", "s7", "s8", "s1"),
             reason or f"rearrangement for reservations/{big}: moving to s5 s6 s7 s8 s1 to make room",
             Decision(Kind.DISPLACED, relieves=f"reservations/{big}", to=to) if typed else None)
    run.move("big", 13.1, relieved_path, S6_S8_AROUND,
             "congested: ...; moving to s6 s5 s4 s3 s2 s1 s8 (rearrangement made room)")
    return run


def test_a_move_announced_as_a_rearrangement_for_a_congested_flow_is_explained():
    result = unexplained_moves_at_most(rearrangement(S6_S8).rec, 0)
    assert result.passed, result.line()


def test_the_typed_decision_explains_a_rearrangement_whatever_its_reason_says():
    reworded = rearrangement(S6_S8, reason="making way for a neighbour")
    assert unexplained_moves_at_most(reworded.rec, 0).passed
    untyped = rearrangement(S6_S8, typed=False)  # today's text, but no typed decision: nothing reads the text
    result = unexplained_moves_at_most(untyped.rec, 0)
    assert not result.passed and result.detail.startswith("small at 13.0 s") and "rearrangement for" not in \
        result.detail


def test_a_rearrangement_for_a_flow_with_no_cause_is_unexplained():
    run = rearrangement(("s6", "s5", "s4", "s3", "s2", "s1", "s8"))  # big never crossed s7-s8
    result = unexplained_moves_at_most(run.rec, 0)
    assert not result.passed
    assert "small at 13.0 s" in result.detail and "rearrangement for big" in result.detail
    assert "big at 13.1 s" in result.detail


def test_a_move_onto_a_congested_link_is_named():
    result = never_onto_congested(ring_reroute(back_onto_congested=True).rec)
    assert not result.passed
    assert result.measured == "1 move(s) onto a failed or congested link"
    assert "six-to-eight at 40.0 s: s6 s5 s4 s3 s2 s1 s8 -> s6 s7 s8 onto s7-s8 congested (s7->s8) at 32.0 s" \
        in result.detail


def test_a_move_onto_the_reverse_of_a_congested_direction_counts_as_onto_it():
    run = ring_reroute()
    run.move("one-to-three", 40.0, SHORT, ("s1", "s8", "s7", "s6", "s5", "s4", "s3"), "whatever")
    assert not never_onto_congested(run.rec).passed


def test_a_move_onto_a_link_once_it_is_repaired_or_cleared_is_fine():
    run = ring_reroute()
    run.move("one-to-three", 23.0, LONG, SHORT, "back")  # s2-s3 repaired at 22 s
    run.move("six-to-eight", 48.5, S6_S8_AROUND, S6_S8, "back")  # s7-s8 cleared at 48 s
    assert never_onto_congested(run.rec).passed


def test_a_move_onto_a_failed_link_is_named():
    run = ring_reroute()
    run.move("six-to-eight", 15.0, S6_S8, ("s6", "s5", "s4", "s3", "s2", "s1", "s8"), "whatever")
    result = never_onto_congested(run.rec)
    assert not result.passed and "onto s2-s3 failed at 10.0 s" in result.detail


def test_a_late_move_off_congestion_is_named_with_its_delay():
    result = reacted_within(ring_reroute(move_at=39.0).rec, congestion=5, failure=2)
    assert not result.passed
    assert result.measured == "congestion 7.0 s at worst, failure 0.3 s at worst"
    assert "six-to-eight moved off s7-s8 congested (s7->s8) at 32.0 s after 7.0 s" in result.detail
    assert reacted_within(ring_reroute(move_at=39.0).rec, congestion=10, failure=2).passed


def test_a_flow_never_moved_off_a_cut_fails():
    run = Run()
    run.flow("east", "transfer", "dtn1", "dtn3", SHORT)
    run.flow("held", "reservation", "dtn2", "dtn4", ("s2", "s3", "s4"))
    run.fail("s2-s3", 8.0)
    run.move("east", 8.5, SHORT, LONG, "link s2-s3 is down")
    run.restore("s2-s3", 18.0)
    result = reacted_within(run.rec, congestion=None, failure=2)
    assert not result.passed
    assert result.measured == "failure never at worst"
    assert result.detail == "held never moved off s2-s3 failed at 8.0 s"


def test_a_late_move_off_a_cut_fails():
    run = Run()
    run.flow("east", "transfer", "dtn1", "dtn3", SHORT)
    run.fail("s2-s3", 8.0)
    run.move("east", 11.0, SHORT, LONG, "link s2-s3 is down")
    result = reacted_within(run.rec, congestion=None, failure=2)
    assert not result.passed and "east moved off s2-s3 failed at 8.0 s after 3.0 s" in result.detail


def test_a_transfer_that_keeps_its_rate_on_a_congested_link_need_not_move():
    """Congestion that leaves a transfer at or above 80% of its booking asks nothing of it."""
    run = Run()
    run.flow("six-to-eight", "transfer", "dtn6", "dtn8", S6_S8)
    run.congest("s7-s8", 10.0, [S7_TO_S8])
    run.rates("six-to-eight", 11, 20, 0.9, S6_S8)
    run.clear("s7-s8", 20.0, [S7_TO_S8])
    result = reacted_within(run.rec, congestion=5, failure=None)
    assert result.passed and result.detail == "0 flow(s) had to move"


def test_congestion_asks_only_transfers_crossing_it_forwards_to_move():
    """A transfer on s8 -> s7 (the reverse of the congested s7 -> s8) slowed by its acks is not
    required to move by reacted_within (moving it is still explained)."""
    run = Run()
    run.flow("back", "transfer", "dtn8", "dtn6", ("s8", "s7", "s6"))
    run.flow("booked", "reservation", "dtn7", "dtn8", ("s7", "s8"))
    run.congest("s7-s8", 10.0, [S7_TO_S8])
    run.rates("back", 11, 20, 0.3, ("s8", "s7", "s6"))
    assert reacted_within(run.rec, congestion=5, failure=None).passed


def test_a_slowed_transfer_never_moved_off_congestion_fails():
    run = Run()
    run.flow("six-to-eight", "transfer", "dtn6", "dtn8", S6_S8)
    run.congest("s7-s8", 10.0, [S7_TO_S8])
    run.rates("six-to-eight", 11, 20, 0.25, S6_S8)
    run.clear("s7-s8", 20.0, [S7_TO_S8])
    result = reacted_within(run.rec, congestion=5, failure=None)
    assert not result.passed and result.detail == "six-to-eight never moved off s7-s8 congested (s7->s8) at 10.0 s"


def test_a_flow_released_before_its_deadline_is_not_late():
    run = Run()
    run.flow("east", "transfer", "dtn1", "dtn3", SHORT)
    run.fail("s2-s3", 8.0)
    run.release("east", 8.5)
    assert reacted_within(run.rec, congestion=None, failure=2).passed


def test_reroutes_at_most_counts_every_move():
    rec = ring_reroute().rec
    assert reroutes_at_most(rec, 2).passed
    result = reroutes_at_most(rec, 1)
    assert not result.passed and result.measured == "2 reroute(s)" and "six-to-eight at 33.5 s" in result.detail


# -- in scenario files -------------------------------------------------------------------------

SCENARIO = {
    "name": "tiny",
    "topology": "ring8",
    "emulation_scale": 0.001,
    "agents": ["dtn1", "dtn3", "dtn6", "dtn8"],
    "duration": 60,
    "timeline": [
        {"at": 0, "action": "transfer", "name": "one-to-three", "src": "dtn1", "dst": "dtn3", "bandwidth": "25G",
         "until": "release"},
        {"at": 10, "action": "fail_link", "link": "s2-s3"},
        {"at": 22, "action": "restore_link", "link": "s2-s3"},
        {"at": 25, "action": "transfer", "name": "six-to-eight", "src": "dtn6", "dst": "dtn8", "bandwidth": "25G",
         "until": "release"},
        {"at": 32, "action": "congest_link", "link": "s7-s8", "from": "s7", "rate": "5G"},
        {"at": 48, "action": "clear_link", "link": "s7-s8", "from": "s7"},
        {"at": 58, "action": "release", "name": "one-to-three"},
        {"at": 58, "action": "release", "name": "six-to-eight"},
    ],
    "expectations": {"unexplained_moves_at_most": 0, "never_onto_congested": True,
                     "reacted_within": {"congestion": 5, "failure": 2}, "reroutes_at_most": 4},
}


def scenario_file(tmp_path: Path, **changes) -> Path:
    data = {**SCENARIO, **changes}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_new_expectations_load_and_are_evaluated_in_order(tmp_path):
    scenario = load_scenario(scenario_file(tmp_path)).scenario
    assert scenario.expectations.reacted_within.congestion == 5
    assert not scenario.expectations.reacted_within.shorthand
    results = evaluate(scenario, ring_reroute(back_onto_congested=True).rec)
    assert [r.name for r in results] == ["never_overbooked", "reroutes_at_most", "unexplained_moves_at_most",
                                         "never_onto_congested", "reacted_within", "timeline"]
    failed = {r.name for r in results if not r.passed}
    assert "never_onto_congested" in failed and "reroutes_at_most" not in failed


def test_reacted_within_as_one_number_is_both_kinds(tmp_path):
    scenario = load_scenario(scenario_file(tmp_path, expectations={"reacted_within": 3})).scenario
    reacted = scenario.expectations.reacted_within
    assert (reacted.congestion, reacted.failure, reacted.shorthand) == (3, 3, True)


@pytest.mark.parametrize(("expectations", "timeline", "problem"), [
    ({"reacted_within": {}}, None, "expectations.reacted_within: Value error, give congestion, failure or both"),
    ({"reacted_within": "soon"}, None, "expectations.reacted_within: seconds (a number), or {congestion: S"),
    ({"reacted_within": {"congestion": 0}}, None, "expectations.reacted_within.congestion: Input should be greater"),
    ({"reacted_within": {"later": 3}}, None, "expectations.reacted_within.later: unknown field"),
    ({"unexplained_moves_at_most": -1}, None, "expectations.unexplained_moves_at_most:"),
    ({"reroutes_at_most": 1.5}, None, "expectations.reroutes_at_most:"),
    ({"never_onto_congested": "yes please"}, None, "expectations.never_onto_congested:"),
    ({"reacted_within": 5}, [SCENARIO["timeline"][0], SCENARIO["timeline"][-2]],
     "expectations.reacted_within: the timeline fails and congests no link"),
    ({"reacted_within": {"failure": 2}}, [t for t in SCENARIO["timeline"] if "link" not in t or "s7" in str(t)],
     "expectations.reacted_within.failure: the timeline fails no link"),
    ({"reacted_within": {"congestion": 2}}, [t for t in SCENARIO["timeline"] if "s7-s8" not in str(t)],
     "expectations.reacted_within.congestion: the timeline congests no link"),
])
def test_bad_new_expectations_are_refused_naming_the_field(tmp_path, expectations, timeline, problem):
    changes = {"expectations": expectations}
    if timeline is not None:
        changes["timeline"] = timeline
    path = scenario_file(tmp_path, **changes)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert any(p.startswith(f"{path}: ") and problem in p for p in caught.value.problems), caught.value.problems



# -- nsi_segments: flows to remote DTNs over a WAN segment booked at the neighbour ----------------

RNP = "urn:ogf:network:rnp.sc16:nsa"


def nsi_run(segment: bool = True, end: str = "Terminated", data_from: float = 3.0) -> Recording:
    """wan pasadena-dtn1 -> saopaulo-dtn1 (beyond to-rnp) confirmed at 2.2 s, data from `data_from`;
    tcp stays on the show floor."""
    rec = Recording("sc16-nsi")
    rec.remote_dtns = {"saopaulo-dtn1": ("to-rnp", RNP)}
    for name, src, dst in (("wan", "pasadena-dtn1", "saopaulo-dtn1"), ("tcp", "caltech-a-dtn2", "caltech-b-dtn2")):
        rec.flows[name] = Flow(name, "transfer", src, dst, 40 * G, state="CANCELLED")
        for t in range(int(data_from) if name == "wan" else 1, 20):
            rec.rate(RateSample(float(t), name, 38 * G, 40 * G))
    if segment:
        rec.segments["wan"] = NsiSegment("wan", "r1", "saopaulo-dtn1", RNP, "RN-4b129c142a", "to-rnp", 1780, 2.2,
                                         end, 31.0 if end == "Terminated" else None)
    return rec


def test_a_flow_over_its_segment_terminated_at_the_end_passes():
    result = nsi_segments(nsi_run())
    assert result.passed, result.line()
    assert result.measured == "1 of 1 flow(s) to remote DTNs over a segment, 1 terminated"
    assert "wan: RN-4b129c142a at urn:ogf:network:rnp.sc16:nsa" in result.detail


@pytest.mark.parametrize(("run", "words"), [
    (nsi_run(segment=False), "wan never got its WAN segment (no connection id)"),
    (nsi_run(segment=False), "wan moved data without a WAN segment"),
    (nsi_run(data_from=1.0), "wan moved data at 1.0 s, before its segment RN-4b129c142a was confirmed at 2.2 s"),
    (nsi_run(data_from=99.0), "wan moved no data over RN-4b129c142a"),
    (nsi_run(end="Created"), "RN-4b129c142a at urn:ogf:network:rnp.sc16:nsa (wan) not terminated at the end: Created"),
    (nsi_run(end=""), "not terminated at the end: not asked"),
])
def test_a_flow_without_its_segment_or_left_at_the_neighbour_fails_naming_it(run, words):
    result = nsi_segments(run)
    assert not result.passed and words in result.detail, result.line()


def test_nsi_segments_fails_when_no_flow_reaches_a_remote_dtn():
    rec = nsi_run()
    del rec.flows["wan"]
    result = nsi_segments(rec)
    assert not result.passed and result.measured == "no flow to a remote DTN"


def test_nsi_segments_needs_a_topology_with_neighbours_and_a_flow_to_them(tmp_path):
    path = scenario_file(tmp_path, expectations={"nsi_segments": True})
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert f"{path}: expectations.nsi_segments: topology ring8 has no interdomain port" in caught.value.problems
    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "scenarios" / "sc16-nsi.yaml").read_text())
    data["topology"] = str(Path(__file__).resolve().parents[1] / "topologies" / "sc16-nsi.yaml")
    data["timeline"] = [a for a in data["timeline"] if "wan" not in a.get("name", "")]
    local = tmp_path / "local.yaml"
    local.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(local)
    assert any("expectations.nsi_segments: the timeline starts no transfer or reservation to a remote DTN" in p
               for p in caught.value.problems), caught.value.problems
