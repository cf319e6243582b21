"""Real NSI peers for tests: OpenNSA (NORDUnet's NSI CS 2.0 provider, "dud" backend) started by the recipe
in ../shared/tools/opennsa (or the directory TSDN_OPENNSA names), and its requester command line `onsa`.

Fixtures (re-exported by tests/conftest.py):

- `opennsa`: a running OpenNSA for the session (its CS2 URL), stopped and purged afterwards;
- `opennsa_build`: OpenNSA's source tree and venv (built by the recipe's setup.sh when missing);
- `onsa`: the path of the recipe's `onsa` wrapper, with the source and venv it runs from in place.

Without the recipe these skip saying why, and fail when CI is set (CI must run them)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OPENNSA_TPC_TIMEOUT = 5  # seconds the session's OpenNSA keeps an uncommitted hold
SETUP_TIMEOUT = 900  # seconds setup.sh may take from nothing (apt, pip with psycopg2 built from source)


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def opennsa_recipe() -> Path:
    """The OpenNSA recipe directory (TSDN_OPENNSA, else ../shared/tools/opennsa beside the repo); the test
    skips saying why when it is absent, and fails when CI is set."""
    recipe = Path(os.environ.get("TSDN_OPENNSA") or REPO.parent / "shared" / "tools" / "opennsa")
    if not (recipe / "setup.sh").is_file():
        why = f"no OpenNSA recipe: {recipe / 'setup.sh'} is not a file (set TSDN_OPENNSA to its directory)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return recipe


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
    OPENNSA_TPC_TIMEOUT s) started by the recipe's setup.sh in a fresh /tmp dir: its CS2 URL."""
    recipe = opennsa_recipe()
    base = Path(tempfile.mkdtemp(prefix="tsdn-opennsa-", dir="/tmp"))
    base.chmod(0o755)  # PostgreSQL runs as its own user when setup.sh runs as root
    port = free_port()
    env = {**os.environ, "TPC_TIMEOUT": str(OPENNSA_TPC_TIMEOUT), "RESET_DB": "0"}
    try:
        started = subprocess.run([str(recipe / "setup.sh"), str(base), str(port), str(free_port())], env=env,
                                 capture_output=True, text=True, timeout=SETUP_TIMEOUT, check=False)
        if started.returncode != 0:
            pytest.fail(f"OpenNSA setup.sh failed ({started.returncode}):\n{started.stdout[-3000:]}\n"
                        f"{started.stderr[-3000:]}")
        yield f"http://127.0.0.1:{port}/NSI/services/CS2"
    finally:
        subprocess.run([str(recipe / "stop.sh"), "--purge", str(base)], capture_output=True, timeout=120,
                       check=False)
        shutil.rmtree(base, ignore_errors=True)


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
    after OPENNSA_TPC_TIMEOUT s; its own state dir and ports, stopped and purged afterwards."""
    recipe = opennsa_recipe()
    base = Path(tempfile.mkdtemp(prefix="tsdn-opennsa-rnp-", dir="/tmp"))
    base.chmod(0o755)  # PostgreSQL runs as its own user when setup.sh runs as root
    nrm = base / "rnp.nrm"
    first, last = RNP_VLANS
    nrm.write_text("".join(f"ethernet {port} - vlan:{first}-{last} 100000 em{i} -\n"
                           for i, port in enumerate(RNP_PORTS)))
    nrm.chmod(0o644)
    port = free_port()
    env = {**os.environ, "TPC_TIMEOUT": str(OPENNSA_TPC_TIMEOUT), "RESET_DB": "0", "NSA_DOMAIN": RNP_DOMAIN,
           "NRM_FILE": str(nrm)}
    try:
        started = subprocess.run([str(recipe / "setup.sh"), str(base), str(port), str(free_port())], env=env,
                                 capture_output=True, text=True, timeout=SETUP_TIMEOUT, check=False)
        if started.returncode != 0:
            pytest.fail(f"OpenNSA ({RNP_DOMAIN}) setup.sh failed ({started.returncode}):\n{started.stdout[-3000:]}\n"
                        f"{started.stderr[-3000:]}")
        yield Neighbour(f"urn:ogf:network:{RNP_DOMAIN}:nsa", f"urn:ogf:network:{RNP_DOMAIN}:topology",
                        f"http://127.0.0.1:{port}/NSI/services/CS2")
    finally:
        subprocess.run([str(recipe / "stop.sh"), "--purge", str(base)], capture_output=True, timeout=120,
                       check=False)
        shutil.rmtree(base, ignore_errors=True)
