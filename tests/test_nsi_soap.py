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
from tests.nsi_schemas import valid

DATA = Path(__file__).parent / "data" / "nsi"
ACTION = '"http://schemas.ogf.org/nsi/2013/12/connection/service/{}"'


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


# --- the other provider requests, the callbacks and notifications (issue 23) ---

CID = "TS-0123456789"
TSDN = "urn:ogf:network:sc16.example:nsa"
T0 = datetime.datetime(2026, 11, 25, 20, 13, 29, 847470, tzinfo=datetime.UTC)


def body_of(message: bytes) -> etree._Element:
    """The one element in the SOAP body of `message`."""
    return etree.fromstring(message).find(f"{{{nsi_soap.SOAP}}}Body")[0]


def shape(element: etree._Element) -> tuple:
    """`element` as (tag, attributes, text, children), whitespace between elements ignored: two documents with
    the same shape say the same thing whatever their prefixes and indentation."""
    return (element.tag, dict(element.attrib), (element.text or "").strip(),
            tuple(shape(child) for child in element if isinstance(child.tag, str)))


def parsed(name: str, operation: str) -> nsi_soap.Message:
    return nsi_soap.parse((DATA / name).read_bytes(), ACTION.format(operation))


@pytest.mark.parametrize("name, operation, connection_id", [
    ("onsa-reserve-commit.xml", "reserveCommit", "OP-be622e5b97"),
    ("onsa-provision.xml", "provision", "OP-be622e5b97"),
    ("onsa-terminate.xml", "terminate", "OP-be622e5b97"),
])
def test_the_requests_onsa_sends_about_a_connection_name_it(schemas, name, operation, connection_id):
    valid(schemas, (DATA / name).read_bytes())
    message = parsed(name, operation)
    nsi_soap.require_supported(message)
    assert (message.operation, nsi_soap.connection_request(message)) == (operation, connection_id)


@pytest.mark.parametrize("operation", ["reserveCommit", "reserveAbort", "provision", "release", "terminate"])
def test_a_request_without_its_connection_id_is_a_missing_parameter_fault(operation):
    body = (DATA / "onsa-provision.xml").read_bytes().replace(b"ctypes:provision>", f"ctypes:{operation}>".encode())
    for broken in (body.replace(b"<connectionId>OP-be622e5b97</connectionId>", b""),
                   body.replace(b"OP-be622e5b97", b"  ")):
        message = nsi_soap.parse(broken, ACTION.format(operation))
        with pytest.raises(nsi_soap.SoapFault, match=f"{operation}: connectionId is missing") as caught:
            nsi_soap.connection_request(message)
        assert caught.value.error_id == nsi_soap.MISSING_PARAMETER == "00101"
        assert caught.value.header == message.header  # so the fault can echo the correlation id


def test_the_query_onsa_sends_names_its_connection_and_an_empty_one_asks_for_all(schemas):
    body = (DATA / "onsa-query-summary-sync.xml").read_bytes()
    valid(schemas, body)
    message = parsed("onsa-query-summary-sync.xml", "querySummarySync")
    nsi_soap.require_supported(message)
    assert nsi_soap.query_request(message) == nsi_soap.QuerySummary(("OP-47992bcfda",), ())
    everything = nsi_soap.parse(body.replace(b"<connectionId>OP-47992bcfda</connectionId>", b""),
                                ACTION.format("querySummarySync"))
    assert nsi_soap.query_request(everything) == nsi_soap.QuerySummary((), ())
    several = body.replace(b"querySummarySync>", b"querySummary>").replace(
        b"<connectionId>OP-47992bcfda</connectionId>",
        b"<connectionId>A</connectionId><connectionId>B</connectionId>"
        b"<ifModifiedSince>2026-11-25T20:00:00Z</ifModifiedSince>")
    valid(schemas, several)
    query = nsi_soap.query_request(nsi_soap.parse(several, ACTION.format("querySummary")))
    assert query == nsi_soap.QuerySummary(("A", "B"), (), datetime.datetime(2026, 11, 25, 20, tzinfo=datetime.UTC))
    by_global = body.replace(b"<connectionId>OP-47992bcfda</connectionId>",
                             b"<globalReservationId>urn:uuid:1</globalReservationId>")
    valid(schemas, by_global)
    assert nsi_soap.query_request(nsi_soap.parse(by_global, ACTION.format("querySummarySync"))) == \
        nsi_soap.QuerySummary((), ("urn:uuid:1",))
    with pytest.raises(nsi_soap.SoapFault, match="ifModifiedSince 'yesterday'"):
        nsi_soap.query_request(nsi_soap.parse(several.replace(b"2026-11-25T20:00:00Z", b"yesterday"),
                                              ACTION.format("querySummary")))


@pytest.mark.parametrize("operation", ["queryRecursive", "queryNotification", "queryNotificationSync", "queryResult",
                                       "queryResultSync"])
def test_the_queries_tsdn_does_not_offer_are_refused_as_unsupported(operation):
    body = (DATA / "onsa-query-summary-sync.xml").read_bytes().replace(b"querySummarySync>",
                                                                       f"{operation}>".encode())
    message = nsi_soap.parse(body, ACTION.format(operation))
    with pytest.raises(nsi_soap.SoapFault, match=f"{operation} is not supported by this provider") as caught:
        nsi_soap.require_supported(message)
    assert caught.value.error_id == nsi_soap.UNSUPPORTED_PARAMETER == "00102"
    assert caught.value.header.correlation_id == "urn:uuid:861a792a-e90c-11f1-84ff-02fc00000001"


def test_a_reserve_naming_a_connection_is_a_modify_the_caller_can_tell_apart():
    body = (DATA / "onsa-reserve.xml").read_bytes().replace(
        b"<ctypes:reserve>", b"<ctypes:reserve><connectionId>OP-be622e5b97</connectionId>")
    modify = nsi_soap.reserve_request(nsi_soap.parse(body, ACTION.format("reserve")).element)
    assert modify.connection_id == "OP-be622e5b97" and modify.capacity_mbps == 200


@pytest.mark.parametrize("case, mutate, error_id, expected", [
    ("operation in another namespace", lambda b: b.replace(b'xmlns:ctypes="http://schemas.ogf.org/nsi/2013/12/connection/types"',
                                                           b'xmlns:ctypes="http://example.com/other"'), "00100",
     "not the NSI connection types namespace"),
    ("header in another namespace",
     lambda b: b.replace(b'xmlns:header="http://schemas.ogf.org/nsi/2013/12/framework/headers"',
                         b'xmlns:header="http://example.com/h"'), "00101", "no nsiHeader"),
    ("operation of no interface", lambda b: b.replace(b"ctypes:provision>", b"ctypes:reprovision>"), "00102",
     "'reprovision' is not an operation of the NSI provider interface"),
    ("oversized",
     lambda b: b.replace(b"</soap:Envelope>", b"<!--" + b"x" * nsi_soap.MAX_MESSAGE_BYTES + b"--></soap:Envelope>"),
     "00100", "bytes, at most"),
    ("document type", lambda b: b'<?xml version="1.0"?><!DOCTYPE soap:Envelope [<!ENTITY a "aaaa">]>' + b, "00100",
     "document type declaration"),
])
def test_bad_requests_are_faults_with_the_nsi_error_id(case, mutate, error_id, expected):
    body = mutate((DATA / "onsa-provision.xml").read_bytes())
    action = "reprovision" if case == "operation of no interface" else "provision"
    with pytest.raises(nsi_soap.SoapFault, match=expected) as caught:
        nsi_soap.parse(body, ACTION.format(action))
    assert caught.value.error_id == error_id


def summary(**changes) -> nsi_soap.Summary:
    """A committed, provisioned connection with one criteria version, as a query reports it."""
    base = nsi_soap.Summary(
        CID, "urn:ogf:network:onsa.test:nsa",
        nsi_soap.ConnectionStates("ReserveStart", "Provisioned", "Created", True, 0, True),
        (nsi_soap.Criteria(0, T0, T0 + datetime.timedelta(hours=1), 100,
                           "urn:ogf:network:sc16.example:topology:a?vlan=1780",
                           "urn:ogf:network:sc16.example:topology:b?vlan=1781"),),
        "urn:uuid:9e2a1c1e-0000-4000-8000-000000000001", "sc16 demo", 3, 2)
    return dataclasses.replace(base, **changes)


def every_callback() -> dict[str, etree._Element]:
    states = nsi_soap.ConnectionStates("ReserveFailed", "Released", "Created", False, 0)
    why = nsi_soap.ServiceException(TSDN, nsi_soap.CAPACITY_UNAVAILABLE, "only 40 Mbit/s left on a-b", CID)
    notice = nsi_soap.Notice(CID, 4, T0)
    built = {f"{operation}Confirmed": nsi_soap.confirmed(operation, CID)
             for operation in ("reserveCommit", "reserveAbort", "provision", "release", "terminate")}
    built.update({
        "reserveFailed": nsi_soap.failed("reserve", CID, states, why),
        "reserveCommitFailed": nsi_soap.failed("reserveCommit", CID, states, why),
        "querySummaryConfirmed": nsi_soap.query_summary_confirmed(
            [summary(), summary(connection_id="TS-2", criteria=(), global_reservation_id="", description="",
                     notification_id=None, result_id=None)], last_modified=T0),
        "querySummarySyncConfirmed": nsi_soap.query_summary_confirmed([summary()], sync=True),
        "error": nsi_soap.error(why),
        "reserveTimeout": nsi_soap.reserve_timeout(notice, 120, CID, TSDN),
        "dataPlaneStateChange": nsi_soap.data_plane_state_change(notice, True, 0),
        "errorEvent": nsi_soap.error_event(notice, "forcedEnd", CID, TSDN, why),
    })
    built.update({f"errorEvent {event}": nsi_soap.error_event(notice, event, CID, TSDN)
                  for event in ("activateFailed", "deactivateFailed", "dataplaneError")})
    return built


@pytest.mark.parametrize("name", list(every_callback()))
def test_every_callback_is_valid_against_the_ogf_schemas(schemas, name):
    element = every_callback()[name]
    assert etree.QName(element).localname == name.split()[0]
    header = nsi_soap.Header(nsi_soap.REQUESTER_PROTOCOL, "urn:uuid:ae41188c-e90c-11f1-84ff-02fc00000001",
                             "urn:ogf:network:onsa.test:nsa", TSDN)
    message = nsi_soap.envelope(header, element)
    valid(schemas, message)
    # and the requester side (another helper's parser) takes it as the operation it is
    operation = name.split()[0]
    if operation != "querySummarySyncConfirmed":
        assert nsi_soap.parse(message, ACTION.format(operation), nsi_soap.REQUESTER_OPERATIONS).operation == operation


def test_a_query_result_says_what_the_requester_needs_to_know():
    result = every_callback()["querySummaryConfirmed"]
    first, second = result.findall("reservation")
    assert [child.tag for child in first] == ["connectionId", "globalReservationId", "description", "criteria",
                                              "requesterNSA", "connectionStates", "notificationId", "resultId"]
    assert first.findtext("criteria/schedule/endTime") == "2026-11-25T21:13:29.847470Z"
    assert first.find("criteria").get("version") == "0"
    assert first.findtext(f"criteria/{{{nsi_soap.P2P}}}p2ps/capacity") == "100"
    assert [first.findtext(f"connectionStates/{name}") for name in (
        "reservationState", "provisionState", "lifecycleState", "dataPlaneStatus/active",
        "dataPlaneStatus/version", "dataPlaneStatus/versionConsistent")] == [
        "ReserveStart", "Provisioned", "Created", "true", "0", "true"]
    assert [child.tag for child in second] == ["connectionId", "requesterNSA", "connectionStates"]
    assert result.findtext("lastModified") == "2026-11-25T20:13:29.847470Z"
    assert nsi_soap.query_summary_confirmed([]).findall("reservation") == []


def test_what_tsdn_sends_says_exactly_what_opennsa_says_in_the_same_case():
    """OpenNSA's real callbacks, rebuilt from their values with tsdn's builders, are the same documents."""
    notice = nsi_soap.Notice("OP-be622e5b97", 0, T0)
    timeout = nsi_soap.Notice("OP-26db6c400f", 4, datetime.datetime(2026, 11, 25, 20, 12, 42, 594520,
                                                                      tzinfo=datetime.UTC))
    cases = {
        "opennsa-data-plane-state-change.xml": nsi_soap.data_plane_state_change(notice, True, 0, True),
        "opennsa-provision-confirmed.xml": nsi_soap.confirmed("provision", "OP-be622e5b97"),
        "opennsa-reserve-commit-confirmed.xml": nsi_soap.confirmed("reserveCommit", "OP-be622e5b97"),
        "opennsa-reserve-timeout.xml": nsi_soap.reserve_timeout(timeout, 15, "DUD-6cf1a900",
                                                                "urn:ogf:network:opennsa.test:nsa"),
        "opennsa-fault-stp-unavailable.xml": nsi_soap.fault(
            "STP <STP opennsa.test:topology:ps?vlan=1786> not available in specified time span",
            nsi_soap.STP_UNAVAILABLE, "urn:ogf:network:opennsa.test:nsa"),
    }
    for name, ours in cases.items():
        theirs = body_of((DATA / name).read_bytes())
        assert shape(etree.fromstring(etree.tostring(ours))) == shape(theirs), name


def test_a_query_result_reads_like_opennsas():
    theirs = body_of((DATA / "opennsa-query-summary-sync-confirmed.xml").read_bytes())
    for children in theirs.iter("children"):  # OpenNSA lists its (here no) children; tsdn has none to list
        children.getparent().remove(children)
    ours = nsi_soap.query_summary_confirmed([nsi_soap.Summary(
        "OP-cf36e4868a", "urn:ogf:network:theirs.test:nsa",
        nsi_soap.ConnectionStates("ReserveStart", "Released", "Terminated", False, 0, True),
        (nsi_soap.Criteria(0, None, datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC), 100,
                           "urn:ogf:network:opennsa.test:topology:ps?vlan=1797",
                           "urn:ogf:network:opennsa.test:topology:port1?vlan=1798",
                           service_type="http://services.ogf.org/nsi/2013/07/descriptions/EVTS.A-GOLE"),),
        description="curl test", notification_id=1, result_id=0)], sync=True)
    assert shape(etree.fromstring(etree.tostring(ours))) == shape(theirs)


def test_opennsas_fault_carries_the_stp_unavailable_error_id(schemas):
    body = (DATA / "opennsa-fault-stp-unavailable.xml").read_bytes()
    valid(schemas, body)
    assert body_of(body).findtext(f"detail/{{{nsi_soap.FTYPES}}}serviceException/errorId") == nsi_soap.STP_UNAVAILABLE


def test_the_nsi_error_ids_are_the_gfd235_ones():
    ids = {name: value for name, value in vars(nsi_soap).items()
           if name.isupper() and isinstance(value, str) and value.isdigit() and len(value) == 5}
    assert len(set(ids.values())) == len(ids), "two names for one error id"
    assert (ids["MISSING_PARAMETER"], ids["UNSUPPORTED_PARAMETER"], ids["INVALID_TRANSITION"],
            ids["RESERVATION_NONEXISTENT"], ids["UNKNOWN_STP"], ids["STP_UNAVAILABLE"],
            ids["CAPACITY_UNAVAILABLE"]) == ("00101", "00102", "00201", "00203", "00701", "00704", "00705")


@pytest.mark.parametrize("build, expected", [
    (lambda: nsi_soap.failed("reserve", CID, nsi_soap.ConnectionStates("Reserved", "Released", "Created", False, 0),
                             nsi_soap.ServiceException(TSDN, "00500", "x")), "reservation state 'Reserved'"),
    (lambda: nsi_soap.query_summary_confirmed([nsi_soap.Summary(CID, TSDN, nsi_soap.ConnectionStates(
        "ReserveHeld", "Released", "Gone", False, 0))]), "lifecycle state 'Gone'"),
    (lambda: nsi_soap.Criteria(0, None, None, 0, "a", "b"), "capacity 0"),
    (lambda: nsi_soap.Criteria(0, datetime.datetime(2026, 1, 1), None, 10, "a", "b"), "has no time zone"),
    (lambda: nsi_soap.Criteria(0, None, None, 10, "a", "b", directionality="Both"), "directionality 'Both'"),
    (lambda: nsi_soap.ServiceException(TSDN, "704", "no"), "error id '704'"),
    (lambda: nsi_soap.confirmed("reserve", CID), "'reserve' has no generic confirmation"),
    (lambda: nsi_soap.failed("provision", CID, summary().states, nsi_soap.ServiceException(TSDN, "00500", "x")),
     "'provision' has no failure callback"),
    (lambda: nsi_soap.error_event(nsi_soap.Notice(CID, 1, T0), "linkDown", CID, TSDN), "error event 'linkDown'"),
    (lambda: nsi_soap.data_plane_state_change(nsi_soap.Notice(CID, 1, datetime.datetime(2026, 1, 1)), True, 0),
     "has no time zone"),
])
def test_a_callback_from_bad_values_is_refused_naming_the_value(build, expected):
    with pytest.raises(ValueError, match=expected):
        build()
