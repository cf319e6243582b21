"""The two documents an NSI provider publishes besides its Connection Service: the NSA discovery
document (OGF NSI Discovery, nsa v1.0) and the NML topology of its network, written with lxml.

Both follow what OpenNSA publishes (the reference NSI implementation of the AutoGOLE), so that the
aggregators and path finders that read OpenNSA's documents read tsdn's:

- `discovery_document(Nsa(...))`: id `urn:ogf:network:<domain>:nsa`, the provider SOAP interface
  (twice, under the current and the older type name, as OpenNSA does), the topology URL, and the
  uPA role;
- `topology_document(domain, ports, version)`: an `nml:Topology` `urn:ogf:network:<domain>:topology`
  with a BidirectionalPort per STP port made of `<port>-in` and `<port>-out` PortGroups, their VLAN
  ranges (and capacity, in the NML ethernet namespace) under hasInboundPort/hasOutboundPort, an
  isAlias relation to the peer's port for an inter-domain port, and the EVTS.A-GOLE service.

The inputs are plain frozen dataclasses (`Nsa`, `StpPort`); the adapter fills them from tsdn's topology.
"""

from __future__ import annotations

import datetime
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from lxml import etree

from sdn_app.core.nsi import NETWORK, check_domain, network_id, nsa_id

URN_PREFIX = NETWORK
DISCOVERY = "http://schemas.ogf.org/nsi/2014/02/discovery/nsa"
NML = "http://schemas.ogf.org/nml/2013/05/base#"
NSIDEF = "http://schemas.ogf.org/nsi/2013/12/services/definition"
ETHERNET = "http://schemas.ogf.org/nml/2012/10/ethernet"
VLAN_LABEL = ETHERNET + "#vlan"
PROVIDER_INTERFACE = "application/vnd.ogf.nsi.cs.v2.provider+soap"
LEGACY_INTERFACE = "application/vnd.org.ogf.nsi.cs.v2+soap"  # the older name; OpenNSA lists both
TOPOLOGY_INTERFACE = "application/vnd.ogf.nsi.topology.v2+xml"
UPA_FEATURE = "vnd.ogf.nsi.cs.v2.role.uPA"
SERVICE_TYPE = "http://services.ogf.org/nsi/2013/12/descriptions/EVTS.A-GOLE"
SERVICE_NAME = "GLIF Automated GOLE Ethernet VLAN Transfer Service"
GRANULARITY_BPS = 1_000_000  # NSI asks for capacity in whole Mbit/s
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")


@dataclass(frozen=True)
class Nsa:
    """What the discovery document says of this NSA: its domain (the NSA id is
    `urn:ogf:network:<domain>:nsa`), name, software, when it started, where its provider interface and
    topology document are, and the document's version (default: the start time)."""

    domain: str
    name: str
    software_version: str
    start_time: datetime.datetime
    provider_url: str
    topology_url: str
    version: datetime.datetime | None = None

    def __post_init__(self) -> None:
        check_domain(self.domain)
        for what, url in (("provider URL", self.provider_url), ("topology URL", self.topology_url)):
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{what} {url!r} is not an http(s) URL")
            if parts.port is None:
                raise ValueError(f"{what} {url!r} names no port (onsa cannot dial a URL without one)")
        for what, value in (("start time", self.start_time), ("version", self.version)):
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{what} {value.isoformat()} has no time zone")


@dataclass(frozen=True)
class StpPort:
    """A port requesters may name in an STP (`<network>:<name>?vlan=N`): its VLAN range (inclusive), its
    capacity in bit/s and, for an inter-domain port, the URN of the peer network's port it is wired to."""

    name: str
    vlans: tuple[int, int]
    capacity_bps: int
    alias: str | None = None

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"port name {self.name!r} is not letters, digits, '.', '_' and '-'")
        low, high = self.vlans
        if not 1 <= low <= high <= 4094:
            raise ValueError(f"port {self.name}: VLAN range {low}-{high} is not within 1-4094 (low to high)")
        if self.capacity_bps <= 0:
            raise ValueError(f"port {self.name}: capacity {self.capacity_bps} bit/s is not positive")
        if self.alias is not None and not (self.alias.startswith(URN_PREFIX) and len(self.alias) > len(URN_PREFIX)):
            raise ValueError(f"port {self.name}: alias {self.alias!r} is not a {URN_PREFIX}... port URN")


def _time(value: datetime.datetime) -> str:
    if value.tzinfo is None:
        raise ValueError(f"time {value.isoformat()} has no time zone")
    return value.astimezone(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def discovery_document(nsa: Nsa) -> bytes:
    """The NSA discovery document of `nsa` (served at /NSI/discovery.xml), as UTF-8 bytes."""
    root = etree.Element(etree.QName(DISCOVERY, "nsa"), nsmap={"nsi": DISCOVERY}, id=nsa_id(nsa.domain),
                         version=_time(nsa.version or nsa.start_time))
    etree.SubElement(root, "name").text = nsa.name
    etree.SubElement(root, "softwareVersion").text = nsa.software_version
    etree.SubElement(root, "startTime").text = _time(nsa.start_time)
    etree.SubElement(root, "networkId").text = network_id(nsa.domain)
    for kind, href in ((PROVIDER_INTERFACE, nsa.provider_url), (LEGACY_INTERFACE, nsa.provider_url),
                       (TOPOLOGY_INTERFACE, nsa.topology_url)):
        interface = etree.SubElement(root, "interface")
        etree.SubElement(interface, "type").text = kind
        etree.SubElement(interface, "href").text = href
    etree.SubElement(root, "feature", type=UPA_FEATURE)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def _nml(parent: etree._Element, name: str, **attributes: str) -> etree._Element:
    return etree.SubElement(parent, etree.QName(NML, name), **attributes)


def topology_document(domain: str, ports: Iterable[StpPort], version: datetime.datetime,
                      label_swapping: bool = True) -> bytes:
    """The NML topology of `domain`'s network with `ports` (served at /NSI/<domain>:topology.nml.xml), as UTF-8
    bytes; `version` changes whenever the ports do."""
    ports = list(ports)
    names = [port.name for port in ports]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"port names {', '.join(twice)} are given more than once")
    topology_id = network_id(domain)
    root = etree.Element(etree.QName(NML, "Topology"), nsmap={"nml": NML, "nsidef": NSIDEF, "eth": ETHERNET},
                         id=topology_id, version=_time(version))
    _nml(root, "name").text = f"{domain}:topology"
    for port in ports:
        bidirectional = _nml(root, "BidirectionalPort", id=f"{topology_id}:{port.name}")
        _nml(bidirectional, "name").text = port.name
        _nml(bidirectional, "PortGroup", id=f"{topology_id}:{port.name}-in")
        _nml(bidirectional, "PortGroup", id=f"{topology_id}:{port.name}-out")
    # Traffic entering through our -in port leaves the peer through its -out port, and the other way round.
    for relation, suffix, peer_suffix in (("hasInboundPort", "-in", "-out"), ("hasOutboundPort", "-out", "-in")):
        if not ports:
            break
        group = _nml(root, "Relation", type=NML + relation)
        for port in ports:
            port_group = _nml(group, "PortGroup", id=f"{topology_id}:{port.name}{suffix}", encoding=ETHERNET)
            low, high = port.vlans
            _nml(port_group, "LabelGroup", labeltype=VLAN_LABEL).text = f"{low}-{high}" if low != high else str(low)
            if port.alias is not None:
                alias = _nml(port_group, "Relation", type=NML + "isAlias")
                _nml(alias, "PortGroup", id=port.alias + peer_suffix)
            for name, value in (("capacity", port.capacity_bps), ("maximumReservableCapacity", port.capacity_bps),
                                ("minimumReservableCapacity", GRANULARITY_BPS), ("granularity", GRANULARITY_BPS)):
                etree.SubElement(port_group, etree.QName(ETHERNET, name)).text = str(value)
    definition_id = f"{topology_id}:sd:EVTS.A-GOLE"
    definition = etree.SubElement(root, etree.QName(NSIDEF, "serviceDefinition"), id=definition_id)
    etree.SubElement(definition, "name").text = SERVICE_NAME
    etree.SubElement(definition, "serviceType").text = SERVICE_TYPE
    service = _nml(_nml(root, "Relation", type=NML + "hasService"), "SwitchingService",
                   id=f"{topology_id}:switch:EVTS.A-GOLE", labelSwapping="true" if label_swapping else "false",
                   labelType=VLAN_LABEL)
    etree.SubElement(service, etree.QName(NSIDEF, "serviceDefinition"), id=definition_id)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")
