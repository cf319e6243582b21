"""The transfer desk paces each sender just under its reservation's meter, and hands the sender's
agent a PACE job whenever the meter changes while it sends; the pacing survives a restart.

The meter changes here as the book changes it for real: the owner modifies the reservation's
bandwidth (elastic shares and deadline schedules change it through the same kind of event).
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from northbound.proto.tsdn.v1 import agent_pb2 as agent_pb
from northbound.transfers import job_out, role_in
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.transfers import JobRole, TransferState
from tests.test_transfers import (
    AGENT,
    DST,
    FTS,
    RUCIO,
    SRC,
    G,
    _body,
    make,
    offers,
    rate,
    restart,
    running,
    settle,
    spec,
    split,
)


@pytest.fixture
def env(tmp_path):
    """Ledger only: reservations are ACTIVE at once."""
    return make(tmp_path)


def meter_to(env, transfer, bandwidth: int) -> None:
    """The owner changes the reservation's bandwidth, and so its meter; the desk sees the events."""
    env.book.modify(RUCIO, transfer.reservation, bandwidth=bandwidth)
    settle(env)


def test_a_meter_change_hands_the_running_sender_a_pace_job_and_tells_watchers(env):
    transfer = running(env, env.desk.start(RUCIO, spec(bandwidth=10 * G)))
    meter_to(env, transfer, 6 * G)
    jobs, events = split(env)
    [pace] = [offer.job for offer in jobs]
    assert (pace.role, pace.dtn, pace.pacing_bps, pace.reservation) == (JobRole.PACE, SRC, int(6 * G * 0.95),
                                                                         transfer.reservation)
    # One event, the pacing's: not also a "path ACTIVE" one for the same change.
    assert [e.reason for e in events] == [
        "pacing 9.5Gbit/s -> 5.7Gbit/s: the meter changed (modified: bandwidth 10G -> 6G)"]
    assert events[0].state is events[0].previous is TransferState.RUNNING
    now = env.desk.get(RUCIO, transfer.name)
    assert now.paced_meter == 6 * G and now.pacing == int(6 * G * 0.95)
    assert now.reason == transfer.reason  # the transfer's own reason is not the pacing's

    meter_to(env, transfer, 8 * G)  # again: the latest PACE replaces the one before
    [again] = [offer.job for offer in split(env)[0]]
    assert again.pacing_bps == int(8 * G * 0.95)
    assert [job.role for job in env.desk.jobs_for(AGENT, SRC)] == [JobRole.SEND, JobRole.PACE]
    assert env.desk.jobs_for(AGENT, SRC)[-1] == again


def test_pacing_is_scaled_by_the_emulation(tmp_path):
    env = make(tmp_path, scale=0.001)
    transfer = running(env, env.desk.start(RUCIO, spec(bandwidth=10 * G)))
    meter_to(env, transfer, 4 * G)
    [pace] = [offer.job for offer in split(env)[0]]
    assert pace.pacing_bps == 3_800_000  # 4G x 0.95 x 0.001, as sent on the emulated wire


def test_a_change_that_leaves_the_meter_alone_hands_no_pace_job(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    env.book.modify(RUCIO, transfer.reservation, end=env.clock.now() + 3600)
    settle(env)
    jobs, events = split(env)
    assert jobs == []
    assert [e.reason for e in events] == [f"path ACTIVE: {env.book.get(RUCIO, transfer.reservation).reason}"]
    assert env.desk.get(RUCIO, transfer.name).paced_meter == 10 * G


def test_before_the_sender_starts_no_pace_job_and_the_send_is_paced_at_the_meter_then(env):
    transfer = env.desk.start(RUCIO, spec(bandwidth=10 * G))
    settle(env)
    env.desk.take_events()
    meter_to(env, transfer, 6 * G)
    assert offers(env) == []
    env.desk.receiver_ready(AGENT, DST, transfer.name, 5201)
    [send] = [offer.job for offer in split(env)[0]]
    assert (send.role, send.pacing_bps) == (JobRole.SEND, int(6 * G * 0.95))
    assert env.desk.get(RUCIO, transfer.name).paced_meter == 6 * G


def test_a_sender_held_to_its_own_pace_is_repaced_only_when_the_meter_falls_below_it(env):
    transfer = running(env, env.desk.start(RUCIO, spec(bandwidth=10 * G, pace=3 * G)))
    meter_to(env, transfer, 6 * G)
    jobs, events = split(env)
    assert jobs == [] and [e.reason.startswith("path ACTIVE: modified") for e in events] == [True]
    assert env.desk.get(RUCIO, transfer.name).paced_meter == 6 * G
    meter_to(env, transfer, 2 * G)
    jobs, events = split(env)
    assert [offer.job.pacing_bps for offer in jobs] == [int(2 * G * 0.95)]
    assert [e.reason for e in events] == [
        "pacing 3Gbit/s -> 1.9Gbit/s: the meter changed (modified: bandwidth 6G -> 2G)"]


def test_no_pace_job_once_the_sender_ended_and_no_stop_for_it(env):
    transfer = running(env, env.desk.start(RUCIO, spec()))
    meter_to(env, transfer, 6 * G)
    env.desk.take_events()
    env.desk.finished(AGENT, SRC, transfer.name, JobRole.SEND, True, "", None, rate(5.7 * G, final=True))
    assert env.desk.jobs_for(AGENT, SRC) == []
    meter_to(env, transfer, 4 * G)
    assert offers(env) == []
    env.desk.cancel(RUCIO, transfer.name)
    assert offers(env) == [(JobRole.STOP, DST)]  # the receiver's side only: a PACE is no side


def test_a_restart_keeps_the_current_pacing(env):
    transfer = running(env, env.desk.start(RUCIO, spec(bandwidth=10 * G)))
    meter_to(env, transfer, 6 * G)
    [pace] = [offer.job for offer in split(env)[0]]
    new = restart(env, agents=(SRC, DST))
    assert offers(new) == []  # nothing changed: nothing handed out anew
    now = new.desk.get(RUCIO, transfer.name)
    assert now.paced_meter == 6 * G and now.pacing == int(6 * G * 0.95)
    send, again = new.desk.jobs_for(AGENT, SRC)  # an agent whose job stream reconnects
    assert (send.role, again) == (JobRole.SEND, pace)
    meter_to(new, transfer, 6 * G)  # the same meter: nothing to do
    assert offers(new) == []


def test_a_meter_changed_while_the_controller_was_away_repaces_at_the_restart(env):
    transfer = running(env, env.desk.start(RUCIO, spec(bandwidth=10 * G)))
    env.book.modify(RUCIO, transfer.reservation, bandwidth=6 * G)
    env.book.take_events()  # the controller crashed before the desk saw them
    new = restart(env, agents=(SRC, DST))
    jobs, events = split(new)
    assert [(offer.job.role, offer.job.pacing_bps) for offer in jobs] == [(JobRole.PACE, int(6 * G * 0.95))]
    reason = new.book.get(RUCIO, transfer.reservation).reason
    assert [e.reason for e in events] == [
        f"pacing 9.5Gbit/s -> 5.7Gbit/s: the meter changed (found so when the controller restarted: "
        f"{transfer.reservation} {reason})"]


def test_a_row_from_before_pacing_followed_the_meter_loads_as_paced_at_its_booking(env):
    transfer = running(env, env.desk.start(RUCIO, spec(bandwidth=10 * G)))
    body = _body(env, transfer.id)
    for key in ("paced_meter", "schedule", "projected_finish", "behind"):
        del body[key]
    del body["spec"]["deadline"]
    with sqlite3.connect(env.path) as db:
        db.execute("UPDATE transfers SET body=? WHERE id=?", (json.dumps(body), transfer.id))
    new = restart(env, agents=(SRC, DST))
    assert offers(new) == []
    assert new.desk.get(RUCIO, transfer.name).paced_meter == 10 * G
    meter_to(new, transfer, 5 * G)
    assert [(role, dtn) for role, dtn in offers(new)] == [(JobRole.PACE, SRC)]


def test_a_pace_job_goes_to_the_agent_as_pace_and_is_no_reports_role(env):
    transfer = running(env, env.desk.start(RUCIO, spec(bandwidth=10 * G)))
    meter_to(env, transfer, 6 * G)
    [pace] = [offer.job for offer in split(env)[0]]
    message = job_out(pace)
    assert (message.transfer, message.role, message.pacing_bps) == (transfer.name, agent_pb.PACE, 5_700_000_000)
    with pytest.raises(InvalidArgument, match="role: RECEIVE or SEND"):
        role_in(agent_pb.PACE)


def test_an_elastic_transfer_is_paced_at_its_share_and_follows_it(env):
    """Two elastic transfers share dtn3's access link by priority; a guaranteed reservation on it
    shrinks them, and each sender gets a PACE job at its new share."""
    dmm = Principal("rucio", Role.SERVICE, priority=3)  # its tokens file gives it priority 3
    low = running(env, env.desk.start(dmm, spec(bandwidth=10 * G, ceiling=100 * G, priority=1)))
    high = running(env, env.desk.start(dmm, spec(src="dtn5", bandwidth=10 * G, ceiling=100 * G, priority=3)))
    split(env)
    assert env.book.get(dmm, low.reservation).meter_bps == 30 * G  # 80G spare on dtn3's link, 1:3
    assert env.book.get(dmm, high.reservation).meter_bps == 70 * G
    now = env.clock.now()
    env.book.create(FTS, PathRequest("dtn7", DST, 40 * G, now, now + 3600))
    settle(env)
    paces = {offer.job.dtn: offer.job.pacing_bps for offer in split(env)[0] if offer.job.role is JobRole.PACE}
    assert paces == {SRC: int(20 * G * 0.95), "dtn5": int(40 * G * 0.95)}
