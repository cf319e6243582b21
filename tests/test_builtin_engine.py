"""The builtin multi-stream TCP engine on loopback: memory and disk transfers, resume, checksums,
protocol errors and rate reports."""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
import time
import zlib
from pathlib import Path

import pytest

from dtn_agent.engines import TransferJob
from dtn_agent.engines.builtin import BuiltinEngine, receive_in_thread
from dtn_agent.engines.builtin_protocol import (
    HEADER,
    MAGIC,
    MAX_MESSAGE,
    JobHeader,
    MessageType,
    ProtocolError,
    adler32_combine,
    decode_header,
    decode_payload,
    encode,
    file_adler32,
    read_message,
)
from dtn_agent.reports import RateReport, TransferResult
from tests.waiting import wait_for

CHUNK = 64 * 1024


def transfer(sender: BuiltinEngine, receiver: BuiltinEngine, streams: int, *, size: int | None = None,
             files: tuple[Path, ...] = (), destination: Path | None = None, pacing_bps: int | None = None,
             receiver_reports: list[RateReport] | None = None,
             sender_reports: list[RateReport] | None = None) -> tuple[TransferResult, TransferResult]:
    """Run one transfer over loopback; (sender result, receiver result)."""
    job = TransferJob("t-1", "127.0.0.1", 0, streams=streams, destination=destination)
    into = receiver_reports if receiver_reports is not None else []
    (host, port), wait = receive_in_thread(receiver, job, into.append)
    sent = sender.send(TransferJob("t-1", host, port, streams=streams, size=size, files=files, pacing_bps=pacing_bps),
                       (sender_reports if sender_reports is not None else []).append)
    return sent, wait()


def make_tree(root: Path) -> dict[str, bytes]:
    """A directory tree with an empty file, a file of whole chunks and ones that are not."""
    contents = {
        "tree/a.bin": os.urandom(3 * CHUNK + 1234),
        "tree/empty.txt": b"",
        "tree/sub/b.bin": os.urandom(2 * CHUNK),
        "tree/sub/deeper/c.txt": b"hello, terabit\n" * 100,
    }
    for name, data in contents.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return contents


def leftovers(destination: Path) -> list[str]:
    """Partial files and journals under `destination`."""
    return sorted(p.name for p in destination.rglob("*") if p.name.endswith((".tsdn-partial", ".tsdn-journal")))


@pytest.mark.parametrize("streams", [1, 3])
def test_memory_transfer_delivers_exactly_the_bytes(streams: int) -> None:
    size = 50 * 1024 * 1024 + 7
    sent, received = transfer(BuiltinEngine(buffer_size=1 << 20), BuiltinEngine(), streams, size=size)
    assert sent.ok, sent.error
    assert received.ok, received.error
    assert received.report.bytes_total == size == sent.report.bytes_total
    assert received.report.final and len(received.report.streams) == streams
    assert sum(s.bytes_total for s in received.report.streams) == size
    assert received.checksums_verified is None


def test_threads_are_pinned_to_the_cpus_the_job_names() -> None:
    cpus = (min(os.sched_getaffinity(0)),)
    job = TransferJob("t-1", "127.0.0.1", 0, streams=2, cpus=cpus)
    (host, port), wait = receive_in_thread(BuiltinEngine(), job, [].append)
    sent = BuiltinEngine().send(TransferJob("t-1", host, port, streams=2, size=1 << 20, cpus=cpus), [].append)
    received = wait()
    assert sent.ok and received.ok, (sent.error, received.error)
    assert received.report.pinning.cpus == cpus and received.report.pinning.method == "sched_setaffinity"
    assert sent.report.pinning.cpus == cpus


def test_memory_transfer_discarding_in_kernel_counts_the_bytes() -> None:
    size = 20 * 1024 * 1024
    sent, received = transfer(BuiltinEngine(), BuiltinEngine(discard_in_kernel=True), 2, size=size)
    assert sent.ok and received.ok, (sent.error, received.error)
    assert received.report.bytes_total == size


def test_directory_tree_arrives_verified(tmp_path: Path) -> None:
    contents = make_tree(tmp_path / "src")
    destination = tmp_path / "dst"
    engine = BuiltinEngine(chunk_size=CHUNK)
    sent, received = transfer(engine, BuiltinEngine(chunk_size=CHUNK), 3, files=(tmp_path / "src" / "tree",),
                              destination=destination)
    assert sent.ok, sent.error
    assert received.ok, received.error
    assert sent.checksums_verified is True and received.checksums_verified is True
    assert sorted(received.files) == sorted(contents)
    for name, data in contents.items():
        assert (destination / name).read_bytes() == data
    assert leftovers(destination) == []
    assert received.report.bytes_total == sum(len(d) for d in contents.values())


def test_interrupted_transfer_resumes_without_resending_finished_chunks(tmp_path: Path) -> None:
    contents = make_tree(tmp_path / "src")
    destination = tmp_path / "dst"
    total = sum(len(d) for d in contents.values())
    stopped, received = transfer(BuiltinEngine(chunk_size=CHUNK, stop_after_chunks=3), BuiltinEngine(chunk_size=CHUNK),
                                 2, files=(tmp_path / "src" / "tree",), destination=destination)
    assert not stopped.ok and "stopped after 3 chunks" in stopped.error
    assert not received.ok and "went away" in received.error
    for name in contents:  # nothing is visible under its final name before it is complete
        assert not (destination / name).exists(), name
    assert ".a.bin.tsdn-partial" in leftovers(destination)

    resumed, received = transfer(BuiltinEngine(chunk_size=CHUNK), BuiltinEngine(chunk_size=CHUNK), 2,
                                 files=(tmp_path / "src" / "tree",), destination=destination)
    assert resumed.ok, resumed.error
    assert received.ok, received.error
    assert resumed.report.bytes_total == total - 3 * CHUNK  # the first three chunks of a.bin were not resent
    for name, data in contents.items():
        assert (destination / name).read_bytes() == data
    assert leftovers(destination) == []


def test_corrupted_byte_is_detected_and_the_file_not_renamed(tmp_path: Path) -> None:
    contents = make_tree(tmp_path / "src")
    destination = tmp_path / "dst"
    sent, received = transfer(BuiltinEngine(chunk_size=CHUNK, corrupt_at=("tree/a.bin", CHUNK + 10)),
                              BuiltinEngine(chunk_size=CHUNK), 2, files=(tmp_path / "src" / "tree",),
                              destination=destination)
    assert not received.ok and received.checksums_verified is False
    assert f"checksum mismatch in 'tree/a.bin' at offset {CHUNK}" in received.error
    assert not sent.ok and "checksum mismatch in 'tree/a.bin'" in sent.error
    assert not (destination / "tree/a.bin").exists()
    assert (destination / "tree/sub/b.bin").read_bytes() == contents["tree/sub/b.bin"]
    assert "tree/a.bin" not in received.files

    # the bad chunk was not journaled: a plain retry sends it (and only what is missing) again
    retried, received = transfer(BuiltinEngine(chunk_size=CHUNK), BuiltinEngine(chunk_size=CHUNK), 2,
                                 files=(tmp_path / "src" / "tree",), destination=destination)
    assert retried.ok and received.ok, (retried.error, received.error)
    assert (destination / "tree/a.bin").read_bytes() == contents["tree/a.bin"]


def test_reports_arrive_about_once_per_second_with_tcp_info() -> None:
    arrivals: list[float] = []
    reports: list[RateReport] = []

    def note(report: RateReport) -> None:
        arrivals.append(time.monotonic())
        reports.append(report)

    pacing = 80 * 10**6  # 80 Mbit/s over two streams: 25 MB take about 2.5 s
    outcome: list[TransferResult] = []
    job_done = threading.Event()
    received_reports: list[RateReport] = []
    (host, port), wait = receive_in_thread(BuiltinEngine(), TransferJob("t-1", "127.0.0.1", 0, streams=2),
                                           received_reports.append)

    def send() -> None:
        outcome.append(BuiltinEngine(buffer_size=256 * 1024).send(
            TransferJob("t-1", host, port, streams=2, size=25 * 10**6, pacing_bps=pacing), note))
        job_done.set()

    sender = threading.Thread(target=send)
    sender.start()
    wait_for(lambda: len(reports) >= 2, "two interval reports", timeout=10)
    wait_for(job_done.is_set, "the paced transfer to end", timeout=20)
    sender.join()
    received = wait()
    assert outcome[0].ok and received.ok, (outcome[0].error, received.error)
    intervals = [r for r in reports if not r.final]
    assert reports[-1].final and outcome[0].report == reports[-1]
    assert all(0.9 <= r.end - r.start <= 1.5 for r in intervals), [(r.start, r.end) for r in intervals]
    assert len(intervals) >= 2
    gaps = [b - a for a, b in itertools.pairwise(arrivals[:len(intervals)])]
    assert all(0.5 <= gap <= 1.6 for gap in gaps), gaps
    assert all(len(r.streams) == 2 for r in intervals)
    assert intervals[0].rtt_ms is not None and intervals[0].retransmits is not None  # TCP_INFO on Linux
    assert outcome[0].report.bits_per_second < 1.5 * pacing  # SO_MAX_PACING_RATE held it back
    assert received_reports[-1].final and received_reports[-1].bytes_total == 25 * 10**6


# -- the control protocol --------------------------------------------------------------------


def test_garbage_and_oversized_headers_are_refused() -> None:
    with pytest.raises(ProtocolError, match="not a tsdn builtin-engine connection"):
        decode_header(b"GET / HTTP")
    with pytest.raises(ProtocolError, match="version 9"):
        decode_header(HEADER.pack(MAGIC, 9, 1, 10))
    with pytest.raises(ProtocolError, match="unknown control message type 77"):
        decode_header(HEADER.pack(MAGIC, 1, 77, 10))
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        decode_header(HEADER.pack(MAGIC, 1, 1, MAX_MESSAGE + 1))
    with pytest.raises(ProtocolError, match="not valid JSON"):
        decode_payload(MessageType.JOB, b"{nope")
    with pytest.raises(ProtocolError, match="must be a JSON object"):
        decode_payload(MessageType.JOB, b"[1, 2]")


GOOD_JOB = {"transfer_id": "t", "streams": 2, "mode": "files", "size": 5, "chunk_size": 65536,
            "files": [["d/a", 5]]}


@pytest.mark.parametrize(("change", "message"), [
    ({"files": [["../etc/passwd", 5]]}, "not a plain relative path"),
    ({"files": [["/etc/passwd", 5]]}, "not a plain relative path"),
    ({"files": [["d/.a.tsdn-partial", 5]]}, "reserved"),
    ({"files": [["d/a", 5], ["d/a", 0]], "size": 5}, "twice"),
    ({"streams": 0}, "streams must be between"),
    ({"streams": True}, "wrong type"),
    ({"mode": "tape"}, "mode must be"),
    ({"size": 6}, "not the sum"),
    ({"chunk_size": 1}, "chunk_size must be between"),
    ({"files": [["d/a", -1]]}, "file entries must be"),
    ({"transfer_id": None}, "wrong type"),
])
def test_bad_job_messages_are_refused(change: dict, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        JobHeader.from_payload({**GOOD_JOB, **change})
    payload = dict(GOOD_JOB)
    del payload["chunk_size"]
    with pytest.raises(ProtocolError, match="lacks the field 'chunk_size'"):
        JobHeader.from_payload(payload)
    assert JobHeader.from_payload(GOOD_JOB).files[0].path == "d/a"


@pytest.mark.parametrize(("first_bytes", "message"), [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a tsdn builtin-engine connection"),
    (HEADER.pack(MAGIC, 1, MessageType.JOB, 2**31), "exceeds the limit"),
    (encode(MessageType.DONE, {"bytes": 1}), "expected a JOB message, got DONE"),
    (encode(MessageType.JOB, {**GOOD_JOB, "files": [["../x", 5]]}), "not a plain relative path"),
])
def test_receiver_refuses_bad_control_messages(tmp_path: Path, first_bytes: bytes, message: str) -> None:
    (host, port), wait = receive_in_thread(
        BuiltinEngine(), TransferJob("t", "127.0.0.1", 0, streams=2, destination=tmp_path), [].append)
    with socket.create_connection((host, port), timeout=10) as client:
        client.sendall(first_bytes)
        kind, payload = read_message(client)
    result = wait()
    assert kind is MessageType.ERROR and message in payload["error"]
    assert not result.ok and message in result.error
    assert list(tmp_path.iterdir()) == []


def test_sender_reports_a_refusal_by_the_receiver(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    (host, port), wait = receive_in_thread(BuiltinEngine(), TransferJob("t", "127.0.0.1", 0), [].append)
    sent = BuiltinEngine().send(TransferJob("t", host, port, files=(tmp_path / "f",)), [].append)
    received = wait()
    assert not sent.ok and "receiver refused the transfer" in sent.error and "no destination" in sent.error
    assert not received.ok


def test_invalid_jobs_raise_before_any_traffic(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of size"):
        BuiltinEngine().send(TransferJob("t", "127.0.0.1", 9), [].append)
    with pytest.raises(ValueError, match="streams must be between"):
        BuiltinEngine().send(TransferJob("t", "127.0.0.1", 9, streams=0, size=1), [].append)
    with pytest.raises(ValueError, match="not a regular file or directory"):
        BuiltinEngine().send(TransferJob("t", "127.0.0.1", 9, files=(tmp_path / "missing",)), [].append)


def test_adler32_combine_matches_zlib() -> None:
    data = os.urandom(300_001)
    pieces = [data[i:i + 70_000] for i in range(0, len(data), 70_000)]
    assert file_adler32([zlib.adler32(p) for p in pieces], len(data), 70_000) == zlib.adler32(data)
    assert adler32_combine(zlib.adler32(b"ab"), zlib.adler32(b""), 0) == zlib.adler32(b"ab")
    assert file_adler32([], 0, 70_000) == zlib.adler32(b"")
    assert json.loads(encode(MessageType.ERROR, {"error": "x"})[HEADER.size:]) == {"error": "x"}
