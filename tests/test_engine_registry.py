"""The engine registry, and the FDT and RDMA engines behind the Engine interface.

RDMA (a RoCE NIC) cannot exist on this host, so its end-to-end tests run the engine's real
process path against a fake `ib_write_bw` written under tmp_path: it parses the same argv, really
listens and connects on 127.0.0.1, and prints the documented output of perftest
(tests/data/engines/). FDT runs for real, through two agents, in tests/test_fdt_transfers.py;
here only what it refuses before anything starts.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dtn_agent.engines import ENGINES, EngineUnavailable, TransferJob, engine_named, engine_unavailable, fdt, rdma
from dtn_agent.engines.iperf3 import Iperf3Engine
from sdn_app.core.reports import RateReport, TransferResult

DATA = Path(__file__).parent / "data" / "engines"

# ------------------------------------------------------------------------------------ fakes

FAKE_IB_WRITE_BW = r'''
import json, socket, sys
LOG, DATA = {log!r}, {data!r}
args = sys.argv[1:]
open(LOG, "a").write(json.dumps(args) + "\n")
VALUED = {{"-D", "-n", "-q", "-s", "-p", "-d", "-x"}}
def opt(name, default=None):
    return args[args.index(name) + 1] if name in args else default
port, iters, qps, size = int(opt("-p", "18515")), int(opt("-n", "1000")), int(opt("-q", "1")), int(opt("-s", "65536"))
table = (
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
    f" {{size}}      {{iters}}          0.00               92.30              0.176048\n"
)
banner = f" Number of qps   : {{qps}}\t\tTransport type : IB\n"
if len(args) > 1 and not args[-1].startswith("-") and args[-2] not in VALUED:
    sock = socket.create_connection((args[-1], port))
    sock.sendall(b"qp exchange")
    sock.close()
    sys.stdout.write(banner + table)
    sys.exit(0)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port))
srv.listen(1)
conn, _ = srv.accept()
while conn.recv(4096):
    pass
for a in args:
    if a.startswith("--out_json_file="):
        text = open(DATA + "/ib_write_bw_out_json.json").read()
        text = text.replace('"Number_of_qps": 2', f'"Number_of_qps": {{qps}}')
        text = text.replace('"n_iterations": 1760550', f'"n_iterations": {{iters}}')
        open(a.split("=", 1)[1], "w").write(text)
sys.stdout.write(banner + table)
'''


def write_fake(path: Path, template: str, log: Path) -> Path:
    """An executable Python script at `path` from `template`, logging its argv to `log`."""
    path.write_text(f"#!{sys.executable}\n" + template.format(log=str(log), data=str(DATA)))
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_rdma(tmp_path: Path) -> tuple[rdma.RdmaEngine, Path]:
    """An RdmaEngine over a fake sysfs with mlx5_0 and a fake ib_write_bw, and its argv log."""
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    log = tmp_path / "ib_write_bw.argv"
    binary = write_fake(tmp_path / "ib_write_bw", FAKE_IB_WRITE_BW, log)
    return rdma.RdmaEngine(binary=str(binary), sysfs=tmp_path / "sys", timeout=60), log


def argvs(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def run_pair(
    receive: Callable[..., TransferResult], send: Callable[..., TransferResult], rx_job: TransferJob,
    tx_job: Callable[[int], TransferJob],
) -> tuple[TransferResult, TransferResult, list[RateReport], list[RateReport], tuple[str, int]]:
    """Run a receiver in a thread, the sender here once the receiver is ready; both results and reports."""
    got_rx: list[RateReport] = []
    got_tx: list[RateReport] = []
    listening: list[tuple[str, int]] = []
    ready = threading.Event()
    results: dict[str, TransferResult] = {}

    def on_ready(addr: tuple[str, int]) -> None:
        listening.append(addr)
        ready.set()

    rx = threading.Thread(target=lambda: results.update(rx=receive(rx_job, got_rx.append, on_ready)), daemon=True)
    rx.start()
    assert ready.wait(20), "the receiver never listened"
    results["tx"] = send(tx_job(listening[0][1]), got_tx.append)
    rx.join(30)
    assert not rx.is_alive(), "the receiver did not finish"
    return results["rx"], results["tx"], got_rx, got_tx, listening[0]


# --------------------------------------------------------------------------------- registry


def test_every_name_resolves_to_an_engine_of_that_name():
    assert ENGINES == ("builtin", "iperf3", "fdt", "rdma")
    for name in ENGINES:
        engine = engine_named(name)
        assert engine.name == name
        assert callable(engine.send) and callable(engine.receive)
    assert engine_named(" FDT ", fdt_jar="/x/fdt.jar").fdt_jar == "/x/fdt.jar"


def test_unknown_engine_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown engine 'gridftp': known engines are builtin, iperf3, fdt, rdma"):
        engine_named("gridftp")
    with pytest.raises(ValueError, match="known engines"):
        engine_unavailable("scp")


def test_engine_unavailable_reasons(tmp_path):
    assert engine_unavailable("builtin") is None
    assert "no fdt.jar given" in (engine_unavailable("fdt") or "")
    assert "fdt.jar not found" in (engine_unavailable("fdt", fdt_jar=tmp_path / "missing.jar") or "")
    assert "'/nonexistent/iperf3' not found" in (Iperf3Engine(binary="/nonexistent/iperf3").unavailable() or "")
    if not rdma.available().ok:
        reason = engine_unavailable("rdma") or ""
        assert reason.startswith("rdma: no RDMA device in /sys/class/infiniband")
        assert "ib_write_bw" in reason


# -------------------------------------------------------------------------- unavailable engines


def test_fdt_engine_without_a_jar_fails_clearly_before_anything_starts(tmp_path):
    engine = fdt.FdtEngine(None)
    announced: list[tuple[str, int]] = []
    with pytest.raises(EngineUnavailable, match=r"fdt: no fdt.jar given.*no package registry.*--fdt-jar PATH"):
        engine.receive(TransferJob("f", "127.0.0.1", 0, size=10), lambda r: None, announced.append)
    with pytest.raises(ValueError, match=r"no fdt\.jar given"):  # EngineUnavailable is a ValueError
        engine.send(TransferJob("f", "127.0.0.1", 54321, size=10), lambda r: None)
    assert announced == []
    with pytest.raises(EngineUnavailable, match=r"fdt\.jar not found at"):
        fdt.FdtEngine(tmp_path / "nope.jar").send(TransferJob("f", "127.0.0.1", 1, size=10), lambda r: None)
    jar = tmp_path / "fdt.jar"
    jar.write_bytes(b"")
    with pytest.raises(EngineUnavailable, match="java not found"):
        fdt.FdtEngine(jar, java="/nonexistent/java").send(TransferJob("f", "127.0.0.1", 1, size=10), lambda r: None)


@pytest.mark.skipif(rdma.available().ok, reason="this host has RDMA")
def test_rdma_engine_on_this_host_fails_naming_the_missing_device():
    engine = rdma.RdmaEngine()
    announced: list[tuple[str, int]] = []
    with pytest.raises(EngineUnavailable) as err:
        engine.receive(TransferJob("r", "127.0.0.1", 0, size=2**20), lambda r: None, announced.append)
    message = str(err.value)
    assert message.startswith("rdma: no RDMA device in /sys/class/infiniband")
    assert "mlx5" in message and "ib_write_bw" in message
    with pytest.raises(EngineUnavailable, match="no RDMA device"):
        engine.send(TransferJob("r", "127.0.0.1", 18515, size=2**20), lambda r: None)
    assert announced == []


def test_rdma_engine_without_ib_write_bw_names_perftest(tmp_path):
    (tmp_path / "class/infiniband/mlx5_0").mkdir(parents=True)
    engine = rdma.RdmaEngine(binary="/nonexistent/ib_write_bw", sysfs=tmp_path)
    with pytest.raises(EngineUnavailable, match="ib_write_bw not found on PATH: install the perftest package"):
        engine.send(TransferJob("r", "127.0.0.1", 18515, size=2**20), lambda r: None)


def test_rdma_engine_rejects_jobs_it_cannot_model(fake_rdma):
    engine, _ = fake_rdma
    with pytest.raises(ValueError, match="memory only"):
        engine.send(TransferJob("r", "127.0.0.1", 18515, files=(Path("/etc/hostname"),)), lambda r: None)
    with pytest.raises(ValueError, match="needs size"):
        engine.receive(TransferJob("r", "127.0.0.1", 0), lambda r: None)


def test_fdt_engine_refuses_jobs_it_cannot_run_before_anything_starts(tmp_path):
    engine = fdt.FdtEngine(None)  # the job is checked before the jar
    with pytest.raises(ValueError, match=r"destination.*-d"):
        engine.send(TransferJob("f", "127.0.0.1", 54321, files=(Path("/etc/hostname"),)), lambda r: None)
    with pytest.raises(ValueError, match="cannot send 0 bytes"):
        engine.send(TransferJob("f", "127.0.0.1", 54321, size=0), lambda r: None)


# --------------------------------------------------------------- RDMA through a fake ib_write_bw


def test_rdma_engine_through_the_process_path(fake_rdma):
    engine, log = fake_rdma
    size = 10 * 2**20  # 160 messages of 64 KiB, over 2 QPs: 80 each
    rx_job = TransferJob("rdma-1", "127.0.0.1", 0, streams=2, size=size)

    def tx_job(port: int) -> TransferJob:
        return TransferJob("rdma-1", "127.0.0.1", port, streams=2, size=size, pacing_bps=25_000_000_000)

    rx, tx, got_rx, got_tx, (_, port) = run_pair(engine.receive, engine.send, rx_job, tx_job)
    assert tx.ok, tx.error
    assert rx.ok, rx.error
    for got, result in ((got_tx, tx), (got_rx, rx)):
        assert got[-1] is result.report and result.report.final
        assert result.report.engine == "rdma" and result.report.transfer_id == "rdma-1"
        assert result.report.bits_per_second == pytest.approx(92.30e9)
        assert result.report.bytes_total == 2 * 80 * 65536  # -n counts one QP's messages
        assert len(result.report.streams) == 2  # one per QP
    assert [r.final for r in got_tx] == [False, True]  # the table row as it came, then the final
    server, client = sorted(argvs(log), key=lambda a: a[-1] == "127.0.0.1")
    for argv in (server, client):
        assert argv[argv.index("-n") + 1] == "80" and "-D" not in argv
        assert argv[argv.index("-q") + 1] == "2" and argv[argv.index("-p") + 1] == str(port)
    assert any(a.startswith("--out_json_file=") for a in server)  # the server's final came from its JSON
    assert {"--rate_limit=25", "--rate_units=g", "--rate_limit_type=SW"} <= set(client)
    assert client[-1] == "127.0.0.1" and "127.0.0.1" not in server


def test_rdma_iterations_round_up_and_respect_perftests_minimum():
    assert rdma.iterations_for(10 * 2**20, 65536, 2) == 80
    assert rdma.iterations_for(10 * 2**20 + 1, 65536, 2) == 81
    assert rdma.iterations_for(1, 65536, 1) == 5
