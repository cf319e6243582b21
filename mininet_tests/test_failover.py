"""Two `tsdn controller` processes sharing a real etcd, ring8 on real Open vSwitch with every switch
connected to both: traffic across a reservation never stops while the leader is killed and the
other takes over, and a link cut right after the failover is rerouted by the new leader."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from benchmarks.controller_process import ControllerProcess
from benchmarks.failover import _REPLY, connections, leader_address, masters
from benchmarks.report import free_port
from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.ha.etcd import Etcd
from tests.waiting import wait_for

SCALE = 0.002
TOKEN = "failover-token-0123456789abcdef"
SRC, DST = "dtn1", "dtn3"  # shortest path s1 > s2 > s3; the long way round is s1 > s8 > ... > s4 > s3
PROBE_INTERVAL = 0.01


def replies(path) -> list[tuple[float, int]]:
    return [(float(m.group(1)), int(m.group(2))) for line in path.read_text().splitlines()
            if (m := _REPLY.match(line))]


def test_traffic_never_stops_across_a_leader_failover_and_the_new_leader_reroutes(clean_mininet, etcd, tmp_path):
    from topologies.mininet_builder import start_network

    of_ports = [free_port(), free_port()]
    controllers = [ControllerProcess(tmp_path / f"c{i}", ("127.0.0.1", port), SCALE, principal="rucio", token=TOKEN,
                                     topology="ring8", store=etcd.url, extra=("--no-http",))
                   for i, port in enumerate(of_ports)]
    store = Etcd(etcd.url)
    with contextlib.ExitStack() as stack:
        for controller in controllers:
            stack.callback(controller.stop)
        addresses = [controller.start() for controller in controllers]
        net = stack.enter_context(start_network("ring8", SCALE, controllers=[("127.0.0.1", p) for p in of_ports]))
        wait_for(lambda: connections() == 8 * 2, "every switch connected to both controllers", 30)
        leader = addresses.index(wait_for(lambda: leader_address(store), "a leader elected", 30))
        other = 1 - leader
        wait_for(lambda: set(masters().values()) == {f"tcp:127.0.0.1:{of_ports[leader]}"}
                 and len(masters()) == 8, "the leader MASTER on every switch", 30)

        client = stack.enter_context(TsdnClient(",".join(addresses), token=TOKEN, timeout=10))
        there = client.create_reservation(SRC, DST, 10 * 10**9)
        back = client.create_reservation(DST, SRC, 10 * 10**9)
        for made in (there, back):
            wait_for(lambda made=made: client.get_reservation(made.name).state == pb.ACTIVE, "ACTIVE", 30)
        path = list(client.get_reservation(there.name).path.links)

        output = tmp_path / "ping.txt"
        with output.open("w") as sink:
            ping = net.host(SRC).popen(["ping", "-D", "-n", "-i", f"{PROBE_INTERVAL:g}", net.topology.dtns[DST].ipv4],
                                       stdout=sink)
        stack.callback(lambda: ping.poll() is None and ping.send_signal(signal.SIGINT))
        wait_for(lambda: len(replies(output)) >= 50, "ping replies across the reservation", 30)

        killed = time.time()
        os.kill(controllers[leader].pid, signal.SIGKILL)
        new_master = f"tcp:127.0.0.1:{of_ports[other]}"
        wait_for(lambda: len(masters()) == 8 and set(masters().values()) == {new_master},
                 "the other controller MASTER on every switch", 30)
        assert leader_address(store) == addresses[other]
        taken_over = time.time()
        wait_for(lambda: replies(output)[-1][0] > taken_over + 1.0, "a second of ping after the takeover", 30)

        seqs = [seq for stamp, seq in replies(output) if stamp >= killed - 0.5]
        missing = sorted(set(range(seqs[0], seqs[-1] + 1)) - set(seqs))
        assert not missing, f"probes lost across the failover: icmp_seq {missing[:20]}"
        reservation = client.get_reservation(there.name)  # from the new leader: nothing lost
        assert (reservation.state, list(reservation.path.links)) == (pb.ACTIVE, path)

        # Right after the failover: the new leader, and only it, moves the reservation off a cut link.
        a, b = (net.topo.mn_name(end) for end in (net.topology.links[path[1]].a, net.topology.links[path[1]].b))
        cut = time.time()
        net.mn.configLinkStatus(a, b, "down")

        def moved() -> bool:
            now = client.get_reservation(there.name)
            return now.state == pb.ACTIVE and path[1] not in now.path.links

        wait_for(moved, f"{there.name} ACTIVE on a path without the cut link {path[1]}", 30)
        wait_for(lambda: replies(output)[-1][0] > time.time() - 0.5 and replies(output)[-1][0] > cut + 0.5,
                 "ping replies again after the reroute", 30)
        assert controllers[leader].process.poll() is not None  # the old leader stayed dead: the new one did it
