"""The demo's player records what the controller decided from the typed decisions on the watch
stream (as a gRPC client sees them), never from the reason text: each reroute carries its cause,
its decision, the flow a rearrangement made room for, and the links of its old and new paths. Fed
with the events of a real book, converted as the servicer converts them; a reworded reason changes
none of what the runner, the expectations or the report conclude."""

from __future__ import annotations

from northbound.convert import decision_in, decision_out, event_out
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.core.decisions import Decision, Kind
from tests.switched import RUCIO, G, active, confirm, switched_ring8
from tests.test_advisor import mesh, tick
from tests.test_decisions import EVERY_KIND
from tests.test_scenarios import SMOKE, write
from tsdn.demo.emulation import Emulation
from tsdn.demo.expectations import moves
from tsdn.demo.player import Player
from tsdn.demo.report import reroute_rows
from tsdn.demo.runner import new_recording
from tsdn.demo.scenario import load_scenario


def runner(tmp_path) -> Player:
    """What a demo run plays its timeline with, on an emulation not started: the watch stream's
    events are handed to it as its watch thread would."""
    loaded = load_scenario(write(tmp_path, SMOKE))
    emulation = Emulation(loaded, loaded.scenario.scale_bound, tmp_path, tmp_path / "out", lambda line: None)
    return Player(loaded.scenario, emulation, new_recording(loaded))


def feed(run: Player, events, reason: str | None = None) -> None:
    """Hand the book's `events` to the player as the watch stream carries them (`reason`: instead of theirs)."""
    for event in events:
        message = event_out(event)
        if reason is not None:
            message.reason = reason
        run.emulation.events.put(message)
    run.drain()


def rearrangement(tmp_path, reason: str | None = None):
    """The mesh's rearrangement (small moved out of the way for big, then big) as the runner records it."""
    tmp_path.mkdir(exist_ok=True)
    env = mesh(tmp_path)
    s = active(env, "dtnc", "dtnb", bandwidth=50 * G)
    t = active(env, "dtnd", "dtnb", bandwidth=50 * G)
    r = active(env, "dtna", "dtnb", bandwidth=60 * G)
    for reporter in (s, t):
        env.book.report_rate(RUCIO, reporter.name, 50 * G)
    run = runner(tmp_path)
    run._by_reservation.update({s.id: "small", t.id: "other", r.id: "big"})
    feed(run, env.book.take_events())
    tick(env, r, 10 * G, {"a:1->b:1": 99 * G, "c:2->b:2": 50 * G, "d:2->b:3": 50 * G}, times=3)
    confirm(env)
    confirm(env)
    feed(run, env.book.take_events(), reason)
    return env, run, (s, r)


def reroutes(run: Player) -> list[dict]:
    return [e.details for e in run.recording.sorted_events() if e.kind == "reroute"]


def test_a_rearrangement_is_recorded_from_its_typed_decisions(tmp_path):
    env, run, (s, r) = rearrangement(tmp_path)
    small, big = reroutes(run)
    assert (small["flow"], small["cause"], small["relieves"], small["decision"]["kind"]) == \
        ("small", "rearrangement", "big", "displaced")
    assert small["decision"]["relieves"] == r.name
    assert small["new_links"] == list(env.book.get(RUCIO, s.name).route.primary.links)
    assert small["old_links"] == ["c-b"] and small["old"] == ["c", "b"]
    assert (big["flow"], big["cause"], big["decision"]["kind"]) == ("big", "congestion", "relieved")
    assert "relieves" not in big
    assert big["decision"]["evidence"]["congested"][0]["direction"] == "a:1->b:1"
    assert [(m.flow, m.relieves) for m in moves(run.recording)] == [("small", "big"), ("big", "")]
    announced = [e.details for e in run.recording.sorted_events()
                 if e.kind == "reservation" and e.details.get("decision", {}).get("kind") == "rearranged"]
    assert announced == []  # the announcement changed no state: recorded with the moves it made


def test_a_reworded_reason_changes_nothing_the_runner_concludes(tmp_path):
    _, today, (_, r_today) = rearrangement(tmp_path / "a")
    _, reworded, (_, r_reworded) = rearrangement(tmp_path / "b", reason="the controller felt like it")

    def without_text(run: Player, relieved: str) -> list[dict]:
        """The reroutes without their text, the relieved reservation's id (random) named."""
        found = []
        for d in reroutes(run):
            d = {k: v for k, v in d.items() if k not in ("reason", "message")}
            if "relieves" in d["decision"]:
                assert d["decision"]["relieves"] == relieved
                d["decision"] = {**d["decision"], "relieves": "big"}
            found.append(d)
        return found

    assert without_text(today, r_today.name) == without_text(reworded, r_reworded.name)

    assert all(d["reason"] == "the controller felt like it" for d in reroutes(reworded))
    assert [m.relieves for m in moves(reworded.recording)] == ["big", ""]
    assert [row[4] for row in reroute_rows(reworded.recording)] == ["rearrangement", "congestion"]


def test_a_move_off_a_failed_link_names_the_links_it_left_and_took(tmp_path):
    env = switched_ring8(tmp_path)
    r = active(env)
    run = runner(tmp_path)
    run._by_reservation[r.id] = "east"
    feed(run, env.book.take_events())
    env.book.set_link_state("s2-s3", up=False, reason="port s2:1 down")
    confirm(env)
    feed(run, env.book.take_events(), reason="")
    (moved,) = reroutes(run)
    assert moved["cause"] == "link" and moved["decision"]["link"] == "s2-s3"
    assert moved["old_links"] == ["s1-s2", "s2-s3"] and "s2-s3" not in moved["new_links"]
    assert moved["new_links"] == list(env.book.get(RUCIO, r.name).route.primary.links)
    assert moved["old"] == ["s1", "s2", "s3"] and moved["new"][:2] == ["s1", "s8"]


def event(rid: str, links: list[str], decision: Decision | None = None) -> pb.ReservationEvent:
    message = pb.ReservationEvent(state=pb.ACTIVE, reason="moved", reservation=pb.Reservation(
        id=rid, state=pb.ACTIVE, path=pb.Path(route=["dtn1", "caltech-a", "starlight", "dtn2"], links=links)))
    if decision is not None:
        message.decision.CopyFrom(decision_out(decision))
    return message


def test_a_move_between_parallel_links_is_a_reroute(tmp_path):
    run = runner(tmp_path)
    run._by_reservation["ab"] = "tcp-demo"
    for message in (event("ab", ["tbit-tcp"]), event("ab", ["tbit-rdma"], Decision(Kind.MOVED))):
        run.emulation.events.put(message)
    run.drain()
    (moved,) = reroutes(run)
    assert moved["old"] == moved["new"] == ["caltech-a", "starlight"]
    assert (moved["old_links"], moved["new_links"], moved["cause"]) == (["tbit-tcp"], ["tbit-rdma"], "congestion")


def test_every_decision_survives_the_proto():
    for decision, _ in EVERY_KIND:
        message = decision_out(decision)
        assert (message.verdict or None, message.cause or None) == (decision.verdict, decision.cause)
        assert decision_in(message) == decision
    assert decision_in(pb.Decision()) is None  # unset


def test_tsdn_path_tags_each_change_with_its_typed_decision():
    from tsdn.cli.reservations import _decision_tag

    tags = [_decision_tag(pb.ReservationHistory(decision=decision_out(d), reason="reworded")) for d, _ in EVERY_KIND]
    assert tags[:5] == ["[moved] ", "[rearranged] ", "[relieved] ", "[displaced] ", "[not moved: held] "]
    assert "[not moved: no_room] " in tags and "[link] " in tags and "[degraded] " in tags
    assert _decision_tag(pb.ReservationHistory(reason="congested: ...; moving to a > b")) == ""  # no decision, no tag
