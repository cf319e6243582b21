"""The limits a caller's fields are held to, and the pure checks that enforce them.

One place for the rules of every northbound field (docs/api.md, "Limits", lists them): the
gRPC adapters call these before anything reaches the core, and the core calls them again where
it takes the same values from anyone else. Each check raises `InvalidArgument` naming the field
and the limit (or `NotFound` for a DTN the topology does not have), and never echoes more than
a short, printable excerpt of what was sent.

    text(request.request_id, "request_id", MAX_NAME)          # -> the value, or InvalidArgument
    number(report.rtt_ms, "rate.rtt_ms", 0, MAX_RTT_MS)       # finite and within [0, 10^6]
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
from collections.abc import Container, Sized

from sdn_app.core.errors import InvalidArgument, NotFound

MAX_NAME = 128  # DTN, switch, link, agent, NIC and principal names; object names and ids
MAX_HOST = 253  # a DNS name (RFC 1035) or an IP address
MAX_PATH = 4096  # a file or directory path (Linux PATH_MAX)
MAX_TEXT = 4096  # free text an agent reports: errors, notes, warnings
MAX_SHORT_TEXT = 256  # short free text: a NIC's limit, a pinning method, an agent's version
MAX_HOPS = 1024  # max_hops of a path request
MAX_PREFIX = 64  # the text of an IPv6 network: "ffff:...:ffff/128" is 43 characters
MAX_LIST = 4096  # entries of a host-facts or pinning list (NICs, CPUs, NUMA nodes, ...)
MAX_OUTCOME_FILES = 100_000  # files listed in a transfer's outcome
MAX_RATE_BPS = 10**16  # 10 Pbit/s: a reported rate above it is a broken measurement
MAX_COUNT = 2**63 - 1  # bytes and retransmit counters: a signed 64-bit integer
MAX_ELAPSED = 10**9  # seconds since a transfer began (about 31 years)
MAX_RTT_MS = 10**6  # 1000 s
MAX_CPU_PERCENT = 100 * MAX_LIST  # percent of one core, summed over every CPU a host may report
MAX_CPU_ID = 65_535
MAX_NUMA_NODE = 1023  # Linux's largest (CONFIG_NODES_SHIFT=10); -1 means unknown
MAX_PORT = 65_535
MAX_MTU = 1 << 20
MAX_VLAN = 4094  # 802.1Q VLAN ids 1..4094 (0 is "no VLAN", 4095 reserved)
REQUEST_ID = re.compile(r"^[\x21-\x7e]{1,128}$")
_MULTICAST = ipaddress.IPv6Network("ff00::/8")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                       r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$")


def shown(value: object, limit: int = 60) -> str:
    """`repr(value)`, cut to about `limit` characters, for error messages: what was sent, never all of it.

    >>> shown("x" * 1000, 10)
    "'xxxxxxxx... (1000 characters)"
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[:limit - 1]}...{size}"


def text(value: str, field: str, limit: int, required: bool = False) -> str:
    """`value` if it has at most `limit` characters (and is not empty, when `required`)."""
    if required and not value:
        raise InvalidArgument(f"{field}: required")
    if len(value) > limit:
        raise InvalidArgument(f"{field}: {len(value)} characters, at most {limit}")
    return value


def entries(values: Sized, field: str, limit: int) -> None:
    """Check that `values` has at most `limit` entries."""
    if len(values) > limit:
        raise InvalidArgument(f"{field}: {len(values)} entries, at most {limit}")


def texts(values: list[str] | tuple[str, ...], field: str, count: int, limit: int) -> tuple[str, ...]:
    """At most `count` strings of 1 to `limit` characters each."""
    entries(values, field, count)
    for i, value in enumerate(values):
        text(value, f"{field}[{i}]", limit, required=True)
    return tuple(values)


def number(value: float, field: str, low: float, high: float) -> float:
    """`value` if it is finite and within [low, high]."""
    if not math.isfinite(value):
        raise InvalidArgument(f"{field}: must be a finite number, got {value}")
    if not low <= value <= high:
        raise InvalidArgument(f"{field}: {value:g} is outside {low:g}..{high:g}")
    return value


def whole(value: int, field: str, low: int, high: int) -> int:
    """`value` if it is within [low, high]."""
    if not low <= value <= high:
        raise InvalidArgument(f"{field}: {value} is outside {low}..{high}")
    return value


def interval(start: float, end: float, field: str) -> None:
    """Check that an interval's end (`field`.end) is not before its start."""
    if end < start:
        raise InvalidArgument(f"{field}.end: {end:g} is before {field}.start {start:g}")


def port(value: int, field: str) -> int:
    """A TCP/UDP port a peer can connect to: 1 to 65535."""
    if not 1 <= value <= MAX_PORT:
        raise InvalidArgument(f"{field}: must be between 1 and {MAX_PORT}, got {value}")
    return value


def host(value: str, field: str) -> str:
    """An IP address or a DNS name of at most 253 characters; empty is allowed (none given)."""
    text(value, field, MAX_HOST)
    if not value:
        return value
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(value):
        raise InvalidArgument(f"{field}: {shown(value)} is neither an IP address nor a host name")
    return value


def ipv6_prefix(value: object, field: str) -> str:
    """The canonical text of the IPv6 network `value` (`2001:db8:1:2::/64`): written with its
    prefix length, 1 to 128 (a /64 is the norm), host bits zero, unicast (outside ff00::/8).

    >>> ipv6_prefix("2001:DB8:1:2:0::/64", "src_prefix")
    '2001:db8:1:2::/64'
    """
    example = "write it like 2001:db8:1:2::/64"
    if not isinstance(value, str):
        raise InvalidArgument(f"{field}: an IPv6 network ({example}), got {shown(value)}")
    text(value, field, MAX_PREFIX, required=True)
    if "/" not in value:
        raise InvalidArgument(f"{field}: {shown(value)} has no prefix length; {example}")
    if "%" in value:
        raise InvalidArgument(f"{field}: {shown(value)} carries a zone; {example}")
    try:
        network = ipaddress.IPv6Network(value)
    except ValueError:
        try:
            loose = ipaddress.IPv6Network(value, strict=False)
        except ValueError:
            raise InvalidArgument(f"{field}: {shown(value)} is not an IPv6 network; {example}") from None
        raise InvalidArgument(f"{field}: {shown(value)} has host bits set; the network is {loose}") from None
    if network.prefixlen == 0:
        raise InvalidArgument(f"{field}: {network} would match every address; the prefix length must be "
                              "1 to 128 (a /64 is the norm)")
    if network.overlaps(_MULTICAST):
        raise InvalidArgument(f"{field}: {network} reaches into multicast ff00::/8; a prefix names hosts' "
                              "unicast addresses")
    return str(network)


def prefix_pair(src: object, dst: object) -> tuple[str, str] | tuple[None, None]:
    """(None, None) when neither prefix is given, else the canonical text of both
    (`ipv6_prefix`): both or neither, and the two must not overlap."""
    if src is None and dst is None:
        return None, None
    if src is None or dst is None:
        given, missing = ("dst_prefix", "src_prefix") if src is None else ("src_prefix", "dst_prefix")
        raise InvalidArgument(f"{missing}: required with {given}; give both prefixes or neither")
    if isinstance(src, str) and isinstance(dst, str):
        return _checked_pair(src, dst)
    return _checked_pair.__wrapped__(src, dst)  # a non-text value: the checks name it


@functools.lru_cache(maxsize=1 << 14)  # a request's prefixes are checked at each step of its way: parse them once
def _checked_pair(src: object, dst: object) -> tuple[str, str]:
    source, target = ipv6_prefix(src, "src_prefix"), ipv6_prefix(dst, "dst_prefix")
    if ipaddress.IPv6Network(source).overlaps(ipaddress.IPv6Network(target)):
        raise InvalidArgument(f"dst_prefix: {target} overlaps src_prefix {source}; each end needs a prefix of "
                              "its own")
    return source, target


def vlan_id(value: object, field: str) -> int | None:
    """`value` if it is None (the end's frames are untagged) or a VLAN id: a whole number 1..4094
    (a bool is not one)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{field}: a VLAN id, a whole number 1..{MAX_VLAN}, got {shown(value)}")
    if not 1 <= value <= MAX_VLAN:
        raise InvalidArgument(f"{field}: VLAN {value} is outside 1..{MAX_VLAN}")
    return value


def request_id(value: str, field: str = "request_id") -> str:
    """A client-chosen idempotency key: empty (none), or 1 to 128 printable ASCII characters without spaces."""
    if value and not REQUEST_ID.fullmatch(value):
        if len(value) > MAX_NAME:
            raise InvalidArgument(f"{field}: {len(value)} characters, at most {MAX_NAME}")
        raise InvalidArgument(f"{field}: 1 to {MAX_NAME} printable ASCII characters without spaces, got {shown(value)}")
    return value


def known_dtn(dtns: Container[str], dtn: str, field: str = "dtn", topology: str = "") -> str:
    """`dtn` if it names a DTN of the topology: InvalidArgument when empty or too long, NotFound when unknown."""
    text(dtn, field, MAX_NAME, required=True)
    if dtn not in dtns:
        where = f" of topology {topology}" if topology else ""
        raise NotFound(f"{field}: {shown(dtn)} is not a DTN{where}")
    return dtn


_DNS_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def domain_name(value: str, field: str = "--domain") -> str:
    """`value` as a DNS-style network name (lower case letters, digits, hyphens; dot-separated labels
    of 1-63 characters, at most 253 in all), the name in URNs such as urn:ogf:network:NAME:DTN;
    `InvalidArgument` naming `field` otherwise."""
    name = value.strip().lower().rstrip(".")
    if not name or len(name) > 253 or not all(_DNS_LABEL.match(label) for label in name.split(".")):
        raise InvalidArgument(f"{field}: {shown(value)} is not a DNS-style name (letters, digits and hyphens in "
                              "dot-separated labels of 1-63 characters, e.g. sc16.caltech.edu)")
    return name


def default_domain(topology_name: str) -> str:
    """The network name used when none is given: the topology's name made DNS-style."""
    name = re.sub(r"[^a-z0-9.-]+", "-", topology_name.lower()).strip("-.")
    name = ".".join(label.strip("-")[:63] or "x" for label in name.split("."))
    return name or "tsdn"
