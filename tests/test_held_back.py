"""Who held a transfer back, from the controller's own decisions: a host-limited transfer the book
judged (its events fed to the demo's player as the watch stream carries them) is held back by its
hosts and listed as not moved with the book's evidence; a transfer moved off a congested or cut link
is held back by the network; one that never sagged by nothing; a sag the controller said nothing
about is named as such."""

from __future__ import annotations

from sdn_app.core.decisions import Decision, Evidence, Kind, Measured, PathTaken, Trigger, Why, to_dict
from sdn_app.core.rerouting.advisor import Health
from tests.switched import active, switched_ring8
from tests.test_advisor import S2_S3, tick
from tests.test_demo_decisions import feed, runner
from tsdn.demo.held_back import held_back, not_moved_rows, sags
from tsdn.demo.record import Flow, RateSample, Recording

G = 10**9


def transfer(rates: list[float], booked: int = 20 * G) -> Recording:
    """A transfer `east` reporting `rates` (share of `booked`) once a second from 1 s."""
    rec = Recording("tiny")
    rec.flows["east"] = Flow("east", "transfer", "dtn1", "dtn3", booked, state="CANCELLED")
    for t, share in enumerate(rates, start=1):
        rec.rate(RateSample(float(t), "east", share * booked, booked))
    return rec


def test_a_transfer_that_never_sagged_was_held_back_by_nothing():
    rec = transfer([0.95, 0.5, 0.5, 0.95, 0.7, 0.95])  # never 3 low reports in a row
    assert sags(rec, "east") == []
    assert held_back(rec, "east") == ("-", "nothing: never 3 reports in a row below 80% of its booking")
    assert not_moved_rows(rec) == []


def test_a_move_off_a_congested_link_is_the_network_and_not_a_not_moved_row():
    rec = transfer([0.95, 0.3, 0.3, 0.3, 0.9, 0.95])
    evidence = Evidence(6 * G, 20 * G, 3, congested=(Measured("s2:1->s3:2", "s2-s3", 100 * G, 99 * G, 90 * G),))
    rec.event(4.2, "reroute", flow="east", old=["s1", "s2", "s3"], new=["s1", "s8"], reason="congested: ...",
              decision=to_dict(Decision(Kind.MOVED, evidence=evidence)))
    (sag,) = sags(rec, "east")
    assert (sag.start, sag.end, sag.reports, sag.moved) == (1.0, 4.0, 3, True)
    assert held_back(rec, "east") == ("network", "the network: s2-s3 congested at 4.2 s")
    assert not_moved_rows(rec) == []


def test_a_cut_link_is_the_network_too():
    rec = transfer([0.95, 0.0, 0.0, 0.0, 0.95])
    path = PathTaken(("dtn1", "s1", "s8", "s7", "s6", "s5", "s4", "s3", "dtn3"))
    rec.event(2.5, "reroute", flow="east", old=["s1", "s2", "s3"], new=["s1", "s8"], reason="link s2-s3 down",
              decision=to_dict(Trigger("s2-s3", note="port s2:1 down").move(path)))
    assert held_back(rec, "east")[1] == "the network: link s2-s3 down at 2.5 s"


def test_a_sag_the_controller_said_nothing_about_is_named():
    rec = transfer([0.95, 0.4, 0.4, 0.4, 0.95])
    assert held_back(rec, "east") == ("unknown", "unknown: 1-4 s: no decision")
    ((flow, start, end, reports, rate, said),) = not_moved_rows(rec)
    assert (flow, start, end, reports, rate) == ("east", "1.0", "4.0", "3", "8G of 20G (40%)")
    assert said.startswith("no decision: the controller judges a transfer after 3 low reports in a row")


def test_a_verdict_held_down_on_a_congested_link_is_the_network_not_the_hosts():
    rec = transfer([0.3, 0.3, 0.3, 0.3])
    evidence = Evidence(6 * G, 20 * G, 3, congested=(Measured("s2:1->s3:2", "s2-s3", 100 * G, 99 * G, 90 * G),))
    rec.event(3.0, "decision", flow="east", reason="...; not moved: held down",
              decision=to_dict(Decision(Kind.NOT_MOVED, Why.HELD, evidence)))
    assert held_back(rec, "east")[0] == "network"
    (row,) = not_moved_rows(rec)
    assert row[5] == "3.0 s held (network): ...; not moved: held down"


def test_a_host_limited_transfer_judged_by_the_book_is_held_back_by_its_hosts(tmp_path):
    env = switched_ring8(tmp_path)
    r = active(env, bandwidth=25 * G)
    player = runner(tmp_path)
    player._by_reservation[r.id] = "slow-disk"
    player.recording.flows["slow-disk"] = Flow("slow-disk", "transfer", "dtn1", "dtn3", 25 * G)
    feed(player, env.book.take_events())
    tick(env, r, 12 * G, {"s1:1->s2:2": 12 * G, S2_S3: 12 * G}, times=3, health=Health(0, 2.1, 0.5))
    feed(player, env.book.take_events())
    (decision,) = [e for e in player.recording.events if e.kind == "decision"]
    assert (decision.details["flow"], decision.details["verdict"]) == ("slow-disk", "hosts")
    for t in (-2, -1, 0, 1):  # the reports the agent sent around it, on the player's clock
        player.recording.rate(RateSample(decision.time + t, "slow-disk", 12 * G, 25 * G))
    assert held_back(player.recording, "slow-disk")[0] == "hosts"
    (row,) = not_moved_rows(player.recording)
    assert row[0] == "slow-disk" and "hosts (hosts): achieved 12G of 25G booked for 3 reports; limited by the " \
                                      "hosts: path links at most 12% loaded (s1:1->s2:2)" in row[5]
