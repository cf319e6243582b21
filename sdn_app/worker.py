"""The one serialized entry point into the core: a single thread that runs every call in order.

gRPC threads (and, later, OpenFlow threads) never touch the `ReservationBook` themselves:
they hand a function to `CoreWorker.call` and wait for its result. The same thread ticks
the book when a window starts or ends and publishes the book's events to watchers, so a
watcher's snapshot and the events after it never overlap or miss one.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from sdn_app.core.plans import Step
from sdn_app.core.reservations import Change, Event, ReservationBook

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_TICK_INTERVAL = 1.0  # seconds; also the longest a window start or end waits to be seen
SUBSCRIBER_BACKLOG = 10_000


class Subscription:
    """One watcher's queue of events; `overflowed` is set if it fell too far behind."""

    def __init__(self, accept: Callable[[Event], bool]):
        self.accept = accept
        self.events: queue.Queue[Event | None] = queue.Queue(maxsize=SUBSCRIBER_BACKLOG)
        self.overflowed = False

    def close(self) -> None:
        """Wake the watcher so it notices the end."""
        with contextlib.suppress(queue.Full):  # a full queue wakes it anyway
            self.events.put_nowait(None)


class EventHub:
    """Fans events out to subscriptions; used only on the worker thread, except `unsubscribe`."""

    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()
        self._lock = threading.Lock()

    def subscribe(self, accept: Callable[[Event], bool]) -> Subscription:
        """A new subscription receiving every later event that `accept` lets through."""
        subscription = Subscription(accept)
        with self._lock:
            self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop delivering to `subscription` and wake it."""
        with self._lock:
            self._subscriptions.discard(subscription)
        subscription.close()

    def publish(self, events: list[Event]) -> None:
        """Deliver `events` to every subscription that accepts them."""
        if not events:
            return
        with self._lock:
            subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            for event in events:
                if subscription.accept(event):
                    try:
                        subscription.events.put_nowait(event)
                    except queue.Full:
                        subscription.overflowed = True
                        self.unsubscribe(subscription)
                        break

    def close_all(self) -> None:
        """Wake and drop every subscription (server shutdown)."""
        with self._lock:
            subscriptions, self._subscriptions = self._subscriptions, set()
        for subscription in subscriptions:
            subscription.close()


class Fabric(Protocol):
    """The OpenFlow side, as the provisioner needs it (sdn_app.openflow.fabric.Fabric)."""

    def apply(self, steps: list[Step], timeout: float = 5.0) -> str | None:
        """Apply `steps` in order with their barriers; None when confirmed, else why not."""
        ...


class Provisioner:
    """Applies the book's OpenFlow changes in order on its own thread, never holding up the core,
    and reports each install's outcome back through the core's serialized entry point."""

    def __init__(self, fabric: Fabric, report: Callable[[str, str | None], None]):
        self.fabric = fabric
        self._report = report
        self._changes: queue.SimpleQueue[Change | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tsdn-provisioner", daemon=True)

    def start(self) -> None:
        """Start applying changes."""
        self._thread.start()

    def submit(self, changes: list[Change]) -> None:
        """Queue `changes` behind those already queued."""
        for change in changes:
            self._changes.put(change)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the change in progress."""
        self._changes.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (change := self._changes.get()) is not None:
            try:
                error = self.fabric.apply(list(change.steps))
            except Exception as exc:  # the adapter's bug must not stop every later change
                log.exception("applying the changes of reservation %s failed", change.reservation_id)
                error = f"internal error: {exc}"
            if change.confirm:
                try:
                    self._report(change.reservation_id, error)
                except RuntimeError:
                    return  # the core is shutting down
            elif error:
                log.warning("removing or changing flows of reservation %s: %s", change.reservation_id, error)


def _log_failure(future: Future) -> None:
    if future.exception() is not None:
        log.error("queued core call failed", exc_info=future.exception())


class CoreWorker:
    """Runs calls into a `ReservationBook` on one thread and ticks it by its clock."""

    def __init__(self, book: ReservationBook, fabric: Fabric | None = None):
        self.book = book
        self.hub = EventHub()
        self.provisioner = (Provisioner(fabric, lambda rid, error: self.call(book.provisioned, rid, error))
                            if fabric is not None else None)
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tsdn-core", daemon=True)
        self._stopped = threading.Event()

    def start(self) -> None:
        """Start the worker thread (it ticks once at once, to catch up after a restart)."""
        if self.provisioner is not None:
            self.provisioner.start()
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Finish queued calls, stop the thread and wake every watcher."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._jobs.put(None)
        self._thread.join(timeout)
        if self.provisioner is not None:
            self.provisioner.stop(timeout)
        self.hub.close_all()

    @property
    def running(self) -> bool:
        """Whether calls are still accepted."""
        return not self._stopped.is_set()

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = 30.0, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` on the worker thread and return its result or raise its error."""
        if self._stopped.is_set():
            raise RuntimeError("the controller core is shutting down")
        future: Future = Future()
        self._jobs.put((lambda: fn(*args, **kwargs), future))
        return future.result(timeout)

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue `fn(*args)` on the worker thread without waiting; its errors are logged."""
        if self._stopped.is_set():
            return
        future: Future = Future()
        future.add_done_callback(_log_failure)
        self._jobs.put((lambda: fn(*args), future))

    def _run(self) -> None:
        self._tick()
        while True:
            wait = min(MAX_TICK_INTERVAL, max(0.0, self.book.next_deadline() - self.book.clock.now()))
            try:
                job = self._jobs.get(timeout=wait if math.isfinite(wait) else MAX_TICK_INTERVAL)
            except queue.Empty:
                self._tick()
                continue
            if job is None:
                return
            fn, future = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as error:  # handed back to the caller's thread
                    future.set_exception(error)
            self._publish()
            if self.book.next_deadline() <= self.book.clock.now():
                self._tick()

    def _tick(self) -> None:
        try:
            self.book.tick()
        except Exception:  # a failing tick must not kill the only core thread
            log.exception("tick of the reservation book failed")
        self._publish()

    def _publish(self) -> None:
        self.hub.publish(self.book.take_events())
        changes = self.book.take_changes()
        if changes and self.provisioner is not None:
            self.provisioner.submit(changes)
