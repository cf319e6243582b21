"""A real etcd for tests and benchmarks: `size` members of Debian's etcd 3.4 on free loopback ports.

Each member has its own data dir and log file under the directory it is given (its output never
reaches the test's). The cluster counts as up once every member answers `/health` (a leader, a
linearizable read) and a read through the JSON gateway with etcd3gw, the controller's client.
A member that cannot bind its port (taken between picking it and etcd binding it) makes the
whole start retry with new ports; any other failure raises `EtcdError` with the member's log tail.
`close()` kills every member and removes the data dirs it created (each WAL preallocates 64 MB);
the logs stay for a post-mortem, and nothing else in the directory is touched. fsync stays on.

The binary is `TSDN_ETCD`, else /usr/bin/etcd (Debian's etcd-server, which bootstrap installs).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import requests

from sdn_app.ha.etcd import import_etcd3gw

etcd3gw = import_etcd3gw()
etcd_exceptions = etcd3gw.exceptions

ETCD_ENV = "TSDN_ETCD"
DEFAULT_ETCD = Path("/usr/bin/etcd")
HOST = "127.0.0.1"

# etcd's own defaults, written out so a test's timing assumptions are visible here: a leader
# sends heartbeats every 100 ms and a follower calls an election after 1 s without one.
HEARTBEAT_MS = 100
ELECTION_MS = 1000
# etcd's default is 128 operations per transaction; one admission of a controller can carry many
# rows (bookings of every link direction on a path, the reservation, its transfer).
MAX_TXN_OPS = 10000
# etcd's default request limit (1.5 MiB) refuses such a transaction well before 10,000 rows (seen:
# 10,000 puts of 270 bytes each answered "Too Many Requests"); 8 MiB carries them.
MAX_REQUEST_BYTES = 8 * 1024 * 1024

START_TIMEOUT = 30.0  # seconds for a whole cluster (or one rejoining member) to answer
STOP_TIMEOUT = 10.0  # seconds for a member to exit after SIGTERM
START_ATTEMPTS = 3  # whole starts with fresh ports when a port was taken meanwhile
PROBE_TIMEOUT = 1.0  # seconds for one health probe of one member
LOG_TAIL_LINES = 15


class EtcdError(RuntimeError):
    """The etcd cluster of a test did not start, or a member did not stop."""


class _PortTaken(EtcdError):
    """A member could not bind its port: someone took it after it was picked."""


def etcd_binary() -> tuple[Path | None, str]:
    """The etcd to run (TSDN_ETCD, else /usr/bin/etcd), or None and why there is none."""
    given = os.environ.get(ETCD_ENV)
    path = Path(given) if given else DEFAULT_ETCD
    if path.is_file() and os.access(path, os.X_OK):
        return path, ""
    where = f"{ETCD_ENV}={given}" if given else f"{path} (set {ETCD_ENV} to use another)"
    return None, f"no etcd: {where} is not an executable file (apt-get install etcd-server)"


def free_loopback_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that were free a moment ago."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            # Every socket stays bound until all are picked, so the ports are distinct.
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def log_tail(path: Path, offset: int = 0, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a member's log from byte `offset` on, or a note that there are none."""
    try:
        with path.open("rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:]) or f"({path} is empty)"


@dataclass
class Member:
    """One etcd member: its ports, its files, and its process while it runs."""

    index: int
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen | None = None
    log_offset: int = 0  # where the log of its latest start begins

    def tail(self) -> str:
        """The end of its log since its latest start."""
        return log_tail(self.log_path, self.log_offset)

    @property
    def name(self) -> str:
        """The member's name in the cluster (m0, m1, ...)."""
        return f"m{self.index}"

    @property
    def client_url(self) -> str:
        """Where clients reach it."""
        return f"http://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        """Where the other members reach it."""
        return f"http://{HOST}:{self.peer_port}"

    @property
    def running(self) -> bool:
        """Whether its process is alive."""
        return self.process is not None and self.process.poll() is None


class EtcdCluster:
    """`size` etcd members on loopback, started (and healthy) when the constructor returns."""

    def __init__(self, size: int, directory: Path, *, binary: Path | None = None,
                 extra_args: Sequence[str] = (), timeout: float = START_TIMEOUT):
        """Start `size` members with their data dirs and logs under `directory`, or raise
        `EtcdError` with the log tail of a member that did not come up within `timeout` s."""
        if size < 1:
            raise ValueError(f"an etcd cluster needs at least one member, not {size}")
        if binary is None:
            binary, why_not = etcd_binary()
            if binary is None:
                raise EtcdError(why_not)
        self.size = size
        self.directory = Path(directory)
        self.binary = binary
        self.extra_args = list(extra_args)
        self.timeout = timeout
        # A token of its own, so members of two clusters in one run can never join each other.
        self.token = f"tsdn-test-{uuid.uuid4().hex[:12]}"
        self.members: list[Member] = []
        self._created: list[Path] = []
        self.directory.mkdir(parents=True, exist_ok=True)
        self._start()

    # -- addresses ---------------------------------------------------------------------------

    @property
    def endpoints(self) -> str:
        """Every member's client address: "127.0.0.1:P1,127.0.0.1:P2,..."."""
        return ",".join(f"{HOST}:{member.client_port}" for member in self.members)

    @property
    def url(self) -> str:
        """The cluster as `tsdn controller --store` takes it: "etcd://" + endpoints."""
        return "etcd://" + self.endpoints

    def client(self, index: int = 0, timeout: float | None = 5.0) -> etcd3gw.Etcd3Client:
        """An etcd3gw client of member `index` whose requests give up after `timeout` s."""
        return etcd3gw.Etcd3Client(host=HOST, port=self.members[index].client_port, timeout=timeout,
                                   api_path="/v3/")

    # -- starting ----------------------------------------------------------------------------

    def pick_ports(self, count: int) -> list[int]:
        """`count` free loopback ports for one start attempt (a test may override this)."""
        return free_loopback_ports(count)

    def _start(self) -> None:
        taken: list[str] = []
        for _attempt in range(START_ATTEMPTS):
            ports = self.pick_ports(2 * self.size)
            self.members = [Member(index=i, client_port=ports[2 * i], peer_port=ports[2 * i + 1],
                                   data_dir=self.directory / f"m{i}.data", log_path=self.directory / f"m{i}.log")
                            for i in range(self.size)]
            try:
                for member in self.members:
                    self._spawn(member, "new")
                self.wait_healthy(range(self.size), self.timeout)
                return
            except _PortTaken as error:
                taken.append(str(error))
                self._kill_all()
                self._remove_data()  # the others recorded the old peer URLs in theirs
            except BaseException:
                self.close()
                raise
        self.close()
        raise EtcdError(f"etcd could not bind its ports in {START_ATTEMPTS} attempts:\n" + "\n".join(taken))

    def _spawn(self, member: Member, state: str) -> None:
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        command = [
            str(self.binary),
            "--name", member.name,
            "--data-dir", str(member.data_dir),
            "--listen-client-urls", member.client_url,
            "--advertise-client-urls", member.client_url,
            "--listen-peer-urls", member.peer_url,
            "--initial-advertise-peer-urls", member.peer_url,
            "--initial-cluster", initial,
            "--initial-cluster-state", state,
            "--initial-cluster-token", self.token,
            "--max-txn-ops", str(MAX_TXN_OPS),
            "--max-request-bytes", str(MAX_REQUEST_BYTES),
            "--heartbeat-interval", str(HEARTBEAT_MS),
            "--election-timeout", str(ELECTION_MS),
            "--logger", "zap", "--log-outputs", "stderr",
            *self.extra_args,
        ]
        if not member.data_dir.exists() and member.data_dir not in self._created:
            self._created.append(member.data_dir)
        with member.log_path.open("a") as log:
            member.log_offset = log.tell()
            log.write(f"--- benchmarks/etcd_cluster.py: {' '.join(command)}\n")
            log.flush()
            member.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, cwd=self.directory)

    def _healthy(self, member: Member) -> bool:
        """Whether the member reports a leader on /health and answers a read through the gateway."""
        client = self.client(member.index, timeout=PROBE_TIMEOUT)
        try:
            response = client.session.get(f"{client.base_url}/health", timeout=PROBE_TIMEOUT)
            if response.status_code != 200 or json.loads(response.text).get("health") != "true":
                return False
            client.get("tsdn-harness-probe")  # a linearizable read: it needs a quorum
        except (requests.RequestException, etcd_exceptions.Etcd3Exception, ValueError):
            return False
        finally:
            client.session.close()
        return True

    def wait_healthy(self, indices: Sequence[int] | range | None = None, timeout: float | None = None) -> None:
        """Wait until members `indices` (default: every running one) are healthy, or raise
        `EtcdError` with the log tail of each that is not once `timeout` s pass or it exits."""
        timeout = self.timeout if timeout is None else timeout
        if indices is None:
            waiting = [member for member in self.members if member.running]
        else:
            waiting = [self.members[i] for i in indices]
        deadline = time.monotonic() + timeout
        while waiting:
            for member in list(waiting):
                if not member.running:
                    code = member.process.poll() if member.process else None
                    tail = member.tail()
                    if "address already in use" in tail:
                        raise _PortTaken(f"{member.name} (client {member.client_port}, peer {member.peer_port}): "
                                         "address already in use")
                    raise EtcdError(f"etcd member {member.name} exited (status {code}) before it was healthy; "
                                    f"{member.log_path} ends:\n{tail}")
                if self._healthy(member):
                    waiting.remove(member)
            if waiting and time.monotonic() > deadline:
                tails = "\n".join(f"{m.name} ({m.client_url}), {m.log_path} ends:\n{m.tail()}"
                                  for m in waiting)
                raise EtcdError(f"etcd not healthy after {timeout:g} s: {', '.join(m.name for m in waiting)}\n{tails}")
            if waiting:
                time.sleep(0.05)  # the polling interval of a condition with a deadline

    # -- members -----------------------------------------------------------------------------

    def stop_member(self, index: int) -> None:
        """Stop member `index` with SIGTERM and wait until it exited (`EtcdError` if it does not)."""
        member = self.members[index]
        if not member.running:
            return
        assert member.process is not None
        member.process.send_signal(signal.SIGTERM)
        try:
            member.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            member.process.kill()
            member.process.wait()
            raise EtcdError(f"etcd member {member.name} did not exit within {STOP_TIMEOUT:g} s of SIGTERM; "
                            f"killed. {member.log_path} ends:\n{member.tail()}") from None

    def kill_member(self, index: int) -> None:
        """Kill member `index` with SIGKILL (a lost host) and wait until it is gone."""
        member = self.members[index]
        if member.process is not None and member.process.poll() is None:
            member.process.kill()
            member.process.wait()

    def start_member(self, index: int, timeout: float | None = None) -> None:
        """Restart stopped member `index` on its ports and data dir (rejoining the cluster) and
        wait until it is healthy, which needs a quorum of running members."""
        member = self.members[index]
        if member.running:
            raise EtcdError(f"etcd member {member.name} is already running")
        self._spawn(member, "existing")
        try:
            self.wait_healthy([index], timeout)
        except _PortTaken as error:
            raise EtcdError(f"etcd member {member.name} cannot rejoin on its old ports: {error}") from None

    def leader(self) -> int | None:
        """The index of the member the running members report as leader, or None if none does."""
        ids: dict[str, int] = {}
        leaders: set[str] = set()
        for member in self.members:
            if not member.running:
                continue
            client = self.client(member.index, timeout=PROBE_TIMEOUT)
            try:
                status = client.status()
            except (requests.RequestException, etcd_exceptions.Etcd3Exception):
                continue
            finally:
                client.session.close()
            ids[str(status["header"]["member_id"])] = member.index
            if status.get("leader"):
                leaders.add(str(status["leader"]))
        found = [ids[leader] for leader in leaders if leader in ids]
        return found[0] if len(found) == 1 else None

    # -- ending ------------------------------------------------------------------------------

    def _kill_all(self) -> None:
        for member in self.members:
            self.kill_member(member.index)

    def _remove_data(self) -> None:
        # Only data dirs this cluster created: each member's WAL preallocates 64 MB.
        for path in self._created:
            shutil.rmtree(path, ignore_errors=True)
        self._created.clear()

    def close(self) -> None:
        """Kill every member and remove the data dirs this cluster created (logs stay)."""
        self._kill_all()
        self._remove_data()

    def __enter__(self) -> EtcdCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        running = [m.name for m in self.members if m.running]
        return f"EtcdCluster({self.url}, running={running}, directory={self.directory})"
