"""The NSI CS 2.0 message layer (sdn_app.web.nsi_soap): real onsa and OpenNSA messages read as
they were meant, every message tsdn writes valid against the OGF's own schemas, and bad input
refused with a fault that says why."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest
from lxml import etree

from sdn_app.web import nsi_soap

xmlschema = pytest.importorskip("xmlschema", reason="schema validation needs xmlschema (a test dependency)")

DATA = Path(__file__).parent / "data" / "nsi"
SCHEMAS = (DATA / "schemas" / "ConnectionService").resolve()
ACTION = '"http://schemas.ogf.org/nsi/2013/12/connection/service/{}"'


@pytest.fixture(scope="module")
def schemas():
    """The OGF schemas: the envelope, and the NSI types, headers and point-to-point service together."""
    nsi = xmlschema.XMLSchema([str(SCHEMAS / name) for name in (
        "ogf_nsi_connection_types_v2_0.xsd", "ogf_nsi_framework_headers_v2_0.xsd", "ogf_nsi_services_p2p_v2_0.xsd")])
    return xmlschema.XMLSchema(str(SCHEMAS / "envelope.xsd")), nsi


def valid(schemas, message: bytes) -> None:
    """`message` is a SOAP envelope whose header and body elements the OGF schemas accept."""
    envelope, nsi = schemas
    root = etree.fromstring(message)
    envelope.validate(root)
    for part in (*root.find(f"{{{nsi_soap.SOAP}}}Header"), *root.find(f"{{{nsi_soap.SOAP}}}Body")):
        if etree.QName(part).namespace != nsi_soap.SOAP:
            nsi.validate(part)
    fault = root.find(f"{{{nsi_soap.SOAP}}}Body/{{{nsi_soap.SOAP}}}Fault")
    if fault is not None:
        for exception in fault.iter(f"{{{nsi_soap.FTYPES}}}serviceException"):
            nsi.validate(exception)


def test_the_reserve_onsa_sends_reads_as_it_was_meant(schemas):
    body = (DATA / "onsa-reserve.xml").read_bytes()
    valid(schemas, body)
    message = nsi_soap.parse(body, ACTION.format("reserve"))
    assert message.operation == "reserve"
    assert message.header == nsi_soap.Header(nsi_soap.PROVIDER_PROTOCOL,
                                             "urn:uuid:adf04b1e-e90c-11f1-84ff-02fc00000001",
                                             "urn:ogf:network:onsa.test:nsa", "urn:ogf:network:opennsa.test:nsa",
                                             "http://127.0.0.1:7080/NSI/services/RequesterService2")
    reserve = nsi_soap.reserve_request(message.element)
    assert (reserve.capacity_mbps, reserve.source_stp, reserve.dest_stp) == (
        200, "urn:ogf:network:opennsa.test:topology:ps?vlan=1784",
        "urn:ogf:network:opennsa.test:topology:port2?vlan=1785")
    assert reserve.start is None and reserve.end == datetime.datetime(2026, 11, 25, 21, 13, 29, 227872,
                                                                      tzinfo=datetime.UTC)
    assert reserve.connection_id == "" and reserve.version == 0 and reserve.directionality == "Bidirectional"


def test_what_tsdn_writes_is_valid_against_the_ogf_schemas_and_reads_back(schemas):
    request = nsi_soap.parse((DATA / "onsa-reserve.xml").read_bytes(), ACTION.format("reserve"))
    reserve = nsi_soap.reserve_request(request.element)
    reply = nsi_soap.reply_header(request.header)
    assert reply.reply_to is None and reply.correlation_id == request.header.correlation_id
    for body in (nsi_soap.reserve_response("TS-0123456789"), nsi_soap.acknowledgment(),
                 nsi_soap.reserve_confirmed("TS-0123456789", reserve, 0),
                 nsi_soap.fault("STP urn:ogf:network:x:topology:p?vlan=5 is not a port of this network", "00701",
                                "urn:ogf:network:sc16.example:nsa", "TS-0123456789")):
        valid(schemas, nsi_soap.envelope(reply, body))
    callback = nsi_soap.reply_header(request.header, nsi_soap.REQUESTER_PROTOCOL)
    confirmed = nsi_soap.envelope(callback, nsi_soap.reserve_confirmed("TS-0123456789", reserve, 0))
    again = etree.fromstring(confirmed).find(f"{{{nsi_soap.SOAP}}}Body/{{{nsi_soap.CTYPES}}}reserveConfirmed")
    assert nsi_soap.reserve_request(again) == dataclasses.replace(reserve, connection_id="TS-0123456789")


def test_opennsas_confirmation_reads_like_ours():
    root = etree.fromstring((DATA / "opennsa-reserve-confirmed.xml").read_bytes())
    confirmed = root.find(f"{{{nsi_soap.SOAP}}}Body/{{{nsi_soap.CTYPES}}}reserveConfirmed")
    reserve = nsi_soap.reserve_request(confirmed)
    assert (reserve.connection_id, reserve.capacity_mbps) == ("OP-be622e5b97", 200)


@pytest.mark.parametrize("case, body, action, expected", [
    ("not xml", b"<soap:Envelope", "reserve", "not well-formed XML"),
    ("entity", b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><x>&e;</x>', "reserve",
     "document type declaration"),
    ("not soap", b"<reserve/>", "reserve", "not a SOAP 1.1 Envelope"),
    ("no header", None, "reserve", "no nsiHeader"),
    ("wrong action", None, "provision", "does not name the operation"),
    ("unquoted wrong", None, "", "SOAPAction"),
])
def test_bad_messages_are_faults_that_say_why(case, body, action, expected):
    good = (DATA / "onsa-reserve.xml").read_bytes()
    if body is None:
        body = good if case != "no header" else good.replace(b"header:nsiHeader", b"header:other")
    with pytest.raises(nsi_soap.SoapFault, match=expected):
        nsi_soap.parse(body, ACTION.format(action) if action else None)


def test_a_reserve_without_what_it_needs_names_the_field():
    good = (DATA / "onsa-reserve.xml").read_bytes()
    for old, new, expected in ((b"<capacity>200</capacity>", b"<capacity>lots</capacity>", "capacity 'lots'"),
                               (b"<sourceSTP>", b"<sourceSTPx>", "sourceSTP is missing"),
                               (b"2026-11-25T21:13:29.227872+00:00", b"tomorrow", "endTime 'tomorrow'")):
        broken = good.replace(old, new).replace(old.replace(b"<", b"</"), new.replace(b"<", b"</"))
        message = nsi_soap.parse(broken, ACTION.format("reserve"))
        with pytest.raises(nsi_soap.SoapFault, match=expected):
            nsi_soap.reserve_request(message.element)
