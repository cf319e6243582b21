"""Units people type (`100G`, `1.5T`, `90m`, ISO times) and the integers the core keeps.

Inside the core a bandwidth is an int of bits per second and a time is a float of seconds
since the Unix epoch (UTC); `math.inf` as an end time means "until released".
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from decimal import Decimal, DecimalException

from sdn_app.core.errors import InvalidArgument

MAX_BANDWIDTH = 10**18  # 1 Ebit/s: far beyond any link, small enough for SQLite's 64-bit integers
_BANDWIDTH_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_BANDWIDTH_RE = re.compile(
    r"^\s*(?P<num>-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*"
    r"(?P<prefix>[kKmMgGtTpP]?)\s*(?P<unit>bps|bit/s|b/s|bits/s|b|bit|bits)?\s*$"
)
_SIZE_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
               "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
_SIZE_RE = re.compile(r"^\s*(?P<num>[0-9]+(?:\.[0-9]+)?)\s*(?P<prefix>(?:[kKmMgGtTpP]i?)?)\s*[bB]?\s*$")
_DURATION_SCALE = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w)")


def parse_bandwidth(text: str | int, what: str = "bandwidth") -> int:
    """Return the bits per second written as `text` (`100G`, `1.5T`, `400Mbps`, `25000000`).

    Decimal prefixes only (k=10^3 ... P=10^15), as link rates are quoted. Rejects zero,
    negatives, fractions of a bit and unknown units with an error naming `what`.

    >>> parse_bandwidth("1.5T")
    1500000000000
    """
    if isinstance(text, bool):
        raise InvalidArgument(f"{what}: expected a bandwidth like 100G, got {text!r}")
    if isinstance(text, int):
        value = Decimal(text)
    else:
        match = _BANDWIDTH_RE.match(str(text))
        if not match:
            raise InvalidArgument(
                f"{what}: cannot read {text!r} as a bandwidth; write a number with an optional "
                "k/M/G/T/P prefix, e.g. 400M, 100G, 1.5T"
            )
        try:
            value = Decimal(match["num"]) * _BANDWIDTH_SCALE[match["prefix"].lower()]
        except DecimalException:  # an exponent beyond what Decimal can hold
            raise InvalidArgument(f"{what}: {text!r} is too large to be a bandwidth") from None
    if value > MAX_BANDWIDTH:
        raise InvalidArgument(f"{what}: {text!r} is more than {format_bandwidth(MAX_BANDWIDTH)}bit/s")
    if value != value.to_integral_value():
        raise InvalidArgument(f"{what}: {text!r} is not a whole number of bits per second")
    if value <= 0:
        raise InvalidArgument(f"{what}: must be greater than zero, got {text!r}")
    return int(value)


def parse_size(text: str, what: str = "size") -> int:
    """Return the bytes written as `text`: `50G` (10^9), `64MiB` (2^20), `1.5T`, `4096`."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise InvalidArgument(f"{what}: cannot read {text!r} as a size; write a number with an optional "
                              "k/M/G/T/P (powers of 1000) or Ki/Mi/Gi/Ti (powers of 1024) prefix, e.g. 50G, 64MiB")
    value = Decimal(match["num"]) * _SIZE_SCALE[match["prefix"].lower()]
    if value != value.to_integral_value() or value <= 0:
        raise InvalidArgument(f"{what}: {text!r} must be a positive whole number of bytes")
    return int(value)


def format_bytes(count: int | float) -> str:
    """Return a byte count as people read it: `50.0 GB`, `64.0 MB`, `812 B` (powers of 1000)."""
    for unit, factor in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= factor:
            return f"{count / factor:.1f} {unit}"
    return f"{int(count)} B"


def format_bandwidth(bps: int | float) -> str:
    """Return `bps` in the shortest exact-enough form people read: `100G`, `1.5T`, `400M`.

    >>> format_bandwidth(1_500_000_000_000)
    '1.5T'
    """
    if bps == 0:
        return "0"
    sign = "-" if bps < 0 else ""
    value = abs(bps)
    for prefix, scale in (("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if value >= scale:
            shown = f"{value / scale:.3f}".rstrip("0").rstrip(".")
            return f"{sign}{shown}{prefix}"
    return f"{sign}{value:g}"


def parse_duration(text: str | int | float, what: str = "duration") -> float:
    """Return the seconds in `text` (`90s`, `30m`, `1h30m`, `2d`, or a plain number of seconds).

    >>> parse_duration("1h30m")
    5400.0
    """
    if isinstance(text, bool):
        raise InvalidArgument(f"{what}: expected a duration like 1h, got {text!r}")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        compact = str(text).strip().replace(" ", "")
        try:
            seconds = float(compact)
        except ValueError:
            parts = _DURATION_PART_RE.findall(compact)
            if not parts or "".join(n + u for n, u in parts) != compact:
                raise InvalidArgument(
                    f"{what}: cannot read {text!r} as a duration; write e.g. 90s, 30m, 1h30m, 2d"
                ) from None
            seconds = sum(float(n) * _DURATION_SCALE[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"{what}: must be a positive duration, got {text!r}")
    return seconds


def parse_time(text: str | int | float, now: float, what: str = "time") -> float:
    """Return epoch seconds for `text`: `now`, `+30m` (relative to `now`), an ISO 8601 time
    (UTC when it names no zone), or epoch seconds.

    >>> parse_time("+1h", now=1000.0)
    4600.0
    """
    if isinstance(text, bool):
        raise InvalidArgument(f"{what}: expected a time, got {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    else:
        raw = str(text).strip()
        if raw.lower() == "now":
            return now
        if raw.startswith("+"):
            return now + parse_duration(raw[1:], what)
        try:
            value = float(raw)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                raise InvalidArgument(
                    f"{what}: cannot read {text!r} as a time; write 'now', '+1h', or ISO 8601 "
                    "like 2016-11-14T10:00:00Z"
                ) from None
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            value = parsed.timestamp()
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{what}: {text!r} is not a valid point in time")
    return value


def format_time(epoch: float) -> str:
    """Return `epoch` as ISO 8601 UTC to the second, or `never` for an open end."""
    if math.isinf(epoch) and epoch > 0:
        return "never"
    try:
        return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (ValueError, OverflowError, OSError):  # NaN, or beyond what a calendar date can show
        return repr(epoch)


def format_window(start: float, end: float) -> str:
    """Return `from T1 until T2`, or `from T1 until released` for an open end."""
    until = "until released" if math.isinf(end) else f"until {format_time(end)}"
    return f"from {format_time(start)} {until}"
