"""The core worker's hubs and the asyncio side of it (sdn_app/worker.py), with a real reservation
book on sc16 (SQLite in tmp_path) and a real worker thread: who is offered which event, and a
coroutine waiting for its events without a thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sdn_app.core.clock import SystemClock
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.worker import CoreWorker, EventHub, owner_topic
from topologies import builtin_topology

G = 10**9
WAIT = 10.0  # seconds: the deadline of any wait
RUCIO, FTS = Principal("rucio", Role.SERVICE), Principal("fts", Role.SERVICE)


@pytest.fixture
def worker(tmp_path):
    clock = SystemClock()
    topology = Topology.load(builtin_topology("sc16"))
    ledger = Ledger(topology.capacities(), tmp_path / "tsdn.db", clock)
    worker = CoreWorker(ReservationBook(topology, ledger, clock))
    worker.start()
    yield worker
    worker.stop()
    ledger.close()


def create(worker: CoreWorker, principal: Principal, src: str = "caltech-a-dtn1", dst: str = "starlight-dtn1"):
    def admit():
        now = worker.book.clock.now()
        return worker.book.create(principal, PathRequest(src, dst, G, now, now + 3600))
    return worker.call(admit)


def drain(subscription) -> list:
    events = []
    while not subscription.events.empty():
        events.append(subscription.events.get_nowait())
    return events


def test_a_topic_subscription_is_offered_only_its_topics_events_in_order(worker):
    rucios = worker.call(lambda: worker.hub.subscribe(lambda event: True, owner_topic("rucio")))
    everything = worker.call(lambda: worker.hub.subscribe(lambda event: True))
    mine = create(worker, RUCIO)
    create(worker, FTS, "ucsd-dtn1", "dell-dtn1")
    worker.call(lambda: worker.book.release(RUCIO, mine.name))
    seen = drain(rucios)
    assert {event.reservation.owner for event in seen} == {"rucio"}
    assert [event.sequence for event in seen] == sorted(event.sequence for event in seen)
    assert seen[-1].reservation.state.name == "RELEASED"
    assert {event.reservation.owner for event in drain(everything)} == {"rucio", "fts"}


def test_unsubscribed_and_closed_subscriptions_get_nothing_more():
    hub = EventHub()
    subscription = hub.subscribe(lambda event: True, owner_topic("rucio"))
    hub.unsubscribe(subscription)
    assert subscription.events.get_nowait() is None  # woken: the end
    hub.unsubscribe(subscription)  # again: nothing
    hub.close_all()


def test_a_coroutine_waits_for_its_events_without_a_thread(worker):
    """The loop runs here; the worker thread publishes; `next_async` wakes for each event."""
    async def watch() -> list:
        subscription = await worker.call_async(lambda: worker.hub.subscribe(lambda e: True, owner_topic("rucio")))
        subscription.wake_on(asyncio.get_running_loop())
        threading.Thread(target=lambda: [create(worker, RUCIO) for _ in range(3)], daemon=True).start()
        events = [await asyncio.wait_for(subscription.next_async(), WAIT) for _ in range(6)]  # 2 per create
        worker.hub.unsubscribe(subscription)
        assert await asyncio.wait_for(subscription.next_async(), WAIT) is None  # closed
        return events
    events = asyncio.run(watch())
    assert [event.reservation.owner for event in events] == ["rucio"] * 6
    assert [event.sequence for event in events] == sorted(event.sequence for event in events)
    assert len({event.reservation.id for event in events}) == 3


def test_call_async_returns_raises_and_undoes_what_an_abandoned_call_set_up(worker):
    release = threading.Event()
    undone = threading.Event()

    async def scenario() -> None:
        assert await worker.call_async(lambda: 42) == 42
        with pytest.raises(ZeroDivisionError):
            await worker.call_async(lambda: 1 / 0)
        with pytest.raises(TimeoutError):  # the core is slow: the caller gives up, the job still runs
            await worker.call_async(lambda: release.wait(WAIT) and "set up", timeout=0.01,
                                    abandoned=lambda result: result == "set up" and undone.set())
        release.set()
        await asyncio.get_running_loop().run_in_executor(None, undone.wait, WAIT)
    asyncio.run(scenario())
    assert undone.is_set(), "what the abandoned call set up was not undone"


def test_a_job_calling_the_worker_again_runs_at_once(worker):
    assert worker.call(lambda: worker.call(lambda: "inner") + " and outer", timeout=WAIT) == "inner and outer"
