"""`tsdn transfer SRC DST ...`: move data between two DTNs over a reserved path, with progress;
`tsdn transfers list|show|cancel`: the transfers a controller runs."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator

from sdn_app.core.errors import InvalidArgument
from sdn_app.core.paths import POLICIES
from sdn_app.core.reports import ENGINES
from sdn_app.core.reservation import MAX_PRIORITY
from sdn_app.core.units import (
    format_bandwidth,
    format_bytes,
    format_time,
    parse_bandwidth,
    parse_size,
    parse_time,
)
from tsdn.cli.reservations import _as_dict, _client_options
from tsdn.output import EXIT_REFUSED, print_json, table

BAR_WIDTH = 30
RECONNECT_WINDOW = 600.0  # seconds `tsdn transfer` waits for a restarting controller
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


def register(commands: argparse._SubParsersAction) -> None:
    """Add `transfer` and `transfers`."""
    start = commands.add_parser(
        "transfer", help="transfer data between two DTNs over a reserved path (the agents move the bytes)",
        description="Reserve a path, start the receiver on DST and the sender on SRC (their agents run them), "
                    "show progress, release the path at the end, and print the achieved rate and the checksum "
                    "verdict. Ctrl-C cancels the transfer and releases the path. Exit 0 when it succeeded, 1 "
                    "when it failed or was refused.")
    start.add_argument("src", metavar="SRC", help="source DTN")
    start.add_argument("dst", metavar="DST", help="destination DTN")
    start.add_argument("--bandwidth", "-b", metavar="BW",
                       help="bandwidth to reserve, e.g. 40G (required unless --deadline)")
    start.add_argument("--deadline", metavar="TIME",
                       help="finish by TIME (ISO 8601 like 2026-11-26T06:00Z, or relative like +6h): the controller "
                            "schedules the bandwidth instead of --bandwidth; needs --size")
    payload = start.add_mutually_exclusive_group(required=True)
    payload.add_argument("--size", metavar="SIZE", help="memory-to-memory: this many bytes, e.g. 50G or 64MiB")
    payload.add_argument("--files", nargs="+", metavar="PATH",
                         help="disk-to-disk: these files or directories (absolute paths on SRC)")
    start.add_argument("--destination", "-d", default="", metavar="DIR",
                       help="with --files: the directory on DST the files land in")
    start.add_argument("--streams", "-P", type=int, default=1, metavar="N", help="parallel streams (default 1)")
    start.add_argument("--engine", choices=ENGINES, default="builtin", help="transfer engine (default builtin)")
    start.add_argument("--policy", choices=POLICIES, default="shortest", help="path policy (default shortest)")
    start.add_argument("--pace", metavar="RATE",
                       help="hold the sender to this rate, below --bandwidth (e.g. 15G: a disk slower than the "
                            "booking); the path stays booked at --bandwidth")
    start.add_argument("--ceiling", metavar="BW",
                       help="elastic: --bandwidth is the floor, the transfer shares spare capacity up to BW by "
                            "priority and its sender's pacing follows its share")
    start.add_argument("--priority", type=int, default=0, metavar="N",
                       help="weight among elastic reservations, at most your own (default: your own)")
    start.add_argument("--no-progress", action="store_true", help="no progress bar: a line per change only")
    _client_options(start, run_transfer)

    group = commands.add_parser("transfers", help="the transfers a controller runs: list, show, cancel")
    sub = group.add_subparsers(dest="transfers_command", metavar="COMMAND", required=True)
    _client_options(sub.add_parser("list", help="transfers you may see, newest first"), run_list)
    for name, run, text in (("show", run_show, "show one transfer"),
                            ("cancel", run_cancel, "stop a transfer and release its path")):
        command = sub.add_parser(name, help=text)
        command.add_argument("id", metavar="ID", help="transfer id or transfers/ID")
        _client_options(command, run)


def _state(value: int) -> str:
    from northbound.proto.tsdn.v1 import transfer_pb2 as pb

    return pb.TransferState.Name(value).removeprefix("TRANSFER_")


def _rate(t) -> str:
    """The sender's latest rate in booking terms, and as measured when the links are emulated."""
    if not t.HasField("rate"):
        return "-"
    text = f"{format_bandwidth(t.nominal_bps)}bit/s"
    if t.nominal_bps != t.rate.bits_per_second:
        text += f" ({format_bandwidth(t.rate.bits_per_second)}bit/s on the emulated links)"
    return text


def _epoch(timestamp) -> float:
    return timestamp.seconds + timestamp.nanos / 1e9


def _schedule_lines(t) -> list[str]:
    """A deadline transfer's schedule, a line per step."""
    return [f"  {format_time(_epoch(step.start_time))} .. {format_time(_epoch(step.end_time))}  "
            f"{format_bandwidth(step.bandwidth_bps)}bit/s" for step in t.schedule]


def _finish(t) -> str:
    """A deadline transfer's projected finish against its deadline ("" without a deadline)."""
    if not t.HasField("deadline"):
        return ""
    deadline = format_time(_epoch(t.deadline))
    if not t.HasField("projected_finish_time"):
        return f"  deadline {deadline}"
    late = " LATE" if _epoch(t.projected_finish_time) > _epoch(t.deadline) else ""
    return f"  finish ~{format_time(_epoch(t.projected_finish_time))}{late} (deadline {deadline})"


def _progress_line(t) -> str:
    """One line: state, bar (memory-to-memory), bytes, rate, path; a deadline transfer's projected finish."""
    done = t.rate.bytes_total if t.HasField("rate") else 0
    rate = _rate(t)
    if t.HasField("size_bytes"):
        share = min(1.0, done / t.size_bytes)
        filled = round(share * BAR_WIDTH)
        amount = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share:4.0%} {format_bytes(done)} of " \
                 f"{format_bytes(t.size_bytes)}"
    else:
        amount = format_bytes(done)
    path = " > ".join(t.path) if t.path else "-"
    return f"{_state(t.state):9} {amount}  {rate}  path {path}{_finish(t)}"


def run_transfer(args: argparse.Namespace, client) -> int:
    """Start the transfer and follow it to its end."""
    from northbound.client import ApiError

    deadline = parse_time(args.deadline, time.time(), "--deadline") if args.deadline else None
    if deadline is None and not args.bandwidth:
        raise InvalidArgument("--bandwidth: required (or give --deadline and let the controller schedule it)")
    if deadline is not None and args.bandwidth:
        raise InvalidArgument("--bandwidth: not with --deadline: the controller schedules the bandwidth to meet it")
    if deadline is not None and not args.size:
        raise InvalidArgument("--deadline needs --size: the controller cannot know the size of files on SRC to "
                              "schedule them")
    bandwidth = parse_bandwidth(args.bandwidth, "--bandwidth") if args.bandwidth else 0
    size = parse_size(args.size, "--size") if args.size else None
    pace = parse_bandwidth(args.pace, "--pace") if args.pace else None
    if pace is not None and bandwidth and pace >= bandwidth:
        raise InvalidArgument(f"--pace: {format_bandwidth(pace)} must be below --bandwidth "
                              f"({format_bandwidth(bandwidth)})")
    if args.files and not args.destination:
        raise InvalidArgument("--files needs --destination DIR: the directory on the destination DTN")
    if not 0 <= args.priority <= MAX_PRIORITY:
        raise InvalidArgument(f"--priority: from 1 to {MAX_PRIORITY} (and at most your own), got {args.priority}")
    if not 1 <= args.streams <= 256:
        raise InvalidArgument(f"--streams: must be between 1 and 256, got {args.streams}")
    started = time.monotonic()
    transfer = client.start_transfer(args.src, args.dst, bandwidth, size=size, files=args.files or (),
                                     destination=args.destination, streams=args.streams, engine=args.engine,
                                     policy=args.policy, pace=pace, deadline=deadline,
                                     ceiling_bps=parse_bandwidth(args.ceiling, "--ceiling") if args.ceiling else 0,
                                     priority=args.priority)
    bar = sys.stderr.isatty() and not args.no_progress and not args.json
    if deadline is None:
        print(f"{transfer.name}: {args.src} -> {args.dst}, {format_bandwidth(bandwidth)}bit/s booked on "
              f"{transfer.reservation}" + (f", sender paced at {format_bandwidth(pace)}bit/s" if pace else ""),
              file=sys.stderr)
    else:
        print(f"{transfer.name}: {args.src} -> {args.dst}, {format_bytes(size or 0)} by {format_time(deadline)}, "
              f"scheduled on {transfer.reservation} (peak {format_bandwidth(transfer.bandwidth_bps)}bit/s)"
              + (f", sender paced at {format_bandwidth(pace)}bit/s at most" if pace else ""), file=sys.stderr)
        for line in _schedule_lines(transfer):
            print(line, file=sys.stderr)
    last = transfer
    try:
        for event in _follow(client, transfer.name):
            last = event.transfer
            if event.reason == "rate":
                if bar:
                    print(f"\r{_progress_line(last)}\033[K", end="", file=sys.stderr, flush=True)
                elif not args.json:
                    print(_progress_line(last), file=sys.stderr, flush=True)
                continue
            if bar:
                print("\r\033[K", end="", file=sys.stderr)
            reason = last.reason if event.reason == "snapshot" else event.reason
            print(f"{_state(event.state):9} {reason}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        try:
            last = client.cancel_transfer(transfer.name)
            print(f"\ncancelled {transfer.name}; its path is released", file=sys.stderr)
        except ApiError as error:
            print(f"\ncould not cancel {transfer.name}: {error.message}", file=sys.stderr)
        raise
    last = client.get_transfer(transfer.name)  # the watch ends at the end: this has the final reports
    return _summary(last, time.monotonic() - started, args)


def _follow(client, name: str) -> Iterator:
    """The transfer's watch events until it ends, watching again after a controller restart.

    The agents keep running a transfer while its controller restarts, and the restarted
    controller picks it up from its state file, so losing the watch is not the transfer's end.
    A controller away for more than RECONNECT_WINDOW seconds ends the wait with its error.
    """
    from northbound.client import ApiError

    away_since: float | None = None
    while True:
        try:
            for event in client.watch_transfer(name):
                away_since = None
                yield event
            ended = _state(client.get_transfer(name).state) in ENDED  # a watch also ends when the server stops
        except ApiError as error:
            if error.code.name not in ("UNAVAILABLE", "CANCELLED"):
                raise
            now = time.monotonic()
            if away_since is None:
                away_since = now
                print(f"\nthe controller is unreachable ({error.message}); the agents keep transferring: "
                      f"watching again once it is back (for up to {RECONNECT_WINDOW:.0f} s)",
                      file=sys.stderr, flush=True)
            elif now - away_since > RECONNECT_WINDOW:
                raise
            time.sleep(1.0)  # the client's own retries already backed off; poll the controller's return
            continue
        if ended:
            return


def _summary(t, elapsed: float, args: argparse.Namespace) -> int:
    state = _state(t.state)
    if args.json:
        print_json(_as_dict(t))
    else:
        moved = format_bytes(t.rate.bytes_total) if t.HasField("rate") else "nothing"
        rate = _rate(t)
        checks = {None: "none (memory-to-memory)", True: "verified", False: "FAILED"}[
            t.checksums_verified if t.HasField("checksums_verified") else None]
        print(f"{t.name} {state}: {t.reason}")
        print(f"  moved {moved} in {elapsed:.1f} s; achieved {rate} of {format_bandwidth(t.bandwidth_bps)}bit/s "
              f"booked{' at the peak' if t.schedule else ''}; checksums {checks}")
        if t.HasField("deadline"):
            ended, deadline = _epoch(t.update_time), _epoch(t.deadline)
            verdict = "met" if state == "SUCCEEDED" and ended <= deadline else "missed"
            print(f"  deadline {format_time(deadline)} {verdict} (ended {format_time(ended)})")
        if t.rate.pinning.method:
            pin = t.rate.pinning
            print(f"  sender pinning: {pin.method}" + (f" CPUs {','.join(map(str, pin.cpus))}" if pin.cpus else "")
                  + (f" ({pin.note})" if pin.note else ""))
    return 0 if state == "SUCCEEDED" else EXIT_REFUSED


def run_list(args: argparse.Namespace, client) -> int:
    """Print the transfers the caller may see."""
    transfers = client.list_transfers()
    if args.json:
        print_json([_as_dict(t) for t in transfers])
        return 0
    rows = [(t.name.removeprefix("transfers/"), _state(t.state), f"{t.src_dtn} -> {t.dst_dtn}",
             f"{format_bandwidth(t.bandwidth_bps)}", format_bytes(t.rate.bytes_total) if t.HasField("rate") else "-",
             f"{format_bandwidth(t.nominal_bps)}" if t.HasField("rate") else "-", t.reason) for t in transfers]
    print(table(("ID", "STATE", "DTNS", "BOOKED", "MOVED", "RATE", "REASON"), rows) if rows else "no transfers")
    return 0


def run_show(args: argparse.Namespace, client) -> int:
    """Print one transfer."""
    t = client.get_transfer(args.id)
    if args.json:
        print_json(_as_dict(t))
    else:
        print(f"{t.name}  {_state(t.state)}  owner {t.owner}  engine {t.engine}, {t.streams} stream(s)"
              + (f", paced at {format_bandwidth(t.pace_bps)}bit/s" if t.pace_bps else ""))
        print(f"  {_progress_line(t)}")
        print(f"  reason: {t.reason}\n  reservation: {t.reservation}")
        if t.schedule:
            print("  schedule:")
            for line in _schedule_lines(t):
                print(f"  {line}")
    return 0


def run_cancel(args: argparse.Namespace, client) -> int:
    """Cancel one transfer."""
    t = client.cancel_transfer(args.id)
    if args.json:
        print_json(_as_dict(t))
    else:
        print(f"{t.name} {_state(t.state)}: {t.reason}")
    return 0
