"""The neighbouring NSI domains of a demo: one real OpenNSA (dud backend) per neighbour NSA of the
topology's inter-domain ports, started by the OpenNSA recipe (`TSDN_OPENNSA`, else
../shared/tools/opennsa beside the repository) before the controller and stopped after it.

Each OpenNSA is the neighbour the topology names: its domain from the NSA URN
(`urn:ogf:network:rnp.sc16:nsa` -> `rnp.sc16`), its HTTP port from `peer.url`, and an NRM with
the STP facing our port (the last part of `peer.stp`) and the STP of each remote DTN beyond it,
all with the inter-domain port's VLAN range. `terminated()` asks a neighbour what became of a
connection (querySummarySync), the neighbour's own word for the report.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from sdn_app.core.errors import FailedPrecondition
from sdn_app.core.topology import Topology

REPO = Path(__file__).resolve().parents[2]
SETUP_TIMEOUT = 900.0  # seconds setup.sh may take from nothing (apt, a venv, psycopg2 built)
STOP_TIMEOUT = 120.0
NSA_PREFIX = "urn:ogf:network:"


class PeerSetupError(FailedPrecondition):
    """A neighbour's OpenNSA could not be started; says what is missing."""


def opennsa_recipe() -> Path:
    """The OpenNSA recipe directory: `TSDN_OPENNSA`, else ../shared/tools/opennsa beside the repository
    (whether it holds setup.sh is for the caller to check)."""
    return Path(os.environ.get("TSDN_OPENNSA") or REPO.parent / "shared" / "tools" / "opennsa")


def require_recipe() -> Path:
    """The recipe directory, or PeerSetupError saying where it was looked for."""
    recipe = opennsa_recipe()
    if not (recipe / "setup.sh").is_file():
        raise PeerSetupError(
            f"the topology has NSI neighbours, which the demo stands in for with OpenNSA, but there is no OpenNSA "
            f"recipe: {recipe / 'setup.sh'} is not a file (put ../shared beside the repository, or set "
            "TSDN_OPENNSA to the recipe's directory)")
    return recipe


def domain_of(nsa: str) -> str:
    """The domain of an NSA URN (`urn:ogf:network:rnp.sc16:nsa` -> `rnp.sc16`)."""
    if not (nsa.startswith(NSA_PREFIX) and nsa.endswith(":nsa")) or len(nsa) <= len(NSA_PREFIX) + 4:
        raise PeerSetupError(f"NSA {nsa!r} is not urn:ogf:network:<domain>:nsa")
    return nsa[len(NSA_PREFIX):-len(":nsa")]


def stp_port(stp: str, domain: str) -> str:
    """The port (last part) of an STP URN of `domain`'s network `topology`, as OpenNSA's dud backend names it."""
    network = f"{NSA_PREFIX}{domain}:topology:"
    port = stp.split("?", 1)[0]
    if not port.startswith(network) or ":" in port[len(network):] or not port[len(network):]:
        raise PeerSetupError(f"STP {stp!r} is not a port of {network.rstrip(':')} (OpenNSA's dud backend names its "
                             f"STPs {network}<port>)")
    return port[len(network):]


@dataclass(frozen=True)
class Neighbour:
    """One neighbouring NSA as the topology describes it: what its OpenNSA must serve."""

    nsa: str
    url: str
    domain: str
    port: int  # its HTTP port, from peer.url
    stps: tuple[tuple[str, int, int, int], ...]  # (port name, first VLAN, last VLAN, Mbit/s)


def neighbours(topology: Topology) -> list[Neighbour]:
    """The neighbour NSAs of `topology`'s inter-domain ports, each with the STPs the demo needs: the one
    facing each of our ports and each remote DTN's beyond them. PeerSetupError on what OpenNSA cannot
    stand in for (no loopback http URL, STPs of another network, two ports of one NSA on different URLs)."""
    found: dict[str, Neighbour] = {}
    for port in topology.spec.interdomain:
        peer = port.peer
        domain = domain_of(peer.nsa)
        url = peer.url or ""
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost") or not parts.port:
            raise PeerSetupError(f"interdomain port {port.name}: peer.url {url!r} is not an http URL on 127.0.0.1 "
                                 "with a port; the demo starts the neighbour's OpenNSA there")
        first, last = port.vlans
        mbps = max(1, port.capacity // 1_000_000)
        stps = [(stp_port(peer.stp, domain), first, last, mbps)]
        for dtn in topology.remote_site_dtns(port.name):
            stps.append((stp_port(topology.dtn(dtn).stp or "", domain), first, last, mbps))
        known = found.get(peer.nsa)
        if known is not None:
            if known.url != url:
                raise PeerSetupError(f"{peer.nsa} has two URLs in the topology: {known.url} and {url}")
            stps = [*known.stps, *(s for s in stps if s[0] not in {k[0] for k in known.stps})]
        found[peer.nsa] = Neighbour(peer.nsa, url, domain, parts.port, tuple(stps))
    return list(found.values())


def nrm(neighbour: Neighbour) -> str:
    """The OpenNSA NRM file of `neighbour`: one ethernet STP per line."""
    return "".join(f"ethernet {name} - vlan:{first}-{last} {mbps} em{i} -\n"
                   for i, (name, first, last, mbps) in enumerate(neighbour.stps))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _port_busy(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class RunningPeers:
    """The OpenNSAs started for one demo run; `stop()` stops and purges them."""

    recipe: Path
    started: dict[str, Path] = field(default_factory=dict)  # NSA -> its state dir
    logs: Path | None = None

    def start(self, neighbour: Neighbour, log_dir: Path, tpc_timeout: int | None = None) -> None:
        """Start `neighbour`'s OpenNSA (PeerSetupError with setup.sh's words when it does not come up);
        `tpc_timeout`: seconds it keeps an uncommitted hold (None: OpenNSA's 120)."""
        if _port_busy(neighbour.port):
            raise PeerSetupError(f"port {neighbour.port} of {neighbour.url} is taken: something already listens "
                                 f"there, where the demo starts {neighbour.nsa}'s OpenNSA")
        base = Path(tempfile.mkdtemp(prefix=f"tsdn-demo-nsa-{neighbour.domain}-", dir="/tmp"))
        base.chmod(0o755)  # PostgreSQL runs as its own user when setup.sh runs as root
        self.started[neighbour.nsa] = base
        path = base / "neighbour.nrm"
        path.write_text(nrm(neighbour))
        path.chmod(0o644)
        env = {**os.environ, "NSA_DOMAIN": neighbour.domain, "NRM_FILE": str(path), "RESET_DB": "0",
               **({"TPC_TIMEOUT": str(tpc_timeout)} if tpc_timeout is not None else {})}
        log = log_dir / f"opennsa-{neighbour.domain}.setup.log"
        try:
            done = subprocess.run([str(self.recipe / "setup.sh"), str(base), str(neighbour.port), str(free_port())],
                                  env=env, capture_output=True, text=True, timeout=SETUP_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise PeerSetupError(f"OpenNSA for {neighbour.nsa} did not start within {SETUP_TIMEOUT:g} s") from None
        log.write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
            raise PeerSetupError(f"OpenNSA for {neighbour.nsa} did not start (setup.sh exit {done.returncode}): "
                                 f"{' | '.join(tail)}; see {log}")

    def keep_log(self, nsa: str, log_dir: Path) -> None:
        """Copy the OpenNSA log of `nsa` into `log_dir` (before its state dir is purged)."""
        base = self.started.get(nsa)
        if base is not None and (base / "opennsa.log").is_file():
            shutil.copyfile(base / "opennsa.log", log_dir / f"opennsa-{domain_of(nsa)}.log")

    def stop(self) -> None:
        """Stop every OpenNSA started (and its PostgreSQL) and delete their state dirs."""
        for base in self.started.values():
            subprocess.run([str(self.recipe / "stop.sh"), "--purge", str(base)], capture_output=True,
                           timeout=STOP_TIMEOUT, check=False)
            shutil.rmtree(base, ignore_errors=True)
        self.started.clear()


def lifecycles(url: str, provider_nsa: str, requester_nsa: str, connection_ids: list[str],
               timeout: float = 15.0) -> dict[str, str]:
    """What the neighbour at `url` says of each connection (querySummarySync as `requester_nsa`):
    connection id -> its lifecycle state (`Terminated`, `Created`, ...); absent ids are unknown to it."""
    from sdn_app.web.nsi_requester import CallbackReceiver, NsiPeer

    async def ask() -> dict[str, str]:
        receiver = CallbackReceiver(requester_nsa)
        # No callback comes for a synchronous query; OpenNSA wants a replyTo all the same.
        async with NsiPeer(provider_nsa, url, requester_nsa, "http://127.0.0.1:9/NSI/services/RequesterService2",
                           receiver, request_timeout=timeout) as peer:
            results = await peer.query(*connection_ids)
        return {r.connection_id: r.states.lifecycle for r in results}

    return asyncio.run(ask())
