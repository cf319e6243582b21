"""Sequence-numbered UDP probes for measuring data-plane gaps: a paced sender, a recording
receiver, and pure functions reading gaps, losses and reordering from the receiver's records.

    python -m benchmarks.probes send --to ADDR:PORT --interval-us 500 --count N [--spin-us 100]
    python -m benchmarks.probes receive --listen ADDR:PORT --out FILE [--idle-timeout 1] [--wait 30]

Each datagram carries 16 bytes: its sequence number (0, 1, ...) and its send time in
CLOCK_MONOTONIC nanoseconds, both unsigned 64-bit big-endian. CLOCK_MONOTONIC is one clock for
every network namespace of a machine (Mininet hosts have no time namespace of their own), so a
sender and a receiver in two Mininet hosts, and the process that started them, read the same
time.

The sender keeps an absolute schedule (probe k is due at start + k x interval): it sleeps until
`--spin-us` before each due time, with the process's timer slack lowered to 1 ns, then
busy-waits to it, so a late wake-up on a loaded machine costs spin time rather than a late
probe; a probe that is late all the same goes out at once and the schedule is kept. On a busy
2-core machine a normal process still waits milliseconds for a core now and then (seen: 2 to 60
ms on this project's machine with a test suite running beside it); `--priority N` runs the
sender under SCHED_FIFO, whose wake-ups preempt ordinary work (seen: under 0.7 ms). It prints
one JSON line `{"started": NS}` as the first probe is due, and a summary line at the end:
`sent`, `send_errors`, `interval_us` (asked), `achieved_interval_us` (first to last send,
divided by the intervals between), `longest_send_gap_us`.

The receiver binds, prints `{"listening": "ADDR:PORT"}`, and records (seq, send time,
receive time) per datagram in arrival order. The receive time is the kernel's arrival
timestamp (SO_TIMESTAMPNS, on CLOCK_REALTIME) moved onto CLOCK_MONOTONIC by the offset between
the two clocks read as the datagram is taken, so the receiver's own scheduling delays stay out
of it; where the kernel gives no timestamp, the time the process took the datagram.
It stops on SIGTERM or SIGINT, once `--idle-timeout` seconds pass without a datagram after the
first one, or when none arrived within `--wait` seconds, and writes one JSON file: `records`
([seq, sent_ns, received_ns] each), `ignored` (datagrams not in the probe format),
`receive_clock` ("kernel" or "process"), `stopped` ("signal", "idle" or "nothing") and
`summary` (what `summarize` reads from the records, against the send interval seen in them).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ipaddress
import itertools
import json
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROBE = struct.Struct("!QQ")
PAYLOAD_BYTES = PROBE.size
# On the wire: the payload, UDP (8), IPv4 (20) and Ethernet (14) headers; Open vSwitch meters
# count the whole frame.
FRAME_BYTES = PAYLOAD_BYTES + 8 + 20 + 14
DEFAULT_SPIN_US = 100
DEFAULT_IDLE_TIMEOUT_S = 1.0
DEFAULT_WAIT_S = 30.0
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python 3.11 does not name it
_TIMESPEC = struct.Struct("@qq")
_PR_SET_TIMERSLACK = 29
_POLL_S = 0.05  # how often the receiver looks at its stop conditions


@dataclass(frozen=True)
class Record:
    """One datagram as the receiver saw it: sequence number, send and receive time (monotonic ns)."""

    seq: int
    sent_ns: int
    received_ns: int


@dataclass(frozen=True)
class Gap:
    """The silence between two consecutive arrivals."""

    before: Record
    after: Record
    interval_ns: int

    @property
    def extra_ns(self) -> int:
        """Time between the two arrivals beyond the send interval (0 for a steady stream)."""
        return self.after.received_ns - self.before.received_ns - self.interval_ns


@dataclass(frozen=True)
class LossRun:
    """Consecutive sequence numbers `first`..`last` that never arrived, between the received
    datagrams `before` and `after` (None at the start or end of the stream)."""

    first: int
    last: int
    before: Record | None
    after: Record | None

    @property
    def count(self) -> int:
        """How many datagrams the run lost."""
        return self.last - self.first + 1

    def gap_ns(self, interval_ns: int) -> int | None:
        """The time the loss took out of the stream: send time of the first datagram after the run
        minus that of the last one before it, minus the send interval (None for an open run)."""
        if self.before is None or self.after is None:
            return None
        return self.after.sent_ns - self.before.sent_ns - interval_ns


def _arrivals(records: Iterable[Record]) -> list[Record]:
    return sorted(records, key=lambda r: r.received_ns)


def _in_window(at_ns: int, after_ns: int | None, until_ns: int | None) -> bool:
    return (after_ns is None or at_ns > after_ns) and (until_ns is None or at_ns <= until_ns)


def longest_gap(records: Iterable[Record], interval_ns: int, after_ns: int | None = None,
                until_ns: int | None = None) -> Gap | None:
    """The longest silence between consecutive arrivals among those that end in the window
    (`after_ns`, `until_ns`] (receive times; None: open); None when no two arrivals qualify."""
    gaps = [Gap(a, b, interval_ns) for a, b in itertools.pairwise(_arrivals(records))
            if _in_window(b.received_ns, after_ns, until_ns)]
    return max(gaps, key=lambda g: g.extra_ns, default=None)


def loss_runs(records: Iterable[Record], sent: int | None = None) -> list[LossRun]:
    """The runs of sequence numbers that never arrived, in sequence order; with `sent` (how many
    the sender sent, numbered from 0) a run at the end counts too."""
    first_seen: dict[int, Record] = {}
    for record in records:
        first_seen.setdefault(record.seq, record)
    seqs = sorted(first_seen)
    runs = []
    if seqs and seqs[0] > 0:
        runs.append(LossRun(0, seqs[0] - 1, None, first_seen[seqs[0]]))
    for a, b in itertools.pairwise(seqs):
        if b > a + 1:
            runs.append(LossRun(a + 1, b - 1, first_seen[a], first_seen[b]))
    end = seqs[-1] + 1 if seqs else 0
    if sent is not None and sent > end:
        runs.append(LossRun(end, sent - 1, first_seen[seqs[-1]] if seqs else None, None))
    return runs


def lost(records: Iterable[Record], sent: int | None = None) -> int:
    """How many sequence numbers never arrived (with `sent`, counting those after the last arrival)."""
    return sum(run.count for run in loss_runs(records, sent))


def longest_loss_gap(records: Iterable[Record], interval_ns: int, after_ns: int | None = None,
                     until_ns: int | None = None) -> LossRun | None:
    """The run of lost datagrams taking the most send time out of the stream, among the runs
    closed by an arrival in the window (`after_ns`, `until_ns`]; None when there is none."""
    runs = [run for run in loss_runs(records) if run.before is not None and run.after is not None
            and _in_window(run.after.received_ns, after_ns, until_ns)]
    return max(runs, key=lambda r: r.gap_ns(interval_ns) or 0, default=None)


def reordered(records: Iterable[Record]) -> int:
    """How many datagrams arrived after one with a higher sequence number (duplicates aside)."""
    highest = -1
    seen: set[int] = set()
    count = 0
    for record in records:
        if record.seq in seen:
            continue
        seen.add(record.seq)
        if record.seq < highest:
            count += 1
        highest = max(highest, record.seq)
    return count


def duplicates(records: Iterable[Record]) -> int:
    """How many datagrams arrived with a sequence number seen before."""
    listed = list(records)
    return len(listed) - len({r.seq for r in listed})


def send_interval_ns(records: Iterable[Record]) -> float | None:
    """The mean send interval the records show (send times of the lowest and highest sequence
    number received); None with fewer than two distinct sequence numbers."""
    listed = list(records)
    if not listed:
        return None
    low, high = min(listed, key=lambda r: r.seq), max(listed, key=lambda r: r.seq)
    if high.seq == low.seq:
        return None
    return (high.sent_ns - low.sent_ns) / (high.seq - low.seq)


def summarize(records: Sequence[Record], interval_ns: int, sent: int | None = None, after_ns: int | None = None,
              until_ns: int | None = None) -> dict[str, Any]:
    """Counts over all records, and the longest gaps (µs) ending in the window (`after_ns`, `until_ns`]."""
    gap = longest_gap(records, interval_ns, after_ns, until_ns)
    loss = longest_loss_gap(records, interval_ns, after_ns, until_ns)
    loss_gap = loss.gap_ns(interval_ns) if loss else None
    return {
        "received": len(records),
        "lost": lost(records, sent),
        "reordered": reordered(records),
        "duplicates": duplicates(records),
        "longest_gap_us": round(gap.extra_ns / 1000, 1) if gap else None,
        "longest_loss_gap_us": round(loss_gap / 1000, 1) if loss_gap is not None else None,
        "longest_loss_run": loss.count if loss else 0,
    }


def load(path: Path) -> tuple[list[Record], dict[str, Any]]:
    """The records of a receiver's output file, and the whole file."""
    document = json.loads(path.read_text())
    return [Record(*row) for row in document["records"]], document


# --- the processes ------------------------------------------------------------------------------


def parse_address(text: str, what: str) -> tuple[str, int, socket.AddressFamily]:
    """ADDR:PORT ([ADDR]:PORT for IPv6) as host, port and family; ValueError naming `what` if not."""
    host, sep, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        address = ipaddress.ip_address(host)
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{what}: expected ADDR:PORT with an IP address, got {text!r}") from None
    if not sep or not 0 <= port <= 65535:
        raise ValueError(f"{what}: port must be 0 to 65535, got {text!r}")
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    return str(address), port, family


def lower_timer_slack() -> None:
    """Ask Linux for 1 ns of timer slack (the default 50 µs would make every sleep that late)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)


@dataclass(frozen=True)
class SendReport:
    """What a sender did."""

    sent: int
    send_errors: int
    interval_us: float
    achieved_interval_us: float | None
    longest_send_gap_us: float | None


def pace(count: int, interval_ns: int, spin_ns: int, send: Callable[[int, int], None],
         on_start: Callable[[int], None] = lambda _: None) -> SendReport:
    """Call `send(seq, now_ns)` for seq 0..count-1 on the absolute schedule start + seq x interval:
    sleep until `spin_ns` before each due time, then busy-wait to it. `send` raising OSError
    counts as a send error."""
    lower_timer_slack()
    clock = time.monotonic_ns
    start = clock()
    on_start(start)
    errors = 0
    first = previous = None
    longest = None
    for seq in range(count):
        due = start + seq * interval_ns
        ahead = due - clock()
        if ahead > spin_ns:
            time.sleep((ahead - spin_ns) / 1e9)
        while (now := clock()) < due:
            pass
        try:
            send(seq, now)
        except OSError:
            errors += 1
        if previous is not None:
            longest = max(longest or 0, now - previous)
        first = now if first is None else first
        previous = now
    achieved = (previous - first) / (count - 1) if count > 1 and first is not None and previous is not None else None
    return SendReport(count, errors, interval_ns / 1000, None if achieved is None else round(achieved / 1000, 2),
                      None if longest is None else round(longest / 1000, 1))


def send_main(args: argparse.Namespace) -> int:
    """The `send` command."""
    host, port, family = parse_address(args.to, "--to")
    if args.priority is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.priority))
        except PermissionError:
            raise ValueError("--priority: real-time scheduling needs root (or CAP_SYS_NICE)") from None
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.connect((host, port))

        def send(seq: int, now: int) -> None:
            sock.send(PROBE.pack(seq, now))

        def started(at: int) -> None:
            print(json.dumps({"started": at}), flush=True)

        report = pace(args.count, args.interval_us * 1000, args.spin_us * 1000, send, started)
    print(json.dumps(report.__dict__), flush=True)
    return 0


def _kernel_time(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanos = _TIMESPEC.unpack_from(data)
            return seconds * 1_000_000_000 + nanos
    return None


class _Stop:
    """Set by SIGTERM or SIGINT."""

    def __init__(self) -> None:
        self.signalled = False

    def __call__(self, _signum: int, _frame: object) -> None:
        self.signalled = True


def receive(sock: socket.socket, idle_timeout: float, wait: float, stop: _Stop) -> dict[str, Any]:
    """Record datagrams from `sock` until `stop` is signalled, `idle_timeout` seconds pass after the
    last one, or none arrived within `wait` seconds; return the output document."""
    kernel = True
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        kernel = False
    sock.settimeout(_POLL_S)
    records: list[Record] = []
    ignored = 0
    started = last = time.monotonic()
    process_clock = False
    while True:
        if stop.signalled:
            stopped = "signal"
            break
        now = time.monotonic()
        if records and now - last > idle_timeout:
            stopped = "idle"
            break
        if not records and now - started > wait:
            stopped = "nothing"
            break
        try:
            data, ancillary, _flags, _peer = sock.recvmsg(64, socket.CMSG_SPACE(_TIMESPEC.size))
        except TimeoutError:
            continue
        before = time.monotonic_ns()
        real = time.clock_gettime_ns(time.CLOCK_REALTIME)
        taken = time.monotonic_ns()
        last = time.monotonic()
        if len(data) != PAYLOAD_BYTES:
            ignored += 1
            continue
        seq, sent_ns = PROBE.unpack(data)
        stamp = _kernel_time(ancillary) if kernel else None
        if stamp is None:
            process_clock = True
            received = taken
        else:
            received = stamp - (real - (before + taken) // 2)
        records.append(Record(seq, sent_ns, received))
    interval = send_interval_ns(records)
    return {
        "records": [[r.seq, r.sent_ns, r.received_ns] for r in records],
        "ignored": ignored,
        "receive_clock": "process" if process_clock or not kernel else "kernel",
        "stopped": stopped,
        "summary": {"send_interval_us": None if interval is None else round(interval / 1000, 2),
                    **summarize(records, round(interval or 0))},
    }


def receive_main(args: argparse.Namespace) -> int:
    """The `receive` command."""
    host, port, family = parse_address(args.listen, "--listen")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise ValueError(f"--out: no directory {str(out.parent)!r}")
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        try:
            sock.bind((host, port))
        except OSError as error:
            raise ValueError(f"--listen: cannot bind {args.listen}: {error.strerror}") from None
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if family == socket.AF_INET6 else bound_host
        print(json.dumps({"listening": f"{shown}:{bound_port}"}), flush=True)
        document = receive(sock, args.idle_timeout, args.wait, stop)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(document))
    os.replace(partial, out)
    return 0


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
        return value

    return parse


def _priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= 99:
        raise argparse.ArgumentTypeError(f"a SCHED_FIFO priority is 1 to 99, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.probes`."""
    top = argparse.ArgumentParser(prog="python -m benchmarks.probes", description=__doc__.split("\n\n")[0])
    commands = top.add_subparsers(dest="command", required=True)
    send = commands.add_parser("send", help="send paced, sequence-numbered UDP probes")
    send.add_argument("--to", required=True, help="ADDR:PORT of the receiver")
    send.add_argument("--interval-us", type=_positive(int), default=500, help="send interval (µs)")
    send.add_argument("--count", type=_positive(int), required=True, help="how many probes")
    send.add_argument("--spin-us", type=int, default=DEFAULT_SPIN_US,
                      help="busy-wait this long before each due time instead of sleeping (µs)")
    send.add_argument("--priority", type=_priority, metavar="1-99",
                      help="run under SCHED_FIFO at this priority (root), so other work cannot delay a probe")
    receive_ = commands.add_parser("receive", help="record probes and write them as JSON")
    receive_.add_argument("--listen", required=True, help="ADDR:PORT to bind (port 0: any)")
    receive_.add_argument("--out", required=True, help="the JSON file to write")
    receive_.add_argument("--idle-timeout", type=_positive(float), default=DEFAULT_IDLE_TIMEOUT_S,
                          help="stop this many seconds after the last probe")
    receive_.add_argument("--wait", type=_positive(float), default=DEFAULT_WAIT_S,
                          help="stop when no probe arrived within this many seconds")
    return top


def main(argv: list[str] | None = None) -> int:
    """Run the `send` or `receive` command; exit code 2 with a message on bad arguments."""
    top = parser()
    args = top.parse_args(argv)
    if args.command == "send" and args.spin_us < 0:
        top.error("--spin-us: must be 0 or more")
    try:
        return send_main(args) if args.command == "send" else receive_main(args)
    except ValueError as error:
        top.error(str(error))


if __name__ == "__main__":
    sys.exit(main())
