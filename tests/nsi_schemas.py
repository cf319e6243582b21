"""The OGF's NSI CS 2.0 schemas (copied into tests/data/nsi/schemas) as a fixture, and the check every
NSI test makes of a SOAP message: its envelope, its header and body elements and any fault's
serviceException are what the schemas accept."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from sdn_app.web import nsi_soap

SCHEMAS = (Path(__file__).resolve().parent / "data" / "nsi" / "schemas" / "ConnectionService")


@pytest.fixture(scope="session")
def schemas():
    """The envelope schema, and the NSI types, headers and point-to-point service together."""
    xmlschema = pytest.importorskip("xmlschema", reason="schema validation needs xmlschema (a test dependency)")
    types = xmlschema.XMLSchema([str(SCHEMAS / name) for name in (
        "ogf_nsi_connection_types_v2_0.xsd", "ogf_nsi_framework_headers_v2_0.xsd", "ogf_nsi_services_p2p_v2_0.xsd")])
    return xmlschema.XMLSchema(str(SCHEMAS / "envelope.xsd")), types


def valid(schemas, message: bytes) -> etree._Element:
    """`message` is a SOAP envelope whose header, body and any fault's serviceException the OGF schemas
    accept (its root back)."""
    envelope, types = schemas
    root = etree.fromstring(message)
    envelope.validate(root)
    for part in (*root.find(f"{{{nsi_soap.SOAP}}}Header"), *root.find(f"{{{nsi_soap.SOAP}}}Body")):
        if etree.QName(part).namespace != nsi_soap.SOAP:
            types.validate(part)
    fault = root.find(f"{{{nsi_soap.SOAP}}}Body/{{{nsi_soap.SOAP}}}Fault")
    if fault is not None:
        for exception in fault.iter(f"{{{nsi_soap.FTYPES}}}serviceException"):
            types.validate(exception)
    return root
