"""The transfer desk: a reservation booked per transfer, RECEIVE and SEND jobs handed to the two
DTNs' agents, rate reports fed to the advisor, timeouts, and how a transfer ends; transfers stored
with the reservations and picked up by a restart. Pure core on ring8 with a fake clock and a real
SQLite file; with switches, changes are applied to simulated flow tables."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from sdn_app.core import transfers
from sdn_app.core.agents import AgentFacts, AgentRegistry, NicFacts
from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NoCapacity,
    NotFound,
    PermissionDenied,
)
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reports import RateReport
from sdn_app.core.reservation import Principal, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.row_fields import CorruptRow
from sdn_app.core.topology import Topology
from sdn_app.core.transfers import (
    RESTART_GRACE,
    STALL_TIMEOUT,
    JobOffer,
    JobRole,
    TransferDesk,
    TransferEvent,
    TransferSpec,
    TransferState,
)
from tests.flowtable import FlowTables, delivered
from tests.switched import measured_loads, own
from topologies import builtin_topology

G = 10**9
M = 10**6
RUCIO = Principal("rucio", Role.SERVICE)
FTS = Principal("fts", Role.SERVICE)
NOC = Principal("noc", Role.ADMIN)
AGENT = Principal("dtn-agent", Role.AGENT)
FACTS = AgentFacts(nics=(NicFacts("ens1f0", speed_bps=100 * G, capacity_bps=100 * G, limit="NIC 100G"),))
SRC, DST = "dtn1", "dtn3"


def make(tmp_path: Path, provisioning: bool = False, scale: float = 1.0,
         agents: tuple[str, ...] = (SRC, DST, "dtn5", "dtn7")) -> SimpleNamespace:
    """ring8 with a book (switches controlled or not), an agent registry with `agents`, a desk;
    state in tmp_path/t.db."""
    topology = Topology.load(builtin_topology("ring8"))
    return open_state(topology, tmp_path / "t.db", FakeClock(), provisioning, scale, agents)


def open_state(topology: Topology, path: Path, clock: FakeClock, provisioning: bool, scale: float,
               agents: tuple[str, ...]) -> SimpleNamespace:
    """A controller's core over the state file `path`, as `Controller` builds it."""
    ledger = Ledger(topology.capacities(), path, clock)
    book = ReservationBook(topology, ledger, clock, provisioning=provisioning)
    registry = AgentRegistry(topology, clock, heartbeat_timeout=15.0, emulation_scale=scale)
    book.host_limits = registry.host_limit
    desk = TransferDesk(book, registry, clock, scale)
    for dtn in agents:
        registry.register(AGENT, dtn, FACTS)
    return SimpleNamespace(topology=topology, clock=clock, ledger=ledger, book=book, agents=registry, desk=desk,
                           tables=FlowTables(topology), path=path, scale=scale)


def restart(env, agents: tuple[str, ...] = ()) -> SimpleNamespace:
    """The controller restarts on the same state file, as after a crash: the old core is dropped
    without closing anything; the new one loads the file. Agents are not stored: only `agents`
    have registered again."""
    settle(env)
    return open_state(env.topology, env.path, env.clock, env.book.provisioning, env.scale, agents)


@pytest.fixture
def env(tmp_path):
    """Ledger only: reservations are ACTIVE at once."""
    return make(tmp_path)


@pytest.fixture
def switched(tmp_path):
    """Switches controlled: a reservation is ACTIVE once its flows are confirmed."""
    return make(tmp_path, provisioning=True)


def settle(env) -> None:
    """What the worker does after each call: hand the book's events to the desk until none come."""
    while events := env.book.take_events():
        env.desk.observe(events)


def confirm(env) -> None:
    """The adapter applies every queued change and confirms each; then the desk sees the events."""
    settle(env)
    for change in env.book.take_changes():
        env.tables.apply_all(change.steps)
        if change.confirm:
            env.book.provisioned(change.reservation_id, None, change.token)
    settle(env)


def offers(env) -> list[tuple[JobRole, str]]:
    """(role, dtn) of the job offers since the last look (transfer events are dropped)."""
    return [(e.job.role, e.job.dtn) for e in env.desk.take_events() if isinstance(e, JobOffer)]


def split(env) -> tuple[list[JobOffer], list[TransferEvent]]:
    events = env.desk.take_events()
    return [e for e in events if isinstance(e, JobOffer)], [e for e in events if isinstance(e, TransferEvent)]


def rate(bps: float, final: bool = False) -> RateReport:
    return RateReport("t", "builtin", 0.0, 1.0, bps, int(bps / 8), final=final)


def spec(**changes) -> TransferSpec:
    fields = {"src": SRC, "dst": DST, "bandwidth": 10 * G, "size": 50 * G}
    fields.update(changes)
    return TransferSpec(**fields)


def reservation(env, transfer):
    return env.book.get(NOC, transfer.reservation)


def running(env, transfer, port: int = 5201):
    """Ledger only: take the transfer to RUNNING (its events and offers are consumed)."""
    settle(env)
    assert env.desk.receiver_ready(AGENT, DST, transfer.name, port) == (False, "")
    env.desk.take_events()
    return env.desk.get(RUCIO, transfer.name)


def nothing_booked(env) -> None:
    assert env.book.list(NOC)[0] == []
    assert env.ledger.bookings() == []
    assert env.desk.list(NOC) == []


# -- the happy path -----------------------------------------------------------------------


def test_switched_transfer_runs_from_booking_to_success(switched):
    env = switched
    transfer = env.desk.start(RUCIO, spec(), request_id="job-1")
    assert transfer.state is TransferState.RESERVING and transfer.owner == "rucio"
    assert reservation(env, transfer).state is State.PROVISIONING
    assert reservation(env, transfer).labels == {"tsdn/transfer": transfer.id}
    jobs, events = split(env)
    assert jobs == [] and [(e.previous, e.state) for e in events] == [(None, TransferState.RESERVING)]
    assert events[0].reason == f"path booked: {transfer.reservation}"
    settle(env)  # the book's PROVISIONING events: nothing for the agents yet
    assert env.desk.take_events() == [] and env.desk.jobs_for(AGENT, DST) == []

    confirm(env)
    assert reservation(env, transfer).state is State.ACTIVE
    jobs, events = split(env)
    [receive] = [o.job for o in jobs]
    assert (receive.role, receive.dtn, receive.reservation) == (JobRole.RECEIVE, DST, transfer.reservation)
    assert receive.spec == spec() and receive.transfer == transfer.name
    assert [(e.previous, e.state) for e in events] == [(TransferState.RESERVING, TransferState.STARTING)]
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.STARTING

    # With switches the sender connects to the address the flows match, not where the receiver says.
    assert env.desk.receiver_ready(AGENT, DST, transfer.name, 5201, host="192.168.77.3") == (False, "")
    jobs, events = split(env)
    [send] = [o.job for o in jobs]
    assert (send.role, send.dtn, send.peer_host, send.peer_port) == (JobRole.SEND, SRC, "10.0.0.3", 5201)
    assert send.pacing_bps == int(10 * G * 0.95)
    assert [(e.previous, e.state) for e in events] == [(TransferState.STARTING, TransferState.RUNNING)]
    assert env.desk.path(env.desk.get(RUCIO, transfer.name)) == ("s1", "s2", "s3")

    for _ in range(5):
        env.clock.advance(1)
        assert env.desk.report(AGENT, SRC, transfer.name, JobRole.SEND, rate(9.5 * G)) == (False, "")
        assert env.desk.report(AGENT, DST, transfer.name, JobRole.RECEIVE, rate(9.4 * G)) == (False, "")
    settle(env)
    assert env.book.take_changes() == []  # at 95 % of the booking nothing moves
    events = [e for e in env.desk.take_events() if isinstance(e, TransferEvent)]
    assert len(events) == 5 and all(e.previous is e.state is TransferState.RUNNING and e.reason == "rate"
                                    for e in events)

    after_send = env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, True, "", None, rate(9.5 * G, final=True))
    assert after_send.state is TransferState.RUNNING and after_send.sides_done == {JobRole.SEND}
    assert env.desk.jobs_for(AGENT, SRC) == [] and len(env.desk.jobs_for(AGENT, DST)) == 1
    done = env.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, True, "", None, rate(9.4 * G, final=True))
    assert done.state is TransferState.SUCCEEDED and done.reason == "done at 9.5G"
    assert done.rate.final and done.receiver_rate.bits_per_second == 9.4 * G
    jobs, events = split(env)
    assert jobs == []  # both sides ended by themselves: nothing to stop
    assert [(e.previous, e.state) for e in events] == [(TransferState.RUNNING, TransferState.SUCCEEDED)]
    assert reservation(env, transfer).state is State.RELEASED
    assert env.ledger.bookings() == []
    confirm(env)  # the flows are removed; the RELEASED event changes nothing more
    assert delivered(env.tables, SRC, DST)[0] != DST
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.SUCCEEDED
    assert env.desk.take_events() == [] and env.desk.next_deadline() == math.inf


def test_ledger_only_starts_the_receiver_at_once_and_uses_the_listening_host(env):
    transfer = env.desk.start(RUCIO, spec())
    assert transfer.state is TransferState.STARTING
    assert reservation(env, transfer).state is State.ACTIVE
    assert offers(env) == [(JobRole.RECEIVE, DST)]
    env.desk.receiver_ready(AGENT, DST, transfer.name, 40000, host="192.168.77.3")
    [send] = [e.job for e in env.desk.take_events() if isinstance(e, JobOffer)]
    assert (send.peer_host, send.peer_port) == ("192.168.77.3", 40000)


def test_ledger_only_watchers_see_no_path_events_for_the_booking_itself(env):
    # The worker hands the desk the book's events of the reservation's creation (PROVISIONING,
    # then ACTIVE at once) after `start` returned, when the transfer is STARTING already: they
    # are no news about the path (nothing moved), and previous == state means a rate report.
    transfer = env.desk.start(RUCIO, spec())
    settle(env)
    events = [e for e in env.desk.take_events() if isinstance(e, TransferEvent)]
    assert [(e.previous, e.state) for e in events] == [(None, TransferState.RESERVING),
                                                       (TransferState.RESERVING, TransferState.STARTING)]
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.STARTING


def test_ledger_only_without_a_listening_host_uses_the_topology_address(env):
    transfer = env.desk.start(RUCIO, spec())
    env.desk.take_events()
    env.desk.receiver_ready(AGENT, DST, transfer.name, 40000)
    [send] = [e.job for e in env.desk.take_events() if isinstance(e, JobOffer)]
    assert send.peer_host == "10.0.0.3"


def test_receiver_ready_twice_hands_out_one_send_job(env):
    transfer = env.desk.start(RUCIO, spec())
    env.desk.take_events()
    env.desk.receiver_ready(AGENT, DST, transfer.name, 40000)
    env.desk.receiver_ready(AGENT, DST, transfer.name, 40001)
    assert offers(env) == [(JobRole.SEND, SRC)]
    other = env.desk.start(RUCIO, spec(src="dtn5", dst="dtn7"))
    for port in (0, 65536):
        with pytest.raises(InvalidArgument, match=f"listening_port: must be between 1 and 65535, got {port}"):
            env.desk.receiver_ready(AGENT, "dtn7", other.name, port)
    assert env.desk.get(RUCIO, other.name).state is TransferState.STARTING


def test_pacing_and_the_success_reason_are_scaled_by_the_emulation(tmp_path):
    env = make(tmp_path, scale=0.001)
    transfer = env.desk.start(RUCIO, spec(bandwidth=10 * G))
    env.desk.take_events()
    env.desk.receiver_ready(AGENT, DST, transfer.name, 5201)
    [send] = [e.job for e in env.desk.take_events() if isinstance(e, JobOffer)]
    assert send.pacing_bps == 9_500_000  # 10G x 0.001 x 0.95, as sent on the emulated wire
    env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, True, "", None, rate(9.5 * M, final=True))
    done = env.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, True, "", None, None)
    assert done.state is TransferState.SUCCEEDED and done.reason == "done at 9.5G"


def test_a_paced_sender_is_held_to_its_pace_not_its_booking(tmp_path):
    env = make(tmp_path, scale=0.001)
    transfer = env.desk.start(RUCIO, spec(bandwidth=10 * G, pace=4 * G))
    assert reservation(env, transfer).request.bandwidth == 10 * G  # the path is booked at the full bandwidth
    env.desk.take_events()
    env.desk.receiver_ready(AGENT, DST, transfer.name, 5201)
    [send] = [e.job for e in env.desk.take_events() if isinstance(e, JobOffer)]
    assert send.pacing_bps == 4_000_000  # 4G x 0.001, nothing shaved off: the pace is below the booking


def test_a_paced_transfer_keeps_its_pace_across_a_restart(env):
    transfer = running(env, env.desk.start(RUCIO, spec(pace=3 * G)))
    new = restart(env, agents=(SRC, DST))
    assert new.desk.get(RUCIO, transfer.name).spec.pace == 3 * G
    [send] = new.desk.jobs_for(AGENT, SRC)
    assert send.pacing_bps == 3 * G


def test_a_row_stored_before_pacing_existed_loads_unpaced(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    body = _body(env, transfer.id)
    del body["spec"]["pace"]
    with sqlite3.connect(env.path) as db:
        db.execute("UPDATE transfers SET body=? WHERE id=?", (json.dumps(body), transfer.id))
    new = restart(env, agents=(SRC, DST))
    assert new.desk.get(RUCIO, transfer.name).spec.pace is None
    [send] = new.desk.jobs_for(AGENT, SRC)
    assert send.pacing_bps == int(10 * G * 0.95)


# -- how a transfer fails -----------------------------------------------------------------


def test_files_whose_checksums_are_not_verified_fail(env):
    transfer = env.desk.start(RUCIO, spec(size=None, files=("/data/a.root", "/data/b.root"), destination="/in"))
    running(env, transfer)
    done = env.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, True, "", False, None)
    assert done.state is TransferState.FAILED and done.reason == f"receiver on {DST}: checksums not verified"
    assert done.checksums_verified is False
    assert offers(env) == [(JobRole.STOP, SRC)]
    assert reservation(env, transfer).state is State.RELEASED


def test_files_need_the_receivers_verdict_even_when_the_sender_is_done(env):
    transfer = env.desk.start(RUCIO, spec(size=None, files=("/data/a.root",), destination="/in"))
    running(env, transfer)
    env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, True, "", None, None)
    done = env.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, True, "", None, None)
    assert done.state is TransferState.FAILED and "checksums not verified" in done.reason


def test_files_with_checksums_verified_succeed(env):
    transfer = env.desk.start(RUCIO, spec(size=None, files=("/data/a.root",), destination="/in"))
    running(env, transfer)
    env.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, True, "", True, None)
    done = env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, True, "", None, rate(8 * G, final=True))
    assert done.state is TransferState.SUCCEEDED and done.reason == "done at 8G, checksums verified"
    assert done.checksums_verified is True


@pytest.mark.parametrize("role, dtn, other", [(JobRole.SEND, SRC, DST), (JobRole.RECEIVE, DST, SRC)])
def test_a_failing_side_fails_the_transfer_stops_the_other_and_releases(env, role, dtn, other):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    done = env.desk.finished(AGENT, dtn, transfer.name, role, False, "connection reset", None, None)
    side = "sender" if role is JobRole.SEND else "receiver"
    assert done.state is TransferState.FAILED and done.reason == f"{side} on {dtn} failed: connection reset"
    jobs, events = split(env)
    assert [(o.job.role, o.job.dtn) for o in jobs] == [(JobRole.STOP, other)]
    assert [(e.previous, e.state) for e in events] == [(TransferState.RUNNING, TransferState.FAILED)]
    assert reservation(env, transfer).state is State.RELEASED
    assert env.desk.jobs_for(AGENT, dtn) == []
    # The STOP stays on offer for the other side (its job stream may be down) until it ends there.
    assert [(j.role, j.dtn) for j in env.desk.jobs_for(AGENT, other)] == [(JobRole.STOP, other)]
    # The other side's late news: it is told to stop, and nothing changes.
    late = JobRole.RECEIVE if role is JobRole.SEND else JobRole.SEND
    assert env.desk.report(AGENT, other, transfer.name, late, rate(1 * G)) == (True, done.reason)
    assert env.desk.finished(AGENT, other, transfer.name, late, True, "", None, None).state is TransferState.FAILED
    assert env.desk.jobs_for(AGENT, other) == []


def test_a_stop_not_taken_expires(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    env.desk.cancel(RUCIO, transfer.name)
    assert len(env.desk.jobs_for(AGENT, SRC)) == len(env.desk.jobs_for(AGENT, DST)) == 1
    env.clock.advance(env.desk.start_timeout)
    env.desk.tick()
    assert env.desk.jobs_for(AGENT, SRC) == env.desk.jobs_for(AGENT, DST) == []
    assert env.desk.next_deadline() == math.inf


def test_a_sender_whose_engine_reports_only_at_the_end_is_not_stalled_while_its_agent_lives(env):
    transfer = running(env, env.desk.start(RUCIO, spec(engine="iperf3")))
    for _ in range(3):
        env.clock.advance(env.desk.stall_timeout)
        env.agents.heartbeat(AGENT, SRC)
        env.agents.heartbeat(AGENT, DST)
        env.desk.tick()
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.RUNNING
    env.clock.advance(env.agents.heartbeat_timeout)
    env.agents.tick()  # the sender's agent is LOST now
    env.clock.advance(env.desk.stall_timeout)
    env.desk.tick()
    ended = env.desk.get(RUCIO, transfer.name)
    assert ended.state is TransferState.FAILED and "LOST" in ended.reason, ended.reason


def test_a_receiver_failing_before_it_listens_fails_the_transfer(env):
    transfer = env.desk.start(RUCIO, spec())
    env.desk.take_events()
    done = env.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, False, "", None, None)
    assert done.state is TransferState.FAILED and done.reason == f"receiver on {DST} failed: no reason given"
    assert offers(env) == []
    assert reservation(env, transfer).state is State.RELEASED


def test_cancel_stops_both_sides_and_releases(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    cancelled = env.desk.cancel(RUCIO, transfer.name)
    assert cancelled.state is TransferState.CANCELLED and cancelled.reason == "cancelled by rucio"
    jobs, events = split(env)
    assert sorted((o.job.role, o.job.dtn) for o in jobs) == [(JobRole.STOP, SRC), (JobRole.STOP, DST)]
    assert all(o.job.transfer == transfer.name for o in jobs)
    assert [(e.previous, e.state) for e in events] == [(TransferState.RUNNING, TransferState.CANCELLED)]
    assert reservation(env, transfer).state is State.RELEASED
    assert env.desk.cancel(RUCIO, transfer.name) == cancelled  # ended: unchanged
    assert env.desk.take_events() == []
    assert env.desk.report(AGENT, SRC, transfer.name, JobRole.SEND, rate(1 * G)) == (True, "cancelled by rucio")
    assert env.desk.receiver_ready(AGENT, DST, transfer.name, 5201) == (True, "cancelled by rucio")


def test_others_cannot_see_or_cancel_a_transfer(env):
    transfer = env.desk.start(RUCIO, spec())
    for who in (FTS, AGENT):
        with pytest.raises(NotFound):
            env.desk.cancel(who, transfer.name)
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.STARTING
    assert env.desk.list(FTS) == [] and env.desk.list(NOC) == [env.desk.get(RUCIO, transfer.name)]
    assert env.desk.cancel(NOC, transfer.id).reason == "cancelled by noc"


def test_cancel_while_the_path_is_installed_removes_it(switched):
    env = switched
    transfer = env.desk.start(RUCIO, spec())
    env.desk.take_events()
    assert env.desk.cancel(RUCIO, transfer.name).state is TransferState.CANCELLED
    assert offers(env) == []  # no agent had a job
    confirm(env)
    assert reservation(env, transfer).state is State.RELEASED
    assert env.desk.take_events() == []
    assert delivered(env.tables, SRC, DST)[0] != DST


def test_failed_provisioning_fails_the_transfer(switched):
    env = switched
    transfer = env.desk.start(RUCIO, spec())
    settle(env)
    [change] = own(env.book.take_changes())
    env.book.provisioned(change.reservation_id, "s2: table full", change.token)
    settle(env)
    now = env.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.FAILED
    assert now.reason == f"{transfer.reservation} FAILED: provisioning failed: s2: table full"
    assert offers(env) == []


def test_a_reservation_released_by_its_owner_fails_the_transfer_without_releasing_again(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    env.book.release(RUCIO, transfer.reservation)
    releases = []
    original = env.book.release
    env.book.release = lambda principal, name: releases.append(name) or original(principal, name)
    settle(env)
    now = env.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.FAILED
    assert now.reason == f"{transfer.reservation} RELEASED: released by rucio"
    assert sorted(offers(env)) == [(JobRole.STOP, SRC), (JobRole.STOP, DST)]
    assert releases == []


def test_other_reservations_events_are_ignored(env):
    transfer = env.desk.start(RUCIO, spec())
    settle(env)
    env.desk.take_events()
    now = env.clock.now()
    other = env.book.create(RUCIO, PathRequest("dtn5", "dtn7", 1 * G, now, now + 60))
    env.book.release(RUCIO, other.name)
    settle(env)
    assert env.desk.take_events() == []
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.STARTING


# -- rates and the advisor ----------------------------------------------------------------


S2_S3 = "s2:1->s3:2"  # on the path of SRC -> DST


def sender_reports(env, transfer, bps: float, times: int, measured: dict[str, float] | None = None) -> None:
    """`times` seconds of sender reports, each after a round of measured link loads (when given)."""
    for _ in range(times):
        env.clock.advance(1)
        if measured is not None:
            env.book.observe_loads(measured_loads(env.book.topology, measured))
        assert env.desk.report(AGENT, SRC, transfer.name, JobRole.SEND, rate(bps)) == (False, "")
        settle(env)


def test_an_underperforming_transfer_moves_and_its_watchers_are_told(switched):
    env = switched
    transfer = env.desk.start(RUCIO, spec())
    confirm(env)
    env.desk.receiver_ready(AGENT, DST, transfer.name, 5201)
    env.desk.take_events()
    sender_reports(env, transfer, 7 * G, times=2, measured={S2_S3: 99 * G})  # below 80 %, but only twice
    assert reservation(env, transfer).state is State.ACTIVE
    sender_reports(env, transfer, 7 * G, times=1, measured={S2_S3: 99 * G})
    moving = reservation(env, transfer)
    assert moving.state is State.MOVING and "achieved 7G of 10G booked for 3 reports" in moving.reason
    path_events = [e for e in env.desk.take_events() if isinstance(e, TransferEvent) and e.reason != "rate"]
    assert [(e.previous, e.state) for e in path_events] == [(TransferState.RUNNING, TransferState.RUNNING)]
    assert path_events[0].reason.startswith("path MOVING: congested: achieved 7G") and "s8" in path_events[0].reason
    confirm(env)
    [moved] = [e for e in env.desk.take_events() if isinstance(e, TransferEvent)]
    assert moved.reason.startswith("path ACTIVE: moved to") and moved.state is TransferState.RUNNING
    assert env.desk.path(env.desk.get(RUCIO, transfer.name)) == ("s1", "s8", "s7", "s6", "s5", "s4", "s3")
    assert delivered(env.tables, SRC, DST)[1] == ("s1", "s8", "s7", "s6", "s5", "s4", "s3")
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.RUNNING


def test_ledger_only_moves_are_told_too(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    sender_reports(env, transfer, 1 * G, times=3, measured={S2_S3: 99 * G})
    path_events = [e for e in env.desk.take_events() if isinstance(e, TransferEvent) and e.reason != "rate"]
    assert len(path_events) == 1 and path_events[0].reason.startswith("path ACTIVE: congested: achieved 1G")
    assert env.desk.path(env.desk.get(RUCIO, transfer.name))[1] == "s8"


@pytest.mark.parametrize("reported, moves", [(19 * M, False), (10 * M, True)])
def test_the_senders_rate_is_scaled_back_before_the_advisor(tmp_path, reported, moves):
    env = make(tmp_path, scale=0.001)
    transfer = running(env, env.desk.start(RUCIO, spec(bandwidth=20 * G)))
    sender_reports(env, transfer, reported, times=4, measured={S2_S3: 99 * G})
    now = reservation(env, transfer)
    assert now.state is State.ACTIVE
    assert (now.route.primary.switches[1] == "s8") is moves
    assert ("congested: achieved 10G of 20G booked" in now.reason) is moves


def test_receiver_reports_do_not_feed_the_advisor(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    for _ in range(5):
        env.clock.advance(1)
        env.desk.report(AGENT, DST, transfer.name, JobRole.RECEIVE, rate(1 * G))
    settle(env)
    assert reservation(env, transfer).route.primary.switches == ("s1", "s2", "s3")
    assert env.desk.get(RUCIO, transfer.name).receiver_rate.bits_per_second == 1 * G


# -- timeouts -----------------------------------------------------------------------------


def test_a_path_not_installed_in_time_fails_the_transfer(switched):
    env = switched
    transfer = env.desk.start(RUCIO, spec())
    settle(env)
    env.desk.take_events()
    assert env.desk.next_deadline() == transfer.created + 30
    env.clock.advance(29.5)
    env.desk.tick()
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.RESERVING
    env.clock.advance(0.5)
    env.desk.tick()
    now = env.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.FAILED and now.reason == "the path was not installed within 30 s"
    assert reservation(env, transfer).state is State.RELEASED
    assert env.desk.next_deadline() == math.inf


def test_a_receiver_that_never_listens_fails_the_transfer(env):
    transfer = env.desk.start(RUCIO, spec())
    env.desk.take_events()
    env.clock.advance(30)
    env.desk.tick()
    now = env.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.FAILED and now.reason == f"the receiver on {DST} did not listen within 30 s"
    assert offers(env) == [(JobRole.STOP, DST)]
    assert reservation(env, transfer).state is State.RELEASED


def test_a_timeout_names_the_lost_agent(env):
    transfer = env.desk.start(RUCIO, spec())
    env.clock.advance(10)
    env.agents.heartbeat(AGENT, SRC)
    env.clock.advance(10)
    env.agents.heartbeat(AGENT, SRC)
    lost = {e.agent.dtn for e in env.agents.tick()}
    assert DST in lost and SRC not in lost
    env.clock.advance(10)
    env.desk.tick()
    now = env.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.FAILED
    assert now.reason == (f"the receiver on {DST} did not listen within 30 s; "
                          f"the agent of {DST} is LOST (no heartbeat for 15 s)")


def test_a_stalled_sender_fails_the_transfer(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    assert env.desk.next_deadline() == transfer.last_report + 15
    env.clock.advance(10)
    env.desk.report(AGENT, SRC, transfer.name, JobRole.SEND, rate(10 * G))
    env.clock.advance(10)
    env.desk.report(AGENT, DST, transfer.name, JobRole.RECEIVE, rate(10 * G))  # the receiver's do not count
    env.desk.tick()
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.RUNNING
    env.clock.advance(5)
    env.desk.tick()
    now = env.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.FAILED and now.reason == f"no report from the sender on {SRC} for 15 s"
    assert sorted(offers(env)) == [(JobRole.STOP, SRC), (JobRole.STOP, DST)]
    assert reservation(env, transfer).state is State.RELEASED


# -- refusals -----------------------------------------------------------------------------


def test_no_agent_for_a_dtn_is_refused_and_nothing_is_booked(tmp_path):
    env = make(tmp_path, agents=(SRC,))
    with pytest.raises(FailedPrecondition, match=f"destination dtn {DST}: no agent has registered"):
        env.desk.start(RUCIO, spec())
    nothing_booked(env)


def test_a_lost_agent_is_refused_and_nothing_is_booked(env):
    env.clock.advance(15)
    env.agents.heartbeat(AGENT, DST)
    env.agents.tick()
    with pytest.raises(FailedPrecondition, match=rf"source dtn {SRC}: its agent is LOST \(no heartbeat for 15 s\)"):
        env.desk.start(RUCIO, spec())
    nothing_booked(env)


@pytest.mark.parametrize("changes, message", [
    ({"size": 5, "files": ("/a",), "destination": "/in"}, "exactly one of size_bytes"),
    ({"size": None}, "exactly one of size_bytes"),
    ({"size": 0}, "size_bytes: must be positive"),
    ({"size": None, "files": ("data/a",), "destination": "/in"}, "files: 'data/a' is not an absolute path"),
    ({"size": None, "files": ("/a",)}, "destination: '' is not an absolute directory"),
    ({"size": None, "files": ("/a",), "destination": "in"}, "destination: 'in' is not an absolute"),
    ({"destination": "/in"}, "destination: only for files"),
    ({"streams": 0}, "streams: must be between 1 and 256, got 0"),
    ({"streams": 1000}, "streams: must be between 1 and 256, got 1000"),
    ({"engine": "gridftp"}, "engine 'gridftp': unknown"),
    ({"size": None, "files": tuple(f"/f{i}" for i in range(10_001)), "destination": "/in"}, "files: 10001 paths"),
    ({"pace": 10 * G}, r"pace_bps: 10G must be above 0 and below the booked bandwidth_bps \(10G\)"),
    ({"pace": 12 * G}, r"pace_bps: 12G must be above 0 and below the booked bandwidth_bps \(10G\)"),
    ({"pace": 0}, "pace_bps: 0 must be above 0"),
])
def test_bad_specs_are_refused_naming_the_field_and_nothing_is_booked(env, changes, message):
    with pytest.raises(InvalidArgument, match=message):
        env.desk.start(RUCIO, spec(**changes))
    nothing_booked(env)


@pytest.mark.parametrize("changes, message", [
    ({"src": "s1"}, "source dtn 's1': not a DTN of topology ring8"),
    ({"dst": "nowhere"}, "destination dtn 'nowhere': not a DTN"),
])
def test_unknown_dtns_are_refused(env, changes, message):
    with pytest.raises(InvalidArgument, match=message):
        env.desk.start(RUCIO, spec(**changes))
    nothing_booked(env)


def test_no_room_on_the_path_books_nothing(env):
    with pytest.raises(NoCapacity):
        env.desk.start(RUCIO, spec(bandwidth=500 * G))
    nothing_booked(env)


def test_only_services_and_admins_start_transfers(env):
    with pytest.raises(PermissionDenied, match="may not start transfers"):
        env.desk.start(AGENT, spec())
    nothing_booked(env)
    assert env.desk.start(NOC, spec()).owner == "noc"


def test_agents_only_take_jobs_and_report(env):
    transfer = env.desk.start(RUCIO, spec())
    with pytest.raises(PermissionDenied, match="only agent and admin tokens"):
        env.desk.jobs_for(RUCIO, DST)
    with pytest.raises(PermissionDenied, match="only agent and admin tokens"):
        env.desk.receiver_ready(RUCIO, DST, transfer.name, 5201)
    assert len(env.desk.jobs_for(NOC, DST)) == 1


def test_the_same_request_id_returns_the_same_transfer(env):
    first = env.desk.start(RUCIO, spec(), request_id="fts-42")
    again = env.desk.start(RUCIO, spec(), request_id="fts-42")
    assert again.id == first.id
    assert len(env.book.list(NOC)[0]) == 1 and len(env.desk.list(NOC)) == 1
    other = env.desk.start(FTS, spec(src="dtn5", dst="dtn7"), request_id="fts-42")  # ids are per principal
    assert other.id != first.id
    env.desk.cancel(RUCIO, first.name)
    assert env.desk.start(RUCIO, spec(), request_id="fts-42").state is TransferState.CANCELLED
    assert env.desk.start(RUCIO, spec()).id != first.id  # no request_id: a new transfer each time
    assert len(env.book.list(NOC)[0]) == 3
    with pytest.raises(AlreadyExists, match="fts-42"):  # the same id for another transfer: refused
        env.desk.start(RUCIO, spec(streams=4), request_id="fts-42")
    assert len(env.book.list(NOC)[0]) == 3


# -- agents' tokens and jobs ----------------------------------------------------------------


def test_a_token_bound_to_another_dtn_cannot_take_jobs_or_report(env):
    transfer = env.desk.start(RUCIO, spec())
    with pytest.raises(PermissionDenied, match=f"bound to dtn '{SRC}', not '{DST}'"):
        env.desk.jobs_for(AGENT, DST, bound_dtn=SRC)
    with pytest.raises(PermissionDenied, match="bound to dtn"):
        env.desk.receiver_ready(AGENT, DST, transfer.name, 5201, bound_dtn=SRC)
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.STARTING
    env.desk.receiver_ready(AGENT, DST, transfer.name, 5201, bound_dtn=DST)
    with pytest.raises(PermissionDenied, match="bound to dtn"):
        env.desk.report(AGENT, SRC, transfer.name, JobRole.SEND, rate(1 * G), bound_dtn=DST)
    with pytest.raises(PermissionDenied, match="bound to dtn"):
        env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, False, "x", None, None, bound_dtn=DST)
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.RUNNING
    assert env.desk.get(RUCIO, transfer.name).rate is None


def test_an_agent_can_only_act_for_its_own_side(env):
    transfer = env.desk.start(RUCIO, spec())
    with pytest.raises(PermissionDenied, match=f"dtn {SRC} is not the receive side"):
        env.desk.receiver_ready(AGENT, SRC, transfer.name, 5201)
    with pytest.raises(PermissionDenied, match=f"dtn {DST} is not the send side"):
        env.desk.report(AGENT, DST, transfer.name, JobRole.SEND, rate(1 * G))
    with pytest.raises(PermissionDenied):
        env.desk.finished(AGENT, SRC, transfer.name, JobRole.STOP, False, "", None, None)
    with pytest.raises(NotFound, match="the controller may have restarted"):
        env.desk.report(AGENT, SRC, "transfers/" + "0" * 32, JobRole.SEND, rate(1 * G))
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.STARTING


def test_jobs_for_lists_the_pending_jobs_again(env):
    transfer = env.desk.start(RUCIO, spec())
    env.desk.take_events()
    [receive] = env.desk.jobs_for(AGENT, DST)
    assert env.desk.jobs_for(AGENT, DST) == [receive]  # listed again for an agent that reconnects
    assert receive.role is JobRole.RECEIVE and env.desk.jobs_for(AGENT, SRC) == []
    env.desk.receiver_ready(AGENT, DST, transfer.name, 5201)
    [send] = env.desk.jobs_for(AGENT, SRC)
    assert (send.role, send.peer_port) == (JobRole.SEND, 5201)
    assert env.desk.jobs_for(AGENT, DST) == [receive]
    env.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, True, "", None, None)
    assert env.desk.jobs_for(AGENT, DST) == [] and env.desk.jobs_for(AGENT, SRC) == [send]
    env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, True, "", None, None)
    assert env.desk.jobs_for(AGENT, SRC) == []
    assert env.desk.get(RUCIO, transfer.name).state is TransferState.SUCCEEDED


# -- stored with the reservations: a controller restart ------------------------------------------


def test_a_running_transfer_is_picked_up_by_a_restart_and_ends_there(env):
    transfer = running(env, env.desk.start(RUCIO, spec(), request_id="fts-7"))
    sender_reports(env, transfer, 9.5 * G, times=2)
    before = env.desk.get(RUCIO, transfer.name)

    new = restart(env, agents=(SRC, DST))
    now = new.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.RUNNING and now.reason == before.reason
    assert now.reservation == transfer.reservation and reservation(new, now).state is State.ACTIVE
    assert now.rate.bits_per_second == 9.5 * G  # the rates as last stored (at most RATE_WRITE_INTERVAL old)
    assert new.desk.list(RUCIO) == [now]
    assert new.desk.start(RUCIO, spec(), request_id="fts-7").id == transfer.id  # a retry finds it
    # Agents whose job stream reconnects are handed their jobs again (they run each side once).
    [send] = new.desk.jobs_for(AGENT, SRC)
    [receive] = new.desk.jobs_for(AGENT, DST)
    assert (send.role, send.peer_port, send.pacing_bps) == (JobRole.SEND, 5201, int(10 * G * 0.95))
    assert receive.role is JobRole.RECEIVE

    # The sender's reports reach the new controller: watchers see them, the advisor moves the path.
    sender_reports(new, transfer, 1 * G, times=3, measured={S2_S3: 99 * G})
    events = [e for e in new.desk.take_events() if isinstance(e, TransferEvent)]
    assert [e.reason for e in events][:3] == ["rate"] * 3
    assert any(e.reason.startswith("path ACTIVE: congested: achieved 1G") for e in events)
    assert new.desk.path(new.desk.get(RUCIO, transfer.name))[1] == "s8"

    new.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, True, "", None, rate(9.5 * G, final=True))
    done = new.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, True, "", None, None)
    assert done.state is TransferState.SUCCEEDED and done.reason == "done at 9.5G"
    assert reservation(new, transfer).state is State.RELEASED and new.ledger.bookings() == []

    again = restart(new)
    assert again.desk.get(RUCIO, transfer.name) == done  # ended: queryable as it ended
    assert again.desk.jobs_for(AGENT, SRC) == again.desk.jobs_for(AGENT, DST) == []
    assert again.desk.next_deadline() == math.inf


def test_a_side_that_ended_before_the_restart_is_not_handed_its_job_again(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, True, "", None, rate(9.5 * G, final=True))
    new = restart(env, agents=(SRC, DST))
    assert new.desk.jobs_for(AGENT, SRC) == []
    assert [j.role for j in new.desk.jobs_for(AGENT, DST)] == [JobRole.RECEIVE]
    done = new.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, True, "", None, None)
    assert done.state is TransferState.SUCCEEDED and done.rate.final


def test_a_starting_transfer_waits_again_for_its_receiver(env):
    transfer = env.desk.start(RUCIO, spec())
    env.clock.advance(20)
    new = restart(env, agents=(SRC, DST))
    now = new.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.STARTING
    assert now.reason == f"the controller restarted; waiting for the receiver on {DST} to listen"
    assert [(j.role, j.dtn) for j in new.desk.jobs_for(AGENT, DST)] == [(JobRole.RECEIVE, DST)]
    assert new.desk.next_deadline() == new.clock.now() + 30  # counted from the restart
    assert new.desk.receiver_ready(AGENT, DST, transfer.name, 5202) == (False, "")
    [send] = [e.job for e in new.desk.take_events() if isinstance(e, JobOffer)]
    assert (send.role, send.dtn, send.peer_port) == (JobRole.SEND, SRC, 5202)
    assert new.desk.get(RUCIO, transfer.name).state is TransferState.RUNNING


def test_a_reserving_transfer_goes_on_once_the_switches_confirm_its_path(switched):
    env = switched
    transfer = env.desk.start(RUCIO, spec())
    settle(env)
    env.book.take_changes()  # the controller dies before the switches confirm
    new = restart(env, agents=(SRC, DST))
    now = new.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.RESERVING
    assert now.reason == f"the controller restarted; waiting for the path ({transfer.reservation} PROVISIONING)"
    assert new.desk.jobs_for(AGENT, DST) == []
    for switch in new.topology.switches:  # each switch reconnects and is reconciled
        new.book.switch_reconciled(switch)
    settle(new)
    assert reservation(new, transfer).state is State.ACTIVE
    now = new.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.STARTING
    assert [(j.role, j.dtn) for j in new.desk.jobs_for(AGENT, DST)] == [(JobRole.RECEIVE, DST)]


def test_a_reserving_transfer_whose_path_was_confirmed_just_before_the_crash_starts_its_receiver(switched):
    env = switched
    transfer = env.desk.start(RUCIO, spec())
    settle(env)
    [change] = own(env.book.take_changes())
    env.book.provisioned(change.reservation_id, None, change.token)  # committed; the desk never saw it
    new = open_state(env.topology, env.path, env.clock, True, 1.0, ())
    now = new.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.STARTING
    assert now.reason == f"the controller restarted; path ready: starting the receiver on {DST}"
    assert [(j.role, j.dtn) for j in new.desk.jobs_for(AGENT, DST)] == [(JobRole.RECEIVE, DST)]


def test_a_transfer_whose_path_is_gone_at_the_restart_fails_and_its_agents_are_told_to_stop(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    settle(env)
    with sqlite3.connect(env.path) as db:  # the booking is lost (say, the file was edited)
        db.execute("DELETE FROM bookings WHERE id=?", (transfer.reservation_id,))
    new = restart(env, agents=(SRC, DST))
    now = new.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.FAILED
    assert now.reason == (f"the controller restarted and found its path {transfer.reservation} FAILED: "
                          "its booking was missing from the ledger at start-up")
    assert [j.role for j in new.desk.jobs_for(AGENT, SRC)] == [JobRole.STOP]
    assert [j.role for j in new.desk.jobs_for(AGENT, DST)] == [JobRole.STOP]
    assert new.desk.report(AGENT, SRC, transfer.name, JobRole.SEND, rate(1 * G)) == (True, now.reason)


def test_a_picked_up_transfer_waits_for_its_agent_to_register_again(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    new = restart(env)  # no agent has registered yet
    restarted = new.clock.now()
    assert new.desk.next_deadline() == restarted + RESTART_GRACE
    new.clock.advance(60)
    new.agents.register(AGENT, SRC, FACTS)  # its connection is back: 15 s for a report
    assert new.desk.next_deadline() == new.clock.now() + 15
    sender_reports(new, transfer, 9.5 * G, times=1)
    assert new.desk.get(RUCIO, transfer.name).state is TransferState.RUNNING
    new.clock.advance(15)
    new.desk.tick()
    assert new.desk.get(RUCIO, transfer.name).state is TransferState.FAILED  # then the usual stall timeout


def test_a_picked_up_transfer_whose_agent_never_comes_back_fails_saying_so(env):
    transfer = env.desk.start(RUCIO, spec())
    new = restart(env)
    new.clock.advance(RESTART_GRACE - 1)
    new.desk.tick()
    assert new.desk.get(RUCIO, transfer.name).state is TransferState.STARTING
    new.clock.advance(1)
    new.desk.tick()
    now = new.desk.get(RUCIO, transfer.name)
    assert now.state is TransferState.FAILED
    assert now.reason == (f"the receiver on {DST} did not listen within 30 s after the controller restarted "
                          f"{RESTART_GRACE:.0f} s ago; the agent of {DST} has not registered since")
    assert reservation(new, transfer).state is State.RELEASED
    assert [(j.role, j.dtn) for j in new.desk.jobs_for(AGENT, DST)] == [(JobRole.STOP, DST)]


def test_ended_transfers_stay_queryable_after_a_restart_within_the_bound(env, monkeypatch):
    monkeypatch.setattr(transfers, "KEEP_ENDED", 3)
    ended = []
    for i in range(4):
        transfer = running(env, env.desk.start(RUCIO, spec(), request_id=f"run-{i}"))
        env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, i != 1, "disk full", None, None)
        if i != 1:
            env.desk.finished(AGENT, DST, transfer.name, JobRole.RECEIVE, True, "", None, None)
        ended.append(env.desk.get(RUCIO, transfer.name))
    cancelled = env.desk.cancel(RUCIO, env.desk.start(RUCIO, spec(), request_id="run-4").name)
    kept = [cancelled, *reversed(ended[2:])]
    assert env.desk.list(RUCIO) == kept  # the oldest went over the bound

    new = restart(env)
    assert new.desk.list(RUCIO) == kept
    assert [t.state for t in kept] == [TransferState.CANCELLED, TransferState.SUCCEEDED, TransferState.SUCCEEDED]
    with pytest.raises(NotFound):
        new.desk.get(RUCIO, ended[1].name)
    assert new.desk.start(RUCIO, spec(), request_id="run-3") == ended[3]
    with sqlite3.connect(env.path) as db:
        assert db.execute("SELECT count(*) FROM transfers").fetchone() == (3,)


def test_ended_rows_over_the_bound_are_dropped_at_start_up(env, monkeypatch):
    for _ in range(3):
        env.desk.cancel(RUCIO, env.desk.start(RUCIO, spec()).name)
    newest = env.desk.list(RUCIO)[:2]
    monkeypatch.setattr(transfers, "KEEP_ENDED", 2)
    new = restart(env)
    assert new.desk.list(RUCIO) == newest
    with sqlite3.connect(env.path) as db:
        assert db.execute("SELECT count(*) FROM transfers").fetchone() == (2,)


def test_a_file_from_before_transfers_were_stored_gets_the_table(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    with sqlite3.connect(env.path) as db:
        db.execute("DROP TABLE transfers")
    new = restart(env, agents=(SRC, DST))
    assert new.desk.list(NOC) == []
    released = reservation(new, transfer)  # its transfer is unknown: the path is freed
    assert released.state is State.RELEASED
    assert released.reason == "released by rucio: its transfer was lost when the controller restarted"
    later = new.desk.start(RUCIO, spec())
    assert restart(new).desk.get(RUCIO, later.name).state is TransferState.STARTING


def _body(env, transfer_id: str) -> dict:
    with sqlite3.connect(env.path) as db:
        return json.loads(db.execute("SELECT body FROM transfers WHERE id=?", (transfer_id,)).fetchone()[0])


@pytest.mark.parametrize("damage, message", [
    (lambda body: "{not json", r"body is not JSON"),
    (lambda body: json.dumps([1, 2]), r"field body: expected an object, found \[1, 2\]"),
    (lambda body: json.dumps({**body, "handed": [7]}), r"field handed\[0\]: expected an object, found 7"),
    (lambda body: json.dumps({**body, "format": 9}), r"field format: 9 is not the supported 1"),
    (lambda body: json.dumps({**body, "spec": {**body["spec"], "bandwidth": "10G"}}),
     r'field spec.bandwidth: expected a whole number, found "10G"'),
    (lambda body: json.dumps({k: v for k, v in body.items() if k != "owner"}), r"field owner: missing"),
    (lambda body: json.dumps({**body, "state": "RUNNNING"}), r"field state: 'RUNNNING' is not one of RESERVING"),
    (lambda body: json.dumps({**body, "handed": [{"role": "STOP"}]}), r"field handed\[0\].role: 'STOP'"),
    (lambda body: json.dumps({**body, "rate": {**body["rate"], "pinning": None}}),
     r"field rate.pinning: expected an object, found null"),
])
def test_a_corrupt_row_stops_the_start_naming_the_row_and_the_field(env, damage, message):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    sender_reports(env, transfer, 9.5 * G, times=1)
    body = _body(env, transfer.id)
    with sqlite3.connect(env.path) as db:
        db.execute("UPDATE transfers SET body=? WHERE id=?", (damage(body), transfer.id))
    with pytest.raises(CorruptRow, match=rf"t\.db: transfers row 1 \(id '{transfer.id}'\): {message}") as error:
        restart(env)
    assert f"DELETE FROM transfers WHERE id='{transfer.id}'" in str(error.value)
    with sqlite3.connect(env.path) as db:  # nothing was changed: the path is still booked
        assert db.execute("SELECT state FROM reservations").fetchall() == [("ACTIVE",)]


# -- a crash at any point: the file never holds a transfer and a reservation that disagree --------


class CrashImages:
    """Copies of a state file (with its write-ahead log) as a crash would leave it after each commit."""

    def __init__(self, env, folder: Path):
        self.env, self.folder, self.count = env, folder, 0
        folder.mkdir()
        env.ledger._db.set_trace_callback(self._statement)  # sees each BEGIN: the last commit is done

    def _statement(self, sql: str) -> None:
        if sql.startswith("BEGIN"):
            self.take()

    def take(self) -> None:
        self.count += 1
        for suffix in ("", "-wal"):
            source = Path(f"{self.env.path}{suffix}")
            if source.exists():
                shutil.copyfile(source, self.folder / f"{self.count:03}.db{suffix}")

    def images(self) -> list[Path]:
        return sorted(self.folder.glob("*.db"))


def disagreements(path: Path) -> list[str]:
    """Transfers and reservations in the file that disagree: a live transfer on a final (or
    missing) reservation, an ended one on a live reservation, a transfer's reservation without it."""
    final = ("RELEASED", "EXPIRED", "FAILED")
    with contextlib.closing(sqlite3.connect(path)) as db:
        reservations = {rid: (state, json.loads(body)["labels"])
                        for rid, state, body in db.execute("SELECT id, state, body FROM reservations")}
        rows = db.execute("SELECT id, state, reservation_id FROM transfers").fetchall()
    found = []
    for transfer_id, state, reservation_id in rows:
        reservation_state = reservations.get(reservation_id, ("missing", {}))[0]
        if (state in ("SUCCEEDED", "FAILED", "CANCELLED")) != (reservation_state in final):
            found.append(f"transfer {transfer_id} {state}, reservation {reservation_state}")
    stored = {row[0] for row in rows}
    for reservation_id, (state, labels) in reservations.items():
        if labels.get("tsdn/transfer") and labels["tsdn/transfer"] not in stored:
            found.append(f"reservation {reservation_id} {state} of no stored transfer")
    return found


@pytest.mark.parametrize("provisioning", [False, True])
def test_a_crash_after_any_commit_leaves_transfers_and_reservations_that_agree(tmp_path, provisioning):
    env = make(tmp_path, provisioning=provisioning)
    crashes = CrashImages(env, tmp_path / "crashes")

    def started(src: str, dst: str):
        transfer = env.desk.start(RUCIO, spec(src=src, dst=dst))
        confirm(env)
        env.desk.receiver_ready(AGENT, dst, transfer.name, 5201)
        return transfer

    done = started(SRC, DST)
    sender_reports(env, done, 9.5 * G, times=6)
    env.desk.finished(AGENT, SRC, done.name, JobRole.SEND, True, "", None, rate(9.5 * G, final=True))
    env.desk.finished(AGENT, DST, done.name, JobRole.RECEIVE, True, "", None, None)
    env.desk.cancel(RUCIO, started(SRC, DST).name)
    released = started("dtn5", "dtn7")
    env.book.release(RUCIO, released.reservation)  # by its owner: the transfer fails with it
    settle(env)
    env.desk.start(RUCIO, spec(src=DST, dst=SRC))  # left running up to the end
    confirm(env)
    stalled = started("dtn7", "dtn5")
    env.clock.advance(1)
    env.desk.report(AGENT, "dtn7", stalled.name, JobRole.SEND, rate(9.5 * G))
    env.clock.advance(STALL_TIMEOUT)
    env.desk.tick()
    assert env.desk.get(RUCIO, stalled.name).state is TransferState.FAILED
    crashes.take()

    assert len(crashes.images()) >= 15
    for image in crashes.images():
        assert disagreements(image) == [], image.name
        clock = FakeClock(env.clock.now())
        picked_up = open_state(env.topology, image, clock, provisioning, 1.0, ())
        for transfer in picked_up.desk.list(NOC):
            live = not reservation(picked_up, transfer).state.is_final
            assert live is not transfer.state.ended, (image.name, transfer)


def test_reports_with_numbers_that_are_not_finite_are_refused_and_nothing_is_stored(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    bad = RateReport("t", "builtin", 0.0, 1.0, 1 * G, 1000, rtt_ms=math.nan)
    with pytest.raises(InvalidArgument, match=r"rate\.rtt_ms: must be a finite number, got nan"):
        env.desk.report(AGENT, SRC, transfer.name, JobRole.SEND, bad)
    with pytest.raises(InvalidArgument, match=r"final\.rtt_ms"):
        env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, True, "", None, bad)
    assert env.desk.get(RUCIO, transfer.name) == transfer
    assert restart(env).desk.get(RUCIO, transfer.name).rate is None
