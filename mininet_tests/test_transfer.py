"""A transfer between two DTN agents in Mininet hosts, on real Open vSwitch, through the real
controller process: the agents take their jobs from the controller, the sender reports every
second, a link on the path congested by another tenant's traffic (real UDP between the
cross-traffic hosts, which the switches' port counters see) moves the reservation to the
alternate, and the rate recovers.
"""

from __future__ import annotations

import itertools
import subprocess
import threading

import pytest

from benchmarks.report import free_port
from mininet_tests.controlled import DEADLINE, TOKEN, TSDN, ControllerProcess, connected_bridges
from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import agent_pb2, bandwidth_pb2, transfer_pb2
from tests.waiting import wait_for
from tsdn.demo.cross_traffic import CrossTraffic

BOOKED = 20 * 10**9  # nominal; 20 Mbit/s on the emulated links at 0.001 (the session's calibrated scale)
SECONDS = 25  # the transfer's size, in seconds at the booked rate (its bytes as the emulation moves them)
CROSS = 95 * 10**9  # another tenant's traffic on s2 -> s3 (100G): 5G left, well under 80% of the booking


def start_agent(net, controller: ControllerProcess, dtn: str) -> subprocess.Popen:
    """`tsdn agent run` inside the DTN's Mininet host, reaching the controller's unix socket."""
    return net.host(dtn).popen(
        [TSDN, "agent", "run", "--controller", controller.agent_socket, "--name", dtn,
         "--token-file", str(controller.agent_token(dtn)), "--heartbeat-interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def collect(stream, into: list) -> None:
    """Append each message of `stream` to `into` as it arrives."""
    for message in stream:
        into.append(message)


class Watch:
    """Every event of one transfer, collected on a thread."""

    def __init__(self, client: TsdnClient, name: str):
        self.events: list[transfer_pb2.TransferEvent] = []
        threading.Thread(target=collect, args=(client.watch_transfer(name, timeout=300), self.events),
                         daemon=True).start()

    def rates(self) -> list[transfer_pb2.Transfer]:
        return [e.transfer for e in list(self.events) if e.reason == "rate"]

    def reasons(self) -> list[str]:
        return [e.reason for e in list(self.events)]


@pytest.fixture
def agents_ring8(network, tmp_path, rate_scale):
    """ring8 controlled by a controller process at the session's calibrated scale, with agents running in
    dtn1 and dtn3."""
    controller = ControllerProcess(tmp_path, free_port(), agents=("dtn1", "dtn3"), extra=("--agent-timeout", "3"),
                                   scale=rate_scale)
    processes: list[subprocess.Popen] = []
    try:
        address = controller.start()
        net = network("ring8", scale=rate_scale, controller=("127.0.0.1", controller.openflow_port),
                      cross_traffic=("s2", "s3"))
        wait_for(lambda: connected_bridges() >= {f"s{i}" for i in range(1, 9)}, "all 8 switches to connect",
                 DEADLINE)
        processes.extend(start_agent(net, controller, dtn) for dtn in ("dtn1", "dtn3"))
        with TsdnClient(address, token=TOKEN) as client:
            wait_for(lambda: {a.dtn for a in client.list_agents() if a.state == agent_pb2.ONLINE}
                     >= {"dtn1", "dtn3"}, "both agents to register", DEADLINE)
            yield net, client, processes
    finally:
        for process in processes:
            process.kill()
            process.wait(10)
        controller.stop()


def test_a_transfer_moves_off_a_congested_link_and_its_rate_recovers(agents_ring8):
    net, client, _ = agents_ring8
    size = int(BOOKED * net.scale / 8 * SECONDS)
    transfer = client.start_transfer("dtn1", "dtn3", BOOKED, size=size, streams=2)
    watch = Watch(client, transfer.name)

    wait_for(lambda: len(watch.rates()) >= 3, "three rate reports from the sender", DEADLINE)
    first = watch.rates()[-1]
    assert list(first.path) == ["s1", "s2", "s3"], first.path
    ends = [t.rate.end for t in watch.rates()]
    steps = [b - a for a, b in itertools.pairwise(ends)]
    assert all(0.5 <= step <= 1.5 for step in steps), f"reports should come every second: {steps}"
    assert first.nominal_bps >= 0.8 * BOOKED, f"{first.nominal_bps / 1e9:.1f}G of {BOOKED / 1e9:g}G booked"

    cross = CrossTraffic(net)
    try:
        cross.start(net.topology.directions["s2:1->s3:2"], CROSS)
        wait_for(lambda: any(t.path and "s2" not in t.path for t in [client.get_transfer(transfer.name)]),
                 "the reservation to move off s2-s3", DEADLINE)
    finally:
        cross.close()
    moved = client.get_transfer(transfer.name)
    assert list(moved.path) == ["s1", "s8", "s7", "s6", "s5", "s4", "s3"], moved.path
    assert any("congested: s2:1->s3:2 at " in r for r in watch.reasons()), watch.reasons()
    seen = len(watch.rates())
    wait_for(lambda: any(t.nominal_bps >= 0.8 * BOOKED and "s2" not in t.path for t in watch.rates()[seen:]),
             "the rate to recover on the alternate", DEADLINE)

    wait_for(lambda: client.get_transfer(transfer.name).state in (transfer_pb2.TRANSFER_SUCCEEDED,
                                                                  transfer_pb2.TRANSFER_FAILED),
             "the transfer to end", 120)
    done = client.get_transfer(transfer.name)
    assert done.state == transfer_pb2.TRANSFER_SUCCEEDED, done.reason
    assert done.rate.bytes_total >= size
    assert client.get_reservation(done.reservation).state == bandwidth_pb2.RELEASED


def test_an_agent_that_dies_is_shown_lost(agents_ring8):
    _, client, processes = agents_ring8
    events = []
    threading.Thread(target=collect, args=(client.watch_agents(timeout=60), events), daemon=True).start()
    processes[1].kill()
    wait_for(lambda: any(e.state == agent_pb2.LOST and e.agent.dtn == "dtn3" for e in list(events)),
             "dtn3's agent to be shown LOST on the watch stream", DEADLINE)
