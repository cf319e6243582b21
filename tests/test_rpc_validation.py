"""Hostile and careless input at the edges of the controller, as a caller meets it.

- RPC fields past their limits (docs/api.md, "Limits") are INVALID_ARGUMENT naming the field and
  the limit, and change nothing; TakeJobs for a DTN the topology lacks is NOT_FOUND at once.
- Bearer tokens never cross a network in plaintext unless the operator says so
  (`--allow-plaintext-tokens`), and then every start says so loudly.
- Bad TLS material is exit 2 naming the file and the reason, before anything is opened.

Every call goes to a real controller on a loopback port (raw stubs: no retries, exact codes).
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from northbound.auth import plaintext_token_addresses
from northbound.proto.tsdn.v1 import agent_pb2 as apb
from northbound.proto.tsdn.v1 import agent_pb2_grpc as agent_grpc
from northbound.proto.tsdn.v1 import bandwidth_pb2 as bpb
from northbound.proto.tsdn.v1 import bandwidth_pb2_grpc as bandwidth_grpc
from northbound.proto.tsdn.v1 import transfer_pb2 as tpb
from northbound.proto.tsdn.v1 import transfer_pb2_grpc as transfer_grpc
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.reports import Pinning, RateReport, StreamRate
from tests.conftest import TOKENS
from tsdn.cli import main

G = 10**9
SRC, DST = "caltech-a-dtn1", "caltech-b-dtn1"
WAIT = 10.0
Code = grpc.StatusCode


def bearer(principal: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[principal][1]}"),)


class Stubs:
    """Raw stubs of one controller, each call with a principal's token."""

    def __init__(self, address: str):
        self.channel = grpc.insecure_channel(address)
        self.bandwidth = bandwidth_grpc.BandwidthServiceStub(self.channel)
        self.agents = agent_grpc.AgentServiceStub(self.channel)
        self.transfers = transfer_grpc.TransferServiceStub(self.channel)

    def call(self, method, request, principal: str):
        return method(request, timeout=WAIT, metadata=bearer(principal))

    def refusal(self, method, request, principal: str) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as info:
            self.call(method, request, principal)
        return info.value


@pytest.fixture
def stubs(controller):
    stubs = Stubs(controller.address)
    yield stubs
    stubs.channel.close()


@pytest.fixture
def starting(stubs) -> tpb.Transfer:
    """A transfer from SRC to DST waiting for its receiver (both agents registered by hand)."""
    for dtn in (SRC, DST):
        stubs.call(stubs.agents.RegisterAgent, apb.RegisterAgentRequest(dtn=dtn), "dtn-agent")
    transfer = stubs.call(stubs.transfers.StartTransfer,
                          tpb.StartTransferRequest(src_dtn=SRC, dst_dtn=DST, bandwidth_bps=10 * G, size_bytes=10**9),
                          "rucio")
    assert transfer.state == tpb.TRANSFER_STARTING
    return transfer


def rate_report(**fields) -> apb.RateReport:
    values = {"start": 0.0, "end": 1.0, "bits_per_second": 9.5 * G, "bytes_total": 10**9, "engine": "builtin"}
    return apb.RateReport(**{**values, **fields})


# -- TakeJobs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtn", "code", "says"), [
    ("no-such-dtn", Code.NOT_FOUND, "'no-such-dtn' is not a DTN of topology sc16"),
    ("", Code.INVALID_ARGUMENT, "dtn: required"),
    ("d" * 10_000, Code.INVALID_ARGUMENT, "dtn: 10000 characters, at most 128"),
])
def test_take_jobs_for_a_dtn_that_cannot_have_jobs_is_refused_at_once(stubs, dtn, code, says):
    # The deadline is long: the refusal must come at once, not when the caller gives up.
    stream = stubs.agents.TakeJobs(apb.TakeJobsRequest(dtn=dtn), timeout=WAIT, metadata=bearer("dtn-agent"))
    with pytest.raises(grpc.RpcError) as info:
        next(stream)
    assert info.value.code() is code
    assert says in info.value.details()


def test_take_jobs_for_a_known_dtn_stays_open(stubs):
    stream = stubs.agents.TakeJobs(apb.TakeJobsRequest(dtn=SRC), timeout=1.0, metadata=bearer("dtn-agent"))
    with pytest.raises(grpc.RpcError) as info:
        next(stream)
    assert info.value.code() is Code.DEADLINE_EXCEEDED  # no job yet: it waits, as an agent's stream should


# -- lengths ----------------------------------------------------------------------------------------------------


def test_a_10kb_request_id_starts_no_transfer(stubs, starting):
    request = tpb.StartTransferRequest(src_dtn=SRC, dst_dtn=DST, bandwidth_bps=G, size_bytes=10**9,
                                       request_id="r" * 10_000)
    error = stubs.refusal(stubs.transfers.StartTransfer, request, "rucio")
    assert error.code() is Code.INVALID_ARGUMENT
    assert error.details() == "request_id: 10000 characters, at most 128"
    listed = stubs.call(stubs.transfers.ListTransfers, tpb.ListTransfersRequest(), "noc")
    assert [t.name for t in listed.transfers] == [starting.name]


def test_a_10kb_listening_host_hands_out_no_send_job(stubs, starting):
    request = apb.TransferReport(transfer=starting.name, dtn=DST, role=apb.RECEIVE, listening_port=5201,
                                 listening_host="h" * 10_000)
    error = stubs.refusal(stubs.agents.ReportTransfer, request, "dtn-agent")
    assert error.code() is Code.INVALID_ARGUMENT
    assert error.details() == "listening_host: 10000 characters, at most 253"
    for host in ("10.0.0.1; rm -rf /", "not a host"):
        error = stubs.refusal(stubs.agents.ReportTransfer, apb.TransferReport(
            transfer=starting.name, dtn=DST, role=apb.RECEIVE, listening_port=5201, listening_host=host), "dtn-agent")
        assert "is neither an IP address nor a host name" in error.details()
    assert stubs.call(stubs.transfers.GetTransfer, tpb.GetTransferRequest(name=starting.name),
                      "rucio").state == tpb.TRANSFER_STARTING


@pytest.mark.parametrize(("method", "request_", "field"), [
    ("GetReservation", bpb.GetReservationRequest(name="n" * 100_000), "name"),
    ("DeleteReservation", bpb.DeleteReservationRequest(name="n" * 100_000), "name"),
    ("ListReservations", bpb.ListReservationsRequest(dtn="n" * 100_000), "dtn"),
    ("ListReservations", bpb.ListReservationsRequest(owner="n" * 100_000), "owner"),
    ("CreateReservation", bpb.CreateReservationRequest(source_dtn="n" * 100_000, destination_dtn=DST,
                                                       bandwidth_bps=G), "source_dtn"),
])
def test_over_long_names_are_named_not_echoed(stubs, method, request_, field):
    error = stubs.refusal(getattr(stubs.bandwidth, method), request_, "noc")
    assert error.code() is Code.INVALID_ARGUMENT
    assert error.details() == f"{field}: 100000 characters, at most 128"


def test_a_refusal_quoting_a_long_unicode_value_still_reaches_the_caller(stubs, starting):
    # The desk quotes the bad path; 4000 characters of 4-byte UTF-8 would not fit the trailers.
    request = tpb.StartTransferRequest(src_dtn=SRC, dst_dtn=DST, bandwidth_bps=G, destination="/in",
                                       files=tpb.FileList(paths=["\U0001f4be" * 4000]))
    error = stubs.refusal(stubs.transfers.StartTransfer, request, "rucio")
    assert error.code() is Code.INVALID_ARGUMENT  # not RESOURCE_EXHAUSTED from the client's transport
    assert error.details().startswith("files: ") and error.details().endswith("(message cut)")


def test_max_hops_beyond_any_path_is_refused(stubs):
    request = bpb.CreateReservationRequest(source_dtn=SRC, destination_dtn=DST, bandwidth_bps=G, max_hops=4_000_000_000)
    error = stubs.refusal(stubs.bandwidth.CreateReservation, request, "rucio")
    assert error.code() is Code.INVALID_ARGUMENT
    assert error.details() == "max_hops: 4000000000 is outside 0..1024"
    assert stubs.call(stubs.bandwidth.ListReservations, bpb.ListReservationsRequest(), "noc").reservations == []


@pytest.mark.parametrize(("nic", "says"), [
    (apb.AgentNic(name="eth0", numa_node=5000), "facts.nics[0].numa_node: 5000 is outside -1..1023"),
    (apb.AgentNic(name="eth0", speed_bps=2**63), "facts.nics[0].speed_bps"),
    (apb.AgentNic(name="e" * 200), "facts.nics[0].name: 200 characters, at most 128"),
    (apb.AgentNic(name="eth0", local_cpus=[70_000]), "facts.nics[0].local_cpus[0]: 70000 is outside 0..65535"),
    (apb.AgentNic(name="eth0", warnings=["w" * 5000]), "facts.nics[0].warnings[0]: 5000 characters, at most 4096"),
])
def test_host_facts_out_of_range_register_nothing(stubs, nic, says):
    request = apb.RegisterAgentRequest(dtn=SRC, facts=apb.HostFacts(nics=[nic]))
    error = stubs.refusal(stubs.agents.RegisterAgent, request, "dtn-agent")
    assert error.code() is Code.INVALID_ARGUMENT
    assert says in error.details()
    assert stubs.call(stubs.agents.ListAgents, apb.ListAgentsRequest(), "noc").agents == []


# -- rate reports -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "says"), [
    ({"bits_per_second": 1e300}, "rate.bits_per_second: 1e+300 is outside 0..1e+16"),
    ({"start": 5.0, "end": 4.0}, "rate.end: 4 is before rate.start 5"),
    ({"rtt_ms": math.nan}, "rate.rtt_ms: must be a finite number, got nan"),
    ({"cpu_percent": -math.inf}, "rate.cpu_percent: must be a finite number, got -inf"),
    ({"end": math.inf}, "rate.end: must be a finite number, got inf"),
    ({"bytes_total": 2**64 - 1}, "rate.bytes_total"),
    ({"engine": "e" * 1000}, "rate.engine: 1000 characters, at most 128"),
    ({"streams": [apb.StreamRate(stream=0, bits_per_second=1e20)]}, "rate.streams[0].bits_per_second"),
    ({"streams": [apb.StreamRate(stream=0, rtt_ms=-1.0)]}, "rate.streams[0].rtt_ms"),
    ({"pinning": apb.Pinning(numa_node=-7)}, "rate.pinning.numa_node: -7 is outside -1..1023"),
    ({"pinning": apb.Pinning(note="n" * 5000)}, "rate.pinning.note: 5000 characters, at most 4096"),
])
def test_impossible_rate_reports_are_refused_and_not_kept(stubs, starting, fields, says):
    stubs.call(stubs.agents.ReportTransfer, apb.TransferReport(transfer=starting.name, dtn=DST, role=apb.RECEIVE,
                                                               listening_port=5201), "dtn-agent")
    report = apb.TransferReport(transfer=starting.name, dtn=SRC, role=apb.SEND, rate=rate_report(**fields))
    error = stubs.refusal(stubs.agents.ReportTransfer, report, "dtn-agent")
    assert error.code() is Code.INVALID_ARGUMENT
    assert says in error.details()
    # The same as the final report of an outcome: the transfer does not end on it.
    outcome = apb.TransferReport(transfer=starting.name, dtn=SRC, role=apb.SEND, outcome=apb.TransferOutcome(ok=True),
                                 final=rate_report(**fields, final=True))
    error = stubs.refusal(stubs.agents.ReportTransfer, outcome, "dtn-agent")
    assert error.code() is Code.INVALID_ARGUMENT and says.replace("rate.", "final.") in error.details()
    now = stubs.call(stubs.transfers.GetTransfer, tpb.GetTransferRequest(name=starting.name), "rucio")
    assert now.state == tpb.TRANSFER_RUNNING and not now.HasField("rate")


def test_a_sane_rate_report_is_kept(stubs, starting):
    stubs.call(stubs.agents.ReportTransfer, apb.TransferReport(transfer=starting.name, dtn=DST, role=apb.RECEIVE,
                                                               listening_port=5201), "dtn-agent")
    sane = rate_report(rtt_ms=61.5, cpu_percent=340.0, streams=[apb.StreamRate(stream=0, bits_per_second=9.5e9)])
    stubs.call(stubs.agents.ReportTransfer, apb.TransferReport(transfer=starting.name, dtn=SRC, role=apb.SEND,
                                                               rate=sane), "dtn-agent")
    now = stubs.call(stubs.transfers.GetTransfer, tpb.GetTransferRequest(name=starting.name), "rucio")
    assert now.rate.bits_per_second == 9.5e9 and now.rate.rtt_ms == 61.5


def test_a_final_report_goes_with_an_outcome_only(stubs, starting):
    stubs.call(stubs.agents.ReportTransfer, apb.TransferReport(transfer=starting.name, dtn=DST, role=apb.RECEIVE,
                                                               listening_port=5201), "dtn-agent")
    report = apb.TransferReport(transfer=starting.name, dtn=SRC, role=apb.SEND, rate=rate_report(),
                                final=rate_report(final=True))
    error = stubs.refusal(stubs.agents.ReportTransfer, report, "dtn-agent")
    assert error.details() == "final: only with outcome (the summary report of a side that ended)"


def test_the_rules_are_the_core_reports_own():
    """The desk (and anything else in the core) applies the same checks to reports it is handed."""
    good = RateReport("t", "builtin", 0.0, 1.0, 1e9, 10**8, (StreamRate(0, 1e9, 10**8, 0, 2.0),), 0, 2.0, 80.0,
                      Pinning((0, 1), 0, "numactl", ""))
    good.check()
    for bad, says in [
        (RateReport("t", "builtin", 2.0, 1.0, 1e9, 0), "rate.end: 1 is before rate.start 2"),
        (RateReport("t", "builtin", 0.0, 1.0, 1e300, 0), "rate.bits_per_second"),
        (RateReport("t", "builtin", 0.0, 1.0, 1e9, 0, rtt_ms=math.nan), "rate.rtt_ms"),
        (RateReport("t", "builtin", 0.0, 1.0, 1e9, 0, cpu_percent=-math.inf), "rate.cpu_percent"),
        (RateReport("t", "builtin", 0.0, 1.0, 1e9, -1), "rate.bytes_total"),
        (RateReport("t", "builtin", 0.0, 1.0, 1e9, 0, (StreamRate(0, 1.0, 0),) * 1025), "rate.streams: 1025 entries"),
    ]:
        with pytest.raises(InvalidArgument, match="^" + re.escape(says)):
            bad.check()


# -- no bearer token in plaintext beyond loopback ------------------------------------------------------------------


def test_which_addresses_carry_tokens_in_plaintext():
    addresses = ["127.0.0.1:50051", "[::1]:1", "localhost:2", "unix:/run/tsdn.sock", "0.0.0.0:50051", "10.1.2.3:5"]
    assert plaintext_token_addresses(addresses, tokens=True, tls=False) == ["0.0.0.0:50051", "10.1.2.3:5"]
    assert plaintext_token_addresses(addresses, tokens=True, tls=True) == []
    assert plaintext_token_addresses(addresses, tokens=False, tls=False) == []  # refused elsewhere: dev mode


@pytest.mark.parametrize(("listen", "named"), [
    (["--listen-grpc", "0.0.0.0:0"], "--listen-grpc 0.0.0.0:0"),
    (["--also-listen", "192.0.2.1:0"], "--also-listen 192.0.2.1:0"),
])
def test_tokens_in_plaintext_beyond_loopback_are_refused(tmp_path, tokens_file, capsys, listen, named):
    state = tmp_path / "plain.db"
    code = main(["controller", "--topology", "sc16", "--tokens", str(tokens_file), "--state", str(state),
                 "--no-openflow", "--no-http", *listen])
    assert code == 2
    said = capsys.readouterr().err
    assert named in said and "plaintext" in said
    assert "--tls-cert" in said and "--allow-plaintext-tokens" in said  # the two ways out
    assert not state.exists()  # refused before opening anything


def test_allowed_plaintext_tokens_start_with_a_loud_warning(start_controller, tokens_file, caplog):
    caplog.set_level(logging.WARNING, logger="tsdn.controller")
    controller = start_controller(tokens=tokens_file, listen_grpc="0.0.0.0:0", allow_plaintext_tokens=True)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "PLAINTEXT TOKENS" in r.getMessage()]
    assert len(warnings) == 1 and "0.0.0.0:0" in warnings[0].getMessage()
    stubs = Stubs(f"127.0.0.1:{controller.port}")
    try:  # and it serves, on loopback too
        assert stubs.call(stubs.bandwidth.ListReservations, bpb.ListReservationsRequest(), "noc").reservations == []
    finally:
        stubs.channel.close()


def test_the_startup_banner_repeats_the_plaintext_warning(tmp_path, tokens_file):
    process = subprocess.Popen(
        [sys.executable, "-m", "tsdn", "controller", "--topology", "sc16", "--tokens", str(tokens_file),
         "--state", str(tmp_path / "tsdn.db"), "--no-openflow", "--no-http", "--listen-grpc", "0.0.0.0:0",
         "--allow-plaintext-tokens", "--log-level", "ERROR"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()
        warning = process.stderr.readline()
    finally:
        process.terminate()
        process.wait(WAIT)
    assert banner.startswith("tsdn controller listening on 0.0.0.0:")
    assert warning.startswith("tsdn controller: WARNING: PLAINTEXT TOKENS")


def test_tls_or_unix_sockets_need_no_flag(start_controller, tokens_file, tmp_path, pki):
    local = start_controller(tokens=tokens_file, also_listen=(f"unix:{tmp_path / 'grpc.sock'}",))
    assert local.plaintext_warning is None
    secure = start_controller(tokens=tokens_file, listen_grpc="0.0.0.0:0", tls_cert=pki / "a.pem",
                              tls_key=pki / "a.key", state=tmp_path / "tls.db")
    assert secure.plaintext_warning is None


# -- TLS material ---------------------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def pki(tmp_path) -> Path:
    """Two self-signed certificates with their keys, and the bad material an operator may hand over."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path / "pki"
    folder.mkdir()
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for name in ("a", "b"):
        _openssl("req", "-x509", *key, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
                 "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1", cwd=folder)
    _openssl("pkey", "-in", "a.key", "-out", "encrypted.key", "-aes256", "-passout", "pass:secret", cwd=folder)
    _openssl("x509", "-in", "a.pem", "-outform", "DER", "-out", "a.der", cwd=folder)
    (folder / "garbage.pem").write_text("this is not a certificate\n")
    pem = (folder / "a.pem").read_text().splitlines()
    (folder / "corrupt.pem").write_text("\n".join([pem[0], pem[1][::-1], *pem[2:]]) + "\n")
    (folder / "folder.pem").mkdir()
    return folder


@pytest.mark.parametrize(("options", "file", "reason"), [
    ({"tls_cert": "a.pem", "tls_key": "b.key"}, "b.key", "does not match the certificate in --tls-cert"),
    ({"tls_cert": "a.pem", "tls_key": "a.key", "client_ca": "garbage.pem"}, "garbage.pem", "not a PEM CA certificate"),
    ({"tls_cert": "a.pem", "tls_key": "a.key", "client_ca": "corrupt.pem"}, "corrupt.pem", "cannot be read"),
    ({"tls_cert": "a.pem", "tls_key": "a.key", "client_ca": "a.key"}, "a.key", "not a PEM CA certificate"),
    ({"tls_cert": "a.der", "tls_key": "a.key"}, "a.der", "not a PEM certificate"),
    ({"tls_cert": "corrupt.pem", "tls_key": "a.key"}, "corrupt.pem", "the certificate cannot be read"),
    ({"tls_cert": "a.pem", "tls_key": "garbage.pem"}, "garbage.pem", "not a PEM private key"),
    ({"tls_cert": "a.pem", "tls_key": "a.pem"}, "a.pem", "not a PEM private key"),
    ({"tls_cert": "a.pem", "tls_key": "encrypted.key"}, "encrypted.key", "the key is encrypted"),
    ({"tls_cert": "a.pem", "tls_key": "missing.key"}, "missing.key", "No such file or directory"),
    ({"tls_cert": "folder.pem", "tls_key": "a.key"}, "folder.pem", "Is a directory"),
])
def test_bad_tls_material_is_exit_2_naming_the_file(tmp_path, tokens_file, pki, capsys, options, file, reason):
    state = tmp_path / "tls.db"
    flags = [f"--{name.replace('_', '-')}={pki / value}" for name, value in options.items()]
    code = main(["controller", "--topology", "sc16", "--tokens", str(tokens_file), "--state", str(state),
                 "--no-openflow", "--no-http", "--listen-grpc", "127.0.0.1:0", *flags])
    said = capsys.readouterr().err
    assert code == 2, said
    assert str(pki / file) in said and reason in said
    assert "Failed to bind" not in said
    assert not state.exists()  # nothing opened, nothing listens


def test_good_tls_material_serves(start_controller, tokens_file, pki):
    controller = start_controller(tokens=tokens_file, tls_cert=pki / "a.pem", tls_key=pki / "a.key",
                                  client_ca=pki / "b.pem")
    assert controller.port > 0
