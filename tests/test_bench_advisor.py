"""`tsdn bench advisor`: a quick run prints its JSON line, and the episodes' ground truth can
tell a policy that moves on every low rate from one that moves only for a network cause."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from benchmarks.advisor import KINDS, SERVICE, Generator, Move, Network, judge, main, request, run_baseline, run_core
from sdn_app.core.clock import FakeClock
from sdn_app.core.decisions import Decision, Kind, PathTaken, Trigger
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathFinder, Unbooked
from sdn_app.core.rerouting.policy import ReroutePolicy
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

SEED = 7
TO = PathTaken(("a", "b"))  # where a move goes: the judging reads the paths themselves


@pytest.fixture(scope="module")
def sc16():
    return Topology.load(builtin_topology("sc16"))


@pytest.fixture(scope="module")
def episodes(sc16):
    generator = Generator(sc16, SEED)
    return {kind: [generator.episode(kind, n * len(KINDS) + k) for n in range(3)] for k, kind in enumerate(KINDS)}


def test_a_quick_run_prints_every_figure_as_its_last_line(capsys):
    assert main(seed=SEED, episodes=16) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["bench"] == "advisor" and result["episodes"] == 16
    for key in ("precision", "recall", "flaps", "decision_ms_p50", "decision_ms_p99"):
        assert isinstance(result[key], int | float), key
    assert set(result["kinds"]) == set(KINDS)
    assert all(result["kinds"][kind]["episodes"] == 2 for kind in KINDS)
    assert {"precision", "recall", "flaps"} <= set(result["baseline"])
    # The congestion kinds need moves; the core made them, each onto an acceptable path.
    assert result["required_moves"] == 8 and result["recall"] == 1.0


def test_the_ground_truth_asks_a_move_only_for_a_network_cause(sc16, episodes):
    policy = ReroutePolicy()
    for kind, generated in episodes.items():
        for episode in generated:
            network = Network(sc16, episode, SEED)
            assert bool(episode.required) == (kind in ("forward", "reverse", "rearrangement", "failure")), kind
            for index, onset in episode.required.items():
                paths = _initial_paths(sc16, episode)
                booked = episode.transfers[index].booking
                before = network.rates(onset - 1, paths)[0][index]
                after = network.rates(onset, paths)[0][index]
                assert before >= policy.threshold * booked > after, (kind, episode.number)
            if kind in ("host-limited", "sender-limited"):
                paths = _initial_paths(sc16, episode)
                rates = network.rates(5, paths)[0]
                assert rates[0] < policy.threshold * episode.transfers[0].booking
                loads = network.loads(5, paths, rates)
                assert max(loads[d].fraction for d in paths[0].direction_ids) < policy.congested_at


def test_a_policy_that_moves_on_every_low_rate_scores_below_one(sc16, episodes, tmp_path):
    """The previous policy (3 low reports: move away) moves host-limited transfers: wrong moves
    and flaps; on forward congestion its move is right."""
    outcomes = [run_baseline(sc16, episode, tmp_path, SEED)
                for kind in ("host-limited", "sender-limited") for episode in episodes[kind]]
    moves = [m for outcome in outcomes for m in outcome.moves]
    assert moves and not any(m.correct for m in moves)
    assert {m.why for m in moves} == {"moved with no congestion or failure on its path", "back onto a path it left"}
    assert sum(outcome.flaps for outcome in outcomes) > 0
    for episode in episodes["forward"]:
        outcome = run_baseline(sc16, episode, tmp_path, SEED)
        assert outcome.moves and all(m.correct for m in outcome.moves) and outcome.made == {0}


def test_a_move_onto_the_congested_link_or_for_no_cause_is_judged_wrong(sc16, episodes, tmp_path):
    episode = episodes["failure"][0]
    network = Network(sc16, episode, SEED)
    paths = _initial_paths(sc16, episode)
    (when, failed), = episode.failures
    network.down.add(failed)
    (hot,) = episode.hot
    rates = network.rates(when, paths)[0]
    index_of = {f"r{i}": i for i in range(len(paths))}
    # Onto a path that still crosses the congested link: wrong, even though it leaves the failed one.
    onto_hot = _other_path(sc16, episode, paths, avoid={failed}, through=hot)
    move = Move(when, 0, paths[0], onto_hot, f"link {failed} down: moving to ...", decision=Trigger(failed).move(TO))
    assert judge(network, episode, move, [onto_hot, *paths[1:]], rates, index_of) == \
        (False, f"onto congested link {hot}")
    clear = _other_path(sc16, episode, paths, avoid={failed, hot})
    move = Move(when, 0, paths[0], clear, "reworded", decision=Trigger(failed).move(TO))
    assert judge(network, episode, move, [clear, *paths[1:]], rates, index_of) == (True, "")
    # A bystander moved "for congestion": nothing called for it.
    bystander = _other_path(sc16, episode, paths, index=1, avoid={*paths[1].links, hot, failed})
    move = Move(when, 1, paths[1], bystander, "congested: ...", decision=Decision(Kind.MOVED))
    assert judge(network, episode, move, [paths[0], bystander, *paths[2:]], rates, index_of) == \
        (False, "moved with no congestion or failure on its path")
    # The judging reads the typed decision: a reason that reads like a failure move, without one, is no cause.
    move = Move(when, 0, paths[0], clear, f"link {failed} down: moving to ...")
    assert judge(network, episode, move, [clear, *paths[1:]], rates, index_of) == \
        (False, f"moved for no network cause: link {failed} down: moving to ...")


def test_the_core_moves_only_where_the_ground_truth_asks(sc16, episodes, tmp_path):
    for kind in ("host-limited", "sender-limited", "blip", "forward", "reverse", "rearrangement", "oscillating"):
        for episode in episodes[kind]:
            outcome = run_core(sc16, episode, tmp_path, SEED)
            assert all(m.correct for m in outcome.moves), [(m.why, m.reason) for m in outcome.moves]
            assert outcome.made == set(episode.required) and outcome.flaps == 0
            assert bool(outcome.decisions_s) == (kind != "blip")  # two low reports call for no decision


def _initial_paths(topology, episode):
    """The transfers' paths as the book places them."""
    clock = FakeClock()
    book = ReservationBook(topology, Ledger(topology.capacities(), None, clock), clock)
    return [book.create(SERVICE, request(clock, tr)).route.primary for tr in episode.transfers]


def _other_path(topology, episode, paths, index=0, avoid=frozenset(), through=None):
    """A path for transfer `index` that avoids `avoid` (and crosses `through`, when given)."""
    finder = PathFinder(topology, Unbooked(topology))
    wanted = replace(request(FakeClock(), episode.transfers[index]), exclude=tuple(sorted(avoid)))
    for path in finder.alternatives(wanted, 20):
        if through is None or through in path.links:
            return path
    pytest.skip(f"no path through {through} avoiding {avoid} in episode {episode.number}")


def test_a_move_off_a_failed_link_during_congestion_avoids_the_congested_link(sc16, episodes, tmp_path):
    generator = Generator(sc16, 16)
    failures = [generator.episode("failure", n) for n in range(8)]
    for episode in failures:
        outcome = run_core(sc16, episode, tmp_path, SEED)
        assert all(m.correct for m in outcome.moves), [(m.why, m.reason) for m in outcome.moves]
