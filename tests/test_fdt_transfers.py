"""FDT for real: the FDT 0.27.0 jar run by real agents (`run_agent` in threads) for a real
controller (ledger only, ring8) on loopback: a memory transfer of a given size, files that
arrive byte-identical, two transfers into one receiver at once, and a cancel.

The jar is `TSDN_FDT_JAR`, else `../shared/tools/fdt.jar` beside the repository (where CI keeps
it); without it, or without java, the tests skip saying so (and fail in CI, see conftest.py).
The agents listen on 127.0.0.1 and advertise it, so the ledger-only controller tells the sender
to connect there. Waits have deadlines; nothing asserts on wall-clock durations.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dtn_agent.agent import run_agent
from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import agent_pb2 as agent_pb
from northbound.proto.tsdn.v1 import transfer_pb2 as pb
from tests.conftest import follow_transfer, reservation_released, write_dtn_tokens
from tests.waiting import wait_for
from tsdn.controller import Controller

REPO = Path(__file__).resolve().parents[1]
SERVICE = ("rucio", "rucio-token-0123456789abcdef")
AGENT_TOKENS = {dtn: f"agent-{dtn}-token-0123456789abcdef" for dtn in ("dtn1", "dtn2", "dtn3")}
BANDWIDTH = 2 * 10**9  # paced at 95 %: a few hundred MiB take a few seconds, so rates reach the controller
MiB = 1 << 20
ENDED = {pb.TRANSFER_SUCCEEDED, pb.TRANSFER_FAILED, pb.TRANSFER_CANCELLED}


def fdt_jar() -> tuple[Path | None, str]:
    """The jar to run (TSDN_FDT_JAR, else ../shared/tools/fdt.jar), or None and why there is none."""
    given = os.environ.get("TSDN_FDT_JAR")
    path = Path(given) if given else REPO.parent / "shared" / "tools" / "fdt.jar"
    if not path.is_file():
        where = f"TSDN_FDT_JAR={given}" if given else f"{path} (set TSDN_FDT_JAR to use another)"
        return None, f"no fdt.jar: {where} is not a file"
    if shutil.which("java") is None:
        return None, "no java on PATH: FDT needs a Java runtime (apt-get install default-jre-headless)"
    return path, ""


JAR, WHY_NOT = fdt_jar()
needs_fdt = pytest.mark.skipif(JAR is None, reason=WHY_NOT)


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    """A service token, and one agent token bound to each of the three DTNs."""
    return write_dtn_tokens(tmp_path, SERVICE, AGENT_TOKENS)


@pytest.fixture
def site(start_controller, tokens) -> Iterator[tuple[Controller, TsdnClient]]:
    """A ledger-only controller on ring8 with agents of dtn1, dtn2 and dtn3 online, each with the
    real fdt.jar; the service's client."""
    controller = start_controller("ring8", tokens=tokens, listen_openflow=None)
    stop = threading.Event()
    errors: list[BaseException] = []

    def agent(dtn: str) -> None:
        try:
            run_agent(controller.address, dtn, AGENT_TOKENS[dtn], "/", 0.5, stop=stop, timeout=5.0,
                      fdt_jar=JAR, listen="127.0.0.1", advertise="127.0.0.1")
        except BaseException as error:  # reported by the test's teardown
            errors.append(error)

    threads = [threading.Thread(target=agent, args=(dtn,), name=f"agent-{dtn}", daemon=True) for dtn in AGENT_TOKENS]
    for thread in threads:
        thread.start()
    client = TsdnClient(controller.address, token=SERVICE[1], timeout=10)
    wait_for(lambda: {a.dtn for a in client.list_agents() if a.state == agent_pb.ONLINE} >= set(AGENT_TOKENS),
             "the three agents online")
    try:
        yield controller, client
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        client.close()
        assert not [t for t in threads if t.is_alive()], "an agent did not stop"
        assert not errors, errors




def _fdt_running() -> list[str]:
    """Command lines of the fdt.jar processes this test process started that still run."""
    running = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and str(JAR).encode() in argv:
            running.append(b" ".join(argv).decode(errors="replace"))
    return running


@needs_fdt
def test_memory_transfer_ends_at_its_size_with_rates_on_the_way(site):
    _, client = site
    size = 600 * MiB
    transfer = client.start_transfer("dtn1", "dtn2", BANDWIDTH, size=size, streams=2, engine="fdt")
    events = follow_transfer(client, transfer.name, timeout=180)
    end = events[-1]
    assert end.state == pb.TRANSFER_SUCCEEDED, end.reason
    assert end.transfer.rate.final and end.transfer.rate.bytes_total == size
    assert end.transfer.receiver_rate.final and end.transfer.receiver_rate.bytes_total == size
    assert any(e.reason == "rate" and e.transfer.rate.bits_per_second > 0 for e in events), \
        [e.reason for e in events]
    assert wait_for(lambda: reservation_released(client, transfer), "the reservation released")
    wait_for(lambda: not _fdt_running(), "both FDT processes to end")


@needs_fdt
def test_files_arrive_byte_identical(site, tmp_path):
    _, client = site
    source = tmp_path / "source" / "run2024"
    source.mkdir(parents=True)
    (source / "events.bin").write_bytes(os.urandom(5 * MiB + 17))
    (source / "empty.dat").write_bytes(b"")
    (source / "manifest.txt").write_text("run 2024, 3 files\n")
    destination = tmp_path / "destination"
    transfer = client.start_transfer("dtn1", "dtn2", BANDWIDTH, files=[str(source)], destination=str(destination),
                                     streams=2, engine="fdt")
    end = follow_transfer(client, transfer.name, timeout=180)[-1]
    assert end.state == pb.TRANSFER_SUCCEEDED, end.reason
    assert end.transfer.checksums_verified is True  # each file's MD5 on dtn2 is the one FDT read on dtn1
    landed = destination / "run2024"
    compare = filecmp.dircmp(source, landed)
    assert sorted(compare.common_files) == ["empty.dat", "events.bin", "manifest.txt"]
    assert not compare.left_only and not compare.right_only
    for name in compare.common_files:
        assert (landed / name).read_bytes() == (source / name).read_bytes(), name
    assert end.transfer.rate.bytes_total == 5 * MiB + 17 + len("run 2024, 3 files\n")
    assert wait_for(lambda: reservation_released(client, transfer), "the reservation released")


@needs_fdt
def test_a_tree_fdt_would_flatten_fails_saying_why(site, tmp_path):
    _, client = site
    source = tmp_path / "run2024"
    (source / "raw").mkdir(parents=True)
    (source / "raw" / "events.bin").write_bytes(b"e" * 1000)
    (source / "manifest.txt").write_text("m\n")
    transfer = client.start_transfer("dtn1", "dtn2", BANDWIDTH, files=[str(source)],
                                     destination=str(tmp_path / "in"), engine="fdt")
    end = follow_transfer(client, transfer.name, timeout=180)[-1]
    assert end.state == pb.TRANSFER_FAILED
    assert "several directories" in end.reason and "builtin engine" in end.reason, end.reason
    assert wait_for(lambda: reservation_released(client, transfer), "the reservation released")
    wait_for(lambda: not _fdt_running(), "the receiver's FDT to be stopped", timeout=30)


@needs_fdt
def test_two_transfers_into_one_receiver_at_once(site):
    _, client = site
    sizes = {"dtn1": 500 * MiB, "dtn3": 300 * MiB}
    transfers = {src: client.start_transfer(src, "dtn2", BANDWIDTH, size=size, streams=2, engine="fdt")
                 for src, size in sizes.items()}
    ends: dict[str, pb.TransferEvent] = {}

    def follow(src: str) -> None:
        ends[src] = follow_transfer(client, transfers[src].name, timeout=180)[-1]

    followers = [threading.Thread(target=follow, args=(src,), daemon=True) for src in sizes]
    for thread in followers:
        thread.start()
    for thread in followers:
        thread.join(200)
    assert set(ends) == set(sizes), "a transfer did not end"
    for src, end in ends.items():
        assert end.state == pb.TRANSFER_SUCCEEDED, (src, end.reason)
        assert end.transfer.rate.bytes_total == sizes[src], src
        assert end.transfer.receiver_rate.bytes_total == sizes[src], src
    for transfer in transfers.values():
        assert wait_for(lambda t=transfer: reservation_released(client, t), "the reservations released")


@needs_fdt
def test_cancel_stops_both_fdts(site):
    _, client = site
    transfer = client.start_transfer("dtn1", "dtn2", BANDWIDTH, size=1 << 40, streams=2, engine="fdt")  # hours
    cancelled = False
    events = []
    for event in client.watch_transfer(transfer.name, timeout=180):
        events.append(event)
        if event.reason == "rate" and not cancelled:
            client.cancel_transfer(transfer.name)
            cancelled = True
        if event.state in ENDED:
            break
    assert cancelled, [e.reason for e in events]
    assert events[-1].state == pb.TRANSFER_CANCELLED, events[-1].reason
    assert wait_for(lambda: reservation_released(client, transfer), "the reservation released")
    wait_for(lambda: not _fdt_running(), "both FDT processes to be stopped", timeout=30)


def test_agent_takes_the_jar_from_tsdn_fdt_jar(monkeypatch, capsys):
    from tsdn.cli import build_parser, main

    monkeypatch.setenv("TSDN_FDT_JAR", "/opt/fdt/fdt.jar")
    args = build_parser().parse_args(["agent", "run", "--name", "dtn1"])
    assert args.fdt_jar == "/opt/fdt/fdt.jar"
    args = build_parser().parse_args(["agent", "run", "--name", "dtn1", "--fdt-jar", "/srv/fdt.jar"])
    assert args.fdt_jar == "/srv/fdt.jar"  # the option wins
    monkeypatch.setenv("TSDN_FDT_JAR", "/no/such/fdt.jar")
    assert main(["agent", "run", "--name", "dtn1", "--controller", "127.0.0.1:1"]) == 2
    assert "TSDN_FDT_JAR /no/such/fdt.jar: no such file" in capsys.readouterr().err
