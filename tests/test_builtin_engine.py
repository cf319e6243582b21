"""The builtin multi-stream TCP engine on loopback: memory and disk transfers, resume, checksums,
protocol errors and rate reports."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import random
import socket
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from dtn_agent.engines import TransferJob, builtin_protocol
from dtn_agent.engines.builtin import BuiltinEngine, _Chunk, _ChunkQueue, receive_in_thread
from dtn_agent.engines.builtin_protocol import (
    HEADER,
    MAGIC,
    MAX_MESSAGE,
    JobHeader,
    MessageType,
    ProtocolError,
    adler32,
    adler32_combine,
    decode_header,
    decode_payload,
    encode,
    file_adler32,
    read_message,
)
from sdn_app.core.reports import RateReport, TransferResult
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


# -- adler32: zlib-ng's where installed, always zlib's values ---------------------------------

ADLER_SIZES = [0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 5551, 5552, 5553, 65535, 65536, 65537,
               (1 << 20) + 3, 3 * (1 << 20) - 1]


def test_the_engine_uses_zlib_ngs_adler32() -> None:
    from zlib_ng import zlib_ng  # a declared dependency

    assert adler32 is zlib_ng.adler32


@pytest.mark.parametrize("size", ADLER_SIZES)
def test_adler32_values_are_zlibs(size: int) -> None:
    rng = random.Random(size)
    data = rng.randbytes(size)
    assert adler32(data) == zlib.adler32(data)
    for start in (0, 1, 0xFFF0FFF0, rng.getrandbits(32)):  # a running value, as the sender carries per piece
        assert adler32(data, start) == zlib.adler32(data, start)
    view = memoryview(bytearray(b"\xff" + data + b"\xff"))[1:-1]  # a slice at an odd address, as recv_into fills
    assert adler32(view) == zlib.adler32(data)
    assert adler32(bytes(size) + b"\xff" * size) == zlib.adler32(bytes(size) + b"\xff" * size)  # sums that wrap


def test_adler32_of_pieces_and_of_chunks_is_the_whole_files() -> None:
    rng = random.Random(7)
    for _ in range(20):
        data = rng.randbytes(rng.randrange(0, 400_000))
        chunk = rng.choice([4096, 65_536, 70_001, 1 << 20])
        piece = rng.randrange(1, chunk + 1)
        sums = []
        for offset in range(0, len(data), chunk):
            running = adler32(b"")
            for start in range(offset, min(offset + chunk, len(data)), piece):
                running = adler32(data[start:min(start + piece, offset + chunk, len(data))], running)
            sums.append(running)
        assert file_adler32(sums, len(data), chunk) == zlib.adler32(data)


def test_without_zlib_ng_the_protocol_falls_back_to_zlibs_adler32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "zlib_ng", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "zlib_ng.zlib_ng", None)
    spec = importlib.util.spec_from_file_location("protocol_without_zlib_ng", builtin_protocol.__file__)
    assert spec is not None and spec.loader is not None
    fallback = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, fallback)  # its dataclasses look themselves up there
    spec.loader.exec_module(fallback)
    assert fallback.adler32 is zlib.adler32
    data = random.Random(3).randbytes(300_001)
    sums = [fallback.adler32(data[i:i + 65_536]) for i in range(0, len(data), 65_536)]
    assert fallback.file_adler32(sums, len(data), 65_536) == file_adler32(sums, len(data), 65_536) == adler32(data)


def test_corruption_is_detected_in_a_chunk_of_odd_size(tmp_path: Path) -> None:
    data = random.Random(5).randbytes(2 * CHUNK + 4097)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "odd.bin").write_bytes(data)
    destination = tmp_path / "dst"
    sent, received = transfer(BuiltinEngine(chunk_size=CHUNK, corrupt_at=("odd.bin", 2 * CHUNK + 4096)),
                              BuiltinEngine(chunk_size=CHUNK), 2, files=(tmp_path / "src" / "odd.bin",),
                              destination=destination)
    assert not received.ok and f"checksum mismatch in 'odd.bin' at offset {2 * CHUNK} (4097 bytes)" in received.error
    assert not sent.ok and not (destination / "odd.bin").exists()


# -- which chunk each disk stream sends -------------------------------------------------------


def test_streams_take_chunks_of_different_files_while_there_are_enough() -> None:
    chunks = [_Chunk(f, c) for f in range(4) for c in range(3)]
    queue = _ChunkQueue(chunks)
    first, second = queue.take(None), queue.take(None)
    assert first is not None and second is not None and first.file_index != second.file_index
    taken: list[_Chunk] = [first, second]
    on = {0: first, 1: second}  # stream -> its current chunk
    stream = 0
    while queue.left:
        chunk = queue.take(on[stream].file_index)
        assert chunk is not None
        assert chunk.file_index != on[1 - stream].file_index
        taken.append(chunk)
        on[stream] = chunk
        stream = 1 - stream
    assert queue.take(on[0].file_index) is None and queue.taken == len(chunks)
    assert sorted(taken, key=lambda c: (c.file_index, c.index)) == chunks  # each chunk once
    for file_index in range(4):  # and each file's chunks in order
        assert [c.index for c in taken if c.file_index == file_index] == [0, 1, 2]


def test_streams_share_a_file_when_there_are_fewer_files_than_streams() -> None:
    queue = _ChunkQueue([_Chunk(0, c) for c in range(4)] + [_Chunk(1, 0)])
    got = [queue.take(None) for _ in range(3)]
    assert [(c.file_index, c.index) for c in got if c is not None] == [(0, 0), (1, 0), (0, 1)]
    assert queue.take(0) == _Chunk(0, 2) and queue.take(0) == _Chunk(0, 3)
    assert queue.take(0) is None and not queue.left


def test_many_files_over_several_streams_all_arrive(tmp_path: Path) -> None:
    rng = random.Random(11)
    contents = {f"many/f{i:02}.bin": rng.randbytes(rng.randrange(0, 3 * CHUNK)) for i in range(12)}
    for name, data in contents.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_bytes(data)
    destination = tmp_path / "dst"
    sent, received = transfer(BuiltinEngine(chunk_size=CHUNK), BuiltinEngine(chunk_size=CHUNK), 3,
                              files=(tmp_path / "src" / "many",), destination=destination)
    assert sent.ok and received.ok, (sent.error, received.error)
    assert sorted(received.files) == sorted(contents)
    for name, data in contents.items():
        assert (destination / name).read_bytes() == data
