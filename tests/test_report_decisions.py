"""The demo report explains each reroute: its cause (from the typed decision) and the controller's
reason, what the timeline had done to its old path then, and the congestion windows shaded on the
plots."""

from __future__ import annotations

import json

from sdn_app.core.decisions import Decision, Kind, PathTaken, Trigger, to_dict
from tests.test_scenarios import SMOKE, write
from tsdn.demo.record import RateSample, Recording
from tsdn.demo.report import _mark_events, congestion_windows, reroute_rows, write_report
from tsdn.demo.scenario import load_scenario

G = 10**9
LONG_WAY = ["s1", "s8", "s7", "s6", "s5", "s4", "s3"]
CONGESTED = ("congested: achieved 8G of 20G booked for 3 reports; congested: s2:1->s3:2 at 98% of 100G, 90G not "
             "the controller's; moving to dtn1 > s1 > s8 > s7 > s6 > s5 > s4 > s3 > dtn3, which has measured "
             "headroom for 20G")


def typed(decision: Decision) -> dict:
    """The typed fields the runner records on a reroute."""
    return {"cause": decision.cause, "decision": to_dict(decision)}


SHORT_WAY = PathTaken(("dtn1", "s1", "s2", "s3", "dtn3"), ("s1-s2", "s2-s3"))


def recording(reasons: tuple[str, str, str] | None = None) -> Recording:
    """ring8: east congested off s2-s3 (west moved to make room for it), then cut off s8-s1;
    `reasons`: the three reroutes' reason texts instead of today's."""
    west, east, cut = reasons or ("rearrangement for reservations/ab: moving to dtn5 > s5 > ... to make room",
                                  CONGESTED, "link s8-s1 down (port s8:2 down): moving to dtn1 > s1 > s2 > s3 > dtn3")
    rec = Recording("tiny")
    rec.links = {f"s{i}-s{i % 8 + 1}": (f"s{i}", f"s{i % 8 + 1}") for i in range(1, 8)} | {"s8-s1": ("s8", "s1")}
    rec.event(5.0, "congest_link", timeline=1, link="s2-s3", message="link s2-s3 congested")
    rec.event(7.0, "reroute", flow="west", old=["s5", "s6"], new=["s5", "s4", "s3", "s2", "s1", "s8", "s7", "s6"],
              reason=west, message="west", **typed(Decision(Kind.DISPLACED, relieves="reservations/ab")))
    rec.event(7.5, "reroute", flow="east", old=["s1", "s2", "s3"], new=LONG_WAY, reason=east, message="east",
              **typed(Decision(Kind.MOVED)))
    rec.event(20.0, "clear_link", timeline=2, link="s2-s3", message="link s2-s3 cleared")
    rec.event(25.0, "fail_link", timeline=3, link="s8-s1", message="link s8-s1 cut")
    rec.event(25.4, "reroute", flow="east", old=LONG_WAY, new=["s1", "s2", "s3"], reason=cut, message="east",
              **typed(Trigger("s8-s1", note="port s8:2 down").move(SHORT_WAY)))
    rec.event(30.0, "congest_link", timeline=4, link="s4-s5", message="link s4-s5 congested")
    for t in range(0, 40):
        rec.rate(RateSample(float(t), "east", 18 * G, 20 * G))
    rec.ended = 40.0
    return rec


def test_each_reroute_is_listed_with_its_cause_its_old_path_then_and_the_reason():
    rows = reroute_rows(recording())
    assert [(r[0], r[1], r[4], r[5]) for r in rows] == [
        ("7.0", "west", "rearrangement", "none"),
        ("7.5", "east", "congestion", "s2-s3 congested"),
        ("25.4", "east", "link", "s8-s1 cut"),
    ]
    assert rows[1][6] == CONGESTED and rows[1][2] == "s1 s2 s3"


def test_a_reworded_reason_changes_no_cause():
    rows = reroute_rows(recording(("whatever", "moved for the fun of it", "link s8-s1 up: moving to")))
    assert [r[4] for r in rows] == ["rearrangement", "congestion", "link"]
    assert [r[6] for r in rows] == ["whatever", "moved for the fun of it", "link s8-s1 up: moving to"]
    untyped = Recording("untyped")  # a reason alone, however clear, says no cause
    untyped.event(1.0, "reroute", flow="east", old=["s1", "s2"], new=["s1", "s8", "s2"], reason=CONGESTED)
    assert reroute_rows(untyped)[0][4] == "-"


def test_a_parallel_link_is_named_as_such():
    rec = Recording("sc16ish")
    rec.links = {"tbit-tcp": ("caltech-a", "starlight"), "tbit-rdma": ("starlight", "caltech-a")}
    rec.event(1.0, "congest_link", link="tbit-tcp")
    rec.event(2.0, "reroute", flow="tcp-demo", old=["caltech-a", "starlight"], new=["caltech-a", "x", "starlight"],
              reason=CONGESTED)
    assert reroute_rows(rec)[0][5] == "tbit-tcp congested (a parallel link)"


def test_the_links_of_the_old_path_say_which_parallel_link_it_took():
    rec = Recording("sc16ish")
    rec.links = {"tbit-tcp": ("caltech-a", "starlight"), "tbit-rdma": ("starlight", "caltech-a")}
    rec.event(1.0, "congest_link", link="tbit-tcp")
    for at, took in ((2.0, "tbit-tcp"), (3.0, "tbit-rdma")):
        rec.event(at, "reroute", flow="tcp-demo", old=["caltech-a", "starlight"], new=["caltech-a", "starlight"],
                  old_links=[took], new_links=["tbit-rdma" if took == "tbit-tcp" else "tbit-tcp"], reason=CONGESTED)
    assert [row[5] for row in reroute_rows(rec)] == ["tbit-tcp congested", "none"]


def test_congestion_windows_run_from_congest_to_clear_or_to_the_end():
    assert congestion_windows(recording()) == [("s2-s3", 5.0, 20.0), ("s4-s5", 30.0, 40.0)]


def test_the_plots_shade_each_congestion_window():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots()
    _mark_events(axes, recording())
    shaded = sorted((round(p.get_x(), 1), round(p.get_x() + p.get_width(), 1)) for p in axes.patches)
    plt.close(fig)
    assert shaded == [(5.0, 20.0), (30.0, 40.0)]


def test_the_report_page_has_the_reroutes_and_events_jsonl_keeps_its_fields(tmp_path):
    scenario = load_scenario(write(tmp_path, SMOKE)).scenario
    rec = recording()
    page = write_report(tmp_path / "r", scenario, rec, []).read_text()
    assert "<h2>Reroutes, and why</h2>" in page
    assert "s2:1-&gt;s3:2 at 98% of 100G, 90G not the controller&#x27;s" in page
    assert "shaded orange" in page
    events = [json.loads(line) for line in (tmp_path / "r" / "events.jsonl").read_text().splitlines()]
    reroute = next(e for e in events if e["kind"] == "reroute")
    assert {"flow", "old", "new", "reason", "cause", "decision"} <= set(reroute["details"])
    assert reroute["details"]["decision"]["kind"] == "displaced" and reroute["details"]["cause"] == "rearrangement"
    assert all(e["details"].get("link") for e in events if e["kind"] in ("congest_link", "clear_link", "fail_link"))
