"""The os-ken application: the only class here that subclasses the framework (Faucet's valve_ryuapp).

`TsdnOpenFlowApp` takes its `topology` and emulation `scale` as os-ken app kwargs
(`AppManager.instantiate_apps(topology=..., scale=...)`, which `fabric.start_openflow` does;
os-ken hands every app the same kwargs and its own `OFPHandler` ignores them). It decides
nothing about reservations; its handlers unpack an event and hand over:

- switch features (CONFIG_DISPATCHER): install the base flows, table-miss drop (default deny)
  and ARP to the controller;
- state changes: a datapath in MAIN_DISPATCHER is connected (tracked by dpid); in
  DEAD_DISPATCHER it is gone, and whoever waits on it is told;
- packet-in: ARP requests are answered for DTN addresses of the topology (`arp_answer`), with
  a packet-out on the port the request came in on; never flooded, everything else ignored;
- barrier replies and error messages go to the waiters registered for their (dpid, xid).

Threads: os-ken runs these handlers on the app's event thread; `Fabric.apply` runs on the
caller's. Shared state (datapaths, waiters, xids) is guarded by one lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import ClassVar

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_v1_3

from sdn_app.core.topology import Topology
from sdn_app.openflow import encoder

LOG = logging.getLogger("tsdn.openflow")


@dataclass(frozen=True)
class ArpAnswer:
    """What to answer: `target_ip` is at `target_mac`, to the asker at `asker_mac`/`asker_ip`."""

    asker_mac: str
    asker_ip: str
    target_mac: str
    target_ip: str


def arp_answer(topology: Topology, dpid: int, in_port: int, eth_src: str, opcode: int, src_mac: str,
               src_ip: str, dst_ip: str) -> ArpAnswer | None:
    """The answer to an ARP packet seen on switch `dpid` port `in_port`, or None to ignore it.

    Answered: requests whose sender is a DTN of the topology (its IPv4 and MAC, in the ARP
    header and the Ethernet source) arriving on that DTN's own access port, asking for
    another DTN's address. Everything else (replies, gratuitous ARP, strangers, requests
    from the wrong port, unknown targets) is ignored.
    """
    if opcode != arp.ARP_REQUEST or src_ip == dst_ip:
        return None
    asker = next((d for d in topology.dtns.values() if d.ipv4 == src_ip), None)
    target = next((d for d in topology.dtns.values() if d.ipv4 == dst_ip), None)
    if asker is None or target is None:
        return None
    if asker.mac.lower() != src_mac.lower() or asker.mac.lower() != eth_src.lower():
        return None
    if topology.switch_by_dpid(dpid) != asker.switch or in_port != asker.port:
        return None
    return ArpAnswer(asker_mac=asker.mac, asker_ip=asker.ipv4, target_mac=target.mac, target_ip=target.ipv4)


class Waiter:
    """Barrier replies and errors awaited for one batch: (dpid, xid) of each barrier, and the
    xids of the messages sent before it (whose errors are reported)."""

    def __init__(self, lock: threading.RLock) -> None:
        self.cond = threading.Condition(lock)  # the app's lock: waiters change under it
        self.barriers: set[tuple[int, int]] = set()
        self.errors: list[tuple[int, int, int, int]] = []  # (dpid, xid, type, code)
        self.gone: set[int] = set()

    def done(self) -> bool:
        return not self.barriers or bool(self.errors) or bool(self.gone)


class TsdnOpenFlowApp(app_manager.OSKenApp):
    """Base flows, ARP answers, datapath tracking and barrier/error routing for the fabric."""

    OFP_VERSIONS: ClassVar[list[int]] = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, topology: Topology | None = None, scale: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)
        if topology is None:
            raise ValueError("TsdnOpenFlowApp needs the topology (app kwarg topology=...)")
        self.topology = topology
        self.scale = scale
        self.lock = threading.RLock()
        self.datapaths: dict[int, object] = {}
        self.changed = threading.Condition(self.lock)
        # (dpid, xid) -> waiter, for every message of an apply batch and its barriers
        self._waiting: dict[tuple[int, int], Waiter] = {}

    # -- sending (one lock: datapath xids are not thread-safe in os-ken) -------------------

    def waiter(self) -> Waiter:
        """A new waiter for one batch of messages."""
        return Waiter(self.lock)

    def send(self, dp, msg, waiter: Waiter | None = None, barrier: bool = False) -> int:
        """Send `msg` to `dp` with a fresh xid; route its errors (and, for a `barrier`, its
        reply) to `waiter`. Raises ConnectionError when the datapath is closing."""
        with self.lock:
            xid = dp.set_xid(msg)
            if waiter is not None:
                self._waiting[(dp.id, xid)] = waiter
                if barrier:
                    waiter.barriers.add((dp.id, xid))
            if not dp.send_msg(msg):
                self._waiting.pop((dp.id, xid), None)
                if waiter is not None:
                    waiter.barriers.discard((dp.id, xid))
                raise ConnectionError(f"datapath {dp.id:#x} is closing")
            return xid

    def forget(self, waiter: Waiter) -> None:
        """Drop every (dpid, xid) routed to `waiter`."""
        with self.lock:
            for key in [k for k, w in self._waiting.items() if w is waiter]:
                del self._waiting[key]

    def datapath(self, dpid: int):
        """The connected datapath `dpid`, or None."""
        with self.lock:
            return self.datapaths.get(dpid)

    def connected(self) -> set[int]:
        """Dpids of the connected switches."""
        with self.lock:
            return set(self.datapaths)

    def switch_name(self, dpid: int) -> str:
        return self.topology.switch_by_dpid(dpid) or f"dpid {dpid:#x}"

    # -- handlers ---------------------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev) -> None:
        dp = ev.msg.datapath
        if self.topology.switch_by_dpid(dp.id) is None:
            LOG.warning("switch with dpid %#x is not in topology %s; default deny only", dp.id, self.topology.name)
        self.send(dp, encoder.table_miss_drop(dp))
        self.send(dp, encoder.arp_to_controller(dp))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev) -> None:
        dp = ev.datapath
        if dp.id is None:
            return
        with self.lock:
            if ev.state == MAIN_DISPATCHER:
                self.datapaths[dp.id] = dp
                LOG.info("switch %s (dpid %#x) connected from %s", self.switch_name(dp.id), dp.id, dp.address)
            elif ev.state == DEAD_DISPATCHER and self.datapaths.get(dp.id) is dp:
                del self.datapaths[dp.id]
                LOG.info("switch %s (dpid %#x) disconnected", self.switch_name(dp.id), dp.id)
                for (dpid, _), waiter in list(self._waiting.items()):
                    if dpid == dp.id:
                        waiter.gone.add(dpid)
                        waiter.cond.notify_all()
            else:
                return
            self.changed.notify_all()

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev) -> None:
        msg = ev.msg
        with self.lock:
            waiter = self._waiting.pop((msg.datapath.id, msg.xid), None)
            if waiter is not None:
                waiter.barriers.discard((msg.datapath.id, msg.xid))
                waiter.cond.notify_all()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error(self, ev) -> None:
        msg = ev.msg
        dpid = msg.datapath.id
        with self.lock:
            waiter = self._waiting.get((dpid, msg.xid))
            if waiter is not None:
                waiter.errors.append((dpid, msg.xid, msg.type, msg.code))
                waiter.cond.notify_all()
                return
        LOG.warning("switch %s: unsolicited error %s (xid %s)", self.switch_name(dpid),
                    encoder.describe_error(msg.datapath.ofproto, msg.type, msg.code), msg.xid)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev) -> None:
        msg = ev.msg
        dp = msg.datapath
        try:
            pkt = packet.Packet(msg.data)
        except Exception:  # a malformed frame is not ours to answer
            return
        eth = pkt.get_protocol(ethernet.ethernet)
        req = pkt.get_protocol(arp.arp)
        if eth is None or req is None:
            return
        in_port = msg.match.get("in_port")
        if in_port is None:
            return
        answer = arp_answer(self.topology, dp.id, in_port, eth.src, req.opcode, req.src_mac, req.src_ip, req.dst_ip)
        if answer is None:
            return
        with contextlib.suppress(ConnectionError):
            self.send(dp, encoder.arp_reply(dp, in_port, asker_mac=answer.asker_mac, asker_ip=answer.asker_ip,
                                            target_mac=answer.target_mac, target_ip=answer.target_ip))
