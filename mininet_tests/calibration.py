"""What this machine's emulation carries, measured once per test session for the tests that assert a rate.

The heaviest load those tests put on ring8 is two metered flows sharing s1->s2 with UDP offered
above their meters (`mininet_tests/test_sharing.py`: 30G and 70G of a 100G link, each offered
100G). `measure` books the same two reservations through a real `tsdn controller` on ring8 at a
scale, sends the same UDP with iperf3 and compares what arrived with each meter. A scale fits
when each flow carried at least `CARRIED` of its meter, half the tests' own 10% tolerance short of
it; down the demo's ladder (`tsdn.demo.calibration.LADDER`) from `SCALE` until one does. The rate
tests then run at that scale and assert exactly what they assert (a meter caps at its rate,
shares split as solved), with the tolerance they have.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from mininet_tests.controlled import DEADLINE, SCALE, TOKEN, ControllerProcess, connected_bridges
from mininet_tests.traffic import start_iperf3
from tests.waiting import wait_for
from tsdn.demo.calibration import ladder

G = 10**9
CARRIED = 0.95  # of its meter, for every flow
FLOWS = (("dtn1", "dtn3", 30 * G), ("dtn8", "dtn2", 70 * G))  # share s1->s2 (ring8's 100G): test_sharing's load
OFFERED = 100 * G  # each, nominal: a whole link's worth, above every meter
SECONDS = 4


@dataclass(frozen=True)
class Measured:
    """At one scale: each flow's meter and what arrived (Mbit/s as emulated)."""

    scale: float
    flows: tuple[tuple[str, float, float], ...]  # (src->dst, metered Mbit/s, received Mbit/s)

    @property
    def fits(self) -> bool:
        return all(received >= CARRIED * metered for _, metered, received in self.flows)

    def describe(self) -> str:
        shown = ", ".join(f"{name} {received:.2f} of {metered:g} Mbit/s ({received / metered:.0%})"
                          for name, metered, received in self.flows)
        return f"scale {self.scale:g}: {shown}: {'fits' if self.fits else 'does not fit'}"


@dataclass(frozen=True)
class Calibration:
    """The scale the rate tests run at, and what was measured on the way to it."""

    scale: float
    tried: tuple[Measured, ...]

    def describe(self) -> str:
        """The line recorded in the test output."""
        return (f"emulation calibration: metered UDP over ring8 ({', '.join(m.describe() for m in self.tried)}); "
                f"the rate tests run at scale {self.scale:g} (needs {CARRIED:.0%} of each meter)")


def measure(scale: float) -> Measured:
    """Book `FLOWS` on ring8 at `scale` under a real controller and send UDP above each meter."""
    from benchmarks.report import free_port
    from northbound.client import TsdnClient
    from northbound.proto.tsdn.v1 import bandwidth_pb2
    from topologies.mininet_builder import start_network

    with tempfile.TemporaryDirectory(prefix="tsdn-calibration-") as folder:
        controller = ControllerProcess(Path(folder), free_port(), scale=scale)
        try:
            address = controller.start()
            with start_network("ring8", scale=scale, controller=("127.0.0.1", controller.openflow_port)) as net, \
                    TsdnClient(address, token=TOKEN) as client:
                wait_for(lambda: connected_bridges() >= {f"s{i}" for i in range(1, 9)}, "all 8 switches to connect",
                         DEADLINE)
                booked = [client.create_reservation(src, dst, bps) for src, dst, bps in FLOWS]
                wait_for(lambda: all(client.get_reservation(r.name).state == bandwidth_pb2.ACTIVE for r in booked),
                         "the calibration's reservations to be ACTIVE", DEADLINE)
                offered = OFFERED * scale / 1e6
                runs = [start_iperf3(net.host(src), net.host(dst), net.topology.dtns[dst].ipv4, SECONDS, offered,
                                     udp=True) for src, dst, _ in FLOWS]
                received = [run.report()["end"]["sum_received"]["bits_per_second"] / 1e6 for run in runs]
        finally:
            controller.stop()
    return Measured(scale, tuple((f"{src}->{dst}", bps * scale / 1e6, got)
                                 for (src, dst, bps), got in zip(FLOWS, received, strict=True)))


def calibrate() -> Calibration:
    """The largest rung of the ladder from `SCALE` that fits; AssertionError naming every rung when none does."""
    tried = []
    for scale in ladder(SCALE, [OFFERED]):
        tried.append(measure(scale))
        if tried[-1].fits:
            return Calibration(scale, tuple(tried))
    raise AssertionError("this machine's emulation carries no rung of the ladder: "
                         + "; ".join(m.describe() for m in tried))
