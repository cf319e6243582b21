"""Options shared by every command that describes a bandwidth request, and files of such requests."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from sdn_app.core import validation
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.paths import POLICIES, PathRequest
from sdn_app.core.reservation import MAX_PRIORITY
from sdn_app.core.reservations import MAX_BATCH
from sdn_app.core.topology_schema import capped_problems, describe_validation_error, read_text_file, read_yaml
from sdn_app.core.units import format_time, parse_bandwidth, parse_duration, parse_time


def add_request_arguments(parser: argparse.ArgumentParser, bandwidth: bool = True, protect: bool = True,
                          policy: str = "shortest") -> None:
    """The options bandwidth requests share: bandwidth, window, policy, constraints."""
    if bandwidth:
        parser.add_argument("--bandwidth", "-b", required=True, metavar="BW", help="e.g. 400M, 100G, 1.5T")
    parser.add_argument("--policy", choices=POLICIES, default=policy,
                        help="shortest (hops, or latency when every link has one) or widest (most free bandwidth)")
    parser.add_argument("--start", default="now", metavar="T",
                        help="'now', '+30m', ISO 8601 (UTC unless a zone is given), or epoch seconds")
    end = parser.add_mutually_exclusive_group()
    end.add_argument("--end", metavar="T", help="end of the window (default: until released)")
    end.add_argument("--duration", metavar="D", help="length of the window, e.g. 90s, 1h30m, 2d")
    parser.add_argument("--include", action="append", default=[], metavar="SWITCH|LINK",
                        help="pass through this switch or link (repeat, in order)")
    parser.add_argument("--exclude", action="append", default=[], metavar="SWITCH|LINK",
                        help="avoid this switch or link; 'a--b' means every link between a and b (repeat)")
    parser.add_argument("--max-hops", type=int, metavar="N", help="at most N switch-to-switch links")
    if protect:
        parser.add_argument("--protect", action="store_true", help="also find a link-disjoint backup path")


def request_from_args(args: argparse.Namespace, now: float) -> PathRequest:
    """Build a `PathRequest` from parsed options, with errors that name the option."""
    fields = {name: getattr(args, name, None) for name in ("src", "dst", "start", "end", "duration", "policy",
                                                            "include", "exclude", "max_hops", "protect")}
    fields["bandwidth"] = getattr(args, "bandwidth", None)
    return request_from_fields(fields, now, lambda name: "--" + name.replace("_", "-"))


def request_from_fields(fields: Mapping[str, Any], now: float, named: Callable[[str], str]) -> PathRequest:
    """A `PathRequest` from the fields of a request as `tsdn path request` takes them (src, dst,
    bandwidth (None: 1 bit/s, for availability), start, end or duration, policy, include, exclude,
    max_hops, protect), with errors naming each field as `named(field)` says (`--start`, `[3].start`)."""
    start = parse_time(fields["start"], now, named("start"))
    if fields["end"] is not None:
        end = parse_time(fields["end"], now, named("end"))
    elif fields["duration"] is not None:
        end = start + parse_duration(fields["duration"], named("duration"))
    else:
        end = math.inf
    if end <= start:
        raise InvalidArgument(f"{named('end')}: {format_time(end)} is not after {named('start')} {format_time(start)}")
    if fields["max_hops"] is not None and fields["max_hops"] < 0:
        raise InvalidArgument(f"{named('max_hops')}: must be zero or more, got {fields['max_hops']}")
    bandwidth = parse_bandwidth(fields["bandwidth"], named("bandwidth")) if fields["bandwidth"] is not None else 1
    return PathRequest(
        src=fields["src"], dst=fields["dst"], bandwidth=bandwidth, start=start, end=end, policy=fields["policy"],
        include=tuple(fields["include"]), exclude=tuple(fields["exclude"]), max_hops=fields["max_hops"],
        protect=bool(fields["protect"]),
    )


# -- a file of requests (`tsdn path batch FILE`) ----------------------------------------------------------

MAX_BATCH_FILE_BYTES = 4 * 1024 * 1024  # 1,000 requests with labels take about 300 kB
_Name = Annotated[str, Field(min_length=1, max_length=validation.MAX_NAME)]
_Value = StrictStr | StrictInt | StrictFloat  # "10G", "+30m", "2026-11-21T18:00:00Z", or a number
_Time = _Value | datetime  # YAML reads an unquoted ISO 8601 time as a timestamp


class BatchEntry(BaseModel):
    """One request of a batch file: the arguments and options of `tsdn path request`, by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    src: _Name
    dst: _Name
    bandwidth: _Value
    start: _Time = "now"
    end: _Time | None = None
    duration: _Value | None = None
    policy: Literal["shortest", "widest"] = "shortest"
    include: Annotated[list[_Name], Field(max_length=64)] = []
    exclude: Annotated[list[_Name], Field(max_length=64)] = []
    max_hops: Annotated[StrictInt, Field(ge=0, le=validation.MAX_HOPS)] | None = None
    protect: StrictBool = False
    labels: Annotated[dict[StrictStr, StrictStr], Field(max_length=32)] = {}
    request_id: Annotated[str, Field(min_length=1, max_length=validation.MAX_NAME)] | None = None
    hold: StrictBool = False
    manual_provision: StrictBool = False
    priority: Annotated[StrictInt, Field(ge=0, le=MAX_PRIORITY)] = 0  # 0: the caller's own
    ceiling: _Value | None = None
    src_prefix: _Name | None = None
    dst_prefix: _Name | None = None

    @model_validator(mode="after")
    def _one_end(self) -> BatchEntry:
        if self.end is not None and self.duration is not None:
            raise ValueError("give end or duration, not both")
        return self

    def request(self, now: float, where: str) -> PathRequest:
        """Its `PathRequest` (times from `now`), with errors naming the field as `where.field`."""
        fields = self.model_dump()
        for name in ("start", "end"):
            if isinstance(fields[name], datetime):
                when = fields[name]
                fields[name] = (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()
        return request_from_fields(fields, now, lambda name: f"{where}.{name}")


def read_batch_file(path: str, now: float) -> list[tuple[BatchEntry, PathRequest, int]]:
    """The requests of a YAML or JSON file (a list of `BatchEntry` mappings), each with its
    `PathRequest` and ceiling in bits/s (0: none): InvalidArgument naming the file, the request's
    index and the field of every problem (`campaign.yaml: [3].bandwidth: ...`)."""
    data = read_yaml(read_text_file(path, MAX_BATCH_FILE_BYTES, "batch file"), path)
    if not isinstance(data, list):
        raise InvalidArgument(f"{path}: (top level): expected a list of requests (each with src, dst, bandwidth, "
                              "and the options of `tsdn path request`)")
    if not 1 <= len(data) <= MAX_BATCH:
        raise InvalidArgument(f"{path}: {len(data):,} requests; a batch has 1 to {MAX_BATCH:,}")
    try:
        entries = _BATCH.validate_python(data)
    except ValidationError as exc:
        problems = capped_problems(describe_validation_error(exc, path), path)
        raise InvalidArgument("\n".join(problems)) from None
    problems = []
    requests = []
    for index, entry in enumerate(entries):
        where = f"{path}: [{index}]"
        try:
            ceiling = parse_bandwidth(entry.ceiling, f"{where}.ceiling") if entry.ceiling is not None else 0
            requests.append((entry, entry.request(now, where), ceiling))
        except InvalidArgument as error:
            problems.append(str(error))
    if problems:
        raise InvalidArgument("\n".join(capped_problems(problems, path)))
    return requests


_BATCH = TypeAdapter(list[BatchEntry])
