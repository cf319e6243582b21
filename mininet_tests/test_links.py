"""Link verification on real Open vSwitch: LLDP and port status through a `tsdn controller` process.

Every ring8 link becomes UP (verified by LLDP both ways) in `tsdn topo status`; a link taken
down in Mininet goes DOWN with a port-status reason while the others stay UP, and comes UP
again once LLDP crosses it; a controller given a miswired copy of the topology file shows the
mismatch, naming the expected and the observed end, and logs it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import yaml

from benchmarks.report import free_port
from mininet_tests.conftest import ALL_RING8_SWITCHES
from mininet_tests.controlled import DEADLINE, SCALE, ControllerProcess, cli_env, connected_bridges, tsdn
from tests.waiting import wait_for
from topologies import builtin_topology

POLL = 0.5  # each poll runs the CLI


def status(env) -> dict:
    """`tsdn topo status --json`, parsed."""
    shown = tsdn(env, "topo", "status", "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def links(env) -> dict[str, tuple[str, str]]:
    """Link name -> (state, reason)."""
    return {link["name"]: (link["state"], link.get("reason", "")) for link in status(env)["links"]}


def links_when(env, holds: Callable[[dict[str, tuple[str, str]]], bool]) -> dict[str, tuple[str, str]] | None:
    """`links(env)` if `holds` is true of it, else None (a condition for `wait_for`)."""
    now = links(env)
    return now if holds(now) else None


def logged(controller: ControllerProcess, text: str) -> list[str]:
    """The controller's log lines containing `text`."""
    return [line.strip() for line in controller.log if text in line]


def test_ring_links_are_verified_and_a_cut_link_goes_down_and_comes_back(controlled):
    net, env, controller = controlled
    everything_up = wait_for(lambda: links_when(env, lambda now: {s for s, _ in now.values()} == {"UP"}),
                             "every ring8 link to be verified by LLDP", DEADLINE, POLL)
    assert set(everything_up) == {f"s{i}-s{i % 8 + 1}" for i in range(1, 9)}
    assert {reason for _, reason in everything_up.values()} == {"verified by LLDP both ways"}
    shown = status(env)
    assert shown["controlled"] is True and "mismatches" not in shown
    assert all(s["connected"] for s in shown["switches"])

    net.mn.configLinkStatus(net.topo.mn_name("s2"), net.topo.mn_name("s3"), "down")
    cut = wait_for(lambda: links_when(env, lambda now: now["s2-s3"][0] == "DOWN"), "s2-s3 to go DOWN",
                   DEADLINE, POLL)
    assert cut["s2-s3"][1] in ("port s2:1 went down (port status)", "port s3:2 went down (port status)"), cut
    assert {name for name, (state, _) in cut.items() if state != "UP"} == {"s2-s3"}
    assert logged(controller, "WARNING tsdn.openflow: link s2-s3 down: port s")

    net.mn.configLinkStatus(net.topo.mn_name("s2"), net.topo.mn_name("s3"), "up")
    back = wait_for(lambda: links_when(env, lambda now: now["s2-s3"][0] == "UP"), "s2-s3 to come UP again",
                    DEADLINE, POLL)
    assert {state for state, _ in back.values()} == {"UP"}
    assert logged(controller, "INFO tsdn.openflow: link s2-s3 up: LLDP heard again")
    downs = logged(controller, " down: ")
    assert downs and all(": link s2-s3 down: " in line for line in downs), downs  # no other link ever went down


@pytest.fixture
def miswired_file(tmp_path):
    """ring8 as a file that swaps s3's ports 2 and 3: link s2-s3 on s3:3, dtn3 on s3:2 (the cables
    are the other way round)."""
    spec = yaml.safe_load(builtin_topology("ring8").read_text())
    link = next(link for link in spec["links"] if link["name"] == "s2-s3")
    dtn = next(dtn for dtn in spec["dtns"] if dtn["name"] == "dtn3")
    assert (link["b"], link["b_port"], dtn["port"]) == ("s3", 2, 3)
    link["b_port"], dtn["port"] = 3, 2
    path = tmp_path / "ring8-miswired.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_a_miswired_topology_file_shows_and_logs_the_mismatch(network, tmp_path, miswired_file):
    controller = ControllerProcess(tmp_path, free_port(), topology=str(miswired_file), scale=SCALE)
    try:
        env = cli_env(controller.start(), tmp_path)
        network("ring8", scale=SCALE, controller=("127.0.0.1", controller.openflow_port))  # the real cabling
        wait_for(lambda: connected_bridges() >= ALL_RING8_SWITCHES, "all 8 switches to connect", DEADLINE)
        shown = wait_for(lambda: (lambda now: now if now.get("mismatches") else None)(status(env)),
                         "the mismatch to show", DEADLINE, POLL)
        (mismatch,) = shown["mismatches"]
        assert (mismatch["at"], mismatch["expected"], mismatch["observed"]) == ("s3:2", "DTN dtn3", "LLDP from s2:1")
        assert mismatch["message"] == ("wiring mismatch at s3:2: topology ring8 attaches DTN dtn3 there, "
                                       "but LLDP from s2:1 arrives there")
        warnings = logged(controller, "WARNING tsdn.openflow: wiring mismatch at s3:2:")
        assert len(warnings) == 1, warnings  # once per distinct observation, not once per LLDP round
        wait_for(lambda: {state for name, (state, _) in links(env).items() if name != "s2-s3"} == {"UP"},
                 "every other link to be verified", DEADLINE, POLL)
        # the file's s2:1-s3:3 never hears LLDP: no evidence either way, so it is not taken down
        assert links(env)["s2-s3"] == ("UNVERIFIED", "no LLDP heard on it yet")

        human = tsdn(env, "topo", "status")
        assert human.returncode == 0, human.stderr
        assert "wiring mismatches:\n  wiring mismatch at s3:2:" in human.stdout
    finally:
        controller.stop()
