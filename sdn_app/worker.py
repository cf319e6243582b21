"""The one serialized entry point into the core: a single thread that runs every call in order.

The gRPC server (on its asyncio loop) and other threads never touch the `ReservationBook`
themselves: they hand a function to `CoreWorker.call_async` (awaited, holding no thread) or
`CoreWorker.call` (a thread waits) and get its result. The same thread ticks
the book when a window starts or ends and publishes the book's events to watchers, so a
watcher's snapshot and the events after it never overlap or miss one. A watcher on the asyncio
loop waits for its subscription's events with `Subscription.next_async`, woken through the loop.

With switches, a provisioner (`Provisioning`: `sdn_app.openflow.provisioner`, built by the process
assembly) applies the book's OpenFlow changes in batches on its own thread, and reconciles each
switch when it connects: `reconcile_switch` queues, through this thread, a job holding what the
switch should hold, behind every change queued before it.

Other core state with deadlines (the agent registry) joins as a `Ticker`: the same thread
ticks it by its deadline and publishes its events to a hub of its own (`hub_for(ticker)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar, runtime_checkable

from sdn_app.core.errors import Unavailable
from sdn_app.core.plans import SwitchPlan
from sdn_app.core.reservation import Change, Event
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.transfers import JobOffer, TransferEvent

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_TICK_INTERVAL = 1.0  # seconds; also the longest a window start or end waits to be seen
SUBSCRIBER_BACKLOG = 10_000


class Subscription:
    """One watcher's queue of events; `overflowed` is set if it fell too far behind.

    A thread reads `events` (blocking `get`); a coroutine calls `wake_on(loop)` once and then
    awaits `next_async()`, which holds no thread while it waits.
    """

    def __init__(self, accept: Callable[[Event], bool]):
        self.accept = accept
        self.events: queue.Queue[Event | None] = queue.Queue(maxsize=SUBSCRIBER_BACKLOG)
        self.overflowed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = asyncio.Event()  # bound to a loop on its first wait, not here
        self._wake_pending = False

    def close(self) -> None:
        """Wake the watcher so it notices the end."""
        with contextlib.suppress(queue.Full):  # a full queue wakes it anyway
            self.events.put_nowait(None)
        self.wake()

    def wake_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wake `next_async`, awaited on `loop`, whenever events arrive (call it on `loop`)."""
        self._loop = loop

    def wake(self) -> None:
        """Tell a waiting `next_async` that events arrived (from any thread; one wake-up in
        flight at a time, however many events arrive before the loop gets to it)."""
        wake_all([self])

    def _set_ready(self) -> None:
        self._wake_pending = False
        self._ready.set()

    async def next_async(self) -> Event | None:
        """The next event, waiting without a thread (after `wake_on`); None once closed, or
        once every event is read after it overflowed."""
        while True:
            try:
                return self.events.get_nowait()
            except queue.Empty:
                if self.overflowed:
                    return None
            self._ready.clear()
            if self.events.empty() and not self.overflowed:  # an event put before the clear is seen here
                await self._ready.wait()


def wake_all(subscriptions: Sequence[Subscription]) -> None:
    """`Subscription.wake` for each of `subscriptions`, with one call into each loop they wait on
    (a call from another thread costs a system call: one per publish, not one per watcher)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Subscription]] = {}
    for subscription in subscriptions:
        loop = subscription._loop
        if loop is not None and not subscription._wake_pending:
            subscription._wake_pending = True
            by_loop.setdefault(loop, []).append(subscription)
    for loop, waiting in by_loop.items():
        try:
            loop.call_soon_threadsafe(_ready_all, waiting)
        except RuntimeError:  # the loop is closed: nobody waits any more
            for subscription in waiting:
                subscription._wake_pending = False


def _ready_all(subscriptions: list[Subscription]) -> None:
    for subscription in subscriptions:
        subscription._set_ready()


Topic = tuple[str, str]


def owner_topic(owner: str) -> Topic:
    """The topic of the events of `owner`'s reservations."""
    return ("owner", owner)


def transfer_topic(transfer_id: str) -> Topic:
    """The topic of one transfer's events."""
    return ("transfer", transfer_id)


def jobs_topic(dtn: str) -> Topic:
    """The topic of the jobs handed to the agent of `dtn`."""
    return ("jobs", dtn)


def topic_of(event: Any) -> Topic | None:
    """The topic an event is published under (None: only subscriptions to every topic get it)."""
    if isinstance(event, Event):
        return owner_topic(event.reservation.owner)
    if isinstance(event, TransferEvent):
        return transfer_topic(event.transfer.id)
    if isinstance(event, JobOffer):
        return jobs_topic(event.job.dtn)
    return None


class EventHub:
    """Fans events out to subscriptions; used only on the worker thread, except `unsubscribe`.

    A subscription to a topic is offered only the events of that topic, so that publishing costs
    what is delivered, not the number of watchers: a thousand watchers of other principals'
    reservations cost a create nothing.
    """

    def __init__(self) -> None:
        self._subscriptions: dict[Topic | None, set[Subscription]] = {}
        self._topics: dict[Subscription, Topic | None] = {}
        self._lock = threading.Lock()

    def subscribe(self, accept: Callable[[Event], bool], topic: Topic | None = None) -> Subscription:
        """A new subscription receiving every later event of `topic` (None: of every topic) that
        `accept` lets through."""
        subscription = Subscription(accept)
        with self._lock:
            self._subscriptions.setdefault(topic, set()).add(subscription)
            self._topics[subscription] = topic
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop delivering to `subscription` and wake it."""
        with self._lock:
            if subscription in self._topics:
                topic = self._topics.pop(subscription)
                subscribers = self._subscriptions[topic]
                subscribers.discard(subscription)
                if not subscribers:
                    del self._subscriptions[topic]
        subscription.close()

    def publish(self, events: list[Event]) -> None:
        """Deliver `events` to every subscription that accepts them, in order."""
        if not events:
            return
        by_topic: dict[Topic, list[Event]] = {}
        for event in events:
            topic = topic_of(event)
            if topic is not None:
                by_topic.setdefault(topic, []).append(event)
        with self._lock:
            deliveries = [(list(self._subscriptions.get(None, ())), events)]
            deliveries += [(list(self._subscriptions[topic]), of_topic) for topic, of_topic in by_topic.items()
                           if topic in self._subscriptions]
        woken = [subscription for subscriptions, offered in deliveries for subscription in subscriptions
                 if self._deliver(subscription, offered)]
        wake_all(woken)

    def _deliver(self, subscription: Subscription, events: list[Event]) -> bool:
        """Queue the `events` `subscription` accepts; whether it got any."""
        delivered = False
        for event in events:
            if subscription.accept(event):
                try:
                    subscription.events.put_nowait(event)
                    delivered = True
                except queue.Full:
                    subscription.overflowed = True
                    self.unsubscribe(subscription)
                    break
        return delivered

    def close_all(self) -> None:
        """Wake and drop every subscription (server shutdown)."""
        with self._lock:
            subscriptions, self._topics, self._subscriptions = list(self._topics), {}, {}
        for subscription in subscriptions:
            subscription.close()


class Ticker(Protocol):
    """Core state the worker ticks by its deadline and whose events it publishes."""

    def tick(self) -> Any:
        """Act on what is due now."""
        ...

    def next_deadline(self) -> float:
        """When the next tick is due (epoch seconds; inf: none)."""
        ...

    def take_events(self) -> list[Any]:
        """The events since the last call."""
        ...


@runtime_checkable
class Observer(Protocol):
    """A ticker that also follows the reservation book's events."""

    def observe(self, events: list[Event]) -> None:
        """Take the book's events, after watchers got them."""
        ...


class Provisioning(Protocol):
    """What applies the book's OpenFlow changes to the switches on a thread of its own
    (`sdn_app.openflow.provisioner.Provisioner`), as the worker calls it."""

    def start(self) -> None:
        """Start applying changes."""
        ...

    def submit(self, changes: list[Change]) -> None:
        """Queue `changes` (stored already) behind those already queued."""
        ...

    def reconcile(self, switch: str, expected: SwitchPlan) -> None:
        """Queue a reconciliation of `switch` to `expected` behind what is already queued."""
        ...

    def connected_switches(self) -> set[str]:
        """Names of the switches connected now."""
        ...

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the work in progress."""
        ...


MAX_GROUP_COMMIT = 64  # calls whose changes a replicated ledger stores in one transaction, at most


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class _LoopOutcome:
    """Takes a job's outcome on the worker thread, as a `Future` would, and settles an asyncio
    future with it on its loop: one call into the loop, no thread waiting."""

    __slots__ = ("abandoned", "future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future,
                 abandoned: Callable[[Any], None] | None):
        self.loop, self.future, self.abandoned = loop, future, abandoned

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def set_result(self, result: Any) -> None:
        self._hand_over(result, None)

    def set_exception(self, error: BaseException) -> None:
        self._hand_over(None, error)

    def _hand_over(self, result: Any, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self.loop.call_soon_threadsafe(self._settle, result, error)

    def _settle(self, result: Any, error: BaseException | None) -> None:
        if self.future.done():  # cancelled or timed out meanwhile
            if error is None and self.abandoned is not None:
                self.abandoned(result)
        elif error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)


def _log_failure(future: Future) -> None:
    if future.exception() is not None:
        log.error("queued core call failed", exc_info=future.exception())


class CoreWorker:
    """Runs calls into a `ReservationBook` on one thread and ticks it by its clock; also ticks
    `tickers` (by the book's clock), each publishing to its own hub."""

    def __init__(self, book: ReservationBook, provisioner: Provisioning | None = None,
                 tickers: Sequence[Ticker] = ()):
        """With `provisioner`, the book's OpenFlow changes go to it once stored (switches are controlled)."""
        self.book = book
        self.hub = EventHub()
        self._tickers = [(ticker, EventHub()) for ticker in tickers]
        # Checked once: isinstance against a runtime-checkable protocol costs ~100 us a call.
        self._observers = [ticker for ticker in tickers if isinstance(ticker, Observer)]
        self.provisioner = provisioner
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future | _LoopOutcome] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tsdn-core", daemon=True)
        self._stopped = threading.Event()

    def start(self) -> None:
        """Start the worker thread (it ticks once at once, to catch up after a restart), and
        reconcile the switches already connected (a switch connecting later is reconciled then)."""
        if self.provisioner is not None:
            self.provisioner.start()
        self._thread.start()
        if self.provisioner is not None:
            for switch in sorted(self.provisioner.connected_switches()):
                self.reconcile_switch(switch)

    def reconcile_switch(self, switch: str) -> None:
        """Queue a reconciliation of `switch` (its flows, meters and groups made what the
        reservations want there); returns at once, so an OpenFlow thread may call it."""
        self.submit(self._queue_reconcile, switch)

    def _queue_reconcile(self, switch: str) -> None:
        # On the core thread: every change decided so far is already in the provisioner's queue,
        # so the wish taken now is what the switch should hold once they are applied.
        if self.provisioner is not None:
            self.provisioner.reconcile(switch, self.book.switch_plan(switch))

    def hub_for(self, ticker: Ticker) -> EventHub:
        """The hub where `ticker`'s events are published."""
        for known, hub in self._tickers:
            if known is ticker:
                return hub
        raise KeyError(f"{ticker!r} is not ticked by this worker")

    def close_watchers(self) -> None:
        """Wake and drop every subscription of every hub (server shutdown)."""
        self.hub.close_all()
        for _, hub in self._tickers:
            hub.close_all()

    def stop(self, timeout: float = 5.0) -> None:
        """Finish queued calls, stop the thread and wake every watcher."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._jobs.put(None)
        self._thread.join(timeout)
        if self.provisioner is not None:
            self.provisioner.stop(timeout)
        self.close_watchers()

    @property
    def running(self) -> bool:
        """Whether calls are still accepted."""
        return not self._stopped.is_set()

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = 30.0, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` on the worker thread and return its result or raise its error
        (at once when called on the worker thread: from a job, which holds it already)."""
        if threading.get_ident() == self._thread.ident:
            return fn(*args, **kwargs)
        if self._stopped.is_set():
            raise RuntimeError("the controller core is shutting down")
        future: Future = Future()
        self._jobs.put((lambda: fn(*args, **kwargs), future))
        return future.result(timeout)

    async def call_async(self, fn: Callable[[], T], timeout: float | None = 30.0,
                         abandoned: Callable[[T], None] | None = None) -> T:
        """`call`, awaited on an asyncio loop without holding a thread (TimeoutError after
        `timeout` seconds). `abandoned(result)` is called, on the loop, when `fn` returned after
        the awaiting coroutine was cancelled or timed out: what `fn` set up for it is undone there."""
        if self._stopped.is_set():
            raise RuntimeError("the controller core is shutting down")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((fn, _LoopOutcome(loop, future, abandoned)))
        expiry = loop.call_later(timeout, _expire, future) if timeout is not None else None
        try:
            return await future
        finally:
            if expiry is not None:
                expiry.cancel()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue `fn(*args)` on the worker thread without waiting; its errors are logged."""
        if self._stopped.is_set():
            return
        future: Future = Future()
        future.add_done_callback(_log_failure)
        self._jobs.put((lambda: fn(*args), future))

    def _run(self) -> None:
        self._tick()
        # With a replicated ledger, calls queued together are stored together (group commit).
        batch_limit = MAX_GROUP_COMMIT if self.book.ledger.replicated else 1
        while True:
            wait = min(MAX_TICK_INTERVAL, max(0.0, self._next_deadline() - self.book.clock.now()))
            try:
                job = self._jobs.get(timeout=wait if math.isfinite(wait) else MAX_TICK_INTERVAL)
            except queue.Empty:
                self._tick()
                continue
            if job is None:
                return
            outcomes = [self._run_job(job)]
            while len(outcomes) < batch_limit:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self._jobs.put(None)  # stop once this batch is answered
                    break
                outcomes.append(self._run_job(job))
            unstored = self._store()
            for future, result, error in filter(None, outcomes):
                if error is None and unstored is not None:
                    error = unstored
                if error is None:
                    future.set_result(result)
                else:  # handed back to the caller's thread
                    future.set_exception(error)
            self._publish()
            if self._next_deadline() <= self.book.clock.now():
                self._tick()

    @staticmethod
    def _run_job(job: tuple[Callable[[], Any], Future | _LoopOutcome]) -> tuple[Any, Any, BaseException | None] | None:
        """Run one call: (its future, result, error), or None when it was cancelled before it ran."""
        fn, future = job
        if not future.set_running_or_notify_cancel():
            return None
        try:
            return future, fn(), None
        except BaseException as error:
            return future, None, error

    def _store(self) -> Unavailable | None:
        """Store what the calls since the last time changed (a replicated ledger's flush): None
        once stored, else the error every caller of them gets (they changed nothing lasting)."""
        try:
            self.book.ledger.flush()
            return None
        except Exception as error:
            log.error("changes not stored: %s", error)
            return error if isinstance(error, Unavailable) else Unavailable(f"changes not stored: {error}")

    def _next_deadline(self) -> float:
        return min([self.book.next_deadline(), *(ticker.next_deadline() for ticker, _ in self._tickers)])

    def _tick(self) -> None:
        try:
            self.book.tick()
        except Exception:  # a failing tick must not kill the only core thread
            log.exception("tick of the reservation book failed")
        for ticker, _ in self._tickers:
            try:
                ticker.tick()
            except Exception:
                log.exception("tick of %s failed", type(ticker).__name__)
        self._publish()

    def _publish(self) -> None:
        # Nothing goes out (events, switch changes) before what caused it is stored.
        if self._store() is not None:
            self._discard()
            return
        events = self.book.take_events()
        while events:  # observers may change reservations in turn (a transfer ending releases its path)
            self.hub.publish(events)
            for observer in self._observers:
                try:
                    observer.observe(events)
                except Exception:
                    log.exception("%s failed to observe reservation events", type(observer).__name__)
            if self._store() is not None:
                self._discard()
                return
            events = self.book.take_events()
        for ticker, hub in self._tickers:
            hub.publish(ticker.take_events())
        changes = self.book.take_changes()
        if changes and self.provisioner is not None:
            self.provisioner.submit(changes)

    def _discard(self) -> None:
        """Drop the events and switch changes of changes that were not stored (this controller
        steps down: whoever leads next starts from what is stored)."""
        self.book.take_events()
        self.book.take_changes()
        for ticker, _ in self._tickers:
            ticker.take_events()
