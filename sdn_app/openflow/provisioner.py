"""The provisioner: the reservation book's OpenFlow changes applied to the switches, beside the adapter.

`Provisioner` applies the changes the book decides (`ReservationBook.take_changes`, handed over
by the `CoreWorker` once they are stored) in batches on its own thread, never holding up the
core, and reports each install's outcome back through the core's serialized entry point. It
reconciles each switch when it connects: the fabric's `on_switch_connected` queues, through the
core's thread, a job holding what the switch should hold, behind every change queued before it.

`provisioned_worker(book, fabric)` is how the process assembly (`tsdn.controller`) wires the
three together: a `CoreWorker` handing its book's changes to a `Provisioner` over `fabric`.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sdn_app.core.plans import Step, StepKind, SwitchPlan
from sdn_app.core.reservation import Change
from sdn_app.core.reservations import ReservationBook
from sdn_app.worker import CoreWorker, Ticker

log = logging.getLogger(__name__)


class Fabric(Protocol):
    """The OpenFlow side, as the provisioner needs it (sdn_app.openflow.fabric.Fabric)."""

    on_switch_connected: Callable[[str], None] | None  # set by `provisioned_worker`; called on an OpenFlow thread

    def apply_many(self, changes: Sequence[Sequence[Step]], timeout: float = 5.0) -> list[str | None]:
        """Apply independent changes together; per change, None when confirmed, else why not."""
        ...

    def reconcile(self, switch: str, expected: SwitchPlan, timeout: float = 5.0) -> Any:
        """Make `switch` hold exactly `expected`; the result's `summary()` says what changed."""
        ...

    def connected_switches(self) -> set[str]:
        """Names of the switches connected now."""
        ...


@dataclass(frozen=True)
class Reconcile:
    """A queued reconciliation: make `switch` hold `expected`, what the core wanted there when it
    queued the job (behind every change it had queued before, so the two agree)."""

    switch: str
    expected: SwitchPlan


MAX_BATCH = 1000  # changes applied together at most
Report = tuple[str, str | None, int]  # reservation id, None or why its change failed, the change's token
_NOTHING = object()


@dataclass
class _Touched:
    """What changes write (their reservation, every entry their steps name, the paths they
    install or remove) and read (the paths they rely on); `early`: the paths among the writes
    that a change of one phase installs (applied in the first barrier round of a batch)."""

    writes: set[tuple]
    reads: set[tuple]
    early: set[tuple]
    phases: int = 0

    def clashes(self, other: _Touched, same_batch: bool = False) -> bool:
        """Whether the two must be applied one after the other (`other` earlier). In one batch
        (`same_batch`) a change whose last phase is its second or later may rely on a path
        `other` installs in its first round: `apply_many` applies phase i of every change in
        round i, so that path's entries are confirmed before this change's traffic starts."""
        if self.writes & (other.writes | other.reads):
            return True
        relied = self.reads & other.writes
        return bool(relied) and not (same_batch and self.phases >= 2 and relied <= other.early)

    def add(self, other: _Touched) -> None:
        self.writes |= other.writes
        self.reads |= other.reads
        self.early |= other.early


def _touches(change: Change) -> _Touched:
    """What `change` touches (`_Touched`)."""
    writes: set[tuple] = {("reservation", change.reservation_id)}
    for step in change.steps:
        if step.spec is not None:
            writes.add((type(step.spec).__name__, step.spec.key))
    made = {("path", label) for label in change.makes}
    phases = sum(1 for step in change.steps if step.kind is StepKind.BARRIER)
    return _Touched(writes | made, {("path", label) for label in change.needs}, made if phases == 1 else set(),
                    phases)


class Provisioner:
    """Applies the book's OpenFlow changes on its own thread, never holding up the core, and
    reports the outcome of each install back through the core's serialized entry point.

    Changes queued while a batch is applied are applied together as the next batch (at most
    `max_batch`), with `Fabric.apply_many`, and their outcomes reported in one core call.
    Order is kept where it matters: a change that touches anything an earlier change in the
    batch touches (same reservation, or the same flow key, meter or group id on a switch: a
    meter id freed by one release and taken by the next install) waits for the next batch,
    and so does every later change touching what it touches. A change that relies on a shared
    path (`Change.needs`) waits for the change installing it (`Change.makes`), unless that
    change has one phase and this one more (see `_Touched.clashes`); changes relying on the same
    path go together. When a path's change failed, the changes relying on it fail with its
    reason (unsent in later batches; in its own batch, their flows were sent and the core
    removes them), until a change of that path succeeds or every switch it failed on was
    reconciled. A reconciliation job runs alone, after everything queued before
    it and before everything queued after it.
    """

    def __init__(self, fabric: Fabric, report: Callable[[list[Report]], None],
                 reconciled: Callable[[str], None] | None = None, max_batch: int = MAX_BATCH):
        """`report(reports)` gets the outcome of each install or move of a batch, `reconciled(switch)`
        is told of each switch reconciled; both run on this thread and may block."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.fabric = fabric
        self.max_batch = max_batch
        self._report = report
        self._reconciled = reconciled
        self._queue: queue.SimpleQueue[Change | Reconcile | None] = queue.SimpleQueue()
        self._later: deque[Change | Reconcile | None] = deque()  # taken from the queue, left for a later batch
        self._broken: dict[int, tuple[str, set[str]]] = {}  # path label -> why its change failed, switches
        self._thread = threading.Thread(target=self._run, name="tsdn-provisioner", daemon=True)

    def start(self) -> None:
        """Start applying changes."""
        self._thread.start()

    def submit(self, changes: list[Change]) -> None:
        """Queue `changes` behind those already queued."""
        for change in changes:
            self._queue.put(change)

    def reconcile(self, switch: str, expected: SwitchPlan) -> None:
        """Queue a reconciliation of `switch` to `expected` behind what is already queued."""
        self._queue.put(Reconcile(switch, expected))

    def connected_switches(self) -> set[str]:
        """Names of the switches the fabric has connected now."""
        return self.fabric.connected_switches()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the batch in progress (and what was queued before this call)."""
        self._queue.put(None)
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)

    def _take(self, block: bool) -> Change | Reconcile | object | None:
        if self._later:
            return self._later.popleft()
        if block:
            return self._queue.get()
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return _NOTHING

    def next_batch(self) -> list[Change] | Reconcile | None:
        """The next work, waiting for some: a batch of changes, a reconciliation, or None (stop)."""
        first = self._take(block=True)
        if first is None or isinstance(first, Reconcile):
            return first
        assert isinstance(first, Change)
        batch, claimed = [first], _touches(first)
        later: list[Change | Reconcile | None] = []
        blocked = _Touched(set(), set(), set())
        while len(batch) < self.max_batch:
            item = self._take(block=False)
            if item is _NOTHING:
                break
            if item is None or isinstance(item, Reconcile):  # the end or a reconciliation: nothing passes it
                later.append(item)
                break
            assert isinstance(item, Change)
            touched = _touches(item)
            if touched.clashes(claimed, same_batch=True) or touched.clashes(blocked):
                later.append(item)
                blocked.add(touched)
            else:
                batch.append(item)
                claimed.add(touched)
        self._later.extendleft(reversed(later))
        return batch

    def _run(self) -> None:
        while (work := self.next_batch()) is not None:
            if not (self._reconcile(work) if isinstance(work, Reconcile) else self._apply(work)):
                return

    def _apply(self, batch: list[Change]) -> bool:
        """Apply `batch` and report its installs; False once the core is shutting down."""
        unsent = [self._path_broken(change) for change in batch]
        sent = [change for change, why in zip(batch, unsent, strict=True) if why is None]
        try:
            applied = iter(self.fabric.apply_many([list(change.steps) for change in sent]) if sent else [])
        except Exception as exc:  # the adapter's bug must not stop every later change
            log.exception("applying %d change(s) failed", len(sent))
            applied = iter([f"internal error: {exc}"] * len(sent))
        errors = [why if why is not None else next(applied) for why in unsent]
        for change, error in zip(batch, errors, strict=True):
            self._note_paths(change, error)
        errors = [error if error is not None else self._path_broken(change) for change, error in zip(batch, errors,
                                                                                                      strict=True)]
        reports: list[Report] = []
        for change, error in zip(batch, errors, strict=True):
            if change.confirm:
                reports.append((change.reservation_id, error, change.token))
            elif error:
                log.warning("removing or changing flows of reservation %s: %s", change.reservation_id, error)
        if reports:
            try:
                self._report(reports)
            except RuntimeError:
                return False  # the core is shutting down
            except Exception:
                log.exception("reporting %d install(s) to the core failed", len(reports))
        return True

    def _path_broken(self, change: Change) -> str | None:
        """Why `change` cannot work: a path it relies on failed to install (None: it can)."""
        for label in sorted(change.needs):
            if label in self._broken:
                return f"path label {label} is not installed: {self._broken[label][0]}"
        return None

    def _note_paths(self, change: Change, error: str | None) -> None:
        """Remember the paths `change` failed to install or remove, forget those it succeeded on."""
        for label in change.makes:
            if error is None:
                self._broken.pop(label, None)
            else:
                switches = {step.spec.switch for step in change.steps if step.spec is not None}
                self._broken[label] = (error, switches)
                log.warning("shared path label %d: %s", label, error)

    def _reconcile(self, job: Reconcile) -> bool:
        """Reconcile one switch and say so; False once the core is shutting down."""
        try:
            done = self.fabric.reconcile(job.switch, job.expected)
        except Exception as exc:  # a switch that cannot be reconciled must not stop the queue
            log.warning("%s: reconciliation failed: %s", job.switch, exc, exc_info=not isinstance(exc, RuntimeError))
            return True
        for label, (_, switches) in list(self._broken.items()):
            switches.discard(job.switch)  # it holds the path's entries as the core wants them now
            if not switches:
                del self._broken[label]
        log.info("%s: reconciled: %s", job.switch, done.summary())
        if self._reconciled is not None:
            try:
                self._reconciled(job.switch)
            except RuntimeError:
                return False  # the core is shutting down
            except Exception:
                log.exception("telling the core that %s was reconciled failed", job.switch)
        return True


def _report_provisioned(book: ReservationBook, reports: list[Report]) -> None:
    """Tell `book` the outcome of each change (on the core thread: one call for a whole batch)."""
    for reservation_id, error, token in reports:
        try:
            book.provisioned(reservation_id, error, token)
        except Exception:
            log.exception("recording the outcome of reservation %s's change failed", reservation_id)


def provisioned_worker(book: ReservationBook, fabric: Fabric, tickers: Sequence[Ticker] = ()) -> CoreWorker:
    """A `CoreWorker` running `book` (and `tickers`) whose OpenFlow changes a `Provisioner` applies to
    `fabric`: outcomes and reconciled switches are reported through the worker, and each switch
    that connects is reconciled."""
    worker: CoreWorker
    provisioner = Provisioner(fabric, lambda reports: worker.call(_report_provisioned, book, reports),
                              lambda switch: worker.call(book.switch_reconciled, switch))
    worker = CoreWorker(book, provisioner, tickers=tickers)
    fabric.on_switch_connected = worker.reconcile_switch
    return worker
