"""The topology file format (YAML): schema, loading, and errors that name file and field.

A file declares switches (name, dpid, ports), links (two ends by switch and port, capacity
per direction, optional latency, kind), DTNs (switch port, IPv4, MAC, NIC speed, NUMA node)
and sites (coordinates and member switches, for the map). `load_topology_spec` returns a
fully checked `TopologySpec` or raises `TopologyError` listing every problem as
`FILE: field.path: what is wrong`; nothing is half-loaded.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from sdn_app.core.errors import InvalidArgument, TopologyError
from sdn_app.core.units import parse_bandwidth

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
MAX_DPID = 2**64 - 1
MAX_PORT = 0xFFFFFF00  # OpenFlow 1.3 OFPP_MAX: higher numbers are reserved ports
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_RANGE_RE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
MAX_PORTS_PER_SWITCH = 4096


def _bandwidth(value: Any) -> int:
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
                "dpid", "cannot read '{value}' as a datapath id (42, 0x2a or 00:00:00:00:00:00:00:2a)",
                {"value": value},
            ) from None
    else:
        raise PydanticCustomError("dpid", "expected an integer or hex datapath id")
    if not 1 <= number <= MAX_DPID:
        raise PydanticCustomError("dpid", "datapath id must be between 1 and 2^64-1")
    return number


def _ports(value: Any) -> list[int]:
    """Accept a list of port numbers and "first-last" ranges."""
    if not isinstance(value, list):
        raise PydanticCustomError("ports", "expected a list of port numbers or ranges like 1-32")
    ports: list[int] = []
    for item in value:
        if isinstance(item, int) and not isinstance(item, bool):
            ports.append(item)
            continue
        match = _RANGE_RE.match(item) if isinstance(item, str) else None
        if not match:
            raise PydanticCustomError("ports", "cannot read '{item}' as a port or range", {"item": item})
        first, last = int(match[1]), int(match[2])
        if first > last:
            raise PydanticCustomError("ports", "range '{item}' runs backwards", {"item": item})
        if last - first >= MAX_PORTS_PER_SWITCH:
            raise PydanticCustomError("ports", "range '{item}' is too large", {"item": item})
        ports.extend(range(first, last + 1))
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


Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Bandwidth = Annotated[int, BeforeValidator(_bandwidth)]
Dpid = Annotated[int, BeforeValidator(_dpid)]
Ports = Annotated[list[int], BeforeValidator(_ports)]
Mac = Annotated[str, BeforeValidator(_mac)]
IPv4 = Annotated[str, BeforeValidator(_ipv4)]
Port = Annotated[int, Field(ge=1, le=MAX_PORT, strict=True)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SwitchSpec(_Strict):
    """One OpenFlow switch."""

    name: Name
    dpid: Dpid
    ports: Ports
    description: str = ""


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
    description: str = ""

    @property
    def label(self) -> str:
        """The link's name, or `a:port--b:port` when the file gives none."""
        return self.name or f"{self.a}:{self.a_port}--{self.b}:{self.b_port}"


class DtnSpec(_Strict):
    """One data transfer node attached to a switch port."""

    name: Name
    switch: Name
    port: Port
    ipv4: IPv4
    mac: Mac
    nic_speed: Bandwidth
    numa_node: Annotated[int, Field(ge=-1, le=255, strict=True)] = -1
    description: str = ""


class SiteSpec(_Strict):
    """A place on the map (booth or WAN site) and the switches it holds."""

    name: Annotated[str, Field(min_length=1, max_length=80)]
    lat: Annotated[float, Field(ge=-90, le=90)] | None = None
    lon: Annotated[float, Field(ge=-180, le=180)] | None = None
    kind: Literal["booth", "wan", "hub"] = "wan"
    switches: list[Name] = []


class TopologySpec(_Strict):
    """A whole WAN: the content of one topology file."""

    name: Name
    description: str = ""
    switches: Annotated[list[SwitchSpec], Field(min_length=1)]
    links: list[LinkSpec] = []
    dtns: list[DtnSpec] = []
    sites: list[SiteSpec] = []


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    keys = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in keys:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
            )
        keys.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def read_yaml(text: str, source: str) -> Any:
    """Parse YAML `text`; a syntax error or repeated key becomes `InvalidArgument` with the line."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown place"
        raise InvalidArgument(f"{source}: not valid YAML at {where}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise InvalidArgument(f"{source}: not valid YAML: {exc}") from None


def field_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location as `links[3].b_port`."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(top level)"


def describe_validation_error(exc: ValidationError, source: str) -> list[str]:
    """Turn pydantic's errors into `source: field.path: message` lines."""
    problems = []
    for error in exc.errors():
        loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif error["type"] == "missing":
            message = "required field is missing"
        elif error["type"] == "string_pattern_mismatch":
            message = f"{error.get('input')!r} is not a valid name (letters, digits, '.', '_', '-'; at most 63)"
        problems.append(f"{source}: {field_path(loc)}: {message}")
    return problems


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

    ips: dict[str, str] = {}
    macs: dict[str, str] = {}
    for i, dtn in enumerate(spec.dtns):
        where = f"dtns[{i}]"
        claim_name(dtn.name, f"{where}.name")
        claim_port(dtn.switch, dtn.port, f"{where}.port")
        for value, seen, field in ((dtn.ipv4, ips, "ipv4"), (dtn.mac, macs, "mac")):
            if value in seen:
                problems.append(f"{where}.{field}: {value} is already used by {seen[value]}")
            else:
                seen[value] = f"dtn {dtn.name}"

    site_of: dict[str, str] = {}
    site_names: set[str] = set()
    for i, site in enumerate(spec.sites):
        if site.name in site_names:
            problems.append(f"sites[{i}].name: site {site.name!r} is declared twice")
        site_names.add(site.name)
        if (site.lat is None) != (site.lon is None):
            problems.append(f"sites[{i}]: give both lat and lon, or neither")
        for j, member in enumerate(site.switches):
            if member not in ports:
                problems.append(f"sites[{i}].switches[{j}]: switch {member!r} is not declared")
            elif member in site_of:
                problems.append(f"sites[{i}].switches[{j}]: switch {member} is already in site {site_of[member]!r}")
            else:
                site_of[member] = site.name
    return problems


def parse_topology_spec(data: Any, source: str) -> TopologySpec:
    """Validate already-parsed YAML data; raise `TopologyError` naming every problem."""
    if not isinstance(data, dict):
        raise TopologyError([f"{source}: (top level): expected a mapping with name, switches, links, dtns, sites"])
    try:
        spec = TopologySpec.model_validate(data)
    except ValidationError as exc:
        raise TopologyError(describe_validation_error(exc, source)) from None
    problems = check_consistency(spec)
    if problems:
        raise TopologyError([f"{source}: {p}" for p in problems])
    return spec


def load_topology_spec(path: str | Path) -> TopologySpec:
    """Read and validate the topology file at `path`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidArgument(f"{source}: no such topology file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"{source}: cannot read topology file: {exc}") from None
    return parse_topology_spec(read_yaml(text, source), source)


def dump_topology_spec(spec: TopologySpec) -> str:
    """Render `spec` as YAML in the file format, omitting empty optional fields."""
    data = spec.model_dump(mode="json", exclude_none=True, exclude_defaults=False)
    for section in ("switches", "links", "dtns"):
        for item in data.get(section, []):
            if item.get("description") == "":
                del item["description"]
    if data.get("description") == "":
        del data["description"]
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
