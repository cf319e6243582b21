"""Fixtures for the system tests on real Open vSwitch and Mininet.

Every test here is skipped, with the missing pieces named, unless it runs as root with
Mininet, Open vSwitch, iperf3, ethtool and ping installed (CI has them all). Open vSwitch
is started (userspace) when `ovs-vsctl show` fails; `mn -c` runs before the first test,
after every test that made a network (pass or fail) and after the last test.

The builder is imported inside the fixtures, never at module level, so a machine without
Mininet still collects and skips this folder instead of failing the whole run.

`controlled` runs ring8 under a real `tsdn controller` process (mininet_tests/controlled.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"  # topologies.open_vswitch runs it
TOOLS = {
    "mn": "mininet",
    "ovs-vsctl": "openvswitch-switch",
    "ovs-ofctl": "openvswitch-switch",
    "ovs-vswitchd": "openvswitch-switch",
    "iperf3": "iperf3",
    "ethtool": "ethtool",
    "ping": "iputils-ping",
    "tc": "iproute2",
    "ip": "iproute2",
}


def missing_requirements() -> list[str]:
    """Name everything this folder needs that the machine lacks."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (run pytest as root)")
    if importlib.util.find_spec("mininet") is None:
        missing.append("the mininet Python package (Debian package mininet, seen by a venv made from "
                       "/usr/bin/python3 with --system-site-packages)")
    for tool, package in TOOLS.items():
        if shutil.which(tool) is None:
            missing.append(f"{tool} (Debian package {package})")
    if shutil.which("ovs-vsctl") is not None and not os.path.exists(OVS_CTL):
        missing.append(f"{OVS_CTL} (Debian package openvswitch-switch)")
    return missing


def ensure_ovs() -> None:
    """Open vSwitch in userspace, with its packet socket as the emulation needs it (topologies.open_vswitch)."""
    from topologies import open_vswitch

    try:
        open_vswitch.ensure()
    except RuntimeError as error:
        pytest.fail(str(error))


def mn_clean() -> None:
    """Run `mn -c`: remove every bridge, `*-eth*` link and Mininet process left behind."""
    subprocess.run(["mn", "-c"], capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="session", autouse=True)
def mininet_machine() -> Iterator[None]:
    """Skip the folder on a machine that cannot run it; otherwise OVS up and a clean slate."""
    missing = missing_requirements()
    if missing:
        pytest.skip("Mininet system tests need: " + "; ".join(missing))
    ensure_ovs()
    mn_clean()
    yield
    mn_clean()


CALIBRATION = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def rate_scale(mininet_machine, request) -> float:
    """The scale at which the tests that assert a rate run ring8: what this machine's emulation carries,
    measured once per session (mininet_tests/calibration.py) and said in the test output."""
    from mininet_tests.calibration import calibrate

    mn_clean()
    try:
        found = calibrate()
    finally:
        mn_clean()
    line = found.describe()
    request.config.stash[CALIBRATION] = line
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(f"\n{line}")
    return found.scale


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The emulation's calibration again at the end, beside the results it scaled."""
    line = config.stash.get(CALIBRATION, None)
    if line:
        terminalreporter.write_sep("-", "emulation calibration")
        terminalreporter.write_line(line)


@pytest.fixture
def clean_mininet() -> Iterator[None]:
    """Run `mn -c` after the test, whatever its outcome."""
    try:
        yield
    finally:
        mn_clean()


@pytest.fixture
def network(clean_mininet) -> Iterator[Callable[..., object]]:
    """Factory: `network("ring8", scale=..., controller=None, cross_traffic=())` starts a `RunningNetwork`.

    The first argument is a built-in topology name, a file path or a `Topology`. Every
    network started is stopped after the test, then `mn -c` runs, even on failure.
    """
    from topologies.mininet_builder import start_network

    with contextlib.ExitStack() as stack:

        def start(topology, scale: float | None = None, controller: tuple[str, int] | None = None,
                  cross_traffic: tuple[str, ...] = ()):
            return stack.enter_context(start_network(topology, scale=scale, controller=controller,
                                                     cross_traffic=cross_traffic))

        yield start


ALL_RING8_SWITCHES = frozenset(f"s{i}" for i in range(1, 9))


@contextlib.contextmanager
def ring8_under_controller(network, tmp_path, **controller) -> Iterator[tuple[object, dict, object]]:
    """ring8 in Mininet under a `tsdn controller` process (`ControllerProcess(**controller)`, at its
    `scale`, default `SCALE`), every switch connected; yields (network, CLI env, process) and stops
    the controller after."""
    from benchmarks.report import free_port
    from mininet_tests.controlled import DEADLINE, ControllerProcess, cli_env, connected_bridges
    from tests.waiting import wait_for

    process = ControllerProcess(tmp_path, free_port(), **controller)
    try:
        address = process.start()
        net = network("ring8", scale=process.scale, controller=("127.0.0.1", process.openflow_port))
        wait_for(lambda: connected_bridges() >= ALL_RING8_SWITCHES, "all 8 switches to connect", DEADLINE)
        yield net, cli_env(address, tmp_path), process
    finally:
        process.stop()


@pytest.fixture
def controlled(network, tmp_path) -> Iterator[tuple[object, dict, object]]:
    """ring8 in Mininet, controlled by a `tsdn controller` process; yields (network, CLI env, process)."""
    with ring8_under_controller(network, tmp_path) as running:
        yield running


@pytest.fixture
def ring8():
    """The ring8 `Topology`."""
    from sdn_app.core.topology import Topology
    from topologies import builtin_topology

    return Topology.load(builtin_topology("ring8"))


@contextlib.contextmanager
def ring8_under_fabric(network, ring8, bundles: bool = True) -> Iterator[tuple[object, object]]:
    """os-ken (a `Fabric`, with or without OpenFlow bundles) in this process on a fresh port and
    ring8 in Mininet pointed at it, every switch connected; yields (fabric, network), stops the fabric."""
    from benchmarks.report import free_port
    from sdn_app.openflow.fabric import start_openflow
    from topologies.mininet_builder import default_scale

    scale = default_scale(ring8)
    port = free_port()
    fab = start_openflow(ring8, listen_port=port, scale=scale, bundles=bundles)
    try:
        net = network(ring8, scale=scale, controller=("127.0.0.1", port))
        dpids = {s.dpid for s in ring8.switches.values()}
        assert fab.wait_connected(dpids, timeout=30), \
            f"only dpids {sorted(fab.connected())} of {sorted(dpids)} connected within 30 s"
        yield fab, net
    finally:
        fab.stop()


@pytest.fixture
def fabric(network, ring8) -> Iterator[tuple[object, object]]:
    """`ring8_under_fabric` with bundles; yields (fabric, network)."""
    with ring8_under_fabric(network, ring8) as running:
        yield running
