"""Real NSI peers for tests: OpenNSA (NORDUnet's NSI CS 2.0 provider, "dud" backend) started by the recipe
in ../shared/tools/opennsa (or the directory TSDN_OPENNSA names), and its requester command line `onsa`.

Fixtures (re-exported by tests/conftest.py):

- `opennsa`: a running OpenNSA for the session (its CS2 URL), stopped and purged afterwards;
- `opennsa_build`: OpenNSA's source tree and venv (built by the recipe's setup.sh when missing);
- `onsa`: the path of the recipe's `onsa` wrapper, with the source and venv it runs from in place.

Without the recipe these skip saying why, and fail when CI is set (CI must run them)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tsdn.demo import peers
from tsdn.demo.peers import free_port

OPENNSA_TPC_TIMEOUT = 5  # seconds the session's OpenNSA keeps an uncommitted hold


@dataclass(frozen=True)
class OpenNsaBuild:
    """Where OpenNSA's recipe, source tree and venv interpreter are."""

    recipe: Path
    source: Path
    python: Path

    @property
    def onsa(self) -> Path:
        """The recipe's `onsa` wrapper (it runs the source tree with the venv)."""
        return self.recipe / "onsa"


def opennsa_recipe() -> Path:
    """The OpenNSA recipe directory (TSDN_OPENNSA, else ../shared/tools/opennsa beside the repo); the test
    skips saying why when it is absent, and fails when CI is set."""
    recipe = peers.opennsa_recipe()
    if not (recipe / "setup.sh").is_file():
        why = f"no OpenNSA recipe: {recipe / 'setup.sh'} is not a file (set TSDN_OPENNSA to its directory)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return recipe


@contextlib.contextmanager
def running(domain: str, ports: tuple[str, ...], vlans: tuple[int, int]) -> Iterator[str]:
    """A real OpenNSA (dud backend) for `domain` with `ports` (each offering `vlans`), holds timing out
    after OPENNSA_TPC_TIMEOUT s, started by the recipe (as the demo starts its neighbours) on a free port:
    its CS2 URL. Stopped and purged afterwards."""
    recipe = opennsa_recipe()
    port = free_port()
    url = f"http://127.0.0.1:{port}/NSI/services/CS2"
    neighbour = peers.Neighbour(f"urn:ogf:network:{domain}:nsa", url, domain, port,
                                tuple((name, *vlans, 100_000) for name in ports))
    started = peers.RunningPeers(recipe)
    logs = Path(tempfile.mkdtemp(prefix=f"tsdn-opennsa-{domain}-logs-"))
    try:
        try:
            started.start(neighbour, logs, tpc_timeout=OPENNSA_TPC_TIMEOUT)
        except peers.PeerSetupError as error:
            pytest.fail(str(error))
        yield url
    finally:
        started.stop()
        shutil.rmtree(logs, ignore_errors=True)


def _built(recipe: Path) -> OpenNsaBuild | None:
    """The source tree and venv setup.sh leaves (OPENNSA_SRC, OPENNSA_VENV as it reads them), if present."""
    python = Path(os.environ.get("OPENNSA_VENV", "/tmp/opennsa-venv")) / "bin" / "python"
    source = Path(os.environ.get("OPENNSA_SRC", "/tmp/opennsa-src"))
    if (source / "opennsa" / "topology" / "nmlxml.py").is_file() and (source / "onsa").is_file() and python.is_file():
        return OpenNsaBuild(recipe, source, python)
    return None


@pytest.fixture(scope="session")
def opennsa() -> Iterator[str]:
    """A real OpenNSA (dud backend, ports ps/port1/port2 with VLANs 1780-1799, holds time out after
    OPENNSA_TPC_TIMEOUT s): its CS2 URL."""
    with running("opennsa.test", ("ps", "port1", "port2"), (1780, 1799)) as url:
        yield url


@pytest.fixture(scope="session")
def opennsa_build(request: pytest.FixtureRequest) -> OpenNsaBuild:
    """OpenNSA's source tree and venv; when they are not built yet, the session's OpenNSA is started
    (setup.sh builds them), so this fails or skips as `opennsa` does."""
    recipe = opennsa_recipe()
    found = _built(recipe)
    if found is None:
        request.getfixturevalue("opennsa")
        found = _built(recipe)
    if found is None:
        pytest.fail(f"{recipe / 'setup.sh'} ran but left no OpenNSA source and venv (OPENNSA_SRC, OPENNSA_VENV)")
    return found


@pytest.fixture(scope="session")
def onsa(opennsa_build: OpenNsaBuild) -> Path:
    """The `onsa` command (OpenNSA's requester command line), ready to run."""
    if not os.access(opennsa_build.onsa, os.X_OK):
        pytest.fail(f"{opennsa_build.onsa} is not an executable")
    return opennsa_build.onsa


@dataclass(frozen=True)
class Neighbour:
    """A running OpenNSA standing in for a neighbouring WAN domain: its NSA id, network id and CS2 URL."""

    nsa: str
    network: str
    url: str

    def stp(self, port: str) -> str:
        """The STP URN of `port` in this OpenNSA's network (no VLAN)."""
        return f"{self.network}:{port}"


RNP_DOMAIN = "rnp.test"
# the STPs facing ring8's inter-domain ports (a second one for re-homing), and the remote DTN's
RNP_PORTS = ("ring8", "saopaulo", "ring8b")
RNP_VLANS = (1780, 1799)


@pytest.fixture(scope="session")
def opennsa_rnp() -> Iterator[Neighbour]:
    """A second real OpenNSA (dud backend) standing in for RNP: NSA urn:ogf:network:rnp.test:nsa, ports
    `ring8`, `saopaulo` and `ring8b` (a second port facing ring8) with VLANs 1780-1799, holds timing out
    after OPENNSA_TPC_TIMEOUT s."""
    with running(RNP_DOMAIN, RNP_PORTS, RNP_VLANS) as url:
        yield Neighbour(f"urn:ogf:network:{RNP_DOMAIN}:nsa", f"urn:ogf:network:{RNP_DOMAIN}:topology", url)
