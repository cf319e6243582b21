"""The topology file format (YAML): schema, loading, and errors that name file and field.

A file declares switches (name, dpid, ports), links (two ends by switch and port, capacity
per direction, optional latency, kind), DTNs (switch port, IPv4, MAC, NIC speed, NUMA node,
optionally the IPv6 pool the SENSE API allocates /64s from), interdomain ports (a switch port
leading to a neighbouring domain, named by its NSI NSA id and STP, with the VLAN range both sides
allow), remote DTNs (at a site in a neighbouring domain, reached through an interdomain port) and
sites (coordinates and member switches, or for a remote site the interdomain port it lies beyond,
for the map). `load_topology_spec` returns a fully checked `TopologySpec` or raises
`TopologyError` listing every problem as `FILE: field.path: what is wrong`; nothing is
half-loaded.

Every file tsdn reads as YAML (topologies, tokens, scenarios) goes through `read_text_file`
and `read_yaml`, which bound what a hostile or careless file can cost: its size, how deep
lists and mappings nest, how many nodes aliases expand to, and how long an integer may be.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from sdn_app.core.errors import InvalidArgument, TopologyError
from sdn_app.core.units import parse_bandwidth
from sdn_app.core.validation import ipv6_prefix

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
MAX_DPID = 2**64 - 1
MAX_PORT = 0xFFFFFF00  # OpenFlow 1.3 OFPP_MAX: higher numbers are reserved ports
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_RANGE_RE = re.compile(r"^\s*(\d{1,20})\s*-\s*(\d{1,20})\s*$")

# Limits of a topology file (docs/topologies.md, docs/operations.md "Limits"). The counts keep
# every accepted topology's GetTopology reply under gRPC clients' default 4 MiB message limit
# whatever its names (about 2.9 MB at worst: tests/test_file_limits.py builds that topology), and
# still hold the largest Topology Zoo network (754 nodes, 895 edges) with a DTN on every node.
# The byte limit bounds what parsing costs before any count is known.
MAX_TOPOLOGY_BYTES = 1024 * 1024
MAX_SWITCHES = 1024
MAX_LINKS = 2048
MAX_DTNS = 2048
MAX_SITES = 1024
MAX_INTERDOMAIN = 1024
MAX_PORTS_PER_SWITCH = 4096
MAX_PORTS = 32768  # over all switches
MAX_DESCRIPTION = 1024  # characters, of a switch, link or DTN
MAX_TOPOLOGY_DESCRIPTION = 4096
MAX_PROBLEMS_SHOWN = 50  # an error lists this many problems, then counts the rest
# A DTN's `ipv6_pool`: a /56 (256 /64s) to a /64 (one). The SENSE API allocates /64s from it (one
# per Rucio rule) and lists every /64 of it in its manifest (docs/sense.md).
MIN_POOL_PREFIX = 56
# VLAN ids a file may name (802.1Q: 0 means untagged, 4095 is reserved); an own DTN's default range
# (VLAN 1 is many switches' native VLAN) for NSI requesters asking for a tagged STP at its port.
MIN_VLAN, MAX_VLAN = 1, 4094
DEFAULT_DTN_VLANS = (2, 4094)
# An NSI identifier (NSA id, STP): `urn:ogf:network:` then ':'-separated parts of characters that
# need no escaping in XML, URLs or shells. A label (`?vlan=1780`) is not part of an STP's name.
URN_PREFIX = "urn:ogf:network:"
MAX_URN = 255
_URN_RE = re.compile(r"^urn:ogf:network:[A-Za-z0-9._~+@/-]+(:[A-Za-z0-9._~+@/-]+)*$")
MAX_URL = 2048

# Limits of any YAML file tsdn reads: they keep parsing and validation bounded (no
# RecursionError, no alias bombs, no 5,000-digit integers).
MAX_YAML_DEPTH = 32  # nested lists and mappings; topology files need 4
MAX_YAML_NODES = 200_000  # scalars, lists and mappings, aliases counted each time they are used; a
# topology at every count limit has about 120,000
MAX_INT_CHARS = 40  # any integer tsdn takes fits in 20 digits
_TEXT_CHARS = 64  # what a bandwidth, dpid or port range written as text may take


def shown(value: Any, limit: int = 60) -> str:
    """`repr(value)`, cut to about `limit` characters: error messages never echo a whole huge input."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _bandwidth(value: Any) -> int:
    if isinstance(value, str) and len(value) > _TEXT_CHARS:
        raise PydanticCustomError("bandwidth", "{value} is too long to be a bandwidth", {"value": shown(value)})
    try:
        return parse_bandwidth(value, "value")
    except InvalidArgument as exc:
        raise PydanticCustomError("bandwidth", str(exc).removeprefix("value: ")) from None


def _dpid(value: Any) -> int:
    """Accept 42, "0x2a", or the colon form "00:00:00:00:00:00:00:2a"."""
    if isinstance(value, bool):
        raise PydanticCustomError("dpid", "expected an integer or hex datapath id")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip().lower()
        if len(text) > _TEXT_CHARS:
            raise PydanticCustomError("dpid", "{value} is too long to be a datapath id", {"value": shown(value)})
        try:
            if ":" in text:
                parts = text.split(":")
                if len(parts) != 8 or not all(len(p) == 2 for p in parts):
                    raise ValueError
                number = int("".join(parts), 16)
            else:
                number = int(text, 0)
        except ValueError:
            raise PydanticCustomError(
                "dpid", "cannot read {value} as a datapath id (42, 0x2a or 00:00:00:00:00:00:00:2a)",
                {"value": shown(value)},
            ) from None
    else:
        raise PydanticCustomError("dpid", "expected an integer or hex datapath id")
    if not 1 <= number <= MAX_DPID:
        raise PydanticCustomError("dpid", "datapath id must be between 1 and 2^64-1")
    return number


def _ports(value: Any, info: ValidationInfo) -> list[int]:
    """Accept a list of port numbers and "first-last" ranges. With a `{"ports": 0}` validation
    context, also count ports over all switches, refusing before the total exceeds `MAX_PORTS`."""
    if not isinstance(value, list):
        raise PydanticCustomError("ports", "expected a list of port numbers or ranges like 1-32")
    counter = info.context if isinstance(info.context, dict) and "ports" in info.context else None
    ports: list[int] = []
    for item in value:
        if isinstance(item, int) and not isinstance(item, bool):
            more: list[int] | range = [item]
        else:
            match = _RANGE_RE.match(item) if isinstance(item, str) and len(item) <= _TEXT_CHARS else None
            if not match:
                raise PydanticCustomError("ports", "cannot read {item} as a port or range", {"item": shown(item)})
            first, last = int(match[1]), int(match[2])
            if first > last:
                raise PydanticCustomError("ports", "range {item} runs backwards", {"item": shown(item)})
            if last - first >= MAX_PORTS_PER_SWITCH:
                raise PydanticCustomError("ports", "range {item} is too large", {"item": shown(item)})
            more = range(first, last + 1)
        if len(ports) + len(more) > MAX_PORTS_PER_SWITCH:
            raise PydanticCustomError("ports", "more than {max} ports on one switch", {"max": MAX_PORTS_PER_SWITCH})
        if counter is not None:
            if counter["ports"] + len(more) > MAX_PORTS:
                raise PydanticCustomError("ports", "the switches up to this one have more than {max} ports in all",
                                          {"max": MAX_PORTS})
            counter["ports"] += len(more)
        ports.extend(more)
    bad = [p for p in ports if not 1 <= p <= MAX_PORT]
    if bad:
        raise PydanticCustomError("ports", "port {port} is outside 1..{max}", {"port": bad[0], "max": MAX_PORT})
    seen: set[int] = set()
    for port in ports:
        if port in seen:
            raise PydanticCustomError("ports", "port {port} is listed twice", {"port": port})
        seen.add(port)
    return ports


def _mac(value: Any) -> str:
    if not isinstance(value, str) or not _MAC_RE.match(value):
        raise PydanticCustomError("mac", "expected a MAC address like 02:00:00:00:00:01")
    mac = value.lower()
    if int(mac[:2], 16) & 1:
        raise PydanticCustomError("mac", "{value} is a multicast address; a DTN needs a unicast MAC", {"value": value})
    return mac


def _ipv4(value: Any) -> str:
    try:
        address = ipaddress.IPv4Address(value)
    except (ipaddress.AddressValueError, ValueError):
        raise PydanticCustomError("ipv4", "expected an IPv4 address like 10.16.0.1") from None
    if address.is_multicast or address.is_unspecified or address == ipaddress.IPv4Address("255.255.255.255"):
        raise PydanticCustomError("ipv4", "{value} cannot be a host address", {"value": value})
    return str(address)


def _ipv6_pool(value: Any) -> str:
    """An IPv6 network of unicast addresses, a /56 to a /64, host bits zero: `2001:db8:16:100::/56`."""
    try:
        network = ipaddress.IPv6Network(ipv6_prefix(value, "ipv6_pool"))
    except InvalidArgument as error:  # the field's path is added by the schema's error report
        raise PydanticCustomError("ipv6_pool", "{problem}",
                                  {"problem": str(error).removeprefix("ipv6_pool: ")}) from None
    if not MIN_POOL_PREFIX <= network.prefixlen <= 64:
        raise PydanticCustomError("ipv6_pool", "{value}: a pool is a /{low} to a /64", {"value": str(network),
                                                                                       "low": MIN_POOL_PREFIX})
    if network.is_multicast or network.is_link_local or network.is_loopback or network.is_unspecified:
        raise PydanticCustomError("ipv6_pool", "{value} is not unicast host space (global, ULA or documentation "
                                  "2001:db8::/32)", {"value": str(network)})
    return str(network)


def _vlans(value: Any) -> tuple[int, int]:
    """Accept a VLAN range "1780-1799", or one VLAN (1780 or "1780"), within 1..4094."""
    if isinstance(value, int) and not isinstance(value, bool):
        first = last = value
    elif isinstance(value, str) and len(value) <= _TEXT_CHARS and (match := _RANGE_RE.match(value)):
        first, last = int(match[1]), int(match[2])
    elif isinstance(value, str) and len(value) <= _TEXT_CHARS and value.strip().isdigit():
        first = last = int(value)
    else:
        raise PydanticCustomError("vlans", "cannot read {value} as a VLAN range like 1780-1799",
                                  {"value": shown(value)})
    for vlan in (first, last):
        if not MIN_VLAN <= vlan <= MAX_VLAN:
            raise PydanticCustomError("vlans", "VLAN {vlan} is outside {low}..{high}",
                                      {"vlan": vlan, "low": MIN_VLAN, "high": MAX_VLAN})
    if first > last:
        raise PydanticCustomError("vlans", "range {value} runs backwards", {"value": shown(value)})
    return first, last


def format_vlans(vlans: tuple[int, int]) -> str:
    """A VLAN range as the file writes it: `1780-1799`, or `1780` for one VLAN."""
    first, last = vlans
    return str(first) if first == last else f"{first}-{last}"


def _urn(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise PydanticCustomError("urn", "expected {what} as text like urn:ogf:network:example.net:2016:nsa",
                                  {"what": what})
    if len(value) > MAX_URN:
        raise PydanticCustomError("urn", "{value} is longer than {max} characters", {"value": shown(value),
                                                                                    "max": MAX_URN})
    if not value.startswith(URN_PREFIX):
        raise PydanticCustomError("urn", "{value} is not an NSI identifier: it must start with {prefix}",
                                  {"value": shown(value), "prefix": URN_PREFIX})
    if not _URN_RE.match(value):
        raise PydanticCustomError(
            "urn", "{value}: an NSI identifier is ':'-separated non-empty parts of letters, digits and "
            "'.', '_', '~', '+', '@', '/', '-'", {"value": shown(value)})
    return value


def _nsa(value: Any) -> str:
    return _urn(value, "an NSA id")


def _stp(value: Any) -> str:
    if isinstance(value, str) and "?" in value:
        raise PydanticCustomError("stp", "{value}: give the STP without a label (no ?vlan=...): the VLANs are "
                                  "the interdomain port's vlans", {"value": shown(value)})
    return _urn(value, "an STP")


def _url(value: Any) -> str:
    """An NSI CS2 provider URL: http or https, a host and an explicit port."""
    if not isinstance(value, str) or len(value) > MAX_URL or any(c.isspace() for c in value):
        raise PydanticCustomError("url", "expected a URL like http://nsa.example.net:9080/NSI/services/CS2")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise PydanticCustomError("url", "{value}: only http and https URLs are accepted", {"value": shown(value)})
    try:
        port = parts.port
    except ValueError:
        raise PydanticCustomError("url", "{value}: the port is not a number in 1..65535",
                                  {"value": shown(value)}) from None
    if not parts.hostname:
        raise PydanticCustomError("url", "{value}: no host", {"value": shown(value)})
    if port is None or port == 0:
        raise PydanticCustomError("url", "{value}: give the port explicitly (e.g. {scheme}://{host}:9080/...)",
                                  {"value": shown(value), "scheme": parts.scheme, "host": parts.hostname})
    return value


def _checked(check: Any, value: Any, what: str) -> Any:
    try:
        return check(value)
    except PydanticCustomError as exc:
        raise InvalidArgument(f"{what}: {exc.message()}") from None


def read_vlans(value: Any, what: str) -> tuple[int, int]:
    """A VLAN range as a file gives it ("1780-1799"); `InvalidArgument` naming `what` if it is none."""
    return _checked(_vlans, value, what)


def read_nsa_id(value: Any, what: str) -> str:
    """An NSA id (`urn:ogf:network:...`); `InvalidArgument` naming `what` if it is none."""
    return _checked(_nsa, value, what)


def read_stp(value: Any, what: str) -> str:
    """An STP without a label (`urn:ogf:network:...`, no `?vlan=`); `InvalidArgument` naming `what` if it is none."""
    return _checked(_stp, value, what)


def read_provider_url(value: Any, what: str) -> str:
    """An NSI provider URL (http or https, explicit port); `InvalidArgument` naming `what` if it is none."""
    return _checked(_url, value, what)


Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Bandwidth = Annotated[int, BeforeValidator(_bandwidth)]
Dpid = Annotated[int, BeforeValidator(_dpid)]
Ports = Annotated[list[int], BeforeValidator(_ports)]
Mac = Annotated[str, BeforeValidator(_mac)]
IPv4 = Annotated[str, BeforeValidator(_ipv4)]
IPv6Pool = Annotated[str, BeforeValidator(_ipv6_pool)]
Port = Annotated[int, Field(ge=1, le=MAX_PORT, strict=True)]
Description = Annotated[str, Field(max_length=MAX_DESCRIPTION)]
VlanRange = Annotated[tuple[int, int], BeforeValidator(_vlans), PlainSerializer(format_vlans, return_type=str)]
NsaId = Annotated[str, BeforeValidator(_nsa)]
StpId = Annotated[str, BeforeValidator(_stp)]
ProviderUrl = Annotated[str, BeforeValidator(_url)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SwitchSpec(_Strict):
    """One OpenFlow switch."""

    name: Name
    dpid: Dpid
    ports: Ports
    description: Description = ""


class LinkSpec(_Strict):
    """One physical link between two switch ports; capacity may differ per direction."""

    name: Name | None = None
    a: Name
    a_port: Port
    b: Name
    b_port: Port
    capacity: Bandwidth | None = None
    capacity_ab: Bandwidth | None = None
    capacity_ba: Bandwidth | None = None
    latency_ms: Annotated[float, Field(ge=0, le=10_000)] | None = None
    kind: Literal["wan", "booth", "core"] = "core"
    description: Description = ""

    @property
    def label(self) -> str:
        """The link's name, or `a:port--b:port` when the file gives none."""
        return self.name or f"{self.a}:{self.a_port}--{self.b}:{self.b_port}"


class DtnSpec(_Strict):
    """One data transfer node attached to a switch port, or a remote DTN: one at a site in a
    neighbouring domain, reached through interdomain port `beyond` (the file gives no switch or
    port for it; the loaded spec holds the interdomain port's)."""

    name: Name
    switch: Name
    port: Port
    ipv4: IPv4
    mac: Mac
    nic_speed: Bandwidth
    numa_node: Annotated[int, Field(ge=-1, le=255, strict=True)] = -1
    description: Description = ""
    # Where the SENSE API allocates this DTN's IPv6 prefixes (one /64 per Rucio rule): docs/sense.md.
    ipv6_pool: IPv6Pool | None = None
    # An own DTN: the VLANs an NSI requester may ask for at its port (None: DEFAULT_DTN_VLANS).
    vlans: VlanRange | None = None
    beyond: Name | None = None
    # A remote DTN: more interdomain ports that reach it, in order of preference after `beyond`
    # (each leads to the same neighbour NSA): where its WAN segment is re-homed when one fails.
    also_beyond: Annotated[list[Name], Field(max_length=MAX_INTERDOMAIN)] = []
    stp: StpId | None = None  # a remote DTN: the neighbour's STP where its site is reached

    @property
    def is_remote(self) -> bool:
        """Whether this DTN lies in a neighbouring domain, beyond an interdomain port."""
        return self.beyond is not None

    @property
    def ports(self) -> tuple[str, ...]:
        """A remote DTN's interdomain ports, `beyond` first then `also_beyond` (an own DTN: none)."""
        return () if self.beyond is None else (self.beyond, *self.also_beyond)


class PeerSpec(_Strict):
    """The neighbouring domain an interdomain port leads to."""

    nsa: NsaId
    stp: StpId  # their STP facing our port, without a VLAN label
    url: ProviderUrl | None = None  # their NSI CS2 provider


class InterdomainSpec(_Strict):
    """A switch port leading to another domain (an NSI STP of ours), with the VLANs both sides allow."""

    name: Name
    switch: Name
    port: Port
    capacity: Bandwidth  # per direction
    latency_ms: Annotated[float, Field(ge=0, le=10_000)] | None = None
    vlans: VlanRange
    peer: PeerSpec
    description: Description = ""


class SiteSpec(_Strict):
    """A place on the map (booth or WAN site) and the switches it holds; or a remote site, in a
    neighbouring domain beyond interdomain port `beyond`, with no switches and the remote DTNs
    listed in `dtns`."""

    name: Annotated[str, Field(min_length=1, max_length=80)]
    lat: Annotated[float, Field(ge=-90, le=90)] | None = None
    lon: Annotated[float, Field(ge=-180, le=180)] | None = None
    kind: Literal["booth", "wan", "hub"] = "wan"
    switches: Annotated[list[Name], Field(max_length=MAX_SWITCHES)] = []
    beyond: Name | None = None
    dtns: Annotated[list[Name], Field(max_length=MAX_DTNS)] = []


class TopologySpec(_Strict):
    """A whole WAN: the content of one topology file."""

    name: Name
    description: Annotated[str, Field(max_length=MAX_TOPOLOGY_DESCRIPTION)] = ""
    switches: Annotated[list[SwitchSpec], Field(min_length=1, max_length=MAX_SWITCHES)]
    links: Annotated[list[LinkSpec], Field(max_length=MAX_LINKS)] = []
    dtns: Annotated[list[DtnSpec], Field(max_length=MAX_DTNS)] = []
    sites: Annotated[list[SiteSpec], Field(max_length=MAX_SITES)] = []
    interdomain: Annotated[list[InterdomainSpec], Field(max_length=MAX_INTERDOMAIN)] = []

    @model_validator(mode="before")
    @classmethod
    def _place_remote_dtns(cls, data: Any) -> Any:
        """Give each remote DTN that names no switch or port its interdomain port's (a spec built
        in code gets the same as one read from a file; `parse_topology_spec` also reports a file
        that names them)."""
        return _placed(data)[0]


_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


class _LimitExceeded(Exception):
    """A YAML document beyond what `read_yaml` accepts; `mark` is where."""

    def __init__(self, message: str, mark: Any = None):
        super().__init__(message)
        self.mark = mark


try:  # libyaml's parser: ten times faster than PyYAML's on a 1 MB file, and it does not recurse
    from yaml.cyaml import CParser

    class _Base(yaml.composer.Composer, CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        """`yaml.CSafeLoader`, except that nodes are composed in Python (`_SafeLoader` bounds the depth)."""

        def __init__(self, stream: str):
            CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
except ImportError:  # PyYAML built without libyaml
    _Base = yaml.SafeLoader  # type: ignore[misc,assignment]


class _SafeLoader(_Base):
    """A safe loader (no arbitrary objects) that refuses a key given twice in one mapping (PyYAML
    keeps the last), stops composing past `MAX_YAML_DEPTH` (composing recurses per level), turns
    any constructor failure into a YAML error with its line, and reads `10:00:00:00:00:00:00:01`
    as text, not as YAML 1.1's base-60 integer (which would silently turn a dpid into another)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.depth = 0
        self.nodes = 0  # composed so far: stops a long file early (aliases are counted by `_check_nodes`)

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        self.nodes += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise _LimitExceeded(f"lists and mappings nested more than {MAX_YAML_DEPTH} deep",
                                     self.peek_event().start_mark)
            if self.nodes > MAX_YAML_NODES:
                raise _LimitExceeded(f"more than {MAX_YAML_NODES:,} values", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # e.g. `2016-13-45` (a date), `!!bool maybe`, `!!float x`
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {shown(getattr(node, 'value', ''))} as {node.tag.rsplit(':', 1)[-1]}: "
                f"{exc}", node.start_mark) from None


# YAML 1.1's implicit int and float patterns without their base-60 forms (YAML 1.2 dropped them).
_SafeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SafeLoader.add_implicit_resolver(_INT_TAG, re.compile(r"""^(?:[-+]?0b[0-1_]+
    |[-+]?0[0-7_]+
    |[-+]?(?:0|[1-9][0-9_]*)
    |[-+]?0x[0-9a-fA-F_]+)$""", re.X), list("-+0123456789"))
_SafeLoader.add_implicit_resolver(_FLOAT_TAG, re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    keys = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            seen = key in keys
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "a list or mapping cannot be a key",
                                                    key_node.start_mark) from None
        if seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {shown(key)} appears twice in one mapping", key_node.start_mark
            )
        keys.add(key)
    return loader.construct_mapping(node, deep)


_SafeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _check_nodes(root: yaml.Node) -> None:
    """Refuse a composed document whose aliases expand beyond the depth or node limits, or that
    holds an integer too long to be any field's value or text that is not Unicode."""
    count = 0
    open_nodes: set[int] = set()

    def visit(node: yaml.Node, path: tuple[int | str, ...], depth: int) -> None:
        nonlocal count
        count += 1
        if count > MAX_YAML_NODES:
            raise _LimitExceeded(f"more than {MAX_YAML_NODES:,} values (aliases counted each time they are used)",
                                 node.start_mark)
        if depth > MAX_YAML_DEPTH:
            raise _LimitExceeded(f"{field_path(path)}: lists and mappings nested more than {MAX_YAML_DEPTH} deep "
                                 "(through aliases)", node.start_mark)
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _INT_TAG and len(node.value) > MAX_INT_CHARS:
                raise _LimitExceeded(f"{field_path(path)}: a {len(node.value):,}-character integer is far out of "
                                     f"range (at most {MAX_INT_CHARS} characters)", node.start_mark)
            if _SURROGATE_RE.search(node.value):
                raise _LimitExceeded(f"{field_path(path)}: text with a lone surrogate (\\ud800-\\udfff) is not "
                                     "Unicode", node.start_mark)
            return
        if id(node) in open_nodes:
            raise _LimitExceeded(f"{field_path(path)}: an alias refers to a list or mapping that holds it",
                                 node.start_mark)
        open_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, child in enumerate(node.value):
                visit(child, (*path, i), depth + 1)
        else:
            for key, value in node.value:
                visit(key, path, depth + 1)
                label = shown(key.value, 40).strip("'\"") if isinstance(key, yaml.ScalarNode) else "?"
                visit(value, (*path, label), depth + 1)
        open_nodes.discard(id(node))

    visit(root, (), 1)


def read_yaml(text: str, source: str) -> Any:
    """Parse YAML `text`; a syntax error, a repeated key or a document beyond the YAML limits
    (`MAX_YAML_DEPTH`, `MAX_YAML_NODES`, `MAX_INT_CHARS`) becomes `InvalidArgument` with the line."""
    loader = _SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_nodes(root)
        return loader.construct_document(root)
    except _LimitExceeded as exc:
        where = f" (line {exc.mark.line + 1}, column {exc.mark.column + 1})" if exc.mark else ""
        raise InvalidArgument(f"{source}: {exc}{where}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown place"
        raise InvalidArgument(f"{source}: not valid YAML at {where}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise InvalidArgument(f"{source}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def read_text_file(path: str | Path, limit: int, what: str, missing: str | None = None) -> str:
    """The UTF-8 text of the file at `path`, refused (`InvalidArgument` naming it) when larger than
    `limit` bytes: the size is checked before reading, and the read is bounded too (a pipe or a
    device has no size). `missing` is the message for a file that does not exist."""
    source = str(path)
    too_big = f"{source}: a {what} may have at most {limit:,} bytes"
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                raise InvalidArgument(f"{too_big}; this one has {size:,}")
            data = handle.read(limit + 1)
    except OSError as exc:
        if missing is not None and isinstance(exc, FileNotFoundError):
            raise InvalidArgument(f"{source}: {missing}") from None
        raise InvalidArgument(f"{source}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InvalidArgument(f"{too_big}; this one has more")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{source}: cannot read {what}: not UTF-8 text (byte {exc.start:,} is "
                              f"{data[exc.start]:#04x})") from None


def field_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location as `links[3].b_port`."""
    path = ""
    for part in loc:
        if not isinstance(part, int):
            part = str(part) if len(str(part)) <= 40 else shown(str(part), 40)
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path or "(top level)"


def describe_validation_error(exc: ValidationError, source: str) -> list[str]:
    """Turn pydantic's errors into `source: field.path: message` lines."""
    return describe_errors(exc.errors(), source)


def describe_errors(errors: list[Any], source: str) -> list[str]:
    """Turn pydantic's error records (`ValidationError.errors()`) into `source: field.path: message` lines."""
    problems = []
    for error in errors:
        loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif error["type"] == "missing":
            message = "required field is missing"
        elif error["type"] == "string_pattern_mismatch":
            message = f"{shown(error.get('input'))} is not a valid name (letters, digits, '.', '_', '-'; at most 63)"
        elif error["type"] == "too_long":
            message = f"at most {error['ctx']['max_length']:,} allowed, this has {error['ctx']['actual_length']:,}"
        elif error["type"] == "string_too_long":
            message = f"at most {error['ctx']['max_length']:,} characters, this has {len(error['input']):,}"
        problems.append(f"{source}: {field_path(loc)}: {message}")
    return problems


def _attachment(entry: Any) -> tuple[str, int] | None:
    """The (switch, port) of a raw interdomain entry when both are valid, else None."""
    if not isinstance(entry, dict):
        return None
    switch, port = entry.get("switch"), entry.get("port")
    if not isinstance(switch, str) or not re.match(NAME_PATTERN, switch):
        return None
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= MAX_PORT:
        return None
    return switch, port


def _raw_ports(data: dict) -> dict[str, Any]:
    """The raw interdomain entries of `data` by name (the first of a name)."""
    ports: dict[str, Any] = {}
    if isinstance(data.get("interdomain"), list):
        for entry in data["interdomain"]:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                ports.setdefault(entry["name"], entry)
    return ports


def _placed(data: Any) -> tuple[Any, set[int]]:
    """A copy of `data` in which each remote DTN (one with `beyond`) that names neither switch nor
    port has its interdomain port's, when that port exists and its switch and port are valid;
    and the indexes of the remote DTNs."""
    if not isinstance(data, dict) or not isinstance(data.get("dtns"), list):
        return data, set()
    ports = _raw_ports(data)
    remote: set[int] = set()
    dtns = []
    for i, dtn in enumerate(data["dtns"]):
        if isinstance(dtn, dict) and dtn.get("beyond") is not None:
            remote.add(i)
            beyond = dtn["beyond"]
            where = _attachment(ports.get(beyond)) if isinstance(beyond, str) else None
            if where is not None and "switch" not in dtn and "port" not in dtn:
                dtn = {**dtn, "switch": where[0], "port": where[1]}
        dtns.append(dtn)
    return ({**data, "dtns": dtns} if remote else data), remote


def _remote_dtn_problems(data: Any) -> tuple[Any, list[str]]:
    """Check what a file says of its remote DTNs before the schema sees it: a remote DTN names
    no switch or port (it sits at its interdomain port's) and `beyond` names an interdomain port.
    Returns `data` without any switch or port a remote DTN named, and the problems."""
    if not isinstance(data, dict) or not isinstance(data.get("dtns"), list):
        return data, []
    ports = _raw_ports(data)
    problems: list[str] = []
    dtns = []
    for i, dtn in enumerate(data["dtns"]):
        if isinstance(dtn, dict) and dtn.get("beyond") is not None:
            beyond = dtn["beyond"]
            given = [key for key in ("switch", "port") if key in dtn]
            if given:
                problems.append(f"dtns[{i}].{given[0]}: a remote DTN has no {' or '.join(given)} of its own: it is "
                                f"reached through interdomain port {shown(beyond)} and sits at that port; omit "
                                f"{' and '.join(given)}")
                dtn = {key: value for key, value in dtn.items() if key not in given}
            if not isinstance(beyond, str) or beyond not in ports:
                known = ", ".join(sorted(ports)[:12]) or "none"
                problems.append(f"dtns[{i}].beyond: no interdomain port named {shown(beyond)} (declared: {known})")
        dtns.append(dtn)
    return {**data, "dtns": dtns}, problems


def check_consistency(spec: TopologySpec) -> list[str]:
    """Return `field.path: problem` for every cross-reference the schema alone cannot check."""
    problems: list[str] = []
    names: dict[str, str] = {}
    dpids: dict[int, str] = {}
    ports: dict[str, set[int]] = {}
    used_ports: dict[tuple[str, int], str] = {}

    def claim_name(name: str, where: str) -> None:
        if name in names:
            problems.append(f"{where}: name {name!r} is already used by {names[name]}")
        else:
            names[name] = where

    def claim_port(switch: str, port: int, where: str) -> None:
        if switch not in ports:
            problems.append(f"{where}: switch {switch!r} is not declared")
        elif port not in ports[switch]:
            problems.append(f"{where}: port {port} not declared on switch {switch}")
        elif (switch, port) in used_ports:
            problems.append(f"{where}: port {port} of switch {switch} is already used by {used_ports[(switch, port)]}")
        else:
            used_ports[(switch, port)] = where.rsplit(".", 1)[0]

    total_ports = sum(len(switch.ports) for switch in spec.switches)
    if total_ports > MAX_PORTS:
        problems.append(f"switches: {total_ports:,} ports in all; at most {MAX_PORTS:,} are accepted")
    if len(spec.switches) > 1 and not spec.links:
        problems.append(f"links: none, so no two of the {len(spec.switches)} switches can ever reach each other; "
                        "a topology of more than one switch needs links")
    for i, switch in enumerate(spec.switches):
        claim_name(switch.name, f"switches[{i}].name")
        if switch.dpid in dpids:
            problems.append(f"switches[{i}].dpid: dpid {switch.dpid:#x} is already used by {dpids[switch.dpid]}")
        else:
            dpids[switch.dpid] = f"switch {switch.name}"
        ports.setdefault(switch.name, set(switch.ports))

    for i, link in enumerate(spec.links):
        where = f"links[{i}]"
        if link.name is not None:
            claim_name(link.name, f"{where}.name")
        elif link.label in names:
            problems.append(f"{where}: default name {link.label!r} is already used by {names[link.label]}")
        else:
            names[link.label] = f"{where}"
        if link.a == link.b:
            problems.append(f"{where}.b: a link must join two different switches (both ends on {link.a})")
        claim_port(link.a, link.a_port, f"{where}.a_port")
        claim_port(link.b, link.b_port, f"{where}.b_port")
        if link.capacity is None and (link.capacity_ab is None or link.capacity_ba is None):
            problems.append(f"{where}.capacity: give capacity, or both capacity_ab and capacity_ba")

    interdomain: dict[str, InterdomainSpec] = {}
    for port_spec in spec.interdomain:
        interdomain.setdefault(port_spec.name, port_spec)
    ips: dict[str, str] = {}
    macs: dict[str, str] = {}
    for i, dtn in enumerate(spec.dtns):
        where = f"dtns[{i}]"
        claim_name(dtn.name, f"{where}.name")
        if dtn.beyond is None:
            claim_port(dtn.switch, dtn.port, f"{where}.port")
            if dtn.stp is not None:
                problems.append(f"{where}.stp: only a remote DTN (one with beyond) has an STP")
            if dtn.also_beyond:
                problems.append(f"{where}.also_beyond: only a remote DTN (one with beyond) has more interdomain "
                                "ports; give beyond first")
        else:
            problems.extend(_remote_dtn_consistency(dtn, where, interdomain))
        for value, seen, field in ((dtn.ipv4, ips, "ipv4"), (dtn.mac, macs, "mac")):
            if value in seen:
                problems.append(f"{where}.{field}: {value} is already used by {seen[value]}")
            else:
                seen[value] = f"dtn {dtn.name}"

    pools: list[tuple[ipaddress.IPv6Network, str]] = []
    for i, dtn in enumerate(spec.dtns):
        if dtn.ipv6_pool is None:
            continue
        pool = ipaddress.IPv6Network(dtn.ipv6_pool)
        clash = next((owner for other, owner in pools if other.overlaps(pool)), None)
        if clash is not None:
            problems.append(f"dtns[{i}].ipv6_pool: {pool} overlaps the pool of dtn {clash}")
        pools.append((pool, dtn.name))

    stps: dict[str, str] = {}
    for i, port_spec in enumerate(spec.interdomain):
        where = f"interdomain[{i}]"
        claim_name(port_spec.name, f"{where}.name")
        claim_port(port_spec.switch, port_spec.port, f"{where}.port")
        if port_spec.peer.stp in stps:
            problems.append(f"{where}.peer.stp: {port_spec.peer.stp} is already the STP of interdomain port "
                            f"{stps[port_spec.peer.stp]}")
        else:
            stps[port_spec.peer.stp] = port_spec.name

    dtns = {dtn.name: dtn for dtn in spec.dtns}
    site_of: dict[str, str] = {}
    site_of_dtn: dict[str, str] = {}
    site_names: set[str] = set()
    for i, site in enumerate(spec.sites):
        if site.name in site_names:
            problems.append(f"sites[{i}].name: site {site.name!r} is declared twice")
        site_names.add(site.name)
        if (site.lat is None) != (site.lon is None):
            problems.append(f"sites[{i}]: give both lat and lon, or neither")
        if site.beyond is None:
            if site.dtns:
                problems.append(f"sites[{i}].dtns: only a remote site (one with beyond) lists DTNs; the DTNs of a "
                                "site of ours are those on its switches")
        elif site.beyond not in interdomain:
            known = ", ".join(sorted(interdomain)[:12]) or "none"
            problems.append(f"sites[{i}].beyond: no interdomain port named {site.beyond!r} (declared: {known})")
        else:
            if site.switches:
                problems.append(f"sites[{i}].switches: a remote site (beyond {site.beyond}) lies in another domain "
                                "and holds no switches of ours")
            for j, member in enumerate(site.dtns):
                dtn = dtns.get(member)
                if dtn is None:
                    problems.append(f"sites[{i}].dtns[{j}]: dtn {member!r} is not declared")
                elif dtn.beyond != site.beyond:
                    lies = "is one of ours" if dtn.beyond is None else f"is beyond {dtn.beyond}"
                    problems.append(f"sites[{i}].dtns[{j}]: dtn {member} {lies}, not beyond {site.beyond}")
                elif member in site_of_dtn:
                    problems.append(f"sites[{i}].dtns[{j}]: dtn {member} is already in site {site_of_dtn[member]!r}")
                else:
                    site_of_dtn[member] = site.name
        for j, member in enumerate(site.switches):
            if member not in ports:
                problems.append(f"sites[{i}].switches[{j}]: switch {member!r} is not declared")
            elif member in site_of:
                problems.append(f"sites[{i}].switches[{j}]: switch {member} is already in site {site_of[member]!r}")
            else:
                site_of[member] = site.name
    return problems


def _remote_dtn_consistency(dtn: DtnSpec, where: str, interdomain: dict[str, InterdomainSpec]) -> list[str]:
    """The problems of remote DTN `dtn` (at `where`) given the interdomain ports by name."""
    problems = []
    port_spec = interdomain.get(dtn.beyond or "")
    if port_spec is None:
        known = ", ".join(sorted(interdomain)[:12]) or "none"
        problems.append(f"{where}.beyond: no interdomain port named {dtn.beyond!r} (declared: {known})")
    elif (dtn.switch, dtn.port) != (port_spec.switch, port_spec.port):
        problems.append(f"{where}: a remote DTN sits at its interdomain port {port_spec.name} "
                        f"({port_spec.switch}:{port_spec.port}), not at {dtn.switch}:{dtn.port}")
    if dtn.stp is None:
        problems.append(f"{where}.stp: a remote DTN (beyond {dtn.beyond}) needs the STP where the neighbour "
                        "reaches its site")
    if dtn.vlans is not None:
        problems.append(f"{where}.vlans: a remote DTN uses the VLANs of its interdomain port {dtn.beyond}; omit vlans")
    seen = {dtn.beyond}
    for j, name in enumerate(dtn.also_beyond):
        alternate = interdomain.get(name)
        if name in seen:
            problems.append(f"{where}.also_beyond[{j}]: interdomain port {name} is already named "
                            + ("in beyond" if name == dtn.beyond else "earlier in also_beyond"))
        elif alternate is None:
            known = ", ".join(sorted(interdomain)[:12]) or "none"
            problems.append(f"{where}.also_beyond[{j}]: no interdomain port named {name!r} (declared: {known})")
        elif port_spec is not None and alternate.peer.nsa != port_spec.peer.nsa:
            problems.append(f"{where}.also_beyond[{j}]: interdomain port {name} leads to {alternate.peer.nsa}, not "
                            f"to {port_spec.peer.nsa} where beyond {dtn.beyond} leads and the DTN's STP lies")
        seen.add(name)
    return problems


def _too_many(data: dict, source: str) -> list[str]:
    """The sections with more entries than the limits allow, found before validating any entry."""
    limits = {"switches": MAX_SWITCHES, "links": MAX_LINKS, "dtns": MAX_DTNS, "sites": MAX_SITES,
              "interdomain": MAX_INTERDOMAIN}
    return [f"{source}: {section}: {len(data[section]):,} entries; at most {limit:,} are accepted"
            for section, limit in limits.items()
            if isinstance(data.get(section), list) and len(data[section]) > limit]


def capped_problems(problems: list[str], source: str) -> list[str]:
    """`problems` cut after `MAX_PROBLEMS_SHOWN`, with a last line counting the rest."""
    if len(problems) <= MAX_PROBLEMS_SHOWN:
        return problems
    return [*problems[:MAX_PROBLEMS_SHOWN], f"{source}: ... and {len(problems) - MAX_PROBLEMS_SHOWN:,} more problems"]


def parse_topology_spec(data: Any, source: str) -> TopologySpec:
    """Validate already-parsed YAML data; raise `TopologyError` naming every problem."""
    if not isinstance(data, dict):
        raise TopologyError([f"{source}: (top level): expected a mapping with name, switches, links, dtns, sites"])
    too_many = _too_many(data, source)
    if too_many:
        raise TopologyError(too_many)
    data, early = _remote_dtn_problems(data)
    remote = _placed(data)[1]
    try:
        spec = TopologySpec.model_validate(data, context={"ports": 0})
    except ValidationError as exc:
        # A remote DTN's missing switch and port are its interdomain port's problem, reported there.
        errors = [error for error in exc.errors() if not (
            error["type"] == "missing" and len(error["loc"]) == 3 and error["loc"][0] == "dtns"
            and error["loc"][1] in remote and error["loc"][2] in ("switch", "port"))]
        problems = [f"{source}: {p}" for p in early] + describe_errors(errors, source)
        raise TopologyError(capped_problems(problems, source)) from None
    problems = early + check_consistency(spec)
    if problems:
        raise TopologyError(capped_problems([f"{source}: {p}" for p in problems], source))
    return spec


def load_topology_spec(path: str | Path) -> TopologySpec:
    """Read and validate the topology file at `path` (at most `MAX_TOPOLOGY_BYTES`)."""
    source = str(path)
    text = read_text_file(path, MAX_TOPOLOGY_BYTES, "topology file", missing="no such topology file")
    return parse_topology_spec(read_yaml(text, source), source)


def dump_topology_spec(spec: TopologySpec) -> str:
    """Render `spec` as YAML in the file format, omitting empty optional fields."""
    data = spec.model_dump(mode="json", exclude_none=True, exclude_defaults=False)
    for section in ("switches", "links", "dtns", "interdomain"):
        for item in data.get(section, []):
            if item.get("description") == "":
                del item["description"]
    for item in data.get("dtns", []):
        if "beyond" in item:  # a remote DTN sits at its interdomain port: the file names none
            del item["switch"], item["port"]
        if not item.get("also_beyond"):
            item.pop("also_beyond", None)
    for item in data.get("sites", []):
        if not item.get("dtns"):
            item.pop("dtns", None)
    if not data.get("interdomain"):
        data.pop("interdomain", None)
    if data.get("description") == "":
        del data["description"]
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
