"""The NSA discovery and NML topology documents (sdn_app.web.nsi_documents): valid against the OGF
discovery schema, the same documents OpenNSA publishes for the same network, read by OpenNSA's own
parsers (OpenNSA's source and venv from its recipe: tests/nsi_peers.py), and bad input refused naming what is wrong."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from pathlib import Path

import pytest
from lxml import etree

from sdn_app.core.errors import InvalidArgument
from sdn_app.web import nsi_documents as documents

xmlschema = pytest.importorskip("xmlschema", reason="schema validation needs xmlschema (a test dependency)")

DATA = Path(__file__).parent / "data" / "nsi"
NSA_SCHEMA = DATA / "schemas" / "DiscoveryService" / "nsa-document" / "ogf_nsi_discovery_nsa_v1_0.xsd"
STARTED = datetime.datetime(2026, 11, 25, 20, 12, 17, tzinfo=datetime.UTC)
OPENNSA = documents.Nsa("opennsa.test", "opennsa.test", "OpenNSA-0-git", STARTED,
                        "http://127.0.0.1:9080/NSI/services/CS2",
                        "http://127.0.0.1:9080/NSI/opennsa.test:topology.nml.xml")
OPENNSA_PORTS = [documents.StpPort(name, (1780, 1799), 1_000_000_000) for name in ("ps", "port1", "port2")]
PEER_PORT = "urn:ogf:network:opennsa.test:topology:ps"
SC16_PORTS = [documents.StpPort("dtn1", (1780, 1799), 10_000_000_000),
              documents.StpPort("wan1", (100, 100), 1_000_000_000, alias=PEER_PORT)]


def shape(element: etree._Element) -> tuple:
    """`element` as (tag, attributes, text, children), whitespace between elements ignored."""
    return (element.tag, dict(element.attrib), (element.text or "").strip(),
            tuple(shape(child) for child in element if isinstance(child.tag, str)))


def test_the_discovery_document_is_valid_and_is_the_one_opennsa_publishes_for_the_same_nsa():
    ours = etree.fromstring(documents.discovery_document(OPENNSA))
    xmlschema.XMLSchema(str(NSA_SCHEMA)).validate(ours)
    assert shape(ours) == shape(etree.parse(str(DATA / "opennsa-discovery.xml")).getroot())


def test_the_discovery_document_names_this_nsa_its_network_and_where_to_reach_them():
    nsa = documents.Nsa("sc16.example", "tsdn sc16", "tsdn-0.23", STARTED, "https://ctl.sc16.example:8443/NSI/services/CS2",
                        "https://ctl.sc16.example:8443/NSI/sc16.example:topology.nml.xml",
                        version=STARTED + datetime.timedelta(minutes=5))
    root = etree.fromstring(documents.discovery_document(nsa))
    xmlschema.XMLSchema(str(NSA_SCHEMA)).validate(root)
    assert (root.get("id"), root.get("version")) == ("urn:ogf:network:sc16.example:nsa", "2026-11-25T20:17:17Z")
    assert root.findtext("networkId") == "urn:ogf:network:sc16.example:topology"
    assert {i.findtext("type"): i.findtext("href") for i in root.findall("interface")}[
        "application/vnd.ogf.nsi.cs.v2.provider+soap"] == "https://ctl.sc16.example:8443/NSI/services/CS2"
    assert root.find("feature").get("type") == "vnd.ogf.nsi.cs.v2.role.uPA"


def without_extras(element: etree._Element) -> etree._Element:
    """`element` without what tsdn adds to OpenNSA's topology (the ethernet capacities and port encodings) and
    with OpenNSA's older service type, to compare the rest."""
    element = etree.fromstring(etree.tostring(element))
    for extra in [e for e in element.iter() if etree.QName(e).namespace == documents.ETHERNET]:
        extra.getparent().remove(extra)
    for port_group in element.iter(f"{{{documents.NML}}}PortGroup"):
        port_group.attrib.pop("encoding", None)
    for service_type in element.iter("serviceType"):
        service_type.text = documents.SERVICE_TYPE
    return element


def test_the_topology_is_the_one_opennsa_publishes_for_the_same_ports_plus_capacities():
    ours = etree.fromstring(documents.topology_document("opennsa.test", OPENNSA_PORTS, STARTED))
    theirs = etree.parse(str(DATA / "opennsa-topology.nml.xml")).getroot()
    assert shape(without_extras(ours)) == shape(without_extras(theirs))
    capacities = ours.findall(f".//{{{documents.NML}}}PortGroup/{{{documents.ETHERNET}}}capacity")
    assert [c.text for c in capacities] == ["1000000000"] * 6  # each port, in and out


def test_an_inter_domain_port_is_an_alias_of_the_peers_port_in_the_other_direction():
    root = etree.fromstring(documents.topology_document("sc16.example", SC16_PORTS, STARTED))
    nml = f"{{{documents.NML}}}"
    aliases = {}
    for relation in root.findall(f"{nml}Relation"):
        for port_group in relation.findall(f"{nml}PortGroup"):
            alias = port_group.find(f"{nml}Relation[@type='{documents.NML}isAlias']/{nml}PortGroup")
            aliases[port_group.get("id")] = None if alias is None else alias.get("id")
            assert port_group.findtext(f"{nml}LabelGroup") == ("1780-1799" if "dtn1" in port_group.get("id") else "100")
    assert aliases == {"urn:ogf:network:sc16.example:topology:dtn1-in": None,
                       "urn:ogf:network:sc16.example:topology:dtn1-out": None,
                       "urn:ogf:network:sc16.example:topology:wan1-in": PEER_PORT + "-out",
                       "urn:ogf:network:sc16.example:topology:wan1-out": PEER_PORT + "-in"}


# Run with OpenNSA's interpreter: what OpenNSA's discovery fetcher and NML parser make of our documents.
READ_WITH_OPENNSA = """
import json, sys
from xml.etree import ElementTree as ET
from opennsa import constants
from opennsa.topology import nml, nmlxml
from opennsa.discovery.bindings import discovery
network = nml.Network
# OpenNSA's parser hands dict views where its Network asserts lists (Python 3); the fix is not ours to make.
nmlxml.nml.Network = lambda id_, name, inbound, outbound, bidirectional, *rest: network(
    id_, name, list(inbound), list(outbound), bidirectional, *rest)
topology = nmlxml.parseNMLTopology(ET.parse(sys.argv[1]).getroot())
nsa = discovery.parse(open(sys.argv[2], "rb").read())
print(json.dumps({
    "network": topology.id_,
    "ports": {p.name: [p.inbound_port.label().labelValue(), p.inbound_port.remote_port, p.outbound_port.remote_port]
              for p in topology.bidirectional_ports},
    "nsa": nsa.id_,
    "provider": [i.href for i in nsa.interface if i.type_ == constants.CS2_PROVIDER],
    "networks": list(nsa.networkId),
}))
"""


def test_opennsas_own_parsers_read_our_documents(tmp_path, opennsa_build):
    source, python = opennsa_build.source, opennsa_build.python
    nsa = documents.Nsa("sc16.example", "tsdn", "tsdn", STARTED, "http://127.0.0.1:9081/NSI/services/CS2",
                        "http://127.0.0.1:9081/NSI/sc16.example:topology.nml.xml")
    (tmp_path / "topology.xml").write_bytes(documents.topology_document("sc16.example", SC16_PORTS, STARTED))
    (tmp_path / "nsa.xml").write_bytes(documents.discovery_document(nsa))
    done = subprocess.run([str(python), "-c", READ_WITH_OPENNSA, str(tmp_path / "topology.xml"),
                           str(tmp_path / "nsa.xml")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(source)}, check=False)
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read == {
        "network": "sc16.example:topology",
        "ports": {"dtn1": ["1780-1799", None, None],
                  "wan1": ["100", "opennsa.test:topology:ps-out", "opennsa.test:topology:ps-in"]},
        "nsa": "urn:ogf:network:sc16.example:nsa",
        "provider": ["http://127.0.0.1:9081/NSI/services/CS2"],
        "networks": ["urn:ogf:network:sc16.example:topology"]}


@pytest.mark.parametrize("build, expected", [
    (lambda: documents.StpPort("dtn 1", (1780, 1799), 10**9), "port name 'dtn 1'"),
    (lambda: documents.StpPort("dtn1", (1799, 1780), 10**9), "VLAN range 1799-1780"),
    (lambda: documents.StpPort("dtn1", (0, 10), 10**9), "VLAN range 0-10"),
    (lambda: documents.StpPort("dtn1", (1, 4095), 10**9), "VLAN range 1-4095"),
    (lambda: documents.StpPort("dtn1", (1, 10), 0), "capacity 0 bit/s"),
    (lambda: documents.StpPort("wan1", (1, 10), 10**9, alias="opennsa.test:topology:ps"), "alias 'opennsa.test"),
    (lambda: documents.topology_document("sc16.example", [SC16_PORTS[0], SC16_PORTS[0]], STARTED),
     "port names dtn1 are given more than once"),
    (lambda: documents.topology_document("sc16.example", SC16_PORTS, datetime.datetime(2026, 1, 1)), "no time zone"),
    (lambda: documents.Nsa("x.test", "x", "v", STARTED, "http://h/NSI/services/CS2", "http://h:80/t.xml"),
     "provider URL 'http://h/NSI/services/CS2' names no port"),
    (lambda: documents.Nsa("x.test", "x", "v", STARTED, "http://h:80/cs", "ftp://h:21/t.xml"),
     "topology URL 'ftp://h:21/t.xml' is not an http"),
    (lambda: documents.Nsa("x.test", "x", "v", datetime.datetime(2026, 1, 1), "http://h:80/cs", "http://h:80/t"),
     "start time 2026-01-01T00:00:00 has no time zone"),
])
def test_bad_document_inputs_are_refused_naming_what_is_wrong(build, expected):
    with pytest.raises(ValueError, match=expected.replace("?", r"\?")):
        build()


def test_a_domain_that_cannot_name_an_nsi_network_is_refused():
    with pytest.raises(InvalidArgument, match="'sc16 example' cannot name an NSI network"):
        documents.topology_document("sc16 example", SC16_PORTS, STARTED)
