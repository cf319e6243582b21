"""The builtin engine: N parallel TCP streams, one OS thread each, memory-to-memory or files.

Each stream runs on its own thread; the threads spend their time in `socket.sendall`,
`socket.recv_into`, `os.sendfile`, `os.preadv`/`os.pwrite` and adler32 (zlib-ng's) on large buffers,
all of which release the GIL, so N streams use N cores (iperf3 3.12 runs all its streams on one).
A disk sender reads each chunk once, in cache-sized pieces, for its adler32, then hands the
chunk to the kernel with `os.sendfile` (no copy through user space).

Disk transfers split files into chunks (`chunk_size`) that the streams take from one queue,
each stream on a file of its own while there are enough (the receiver's writes into one file
are serialized by the kernel); the sender sends each chunk with its adler32, the receiver
recomputes it, writes the chunk at its offset in the file's partial copy, and journals it (see
`builtin_files`). Once every stream has finished, the sender sends each file's adler32
(combined from its chunks) and the receiver renames each file whose chunks are all there and
whose adler32 matches. A transfer that is interrupted leaves the partial files and journals:
the next transfer of the same files to the same destination sends only the chunks not yet
verified. Wire format: `builtin_protocol`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import struct
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtn_agent.engines import ReadyCallback, ReportSink, TransferJob
from dtn_agent.engines.builtin_files import PartialFile, collect_files, read_chunk_adler32
from dtn_agent.engines.builtin_protocol import (
    CHUNK,
    END_OF_STREAM,
    FileEntry,
    JobHeader,
    MessageType,
    ProtocolError,
    TcpInfo,
    adler32,
    chunk_count,
    encode,
    field,
    file_adler32,
    read_message,
    tcp_info,
)
from dtn_agent.engines.cpu import ThreadsCpu, percent
from sdn_app.core.reports import Pinning, RateReport, StreamRate, TransferResult

SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux asm-generic/socket.h
DEFAULT_CHUNK = 8 * 1024 * 1024
DEFAULT_BUFFER = 256 * 1024  # one stream
MULTI_STREAM_BUFFER = 512 * 1024  # each of several streams
DEFAULT_RECV_BUFFER = 256 * 1024
PIECE = 512 * 1024  # the disk sender checksums a chunk in pieces of this size, each while in the CPU cache


CANCELLED = "cancelled"


class TransferFailed(Exception):
    """A transfer cannot go on; the message says why."""


class _Meter:
    """Per-stream byte counters, and a thread that turns them into a RateReport every interval.

    The CPU in the reports is that of the stream threads (`cpu.counting()`), the ones that move
    the bytes: not the agent's other threads, nor its other transfers."""

    def __init__(self, transfer_id: str, streams: int, reports: ReportSink, pinning: Pinning,
                 interval: float, sending: bool) -> None:
        self.transfer_id = transfer_id
        self.sending = sending  # interval rates from the bytes the peer acked, else the bytes received
        self.counts = [0] * streams
        self.sockets: list[socket.socket | None] = [None] * streams
        self.reports = reports
        self.pinning = pinning
        self.interval = interval
        self.cpu = ThreadsCpu()
        self.started = time.monotonic()
        self._cpu_started = self._cpu()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"tsdn-report-{transfer_id}", daemon=True)

    def _cpu(self) -> float | None:
        """CPU seconds the stream threads have used so far; None when unknown."""
        return self.cpu.seconds()

    @staticmethod
    def _spent(cpu: float | None, before: float | None) -> float | None:
        return cpu - before if cpu is not None and before is not None else None

    def start(self) -> None:
        """Start the clock and the reporting thread."""
        self.started = time.monotonic()
        self._cpu_started = self._cpu()
        self._thread.start()

    def _kernel_counts(self, infos: list[TcpInfo]) -> list[int] | None:
        """Per stream, the bytes the kernel counted (acked when sending, received when receiving):
        smooth at any rate, where the engine's own counters step a buffer at a time."""
        counts = [info.bytes_acked if self.sending else info.bytes_received for info in infos]
        return None if any(c is None for c in counts) else counts  # type: ignore[return-value]

    def _infos(self) -> list[TcpInfo]:
        return [tcp_info(sock) if sock is not None and sock.fileno() >= 0 else TcpInfo() for sock in self.sockets]

    def _loop(self) -> None:
        previous = [0] * len(self.counts)
        previous_kernel = self._kernel_counts(self._infos())
        last, last_cpu = self.started, self._cpu_started
        deadline = self.started + self.interval
        while not self._stop.wait(max(0.0, deadline - time.monotonic())):
            now, cpu = time.monotonic(), self._cpu()
            counts = list(self.counts)
            infos = self._infos()
            kernel = self._kernel_counts(infos)
            rates = ([(k - p) for k, p in zip(kernel, previous_kernel, strict=True)]
                     if kernel is not None and previous_kernel is not None else None)
            self.reports(self._report(last, now, previous, counts, self._spent(cpu, last_cpu), final=False, infos=infos,
                                      moved=rates))
            previous, last, last_cpu, previous_kernel = counts, now, cpu, kernel
            deadline += self.interval
            if deadline < now:  # fell behind (a stalled machine): skip the missed intervals
                deadline = now + self.interval

    def _report(self, start: float, end: float, previous: list[int], counts: list[int], cpu: float | None,
                final: bool, infos: list[TcpInfo] | None = None, moved: list[int] | None = None) -> RateReport:
        """The report of start..end; `moved`: bytes per stream in it as the kernel counted them
        (default: the engine's own counters); `cpu`: CPU seconds the stream threads used in it (None: unknown)."""
        span = max(end - start, 1e-9)
        infos = infos if infos is not None else self._infos()
        moved = moved if moved is not None else [c - p for c, p in zip(counts, previous, strict=True)]
        rates = []
        for index, count in enumerate(counts):
            info = infos[index]
            rates.append(StreamRate(stream=index, bits_per_second=moved[index] * 8 / span,
                                    bytes_total=count, retransmits=info.retransmits, rtt_ms=info.rtt_ms))
        known_retrans = [r.retransmits for r in rates if r.retransmits is not None]
        known_rtt = [r.rtt_ms for r in rates if r.rtt_ms is not None]
        return RateReport(
            transfer_id=self.transfer_id, engine="builtin", start=start - self.started, end=end - self.started,
            bits_per_second=sum(moved) * 8 / span, bytes_total=sum(counts),
            streams=tuple(rates), retransmits=sum(known_retrans) if known_retrans else None,
            rtt_ms=sum(known_rtt) / len(known_rtt) if known_rtt else None,
            cpu_percent=percent(cpu, end - start), pinning=self.pinning, final=final)

    def finish(self) -> RateReport:
        """Stop reporting and return the summary over the whole transfer."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        end = time.monotonic()
        summary = self._report(self.started, end, [0] * len(self.counts), list(self.counts),
                               self._spent(self._cpu(), self._cpu_started), final=True)
        self.reports(summary)
        return summary


def _pinning(job: TransferJob) -> Pinning:
    plan = job.plan()
    if not plan.pinned:
        return Pinning(note=plan.note)
    return Pinning(cpus=plan.cpus, numa_node=plan.numa_node, method="sched_setaffinity", note=plan.note)


def _pin(job: TransferJob) -> None:
    if job.cpus is not None:
        os.sched_setaffinity(0, job.cpus)  # 0: the calling thread


def set_pacing(sock: socket.socket, bytes_per_second: int) -> None:
    """Cap one socket's sending rate (SO_MAX_PACING_RATE, bytes per second)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("=Q", bytes_per_second))
    except OSError:  # kernels before 64-bit pacing rates take 32 bits
        sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("=I", min(bytes_per_second, 2**32 - 1)))


def _pace_all(sockets: list[socket.socket | None], bits_per_second: int) -> None:
    """Pace a running sender's streams at `bits_per_second` together, split evenly as at its start."""
    per_stream = max(1, bits_per_second // 8 // len(sockets))
    for sock in sockets:
        if sock is not None:
            with contextlib.suppress(OSError):  # closed meanwhile: the transfer is ending
                set_pacing(sock, per_stream)


def _recv_exact(sock: socket.socket, view: memoryview, what: str) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise ProtocolError(f"connection closed after {got} of {len(view)} bytes of {what}")
        got += n


def _close_all(sockets: list[socket.socket | None]) -> None:
    for sock in sockets:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()


class _Cancel:
    """Closes a transfer's sockets once its job's `cancel` event is set, which wakes every call
    blocked on them (accept, recv, send), so the transfer ends at once as "cancelled"."""

    def __init__(self, event: threading.Event | None):
        self.event = event
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._over = threading.Event()
        if event is not None:
            threading.Thread(target=self._watch, name="builtin-cancel", daemon=True).start()

    @property
    def cancelled(self) -> bool:
        """Whether the job was cancelled."""
        return self.event is not None and self.event.is_set()

    def add(self, sock: socket.socket) -> socket.socket:
        """Watch `sock` (closed at once if the job is already cancelled); returns it."""
        with self._lock:
            self._sockets.append(sock)
        if self.cancelled:
            self._close()
        return sock

    def end(self) -> None:
        """The transfer is over: stop watching."""
        self._over.set()

    def _watch(self) -> None:
        assert self.event is not None
        while not self._over.is_set():
            if self.event.wait(0.2):  # polled so that the watcher also ends with its transfer
                self._close()
                return

    def _close(self) -> None:
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


@dataclass
class _Chunk:
    file_index: int
    index: int


class _ChunkQueue:
    """The chunks a disk sender has still to send, handed out so that, while there are at least as
    many files left as streams, no two streams are on the same file at once: the receiver's writes
    into one file are serialized by the kernel (its inode lock), writes into different files are not.
    A stream keeps to its file while it has chunks left, in order. Not thread-safe: callers lock."""

    def __init__(self, chunks: list[_Chunk]) -> None:
        self._pending: OrderedDict[int, deque[_Chunk]] = OrderedDict()
        for chunk in chunks:
            self._pending.setdefault(chunk.file_index, deque()).append(chunk)
        self._busy: dict[int, int] = {}  # file index -> streams now sending one of its chunks
        self.taken = 0

    @property
    def left(self) -> bool:
        """Whether any chunk is still to be handed out."""
        return bool(self._pending)

    def take(self, previous: int | None) -> _Chunk | None:
        """The next chunk for a stream whose last chunk was of file `previous` (None: its first); None when done."""
        if previous is not None:
            self._busy[previous] -= 1
            if not self._busy[previous]:
                del self._busy[previous]
        if not self._pending:
            return None
        if previous in self._pending and previous not in self._busy:
            chosen = previous
        else:
            # At most len(busy) files at the front are busy: the next one, if any, is free.
            candidates = itertools.islice(self._pending, len(self._busy) + 1)
            chosen = min(candidates, key=lambda f: self._busy.get(f, 0))
        chunks = self._pending[chosen]
        chunk = chunks.popleft()
        if not chunks:
            del self._pending[chosen]
        self._busy[chosen] = self._busy.get(chosen, 0) + 1
        self.taken += 1
        return chunk


class BuiltinEngine:
    """The project's own multi-stream TCP engine (see the module docstring).

    `chunk_size`: bytes per chunk of a file (and the buffer of each disk stream);
    `buffer_size`, `recv_buffer_size`: bytes per send and per receive call in memory-to-memory
    mode; by default 256 KiB per send with one stream and 512 KiB with several, 256 KiB per
    receive (buffers that stay in the CPU cache were fastest on a 2-core loopback);
    `discard_in_kernel`: a memory-to-memory receiver drops the bytes in the kernel (recv with
    MSG_TRUNC) instead of copying them into a buffer, as a sink that only counts;
    `report_interval`: seconds between rate reports;
    `stop_after_chunks`, `corrupt_at`: test hooks: the sender stops dead after that many chunks
    (as if killed), or flips the byte at (relative path, offset) after its checksum was taken.
    """

    name = "builtin"
    repaces = True  # SO_MAX_PACING_RATE changes on its live sockets

    def __init__(self, chunk_size: int = DEFAULT_CHUNK, buffer_size: int | None = None,
                 recv_buffer_size: int = DEFAULT_RECV_BUFFER,
                 discard_in_kernel: bool = False, report_interval: float = 1.0, accept_timeout: float = 30.0,
                 stop_after_chunks: int | None = None, corrupt_at: tuple[str, int] | None = None) -> None:
        if min(chunk_size, buffer_size or 4096, recv_buffer_size) < 4096:
            raise ValueError("chunk_size, buffer_size and recv_buffer_size must be at least 4096 bytes")
        self.recv_buffer_size = recv_buffer_size
        self.chunk_size = chunk_size
        self.buffer_size = buffer_size
        self.discard_in_kernel = discard_in_kernel
        self.report_interval = report_interval
        self.accept_timeout = accept_timeout
        self.stop_after_chunks = stop_after_chunks
        self.corrupt_at = corrupt_at
        self._pattern: memoryview | None = None

    # -- sender -------------------------------------------------------------------------------

    def send(self, job: TransferJob, reports: ReportSink) -> TransferResult:
        """Send `job` to the receiver at `job.host`:`job.port` and return how it ended."""
        job.check("send")
        files = collect_files(job.files) if job.files else []
        entries = tuple(FileEntry(name, path.stat().st_size) for path, name in files)
        header = JobHeader(job.transfer_id, job.streams, "files" if files else "memory",
                           sum(e.size for e in entries) if files else int(job.size or 0), self.chunk_size, entries)
        meter = _Meter(job.transfer_id, job.streams, reports, _pinning(job), self.report_interval, sending=True)
        sockets: list[socket.socket | None] = [None] * job.streams
        control: socket.socket | None = None
        cancel = _Cancel(job.cancel)
        try:
            control = cancel.add(socket.create_connection((job.host, job.port), timeout=self.accept_timeout))
            control.sendall(encode(MessageType.JOB, header.to_payload()))
            kind, accept = read_message(control, MessageType.ACCEPT)
            if kind is MessageType.ERROR:
                raise TransferFailed(f"receiver refused the transfer: {accept['error']}")
            sums, queue = self._plan(files, entries, accept)
            for index in range(job.streams):
                sock = cancel.add(socket.create_connection((job.host, job.port), timeout=self.accept_timeout))
                sock.settimeout(None)
                sockets[index] = meter.sockets[index] = sock
                sock.sendall(encode(MessageType.STREAM, {"transfer_id": job.transfer_id, "stream": index}))
                if job.pacing_bps:
                    set_pacing(sock, max(1, job.pacing_bps // 8 // job.streams))
            control.settimeout(None)
            if job.repace is not None:
                job.repace.follow(lambda bps: _pace_all(sockets, bps))
            meter.start()
            errors = self._run_senders(job, header, files, sockets, meter, sums, queue)
            if errors:
                _close_all([*sockets, control])
                raise TransferFailed("; ".join(errors))
            file_sums = [file_adler32([sums[i][c] for c in range(chunk_count(e.size, self.chunk_size))],
                                      e.size, self.chunk_size) for i, e in enumerate(entries)]
            control.sendall(encode(MessageType.DONE, {"bytes": sum(meter.counts), "files": file_sums}))
            kind, result = read_message(control, MessageType.RESULT)
            summary = meter.finish()
            if kind is MessageType.ERROR:
                return TransferResult(summary, ok=False, error=f"receiver: {result['error']}")
            ok = field(result, "ok", bool, "RESULT message")
            error = field(result, "error", str, "RESULT message")
            return TransferResult(summary, ok=ok, error=f"receiver: {error}" if error else "",
                                  checksums_verified=ok if files else None, files=tuple(n for _, n in files))
        except (OSError, ProtocolError, TransferFailed) as error:
            summary = meter.finish()
            message = str(error) if not isinstance(error, OSError) else f"connection to {job.host}:{job.port}: {error}"
            return TransferResult(summary, ok=False, error=CANCELLED if cancel.cancelled else message,
                                  checksums_verified=False if files else None, files=tuple(n for _, n in files))
        finally:
            if job.repace is not None:
                job.repace.follow(None)
            cancel.end()
            _close_all([*sockets, control])

    def _plan(self, files: list[tuple[Path, str]], entries: tuple[FileEntry, ...],
              accept: dict[str, Any]) -> tuple[list[dict[int, int]], list[_Chunk]]:
        """Chunk checksums already known (verified at the receiver and unchanged here), and chunks to send."""
        have = field(accept, "have", list, "ACCEPT message")
        sums: list[dict[int, int]] = [{} for _ in entries]
        for item in have:
            if not (isinstance(item, list) and len(item) == 3 and all(isinstance(v, int) for v in item)
                    and 0 <= item[0] < len(entries) and 0 <= item[1] < chunk_count(entries[item[0]].size,
                                                                                     self.chunk_size)):
                raise ProtocolError(f"ACCEPT message lists a chunk that is not part of the job: {item!r:.80}")
            file_index, index, adler = item
            offset = index * self.chunk_size
            length = min(self.chunk_size, entries[file_index].size - offset)
            if read_chunk_adler32(files[file_index][0], offset, length) == adler:
                sums[file_index][index] = adler  # the receiver has it: not sent again
        queue = [_Chunk(f, c) for f, e in enumerate(entries)
                 for c in range(chunk_count(e.size, self.chunk_size)) if c not in sums[f]]
        return sums, queue

    def _run_senders(self, job: TransferJob, header: JobHeader, files: list[tuple[Path, str]],
                     sockets: list[socket.socket | None], meter: _Meter, sums: list[dict[int, int]],
                     queue: list[_Chunk]) -> list[str]:
        errors: list[str] = []
        lock = threading.Lock()
        chunks = _ChunkQueue(queue)
        stopped = threading.Event()

        def next_chunk(previous: _Chunk | None) -> _Chunk | None:
            with lock:
                if stopped.is_set():
                    return None
                if self.stop_after_chunks is not None and chunks.taken >= self.stop_after_chunks and chunks.left:
                    stopped.set()
                    errors.append(f"sender stopped after {self.stop_after_chunks} chunks (stop_after_chunks)")
                    return None
                return chunks.take(previous.file_index if previous is not None else None)

        def memory_stream(index: int, sock: socket.socket) -> None:
            pattern = self._pattern_view(self.buffer_size or (DEFAULT_BUFFER if job.streams == 1
                                                              else MULTI_STREAM_BUFFER))
            share = header.size // job.streams + (header.size % job.streams if index == 0 else 0)
            while share > 0 and not stopped.is_set():
                n = min(share, len(pattern))
                sock.sendall(pattern[:n])
                meter.counts[index] += n
                share -= n
            if not stopped.is_set():
                sock.shutdown(socket.SHUT_WR)  # the receiver's end of this stream

        def file_stream(index: int, sock: socket.socket) -> None:
            # The chunk is read in pieces small enough to stay in the CPU cache for its adler32,
            # then the kernel sends it from the page cache (os.sendfile), without a copy here.
            piece = memoryview(bytearray(min(PIECE, self.chunk_size)))
            opened: tuple[int, int] | None = None  # file index, fd
            out = sock.fileno()
            try:
                chunk: _Chunk | None = None
                while (chunk := next_chunk(chunk)) is not None:
                    path, name = files[chunk.file_index]
                    offset = chunk.index * self.chunk_size
                    length = min(self.chunk_size, header.files[chunk.file_index].size - offset)
                    if opened is None or opened[0] != chunk.file_index:
                        if opened is not None:
                            os.close(opened[1])
                            opened = None
                        opened = (chunk.file_index, os.open(path, os.O_RDONLY))
                    fd = opened[1]
                    if self.corrupt_at is not None and self.corrupt_at[0] == name \
                            and offset <= self.corrupt_at[1] < offset + length:
                        self._send_corrupted(sock, fd, chunk, offset, length, sums)
                        meter.counts[index] += length
                        continue
                    adler = adler32(b"")
                    for start in range(offset, offset + length, len(piece)):
                        want = min(len(piece), offset + length - start)
                        got = os.preadv(fd, [piece[:want]], start)
                        if got != want:
                            raise TransferFailed(f"{path} changed while being sent: {got} bytes at offset "
                                                 f"{start}, expected {want}")
                        adler = adler32(piece[:want], adler)
                    sums[chunk.file_index][chunk.index] = adler
                    sock.sendall(CHUNK.pack(chunk.file_index, offset, length, adler))
                    sent = 0
                    while sent < length:
                        n = os.sendfile(out, fd, offset + sent, length - sent)
                        if n <= 0:
                            raise TransferFailed(f"{path} changed while being sent: it ends before offset "
                                                 f"{offset + sent}")
                        sent += n
                        meter.counts[index] += n
            finally:
                if opened is not None:
                    os.close(opened[1])
            if not stopped.is_set():
                sock.sendall(CHUNK.pack(END_OF_STREAM, 0, 0, 0))

        def run(index: int) -> None:
            sock = sockets[index]
            assert sock is not None
            try:
                with meter.cpu.counting():
                    _pin(job)
                    (file_stream if files else memory_stream)(index, sock)
            except (OSError, TransferFailed) as error:
                with lock:
                    errors.append(f"stream {index}: {error}")
                stopped.set()
                _close_all(list(sockets))

        threads = [threading.Thread(target=run, args=(i,), name=f"tsdn-send-{i}") for i in range(job.streams)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return errors

    def _send_corrupted(self, sock: socket.socket, fd: int, chunk: _Chunk, offset: int, length: int,
                        sums: list[dict[int, int]]) -> None:
        """The `corrupt_at` test hook: send the chunk with one byte flipped after its adler32 was taken."""
        assert self.corrupt_at is not None
        buffer = bytearray(length)
        if os.preadv(fd, [buffer], offset) != length:
            raise TransferFailed(f"the file changed while being sent at offset {offset}")
        adler = adler32(buffer)
        sums[chunk.file_index][chunk.index] = adler
        buffer[self.corrupt_at[1] - offset] ^= 0xFF
        sock.sendall(CHUNK.pack(chunk.file_index, offset, length, adler))
        sock.sendall(buffer)

    def _pattern_view(self, size: int) -> memoryview:
        if self._pattern is None or len(self._pattern) != size:
            self._pattern = memoryview(os.urandom(size))
        return self._pattern

    # -- receiver -----------------------------------------------------------------------------

    def receive(self, job: TransferJob, reports: ReportSink, ready: ReadyCallback | None = None) -> TransferResult:
        """Listen on `job.host`:`job.port`, take one transfer and return how it ended."""
        job.check("receive")
        listener = socket.create_server((job.host, job.port), backlog=job.streams + 4)
        cancel = _Cancel(job.cancel)
        cancel.add(listener)
        meter = _Meter(job.transfer_id, job.streams, reports, _pinning(job), self.report_interval, sending=False)
        sockets: list[socket.socket | None] = []
        control: socket.socket | None = None
        partials: list[PartialFile] = []
        renamed: list[str] = []
        header: JobHeader | None = None
        try:
            listener.settimeout(self.accept_timeout)
            if ready is not None:
                ready(listener.getsockname()[:2])
            control = cancel.add(listener.accept()[0])
            control.settimeout(self.accept_timeout)
            try:
                _, payload = read_message(control, MessageType.JOB)
                header = JobHeader.from_payload(payload)
                self._check_header(job, header)
            except ProtocolError as error:
                with contextlib.suppress(OSError):
                    control.sendall(encode(MessageType.ERROR, {"error": str(error)}))
                raise
            meter = _Meter(header.transfer_id, header.streams, reports, _pinning(job), self.report_interval,
                           sending=False)
            if header.mode == "files":
                assert job.destination is not None
                partials = [PartialFile.prepare(job.destination, e, header.chunk_size) for e in header.files]
            have = [[f, c, adler] for f, p in enumerate(partials) for c, adler in sorted(p.verified.items())]
            control.sendall(encode(MessageType.ACCEPT, {"have": have}))
            sockets = [cancel.add(sock) for sock in self._accept_streams(listener, header, meter)]
            control.settimeout(None)
            meter.start()
            stream_errors: list[list[str]] = [[] for _ in sockets]
            threads = self._start_receivers(job, header, sockets, partials, meter, stream_errors)
            try:
                _, done = read_message(control, MessageType.DONE)
            except (OSError, ProtocolError) as error:
                deadline = time.monotonic() + self.accept_timeout
                for thread in threads:  # keep what the streams still carry: chunks sent before the end
                    thread.join(max(0.0, deadline - time.monotonic()))
                _close_all(sockets)
                for thread in threads:
                    thread.join()
                raise TransferFailed(f"the sender went away before the end of the transfer ({error}); "
                                     "partial files and journals are kept for a resume") from None
            for thread in threads:
                thread.join()
            errors = [e for stream in stream_errors for e in stream]
            errors += self._finish(header, done, partials, renamed, sum(meter.counts))
            summary = meter.finish()
            ok = not errors
            error = "; ".join(errors)
            with contextlib.suppress(OSError):
                control.sendall(encode(MessageType.RESULT, {"ok": ok, "error": error, "files": renamed}))
            return TransferResult(summary, ok=ok, error=error,
                                  checksums_verified=ok if header.mode == "files" else None, files=tuple(renamed))
        except (OSError, ProtocolError, TransferFailed) as error:
            summary = meter.finish()
            return TransferResult(summary, ok=False, error=CANCELLED if cancel.cancelled else str(error),
                                  checksums_verified=False if header is not None and header.mode == "files" else None,
                                  files=tuple(renamed))
        finally:
            cancel.end()
            _close_all([*sockets, control, listener])

    def _check_header(self, job: TransferJob, header: JobHeader) -> None:
        if header.transfer_id != job.transfer_id:
            raise ProtocolError(f"JOB is for transfer {header.transfer_id!r}, this receiver waits for "
                                f"{job.transfer_id!r}")
        if header.streams > job.streams:
            raise ProtocolError(f"JOB asks for {header.streams} streams, this receiver takes at most {job.streams}")
        if header.mode == "files" and job.destination is None:
            raise ProtocolError("JOB sends files, but this receiver has no destination directory")

    def _accept_streams(self, listener: socket.socket, header: JobHeader, meter: _Meter) -> list[socket.socket]:
        accepted: list[socket.socket | None] = [None] * header.streams
        try:
            for _ in range(header.streams):
                sock, _ = listener.accept()
                sock.settimeout(self.accept_timeout)
                _, hello = read_message(sock, MessageType.STREAM)
                transfer_id = field(hello, "transfer_id", str, "STREAM message")
                stream = field(hello, "stream", int, "STREAM message")
                if transfer_id != header.transfer_id:
                    sock.close()
                    raise ProtocolError(f"STREAM for transfer {transfer_id!r}, expected {header.transfer_id!r}")
                if not 0 <= stream < header.streams or accepted[stream] is not None:
                    sock.close()
                    raise ProtocolError(f"STREAM index {stream} is out of range or already connected")
                sock.settimeout(None)
                accepted[stream] = meter.sockets[stream] = sock
        except (OSError, ProtocolError):
            _close_all(accepted)
            raise
        return [s for s in accepted if s is not None]

    def _start_receivers(self, job: TransferJob, header: JobHeader, sockets: list[socket.socket],
                         partials: list[PartialFile], meter: _Meter,
                         stream_errors: list[list[str]]) -> list[threading.Thread]:
        def memory_stream(index: int, sock: socket.socket) -> None:
            view = memoryview(bytearray(self.recv_buffer_size))
            flags = socket.MSG_TRUNC if self.discard_in_kernel else 0
            counts = meter.counts
            while n := sock.recv_into(view, 0, flags):
                counts[index] += n

        def file_stream(index: int, sock: socket.socket, errors: list[str]) -> None:
            view = memoryview(bytearray(header.chunk_size))
            head = memoryview(bytearray(CHUNK.size))
            while True:
                _recv_exact(sock, head, f"a chunk header on stream {index}")
                file_index, offset, length, adler = CHUNK.unpack(head)
                if file_index == END_OF_STREAM:
                    return
                if file_index >= len(partials):
                    raise ProtocolError(f"stream {index} sent a chunk of file {file_index}, the job has "
                                        f"{len(partials)} files")
                partial = partials[file_index]
                size = partial.entry.size
                if offset % header.chunk_size or offset >= size or length != min(header.chunk_size, size - offset):
                    raise ProtocolError(f"stream {index} sent a chunk of {partial.entry.path!r} at offset {offset} "
                                        f"of {length} bytes, which is not a chunk of that file")
                data = view[:length]
                _recv_exact(sock, data, f"chunk at offset {offset} of {partial.entry.path!r}")
                meter.counts[index] += length
                actual = adler32(data)
                if actual != adler:
                    errors.append(f"checksum mismatch in {partial.entry.path!r} at offset {offset} "
                                  f"({length} bytes): sender adler32 {adler:#010x}, received {actual:#010x}")
                    continue
                partial.write(offset, data, adler)

        def run(index: int, sock: socket.socket) -> None:
            errors = stream_errors[index]
            try:
                with meter.cpu.counting():
                    _pin(job)
                    if header.mode == "files":
                        file_stream(index, sock, errors)
                    else:
                        memory_stream(index, sock)
            except (OSError, ProtocolError) as error:
                errors.append(f"stream {index}: {error}")
                with contextlib.suppress(OSError):
                    sock.close()

        threads = []
        for index, sock in enumerate(sockets):
            thread = threading.Thread(target=run, args=(index, sock), name=f"tsdn-recv-{index}")
            threads.append(thread)
            thread.start()
        return threads

    def _finish(self, header: JobHeader, done: dict[str, Any], partials: list[PartialFile],
                renamed: list[str], received: int) -> list[str]:
        """Check the DONE message against what arrived; rename each complete, verified file."""
        sent = field(done, "bytes", int, "DONE message")
        if header.mode == "memory":
            if sent == received == header.size:
                return []
            return [f"memory transfer of {header.size} bytes: the sender says it sent {sent}, {received} arrived"]
        file_sums = field(done, "files", list, "DONE message")
        if len(file_sums) != len(partials) or not all(isinstance(s, int) for s in file_sums):
            raise ProtocolError(f"DONE message must list one adler32 per file ({len(partials)})")
        errors = []
        for partial, expected in zip(partials, file_sums, strict=True):
            missing = partial.missing()
            if missing:
                errors.append(f"{partial.entry.path!r} is incomplete: {len(missing)} of {partial.chunks} chunks "
                              f"missing (first at offset {missing[0] * header.chunk_size}); kept as a partial file")
                continue
            actual = partial.adler32()
            if actual != expected:
                errors.append(f"checksum mismatch for the whole of {partial.entry.path!r}: sender adler32 "
                              f"{expected:#010x}, received {actual:#010x}")
                continue
            partial.complete()
            renamed.append(partial.entry.path)
        return errors


def receive_in_thread(engine: BuiltinEngine, job: TransferJob, reports: ReportSink,
                      timeout: float = 10.0) -> tuple[tuple[str, int], Callable[[], TransferResult]]:
    """Start `engine.receive(job)` on a thread; return the address it listens on and a function
    that waits for its result."""
    address: list[tuple[str, int]] = []
    listening = threading.Event()
    outcome: list[TransferResult | BaseException] = []

    def ready(addr: tuple[str, int]) -> None:
        address.append(addr)
        listening.set()

    def run() -> None:
        try:
            outcome.append(engine.receive(job, reports, ready))
        except BaseException as error:  # handed to the caller of wait()
            outcome.append(error)
        finally:
            listening.set()

    thread = threading.Thread(target=run, name=f"tsdn-receiver-{job.transfer_id}", daemon=True)
    thread.start()
    if not listening.wait(timeout) or not address:
        thread.join(timeout)
        if outcome and isinstance(outcome[0], BaseException):
            raise outcome[0]
        raise TransferFailed(f"receiver for {job.transfer_id} did not start listening within {timeout:g} s")

    def wait() -> TransferResult:
        thread.join()
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result

    return address[0], wait
