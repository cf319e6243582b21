"""Deadline transfers: the desk books a schedule with the real reservation book
(`ReservationBook.book_by_deadline`), paces the sender at each step, projects the finish from the
sender's reports and tells watchers once when it falls behind and once when it is back on
schedule; bad requests name their field and change nothing. The core on ring8 with a fake clock,
the API on a real controller (loopback gRPC), the command line's own checks."""

from __future__ import annotations

import math
import sqlite3
import time

import grpc
import pytest

from northbound.client import ApiError
from northbound.proto.tsdn.v1 import agent_pb2 as apb
from northbound.proto.tsdn.v1 import transfer_pb2 as tpb
from northbound.transfers import spec_in, transfer_out
from sdn_app.core.errors import InvalidArgument, NoCapacity
from sdn_app.core.paths import PathRequest
from sdn_app.core.reports import RateReport
from sdn_app.core.transfers import JobRole, TransferEvent, TransferState
from sdn_app.core.units import format_bandwidth, format_time
from tests.test_transfers import (
    AGENT,
    DST,
    FTS,
    RUCIO,
    SRC,
    G,
    make,
    nothing_booked,
    reservation,
    restart,
    running,
    settle,
    spec,
    split,
)

TB = 10**12
HOUR = 3600.0


@pytest.fixture
def env(tmp_path):
    """Ledger only: reservations are ACTIVE at once."""
    return make(tmp_path)


def deadline_spec(env, size: int | None = TB, within: float = HOUR, **changes):
    return spec(bandwidth=0, size=size, deadline=env.clock.now() + within, **changes)


def block(env, bandwidth: int, seconds: float) -> None:
    """Another service books `bandwidth` on the same path for the next `seconds`."""
    now = env.clock.now()
    env.book.create(FTS, PathRequest(SRC, DST, bandwidth, now, now + seconds))
    settle(env)
    env.desk.take_events()


# -- booking and pacing by the schedule ---------------------------------------------------------


def test_a_deadline_transfer_is_booked_by_a_schedule_and_its_sender_follows_each_step(env):
    block(env, 60 * G, 100)  # the path has 40G free for 100 s, then all of it
    transfer = env.desk.start(RUCIO, deadline_spec(env))
    assert transfer.state is TransferState.STARTING  # ledger only: the receiver starts at once
    booked = reservation(env, transfer)
    steps = booked.schedule
    assert len(steps) >= 2 and steps[0].bandwidth < steps[1].bandwidth, steps
    assert transfer.schedule == steps and transfer.bandwidth == max(s.bandwidth for s in steps)
    assert booked.request.bandwidth == transfer.bandwidth and steps[-1].end <= transfer.spec.deadline

    transfer = running(env, transfer)
    [send] = [j for j in env.desk.jobs_for(AGENT, SRC) if j.role is JobRole.SEND]
    assert send.pacing_bps == int(steps[0].bandwidth * 0.95)

    env.clock.set(steps[1].start)
    env.book.tick()
    settle(env)
    jobs, events = split(env)
    assert [(o.job.role, o.job.pacing_bps) for o in jobs] == [(JobRole.PACE, int(steps[1].bandwidth * 0.95))]
    [told] = [e.reason for e in events if e.reason.startswith("pacing")]
    assert told.startswith(f"pacing {_g(steps[0].bandwidth * 0.95)} -> {_g(steps[1].bandwidth * 0.95)}: the meter "
                           f"changed ("), told


def _g(bps: float) -> str:
    return f"{format_bandwidth(bps)}bit/s"


def test_the_api_shows_the_deadline_the_schedule_and_the_peak(env):
    transfer = env.desk.start(RUCIO, deadline_spec(env))
    message = transfer_out(transfer, 1.0)
    assert message.deadline.seconds == int(transfer.spec.deadline)
    assert [(s.start_time.seconds, s.end_time.seconds, s.bandwidth_bps) for s in message.schedule] == [
        (int(s.start), int(s.end), s.bandwidth) for s in transfer.schedule]
    assert message.bandwidth_bps == transfer.bandwidth > 0
    assert not message.HasField("projected_finish_time")


def test_a_deadline_transfer_is_kept_by_a_restart(env):
    transfer = running(env, env.desk.start(RUCIO, deadline_spec(env)))
    new = restart(env, agents=(SRC, DST))
    again = new.desk.get(RUCIO, transfer.name)
    assert again.spec == transfer.spec and again.schedule == transfer.schedule
    assert split(new)[0] == []  # the meter did not change: no PACE


def test_a_deadline_the_path_cannot_meet_is_refused_and_books_nothing(env):
    with pytest.raises(NoCapacity) as refusal:  # DeadlineMissed: says when it could arrive
        env.desk.start(RUCIO, deadline_spec(env, size=100 * TB, within=60))
    assert math.isfinite(refusal.value.earliest) and refusal.value.earliest > env.clock.now() + 60
    nothing_booked(env)
    assert restart(env).desk.list(RUCIO) == []


# -- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("changes, message", [
    ({"deadline": -1.0}, r"deadline: .* is not in the future \(now 2016-11-14T00:00:00Z\)"),
    ({"deadline": 0.0}, r"deadline: 2016-11-14T00:00:00Z is not in the future"),
    ({"deadline": math.nan}, "deadline: nan is not a point in time"),
    ({"size": 0}, "size_bytes: must be positive"),
    ({"size": None}, "size_bytes: a transfer with a deadline needs its size"),
    ({"size": None, "files": ("/data/a.root",), "destination": "/in"},
     "files: a transfer with a deadline needs size_bytes: the controller cannot know the size of files"),
    ({"bandwidth": 10 * G}, r"bandwidth_bps: leave it 0 with a deadline \(got 10G\)"),
    ({"pace": 1 * G}, "pace_bps: not with a deadline"),
])
def test_bad_deadline_requests_name_the_field_and_change_nothing(env, changes, message):
    fields = {"deadline": HOUR, **changes}
    fields["deadline"] = env.clock.now() + fields["deadline"] if math.isfinite(fields["deadline"]) \
        else fields["deadline"]
    with pytest.raises(InvalidArgument, match=message):
        env.desk.start(RUCIO, spec(**{"bandwidth": 0, **fields}))
    nothing_booked(env)
    with sqlite3.connect(env.path) as db:
        assert db.execute("SELECT count(*) FROM transfers").fetchone() == (0,)


def test_without_a_deadline_a_bandwidth_is_required(env):
    with pytest.raises(InvalidArgument, match="bandwidth_bps: must be greater than zero, got 0 "
                                              r"\(or give a deadline"):
        env.desk.start(RUCIO, spec(bandwidth=0))
    nothing_booked(env)


# -- falling behind -------------------------------------------------------------------------


def reports_at(env, transfer, bps: float, times: int) -> list[TransferEvent]:
    """`times` seconds of sender reports at `bps`, bytes counted on from the last report; the
    watchers' events other than rates."""
    for _ in range(times):
        last = env.desk.get(RUCIO, transfer.name).rate
        end, done = (last.end, last.bytes_total) if last else (0.0, 0)
        env.clock.advance(1.0)
        env.desk.report(AGENT, SRC, transfer.name, JobRole.SEND,
                        RateReport(transfer.id, "builtin", end, end + 1.0, bps, done + int(bps / 8)))
    return [e for e in split(env)[1] if e.reason != "rate"]


def test_falling_behind_is_told_once_per_crossing_with_the_projection_and_the_deadline(env):
    transfer = running(env, env.desk.start(RUCIO, deadline_spec(env, size=TB, within=HOUR)))
    deadline = transfer.spec.deadline
    assert reports_at(env, transfer, 100 * G, 5) == []  # 1 TB at 100G: 80 s, well before the deadline
    projected = env.desk.get(RUCIO, transfer.name).projected_finish
    assert projected is not None and projected < deadline

    told = reports_at(env, transfer, 1 * G, 10)  # the hosts can only do 1G: ~2 h for what is left
    assert len(told) == 1, [e.reason for e in told]
    now = env.desk.get(RUCIO, transfer.name)
    assert now.behind and now.projected_finish > deadline
    assert told[0].reason.startswith(f"falls behind: projected to finish at "
                                     f"{format_time(told[0].transfer.projected_finish)}, after its deadline "
                                     f"{format_time(deadline)} (achieving ")
    assert "over the last 5 reports" in told[0].reason and "left)" in told[0].reason
    assert reports_at(env, transfer, 1 * G, 10) == []  # still behind: not told again every second
    assert transfer_out(now, 1.0).projected_finish_time.seconds == int(now.projected_finish)

    back = reports_at(env, transfer, 100 * G, 10)
    assert [e.reason.split(":")[0] for e in back] == ["back on schedule"]
    assert f"before its deadline {format_time(deadline)}" in back[0].reason
    assert not env.desk.get(RUCIO, transfer.name).behind


def test_a_slow_start_is_not_judged_before_three_reports(env):
    transfer = running(env, env.desk.start(RUCIO, deadline_spec(env, size=TB, within=HOUR)))
    assert reports_at(env, transfer, 1 * G, 2) == []
    assert len(reports_at(env, transfer, 1 * G, 1)) == 1


def test_a_transfer_behind_its_deadline_is_not_told_again_after_a_restart(env):
    transfer = running(env, env.desk.start(RUCIO, deadline_spec(env, size=TB, within=HOUR)))
    assert len(reports_at(env, transfer, 1 * G, 5)) == 1
    new = restart(env, agents=(SRC, DST))
    assert new.desk.get(RUCIO, transfer.name).behind
    assert reports_at(new, transfer, 1 * G, 6) == []


def test_transfers_without_a_deadline_are_not_projected(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    assert reports_at(env, transfer, 1 * G, 5) == []
    assert env.desk.get(RUCIO, transfer.name).projected_finish is None


# -- the API and the command line -------------------------------------------------------------


def test_start_requests_with_a_deadline_take_no_bandwidth():
    request = tpb.StartTransferRequest(src_dtn=SRC, dst_dtn=DST, size_bytes=TB)
    request.deadline.FromSeconds(2_000_000_000)
    assert (spec_in(request).bandwidth, spec_in(request).deadline) == (0, 2_000_000_000.0)
    request.bandwidth_bps = 10 * G  # passed on for the desk to refuse by name
    assert spec_in(request).bandwidth == 10 * G
    request.deadline.nanos = -1
    with pytest.raises(InvalidArgument, match="deadline: not a valid time"):
        spec_in(request)


API_SRC, API_DST = "caltech-a-dtn1", "caltech-b-dtn1"


@pytest.mark.parametrize("kwargs, message", [
    ({"size": TB, "deadline": -60.0}, "deadline: "),
    ({"size": 0, "deadline": HOUR}, "size_bytes: must be positive"),
    ({"deadline": HOUR}, "size_bytes: a transfer with a deadline needs its size"),
    ({"files": ["/data/a"], "destination": "/in", "deadline": HOUR}, "files: a transfer with a deadline needs"),
])
def test_bad_deadline_start_requests_are_refused_by_the_api_and_book_nothing(client_for, kwargs, message):
    agent = client_for("dtn-agent")
    for dtn in (API_SRC, API_DST):
        agent.register_agent(dtn, apb.HostFacts())
    rucio = client_for("rucio")
    kwargs = {**kwargs, "deadline": time.time() + kwargs["deadline"]}
    with pytest.raises(ApiError) as refusal:
        rucio.start_transfer(API_SRC, API_DST, 0, **kwargs)
    assert refusal.value.code is grpc.StatusCode.INVALID_ARGUMENT and message in refusal.value.message
    noc = client_for("noc")
    assert list(noc.list_reservations()) == [] and noc.list_transfers() == []


@pytest.mark.parametrize("args, message", [
    (["--size", "40TB"], "--bandwidth: required (or give --deadline"),
    (["--size", "40TB", "--deadline", "+6h", "--bandwidth", "10G"], "--bandwidth: not with --deadline"),
    (["--files", "/data/a", "--destination", "/in", "--deadline", "2026-11-26T06:00Z"],
     "--deadline needs --size"),
    (["--size", "40TB", "--deadline", "tomorrow"], "--deadline: cannot read 'tomorrow' as a time"),
])
def test_the_command_line_checks_its_deadline_options(capsys, args, message):
    from tsdn.cli import main

    assert main(["transfer", "dtn1", "dtn3", *args, "--controller", "127.0.0.1:1"]) == 2
    assert message in capsys.readouterr().err



def test_transfers_show_prints_the_deadline_the_projected_finish_and_the_schedule(env, capsys):
    from tsdn.cli.transfer import run_show

    transfer = running(env, env.desk.start(RUCIO, deadline_spec(env, size=TB, within=HOUR)))
    reports_at(env, transfer, 1 * G, 5)  # falls behind: projected long after the deadline
    message = transfer_out(env.desk.get(RUCIO, transfer.name), 1.0)
    client = type("Client", (), {"get_transfer": lambda self, name: message})()
    assert run_show(type("Args", (), {"id": transfer.name, "json": False})(), client) == 0
    out = capsys.readouterr().out
    [step] = transfer.schedule
    finish = env.desk.get(RUCIO, transfer.name).projected_finish
    assert f"finish ~{format_time(finish)} LATE (deadline {format_time(transfer.spec.deadline)})" in out
    assert f"  schedule:\n    {format_time(step.start)} .. {format_time(step.end)}  {_g(step.bandwidth)}\n" in out
