"""`tsdn path request|batch|list|show|modify|release|commit|abort|provision|unprovision|watch|availability`:
reservations on a controller."""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from google.protobuf.json_format import MessageToDict

from sdn_app.core.clock import SystemClock
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.paths import POLICIES
from sdn_app.core.reservation import MAX_PRIORITY
from sdn_app.core.units import (
    format_bandwidth,
    format_time,
    format_window,
    parse_bandwidth,
    parse_size,
    parse_time,
)
from tsdn.cli.request_args import add_request_arguments, read_batch_file, request_from_args
from tsdn.output import EXIT_BAD_INPUT, EXIT_REFUSED, fail, print_json, table

EXIT_AUTH = 3
EXIT_UNAVAILABLE = 4
DEFAULT_LIST_LIMIT = 100
MAX_PAGE_SIZE = 1000  # the controller's largest page
STATES = ("HELD", "SCHEDULED", "PROVISIONING", "ACTIVE", "MOVING", "DEGRADED", "RESERVED", "RELEASED", "EXPIRED",
          "FAILED")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the controller-facing subcommands under `tsdn path`."""
    request = sub.add_parser("request", help="reserve bandwidth between two DTNs on the controller")
    request.add_argument("src", metavar="SRC", help="source DTN")
    request.add_argument("dst", metavar="DST", help="destination DTN")
    add_request_arguments(request)
    request.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="label (repeat)")
    request.add_argument("--request-id", help="idempotency key: a retry with it never books twice (default: new)")
    request.add_argument("--validate-only", action="store_true", help="check admission, book nothing")
    request.add_argument("--hold", action="store_true",
                         help="two phases: book and hold (HELD) until `tsdn path commit`; the hold times out")
    request.add_argument("--manual-provision", action="store_true",
                         help="no flows at the window's start until `tsdn path provision` (NSI style)")
    request.add_argument("--priority", type=int, default=0, metavar="N",
                         help="weight among elastic reservations, at most your own (default: your own)")
    request.add_argument("--ceiling", metavar="BW",
                         help="elastic: share spare capacity up to BW by priority; --bandwidth is the floor")
    request.add_argument("--src-prefix", metavar="PREFIX",
                         help="match the traffic by IPv6 prefixes instead of the DTNs' IPv4 addresses: the "
                              "source side's, e.g. 2001:db8:10:1::/64 (with --dst-prefix)")
    request.add_argument("--dst-prefix", metavar="PREFIX", help="the destination side's IPv6 prefix")
    request.add_argument("--no-wait", action="store_true",
                         help="return at once instead of waiting until the switches confirm (ACTIVE) or refuse")
    _client_options(request, run_request)

    batch = sub.add_parser("batch", help="reserve a campaign: every request of a YAML or JSON file in one call")
    batch.add_argument("file", metavar="FILE",
                       help="a list of up to 1,000 requests, each a mapping of src, dst, bandwidth and the options of "
                            "`tsdn path request` by name (start, end or duration, policy, include, exclude, max_hops, "
                            "protect, labels, request_id, hold, manual_provision, priority, ceiling, src_prefix, "
                            "dst_prefix)")
    batch.add_argument("--all-or-nothing", action="store_true",
                       help="book every request or none (one refused: nothing is booked)")
    batch.add_argument("--validate-only", action="store_true", help="check admission, book nothing")
    batch.add_argument("--no-wait", action="store_true",
                       help="answer once admitted instead of waiting until the switches confirm (ACTIVE) or refuse")
    batch.add_argument("--wait-timeout", type=float, default=30.0, metavar="S",
                       help="the longest wait for the switches (default 30, at most 300)")
    _client_options(batch, run_batch)

    listing = sub.add_parser("list", help="list reservations (newest first)")
    listing.add_argument("--state", choices=STATES, help="only this state")
    listing.add_argument("--dtn", default="", help="only reservations from or to this DTN")
    listing.add_argument("--owner", default="", help="only this principal's (admins)")
    listing.add_argument("--limit", type=int, default=DEFAULT_LIST_LIMIT, metavar="N",
                         help=f"show the newest N (default {DEFAULT_LIST_LIMIT}; 0: all, page after page: the "
                              "controller keeps every ended reservation)")
    _client_options(listing, run_list)

    for name, run, text in (("show", run_show, "show one reservation"),
                            ("release", run_release, "release a reservation and its bandwidth"),
                            ("commit", _calling("commit_reservation"), "commit a HELD reservation"),
                            ("abort", _calling("abort_reservation"), "abort a HELD reservation, freeing its booking"),
                            ("provision", _calling("provision_reservation"),
                             "install a reservation's flows (now in its window, else at its start)"),
                            ("unprovision", _calling("unprovision_reservation"),
                             "remove a reservation's flows and keep its booking (NSI's release)")):
        command = sub.add_parser(name, help=text)
        command.add_argument("id", metavar="ID", help="reservation id or reservations/ID")
        _client_options(command, run)

    modify = sub.add_parser("modify", help="change a reservation's bandwidth or end time, or move it")
    modify.add_argument("id", metavar="ID", help="reservation id or reservations/ID")
    modify.add_argument("--bandwidth", "-b", metavar="BW", help="new bandwidth, e.g. 40G")
    end = modify.add_mutually_exclusive_group()
    end.add_argument("--end", metavar="T", help="new end: ISO 8601, '+2h', or epoch seconds")
    end.add_argument("--until-released", action="store_true", help="remove the end time")
    modify.add_argument("--validate-only", action="store_true", help="check, change nothing")
    modify.add_argument("--priority", type=int, metavar="N", help="new priority, at most your own")
    modify.add_argument("--ceiling", metavar="BW", help="an elastic reservation's new ceiling")
    modify.add_argument("--move", action="store_true",
                        help="move to a new path (make-before-break) computed with --policy/--include/--exclude/"
                             "--max-hops, which replace the reservation's own constraints")
    modify.add_argument("--policy", choices=POLICIES, help="with --move: shortest or widest (default shortest)")
    modify.add_argument("--include", action="append", default=[], metavar="SWITCH|LINK",
                        help="with --move: pass through this switch or link (repeat, in order)")
    modify.add_argument("--exclude", action="append", default=[], metavar="SWITCH|LINK",
                        help="with --move: avoid this switch or link (repeat)")
    modify.add_argument("--max-hops", type=int, metavar="N", help="with --move: at most N switch-to-switch links")
    _client_options(modify, run_modify)

    watch = sub.add_parser("watch", help="print reservation events as they happen (Ctrl-C stops)")
    watch.add_argument("id", metavar="ID", nargs="?", default="", help="only this reservation")
    watch.add_argument("--existing", action="store_true", help="first print every live reservation")
    _client_options(watch, run_watch)

    availability = sub.add_parser("availability", help="largest bandwidth bookable between two DTNs, and paths")
    availability.add_argument("src", metavar="SRC", help="source DTN")
    availability.add_argument("dst", metavar="DST", help="destination DTN")
    add_request_arguments(availability, bandwidth=False, protect=False, policy="widest")
    availability.add_argument("--paths", type=int, default=3, metavar="N", help="candidate paths (default 3)")
    availability.add_argument("--size", metavar="SIZE",
                              help="also: by when could SIZE bytes (e.g. 40TB) get there from --start, and the "
                                   "schedule it would take")
    _client_options(availability, run_availability)


def _client_options(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace, object], int]) -> None:
    parser.add_argument("--controller", default=os.environ.get("TSDN_CONTROLLER", "127.0.0.1:50051"),
                        metavar="HOST:PORT[,HOST:PORT...]",
                        help="controller's gRPC address, or those of several controllers sharing a store: a "
                             "follower sends calls on to the leader (env TSDN_CONTROLLER)")
    parser.add_argument("--token-file", default=os.environ.get("TSDN_TOKEN_FILE"), metavar="FILE",
                        help="file holding your bearer token (env TSDN_TOKEN_FILE)")
    parser.add_argument("--tls-ca", metavar="PEM", help="use TLS, trusting this CA certificate")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S", help="deadline per call (default 10)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(run=lambda args: _with_client(args, run))


def _with_client(args: argparse.Namespace, run: Callable) -> int:
    from northbound.client import ApiError, TsdnClient

    token = None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InvalidArgument(f"--token-file {args.token_file}: {exc.strerror or exc}") from None
        if not token:
            raise InvalidArgument(f"--token-file {args.token_file}: the file is empty")
    tls_ca = None
    if args.tls_ca:
        try:
            tls_ca = Path(args.tls_ca).read_bytes()
        except OSError as exc:
            raise InvalidArgument(f"--tls-ca {args.tls_ca}: {exc.strerror or exc}") from None
    if args.timeout <= 0:
        raise InvalidArgument("--timeout: must be positive")
    try:
        with TsdnClient(args.controller, token=token, timeout=args.timeout, tls_ca=tls_ca) as client:
            return run(args, client)
    except ApiError as error:
        return fail(error.message, _exit_code(error.code.name))


def _exit_code(code: str) -> int:
    if code in ("RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ALREADY_EXISTS"):
        return EXIT_REFUSED
    if code in ("INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE"):
        return EXIT_BAD_INPUT
    if code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return EXIT_AUTH
    return EXIT_UNAVAILABLE


def _as_dict(message) -> dict:
    return MessageToDict(message, preserving_proto_field_name=True)


def _epoch(ts) -> float:
    return ts.seconds + ts.nanos / 1e9


def _route(path) -> str:
    return " > ".join(path.route) if path.route else "-"


def _decision_tag(message) -> str:
    """`[moved] `, `[not moved: held] `, ... from a message's typed decision ("" when it has none)."""
    if not message.HasField("decision"):
        return ""
    from northbound.convert import decision_in

    decision = decision_in(message.decision)
    if decision is None:
        return ""
    if decision.why is not None:
        return f"[not moved: {decision.why.value}] "
    return f"[{decision.kind.value.replace('_', ' ')}] "


def _print_reservation(r, args: argparse.Namespace) -> None:
    if args.json:
        print_json(_as_dict(r))
        return
    from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb

    end = _epoch(r.end_time) if r.HasField("end_time") else math.inf
    print(f"{r.name}  {pb.ReservationState.Name(r.state)}  owner {r.owner}")
    print(f"  {r.source_dtn} -> {r.destination_dtn}: {format_bandwidth(r.bandwidth_bps)}, "
          f"{pb.PathPolicy.Name(r.policy).lower()}, {format_window(_epoch(r.start_time), end)}")
    if r.src_prefix:
        print(f"  traffic: IPv6 {r.src_prefix} <-> {r.dst_prefix}")
    if r.HasField("src_vlan") or r.HasField("dst_vlan"):
        ends = [f"{dtn} VLAN {vlan}" if has else f"{dtn} untagged" for dtn, vlan, has in (
            (r.source_dtn, r.src_vlan, r.HasField("src_vlan")),
            (r.destination_dtn, r.dst_vlan, r.HasField("dst_vlan")))]
        print(f"  tagged: {', '.join(ends)}")
    if r.ceiling_bps:
        print(f"  elastic: floor {format_bandwidth(r.bandwidth_bps)}, ceiling {format_bandwidth(r.ceiling_bps)}, "
              f"share now {format_bandwidth(r.share_bps)}, priority {r.priority}")
    else:
        print(f"  priority {r.priority}" + (f", meter now {format_bandwidth(r.share_bps)}"
                                            if r.share_bps != r.bandwidth_bps else ""))
    if r.HasField("hold_expire_time"):
        print(f"  held until {format_time(_epoch(r.hold_expire_time))}: commit or abort")
    if not r.provision:
        print("  data plane: not provisioned (`tsdn path provision` installs its flows)")
    for step in r.schedule:
        print(f"  step: {format_bandwidth(step.bandwidth_bps)} "
              f"{format_window(_epoch(step.start_time), _epoch(step.end_time))}")
    if r.state_reason:
        print(f"  reason: {r.state_reason}")
    for label, path in (("path:  ", r.path), ("backup:", r.backup_path)):
        if path.route:
            print(f"  {label} {_route(path)}  ({path.hop_count} hop{'' if path.hop_count == 1 else 's'})")
    if r.labels:
        print("  labels: " + ", ".join(f"{k}={v}" for k, v in sorted(r.labels.items())))
    if r.history:
        print("  history:")
        for entry in r.history:
            print(f"    {format_time(_epoch(entry.time))}  {pb.ReservationState.Name(entry.state):<12} "
                  f"{_decision_tag(entry)}{entry.reason or '-'}")


def run_request(args: argparse.Namespace, client) -> int:
    """`tsdn path request SRC DST --bandwidth BW ...`."""
    request = request_from_args(args, SystemClock().now())
    labels = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"--label: {item!r} is not KEY=VALUE")
        labels[key] = value
    # "now" and --duration go as such, so a rerun with the same --request-id is recognised as a retry.
    reservation = client.create_reservation(
        request.src, request.dst, request.bandwidth, start=None if args.start == "now" else request.start,
        end=None if math.isinf(request.end) or args.duration else request.end,
        duration=request.end - request.start if args.duration else None, policy=request.policy, include=request.include,
        exclude=request.exclude, max_hops=request.max_hops, protect=request.protect, labels=labels,
        request_id=args.request_id, validate_only=args.validate_only, hold=args.hold,
        manual_provision=args.manual_provision, priority=_priority(args.priority, allow_zero=True),
        ceiling_bps=parse_bandwidth(args.ceiling, "--ceiling") if args.ceiling else 0,
        src_prefix=args.src_prefix or "", dst_prefix=args.dst_prefix or "",
    )
    from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb

    if not args.no_wait and reservation.state == pb.PROVISIONING:
        reservation = _settled(client, reservation, args.timeout)
    _print_reservation(reservation, args)
    return EXIT_REFUSED if reservation.state == pb.FAILED else 0


def run_batch(args: argparse.Namespace, client) -> int:
    """`tsdn path batch FILE [--all-or-nothing] [--validate-only] [--no-wait]`: one line per request
    and a summary; exit 1 when any request was refused or its install failed."""
    from northbound.client import reservation_request
    from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb

    if not 0 < args.wait_timeout <= 300:
        raise InvalidArgument(f"--wait-timeout: above 0 and at most 300 seconds, got {args.wait_timeout:g}")
    requests = []
    for entry, request, ceiling in read_batch_file(args.file, SystemClock().now()):
        # "now" and durations go as such, so a rerun with the same request_ids is recognised as a retry.
        requests.append(reservation_request(
            request.src, request.dst, request.bandwidth, start=None if entry.start == "now" else request.start,
            end=None if math.isinf(request.end) or entry.duration is not None else request.end,
            duration=request.end - request.start if entry.duration is not None else None, policy=request.policy,
            include=request.include, exclude=request.exclude, max_hops=request.max_hops, protect=request.protect,
            labels=entry.labels, request_id=entry.request_id, hold=entry.hold,
            manual_provision=entry.manual_provision, priority=entry.priority,
            ceiling_bps=ceiling,
            src_prefix=entry.src_prefix or "", dst_prefix=entry.dst_prefix or ""))
    response = client.create_reservations(requests, all_or_nothing=args.all_or_nothing,
                                          validate_only=args.validate_only, no_wait=args.no_wait,
                                          wait_timeout=args.wait_timeout)
    failed = sum(1 for r in response.results if r.HasField("reservation") and r.reservation.state == pb.FAILED)
    if args.json:
        print_json(_as_dict(response))
    else:
        for index, result in enumerate(response.results):
            if result.HasField("error"):
                print(f"[{index}] refused {result.error.code}: {result.error.message}")
                continue
            r = result.reservation
            print(f"[{index}] {r.name or '(validate_only)'}  {pb.ReservationState.Name(r.state)}  "
                  f"{r.source_dtn} -> {r.destination_dtn} {format_bandwidth(r.bandwidth_bps)}"
                  + (f"  {r.state_reason}" if r.state == pb.FAILED else ""))
        print(f"{len(response.results)} requests: {response.admitted} admitted"
              + (" (validate_only: nothing booked)" if args.validate_only else "")
              + f", {response.refused} refused" + (f", {failed} failed to install" if failed else "")
              + (f", {response.installing} still installing (`tsdn path watch` follows them)"
                 if response.installing else ""))
    return EXIT_REFUSED if response.refused or failed else 0


def _settled(client, reservation, timeout: float):
    """The reservation once it left PROVISIONING (or as it is after `timeout` seconds)."""
    from northbound.client import ApiError
    from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb

    try:
        for event in client.watch(reservation.name, include_existing=True, timeout=timeout):
            if event.reservation.state != pb.PROVISIONING:
                return event.reservation
    except ApiError as error:
        if error.code.name != "DEADLINE_EXCEEDED":
            raise
    return client.get_reservation(reservation.name)


def run_list(args: argparse.Namespace, client) -> int:
    """`tsdn path list [--state S] [--dtn D] [--owner O] [--limit N]`: newest first, page after page."""
    from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb

    if args.limit < 0:
        raise InvalidArgument(f"--limit: zero (all) or more, got {args.limit}")
    pages = client.list_reservations(state=args.state, dtn=args.dtn, owner=args.owner,
                                     page_size=min(args.limit + 1, MAX_PAGE_SIZE) if args.limit else MAX_PAGE_SIZE)
    found = list(itertools.islice(pages, args.limit + 1) if args.limit else pages)
    if args.limit and len(found) > args.limit:
        found = found[:args.limit]
        print(f"tsdn: the newest {args.limit} shown, there are more: --limit 0 shows all; --state, --dtn and "
              "--owner narrow the list", file=sys.stderr)
    if args.json:
        print_json([_as_dict(r) for r in found])
        return 0
    print(table(["ID", "STATE", "OWNER", "SRC", "DST", "BANDWIDTH", "PRIO", "FLOOR", "CEILING", "SHARE", "START",
                 "END", "PATH"],
                [(r.id, pb.ReservationState.Name(r.state), r.owner, r.source_dtn, r.destination_dtn,
                  format_bandwidth(r.bandwidth_bps), r.priority,
                  format_bandwidth(r.bandwidth_bps) if r.ceiling_bps else "-",
                  format_bandwidth(r.ceiling_bps) if r.ceiling_bps else "-", format_bandwidth(r.share_bps),
                  format_time(_epoch(r.start_time)),
                  format_time(_epoch(r.end_time)) if r.HasField("end_time") else "released",
                  " > ".join(r.path.route[1:-1])) for r in found]))
    return 0


def _calling(method: str) -> Callable[[argparse.Namespace, object], int]:
    """A command that calls `method` of the client on the reservation ID and prints the result."""
    def run(args: argparse.Namespace, client) -> int:
        _print_reservation(getattr(client, method)(args.id), args)
        return 0
    return run


def run_show(args: argparse.Namespace, client) -> int:
    """`tsdn path show ID`."""
    _print_reservation(client.get_reservation(args.id), args)
    return 0


def run_release(args: argparse.Namespace, client) -> int:
    """`tsdn path release ID`."""
    _print_reservation(client.delete_reservation(args.id), args)
    return 0


def run_modify(args: argparse.Namespace, client) -> int:
    """`tsdn path modify ID [--bandwidth BW] [--end T | --until-released] [--move ...]`."""
    bandwidth = parse_bandwidth(args.bandwidth, "--bandwidth") if args.bandwidth else None
    end = math.inf if args.until_released else (
        parse_time(args.end, SystemClock().now(), "--end") if args.end else None)
    if args.move:
        if args.max_hops is not None and args.max_hops < 0:
            raise InvalidArgument(f"--max-hops: must be zero or more, got {args.max_hops}")
    elif args.policy or args.include or args.exclude or args.max_hops is not None:
        raise InvalidArgument("--policy, --include, --exclude and --max-hops describe a new path: add --move")
    ceiling = parse_bandwidth(args.ceiling, "--ceiling") if args.ceiling else None
    priority = _priority(args.priority) if args.priority is not None else None
    if bandwidth is None and end is None and not args.move and priority is None and ceiling is None:
        raise InvalidArgument("give --bandwidth, --end, --until-released, --move, --priority or --ceiling")
    _print_reservation(client.modify_reservation(
        args.id, bandwidth, end, args.validate_only, move=args.move, policy=args.policy or "shortest",
        include=args.include, exclude=args.exclude, max_hops=args.max_hops, priority=priority,
        ceiling_bps=ceiling), args)
    return 0


def _priority(value: int, allow_zero: bool = False) -> int:
    if not (0 if allow_zero else 1) <= value <= MAX_PRIORITY:
        raise InvalidArgument(f"--priority: from 1 to {MAX_PRIORITY} (and at most your own), got {value}")
    return value


def run_watch(args: argparse.Namespace, client) -> int:
    """`tsdn path watch [ID] [--existing]`: one line (or JSON object) per event."""
    import json

    from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb

    for event in client.watch(args.id, include_existing=args.existing):
        if args.json:
            print(json.dumps(_as_dict(event)), flush=True)
            continue
        r = event.reservation
        before = pb.ReservationState.Name(event.previous_state) if event.previous_state else "new"
        when = format_time(_epoch(event.time)) if event.HasField("time") else "now"
        print(f"{when}  {r.id}  {before} -> {pb.ReservationState.Name(event.state)}  "
              f"{r.source_dtn} -> {r.destination_dtn} {format_bandwidth(r.bandwidth_bps)}  "
              f"{_decision_tag(event)}{event.reason}",
              flush=True)
    print("tsdn: the controller ended the watch", file=sys.stderr)
    return EXIT_UNAVAILABLE


def run_availability(args: argparse.Namespace, client) -> int:
    """`tsdn path availability SRC DST [--start ...] [--end|--duration]`."""
    request = request_from_args(args, SystemClock().now())
    if not 1 <= args.paths <= 20:
        raise InvalidArgument("--paths: 1 to 20")
    found = client.query_availability(
        request.src, request.dst, start=request.start, end=None if math.isinf(request.end) else request.end,
        policy=request.policy, include=request.include, exclude=request.exclude, max_hops=request.max_hops,
        max_paths=args.paths, size_bytes=parse_size(args.size, "--size") if args.size else 0,
    )
    if args.json:
        print_json(_as_dict(found))
        return 0
    print(f"{request.src} -> {request.dst}: at most {format_bandwidth(found.max_bandwidth_bps)} bookable")
    if found.HasField("earliest_finish_time"):
        print(f"  {args.size} could arrive by {format_time(_epoch(found.earliest_finish_time))}:")
        for step in found.schedule:
            print(f"    {format_bandwidth(step.bandwidth_bps)} "
                  f"{format_window(_epoch(step.start_time), _epoch(step.end_time))}")
    if found.reason:
        print(f"  {found.reason}")
    if found.paths:
        print(table(["#", "ROUTE", "HOPS", "FREE", "BOTTLENECK"],
                    [(i + 1, _route(p), p.hop_count, format_bandwidth(p.free_bps), p.bottleneck)
                     for i, p in enumerate(found.paths)]))
    return 0
