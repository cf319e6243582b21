"""Several real `tsdn controller --store etcd://...` processes sharing one etcd, for tests.

    with HACluster(etcd, 3, tmp_path) as cluster:
        old = cluster.wait_leader()                  # the leader key in etcd
        cluster.process_of(old).kill()               # kill -9
        new = cluster.wait_leader(other_than=old)    # another controller leads
        with cluster.client() as tsdn: ...           # a TsdnClient over every address

Each controller runs `tsdn controller --no-openflow --no-http` (ledger only) on a free loopback
gRPC port it also advertises, with a service token, its log in a file of its own (a deposed
leader re-executes itself in the same process, so the same file goes on). Who leads is read
from etcd (`/tsdn/<topology>/leader`: the address in its value, the generation its create
revision), never guessed from timing. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml
from etcd3gw import exceptions as etcd_exceptions

from benchmarks.etcd_cluster import EtcdCluster, free_loopback_ports
from northbound.client import TsdnClient
from tests.waiting import wait_for

TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"
READY = "tsdn controller listening on "  # printed by `tsdn controller` once it serves (again after a re-exec)
PRINCIPAL = "rucio"
TOKEN = "rucio-token-ha-0123456789abcdef"
START_TIMEOUT = 60.0  # seconds for every controller to serve and one to lead (2 cores, 3 Python processes)
STOP_TIMEOUT = 10.0


def b64(text: str) -> str:
    """A key as etcd's JSON gateway takes it."""
    return base64.b64encode(text.encode()).decode()


def prefix_end(prefix: str) -> str:
    """The end of the key range of every key starting with `prefix`."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@dataclass(frozen=True)
class LeaderKey:
    """The leader key as etcd holds it: the leader's advertised address and its generation."""

    address: str
    generation: int  # the key's create revision: grows with each election


@dataclass(frozen=True)
class Snapshot:
    """Every row key of the deployment with its value, and etcd's revision when they were read."""

    revision: int
    rows: dict[str, str]


class ControllerProcess:
    """One `tsdn controller --store ...` process, its log in a file."""

    def __init__(self, index: int, port: int, command: list[str], log_path: Path, cwd: Path):
        self.index = index
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.command = command
        self.log_path = log_path
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Spawn it (its output appended to `log_path`)."""
        with self.log_path.open("ab") as log:
            log.write(f"--- tests/ha_cluster.py: {' '.join(self.command)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.cwd)

    @property
    def pid(self) -> int:
        """Its process id (the same after a re-exec)."""
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        """Whether the process has not exited (it may be stopped)."""
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        """Everything it logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def listening_count(self) -> int:
        """How many times it said it serves (once per start, again after each re-exec)."""
        return self.log().count(READY)

    def wait_listening(self, count: int = 1, timeout: float = START_TIMEOUT) -> None:
        """Wait until it said it serves `count` times; fail with its log when it exits first."""
        def served() -> bool:
            if not self.alive:
                raise AssertionError(f"controller {self.address} exited ({self.process and self.process.poll()}) "
                                     f"before serving:\n{self.tail()}")
            return self.listening_count() >= count
        wait_for(served, f"controller {self.address} to serve ({count} start(s))", timeout, interval=0.05)

    def tail(self, lines: int = 40) -> str:
        """The end of its log."""
        return "\n".join(self.log().splitlines()[-lines:])

    def send_signal(self, signum: int) -> None:
        """Send `signum` to it."""
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """kill -9, and reap it."""
        if self.alive:
            self.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(STOP_TIMEOUT)

    def pause(self) -> None:
        """SIGSTOP: frozen, its sockets open, its lease no longer renewed."""
        self.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT."""
        self.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (after SIGCONT, in case it is stopped), SIGKILL when it does not exit in time."""
        if not self.alive:
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT)

    def __repr__(self) -> str:
        return f"ControllerProcess({self.address}, pid={self.process and self.process.pid}, alive={self.alive})"


class HACluster:
    """`size` controllers on `etcd`, serving (one of them leading) when the constructor returns."""

    def __init__(self, etcd: EtcdCluster, size: int, workdir: Path, *, topology: str = "ring8",
                 namespace: str = "ring8", lease_ttl: int = 2, store: str | None = None,
                 extra: Iterable[str] = ()):
        """Start `size` controllers of `topology` (whose name is `namespace`) on `store` (default:
        every member of `etcd`), logs and tokens under `workdir`."""
        self.etcd = etcd
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace
        self.store = store or etcd.url
        self.lease_ttl = lease_ttl
        tokens = self.workdir / "tokens.yaml"
        tokens.write_text(yaml.safe_dump({"tokens": [{"principal": PRINCIPAL, "role": "service", "token": TOKEN}]}))
        tokens.chmod(0o600)
        self.controllers: list[ControllerProcess] = []
        for index, port in enumerate(free_loopback_ports(size)):
            command = [TSDN, "controller", "--topology", topology, "--store", self.store,
                       "--lease-ttl", str(lease_ttl), "--listen-grpc", f"127.0.0.1:{port}",
                       "--advertise", f"127.0.0.1:{port}", "--no-openflow", "--no-http",
                       "--tokens", str(tokens), "--log-level", "INFO", *extra]
            self.controllers.append(ControllerProcess(index, port, command, self.workdir / f"controller{index}.log",
                                                      self.workdir))
        try:
            for controller in self.controllers:
                controller.start()
            for controller in self.controllers:
                controller.wait_listening()
            self.wait_leader()
        except BaseException:
            self.close()
            raise

    # -- addresses and clients ---------------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        """Every controller's gRPC address, in start order."""
        return [controller.address for controller in self.controllers]

    def client(self, first: ControllerProcess | None = None, *, only: bool = False,
               without: ControllerProcess | None = None, timeout: float = 15.0, retries: int = 6) -> TsdnClient:
        """A client of every controller (`first` tried first; `without` left out), or of `first` `only`."""
        if only:
            assert first is not None
            return TsdnClient(first.address, token=TOKEN, timeout=timeout, retries=retries)
        addresses = [address for address in self.addresses if without is None or address != without.address]
        if first is not None:
            at = addresses.index(first.address)
            addresses = addresses[at:] + addresses[:at]
        return TsdnClient(",".join(addresses), token=TOKEN, timeout=timeout, retries=retries)

    # -- etcd, read directly ------------------------------------------------------------------

    def _range(self, key: str, end: str | None = None) -> dict[str, Any]:
        """A range read through the first running etcd member that answers: the gateway's JSON."""
        body: dict[str, Any] = {"key": b64(key)}
        if end is not None:
            body["range_end"] = b64(end)
        failures = []
        for member in self.etcd.members:
            if not member.running:
                continue
            client = self.etcd.client(member.index, timeout=2.0)
            try:
                return client.post(client.get_url("/kv/range"), json=body)
            except (requests.RequestException, etcd_exceptions.Etcd3Exception) as error:
                failures.append(f"{member.name}: {error}")
            finally:
                client.session.close()
        raise AssertionError(f"no etcd member answered a read of {key}: {failures}")

    def leader(self) -> LeaderKey | None:
        """The leader key as etcd holds it now, or None when nobody leads."""
        kvs = self._range(f"/tsdn/{self.namespace}/leader").get("kvs", [])
        if not kvs:
            return None
        value = json.loads(base64.b64decode(kvs[0]["value"]))
        return LeaderKey(str(value["address"]), int(kvs[0]["create_revision"]))

    def wait_leader(self, other_than: LeaderKey | None = None, timeout: float = START_TIMEOUT) -> LeaderKey:
        """The leader key once a controller holds it (one other than `other_than`, when given)."""
        def elected() -> LeaderKey | None:
            found = self.leader()
            return found if found is not None and found != other_than else None
        what = "a controller to lead" if other_than is None else f"a leader other than {other_than}"
        return wait_for(elected, what, timeout, interval=0.05)

    def process_of(self, leader: LeaderKey) -> ControllerProcess:
        """The controller process advertising `leader.address`."""
        [found] = [c for c in self.controllers if c.address == leader.address]
        return found

    def followers(self, leader: LeaderKey) -> list[ControllerProcess]:
        """The controllers other than `leader`'s."""
        return [c for c in self.controllers if c.address != leader.address]

    def rows(self, table: str) -> dict[str, dict[str, Any]]:
        """The stored rows of `table` by id, decoded."""
        prefix = f"/tsdn/{self.namespace}/rows/{table}/"
        kvs = self._range(prefix, prefix_end(prefix)).get("kvs", [])
        return {base64.b64decode(kv["key"]).decode()[len(prefix):]: json.loads(base64.b64decode(kv["value"]))
                for kv in kvs}

    def snapshot(self) -> Snapshot:
        """Every stored row (key and raw value) and etcd's revision, read in one range."""
        prefix = f"/tsdn/{self.namespace}/rows/"
        response = self._range(prefix, prefix_end(prefix))
        return Snapshot(int(response["header"]["revision"]),
                        {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]).decode()
                         for kv in response.get("kvs", [])})

    # -- ending -------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every controller (SIGCONT first for a stopped one), SIGKILL after a while."""
        for controller in self.controllers:
            try:
                controller.stop()
            except (OSError, subprocess.SubprocessError):
                if controller.process is not None and controller.process.poll() is None:
                    os.kill(controller.process.pid, signal.SIGKILL)

    def logs(self) -> str:
        """Every controller's log tail, for a failure message."""
        return "\n".join(f"== {c.address} ({c.log_path}):\n{c.tail()}" for c in self.controllers)

    def __enter__(self) -> HACluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def raft_leader(etcd: EtcdCluster, timeout: float = 15.0) -> int:
    """The index of the etcd member the running members agree leads (waiting for one)."""
    return wait_for(lambda: (found := etcd.leader()) is not None and found + 1, "etcd to have a leader", timeout) - 1


def store_url(etcd: EtcdCluster, order: Iterable[int]) -> str:
    """`--store` naming the members of `etcd` in `order` (a controller talks to the first it can)."""
    return "etcd://" + ",".join(f"127.0.0.1:{etcd.members[index].client_port}" for index in order)


def freeze_member(etcd: EtcdCluster, index: int) -> None:
    """SIGSTOP etcd member `index`: it keeps accepting connections and answers nothing (a hung
    host, or one cut off without a reset)."""
    process = etcd.members[index].process
    assert process is not None and process.poll() is None
    process.send_signal(signal.SIGSTOP)


def thaw_member(etcd: EtcdCluster, index: int) -> None:
    """SIGCONT etcd member `index`."""
    process = etcd.members[index].process
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGCONT)

