"""Playing timeline actions on an emulation and recording what the controller and the network did.

    player = Player(scenario, emulation, recording)
    player.play(console)        # the scenario's timeline on its own clock, until its end
    player.perform(i, action)   # or one action at a time (calibration)
    player.step()               # what the watch streams saw, into the recording; cross traffic measured
    player.finish_flows()       # cancel transfers and release reservations still live

Every second of `play` the controller's bookings are sampled and the console redrawn; watch
streams record every transfer's rate reports and every reservation's changes, moves and the
controller's decisions about it. Events of reservations another player started (a calibration's
on the same controller) are not this player's and are left out.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from typing import Any

from sdn_app.core import decisions
from sdn_app.core.nsi import nsa_id
from sdn_app.core.nsi_segments import SEGMENT_LABEL, SEGMENT_NOTE
from sdn_app.core.units import format_bandwidth
from sdn_app.core.validation import default_domain
from tsdn.demo.emulation import Emulation
from tsdn.demo.peers import lifecycles
from tsdn.demo.record import BookingSample, Flow, LinkSample, NsiSegment, RateSample, Recording
from tsdn.demo.scenario import (
    ClearLinkAction,
    CongestLinkAction,
    FailLinkAction,
    ReleaseAction,
    ReserveAction,
    RestoreLinkAction,
    Scenario,
    TransferAction,
    transfer_bytes,
)

TICK = 0.1  # the timeline clock's resolution
SAMPLE_EVERY = 1.0
SEGMENT_END_DEADLINE = 45.0  # seconds the neighbours get, after the last release, to have terminated every segment
ENDED = ("CANCELLED", "SUCCEEDED", "FAILED", "RELEASED", "EXPIRED", "REFUSED")


class Player:
    """Performs a scenario's actions on one emulation into one recording."""

    def __init__(self, scenario: Scenario, emulation: Emulation, recording: Recording,
                 ignored: frozenset[str] = frozenset()):
        """`ignored`: reservation and transfer ids started by an earlier player (not this one's)."""
        self.scenario = scenario
        self.emulation = emulation
        self.topology = emulation.topology
        self.recording = recording
        self.scale = emulation.scale
        self.ignored = ignored
        self.t0 = time.time()
        self._transfer_events: queue.Queue = queue.Queue()  # (flow name, TransferEvent) from the watch threads
        self._reservation_paths: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # id -> (switches, links)
        self._reservation_states: dict[str, int] = {}
        self._by_reservation: dict[str, str] = recording.reservation_flows  # reservation id -> flow name
        self._by_transfer: dict[str, str] = {}  # transfer id -> flow name
        self.link_state: dict[str, str] = {}
        self._next_sample = 0.0

    @property
    def client(self):
        return self.emulation.client

    @property
    def started(self) -> frozenset[str]:
        """The reservation and transfer ids this player started (and the ones it ignored)."""
        return self.ignored | frozenset(self._by_reservation) | frozenset(self._by_transfer)

    def now(self) -> float:
        """Seconds since this player started."""
        return time.time() - self.t0

    def rel(self, epoch: float) -> float:
        return epoch - self.t0

    # -- the timeline --------------------------------------------------------------------

    def play(self, console) -> None:
        """Run the scenario's timeline on its own clock, sampling and redrawing every second."""
        self.t0 = time.time()
        actions = self.scenario.ordered()
        end = self.scenario.end
        console.say(f"timeline: {len(actions)} action(s) over {end:g} s")
        while True:
            now = self.now()
            while actions and actions[0][1].at <= now:
                index, action = actions.pop(0)
                self.perform(index, action)
            if self.step(bookings=True):
                console.update(self.recording, now, end, self.emulation.map_url or "", self._links_line())
            if now >= end and not actions:
                break
            time.sleep(TICK)  # the timeline's own clock
        self.recording.ended = self.now()
        self.finish_flows()

    def step(self, bookings: bool = False) -> bool:
        """Record what the watch streams saw; once a second also sample the cross traffic (and the
        bookings when asked); whether that second's samples were taken."""
        self.drain()
        now = self.now()
        if now < self._next_sample:
            return False
        self._next_sample = max(self._next_sample + SAMPLE_EVERY, now)
        if bookings:
            with contextlib.suppress(Exception):
                self._sample_bookings()
        self._sample_cross_traffic()
        return True

    def _sample_cross_traffic(self) -> None:
        """What each direction loaded with cross traffic transmitted since the last sample."""
        cross = self.emulation.cross
        if cross is None or not cross.streams:
            return
        try:
            measured = cross.measure()
        except (RuntimeError, subprocess.SubprocessError, OSError) as error:
            self.recording.event(self.now(), "note", message=f"could not measure the congested links: {error}")
            return
        at = self.now()
        for direction_id, bps in measured.items():
            stream = cross.streams.get(direction_id)
            if stream is not None:
                self.recording.link_load(LinkSample(at, stream.direction.link, direction_id, bps,
                                                    stream.direction.capacity, stream.rate_bps))

    def _sample_bookings(self) -> None:
        topology = self.client.get_topology()
        at = self.rel(topology.time.ToMicroseconds() / 1e6) if topology.HasField("time") else self.now()
        directions = []
        for link in topology.links:
            directions += [link.a_to_b, link.b_to_a]
        for dtn in topology.dtns:
            directions += [dtn.uplink, dtn.downlink]
        directions = [d for d in directions if d.capacity_bps]
        if not directions:
            return
        fullest = max(directions, key=lambda d: d.booked_bps / d.capacity_bps)
        over = tuple((d.id, d.booked_bps, d.capacity_bps) for d in directions if d.booked_bps > d.capacity_bps)
        self.recording.booking(BookingSample(at, fullest.id, fullest.booked_bps / fullest.capacity_bps, over))

    def _links_line(self) -> str:
        if not self.link_state:
            return ""
        return "links: " + ", ".join(f"{link} {state}" for link, state in sorted(self.link_state.items()))

    # -- actions -------------------------------------------------------------------------

    def perform(self, index: int, action) -> None:
        """Carry out one action; a refusal is recorded, not raised."""
        from northbound.client import ApiError

        what = action.action
        name = getattr(action, "name", "") or getattr(action, "link", "")
        started = self.now()  # a failure or congestion begins as the action starts
        try:
            done = getattr(self, f"_do_{what}")(action)
        except ApiError as error:
            self.recording.event(self.now(), "refused", message=f"{what} {name}: {error.message}", action=what,
                                 name=name, timeline=index, code=error.code.name)
            if isinstance(action, TransferAction | ReserveAction):
                self.recording.flows[action.name].state = "REFUSED"
                self.recording.flows[action.name].reason = error.message
            return
        except (subprocess.SubprocessError, OSError, RuntimeError) as error:
            self.recording.event(self.now(), "refused", message=f"{what} {name}: {error}", action=what, name=name,
                                 timeline=index)
            return
        message, extra = done if isinstance(done, tuple) else (done, {})
        details: dict[str, Any] = {"timeline": index, "message": message}
        if hasattr(action, "link"):
            details["link"] = action.link
            details["ends"] = list(self.recording.links[action.link])
        if hasattr(action, "name"):
            details["name"] = action.name
        self.recording.event(started, what, **details, **extra)

    def _do_transfer(self, action: TransferAction) -> str:
        flow = Flow(action.name, "transfer", action.src, action.dst, action.bandwidth, state="REQUESTED",
                    pace_bps=action.pace)
        self.recording.flows[action.name] = flow
        size = transfer_bytes(action, self.scale, self.scenario.end - action.at)
        transfer = self.client.start_transfer(action.src, action.dst, action.bandwidth, size=size,
                                              streams=action.streams, engine=action.engine, policy=action.policy,
                                              pace=action.pace)
        flow.transfer = transfer.name
        flow.reservation = transfer.reservation
        flow.state = "RESERVING"
        transfer_id = transfer.name.removeprefix("transfers/")
        self._by_transfer[transfer_id] = action.name
        self._by_reservation[transfer.reservation.removeprefix("reservations/")] = action.name
        if transfer.path:
            flow.path = tuple(transfer.path)
        threading.Thread(target=self._watch_transfer, args=(action.name, transfer.name), daemon=True).start()
        return (f"transfer {action.name}: {action.src} -> {action.dst} {format_bandwidth(action.bandwidth)} "
                f"{action.policy}, {action.streams} stream(s), {action.engine}"
                + (f", sender paced at {format_bandwidth(action.pace)}" if action.pace else ""))

    def _do_reserve(self, action: ReserveAction) -> str:
        flow = Flow(action.name, "reservation", action.src, action.dst, action.bandwidth, state="REQUESTED")
        self.recording.flows[action.name] = flow
        reservation = self.client.create_reservation(action.src, action.dst, action.bandwidth,
                                                     policy=action.policy, protect=action.protect,
                                                     labels={"tsdn/demo": action.name})
        flow.reservation = reservation.name
        self._by_reservation[reservation.id] = action.name
        flow.state = bandwidth_state(reservation.state)
        if reservation.path.route:
            flow.path = tuple(reservation.path.route[1:-1])
        return f"reserve {action.name}: {action.src} -> {action.dst} {format_bandwidth(action.bandwidth)}"

    def _do_release(self, action: ReleaseAction) -> str:
        flow = self.recording.flows.get(action.name)
        if flow is None or flow.state == "REFUSED":
            return f"release {action.name}: nothing to release"
        if flow.kind == "transfer":
            result = self.client.cancel_transfer(flow.transfer)
            from northbound.proto.tsdn.v1 import transfer_pb2

            flow.state = transfer_pb2.TransferState.Name(result.state).removeprefix("TRANSFER_")
        else:
            result = self.client.delete_reservation(flow.reservation)
            flow.state = bandwidth_state(result.state)
        return f"release {action.name}"

    def _link(self, label: str):
        net = self.emulation.net
        link = next(spec for spec in self.topology.spec.links if spec.label == label)
        a, b = net.switch(link.a), net.switch(link.b)
        intf_a = net.switch_intf(link.a, link.a_port)
        for candidate in net.mn.linksBetween(a, b):
            if intf_a in (candidate.intf1.name, candidate.intf2.name):
                return link, candidate
        raise RuntimeError(f"link {label}: not found in the Mininet network")

    def _do_fail_link(self, action: FailLinkAction) -> str:
        _, mn_link = self._link(action.link)
        mn_link.intf1.ifconfig("down")
        mn_link.intf2.ifconfig("down")
        self.link_state[action.link] = "DOWN"
        return f"link {action.link} cut"

    def _do_restore_link(self, action: RestoreLinkAction) -> str:
        _, mn_link = self._link(action.link)
        mn_link.intf1.ifconfig("up")
        mn_link.intf2.ifconfig("up")
        self.link_state.pop(action.link, None)
        return f"link {action.link} repaired"

    def _directions(self, label: str, side: str | None):
        self._link(label)  # raises when the network lacks it
        return [d for d in self.topology.link_directions[label] if side is None or d.src == side]

    def _do_congest_link(self, action: CongestLinkAction) -> tuple[str, dict[str, Any]]:
        """Cross traffic over each direction named: capacity minus what is left for others."""
        cross = self.emulation.cross
        assert cross is not None
        done, rates = [], {}
        for direction in self._directions(action.link, action.from_):
            left = action.rate if action.rate is not None else int(direction.capacity * (action.fraction or 1))
            stream = cross.start(direction, direction.capacity - left)
            rates[direction.id] = stream.rate_bps
            done.append(f"{direction.src}->{direction.dst} {format_bandwidth(stream.rate_bps)} of cross traffic "
                        f"({stream.emulated_bps / 1e6:g} Mbit/s emulated), {format_bandwidth(left)} left")
        self.link_state[action.link] = "CONGESTED"
        return (f"link {action.link} congested: {', '.join(done)}",
                {"directions": list(rates), "cross_traffic_bps": rates})

    def _do_clear_link(self, action: ClearLinkAction) -> tuple[str, dict[str, Any]]:
        """Stop the cross traffic of each direction named."""
        cross = self.emulation.cross
        assert cross is not None
        done, rates = [], {}
        for direction in self._directions(action.link, action.from_):
            stream = cross.stop(direction)
            if stream is not None:
                rates[direction.id] = stream.rate_bps
                done.append(f"{direction.src}->{direction.dst} {format_bandwidth(stream.rate_bps)} stopped")
        if not cross.streams or all(s.direction.link != action.link for s in cross.streams.values()):
            self.link_state.pop(action.link, None)
        return (f"link {action.link} clear: {', '.join(done) or 'no cross traffic was running'}",
                {"directions": list(rates), "cross_traffic_bps": rates})

    def finish_flows(self) -> None:
        """Cancel the transfers and release the reservations still live."""
        from northbound.client import ApiError

        live = [f for f in self.recording.flows.values() if f.state not in ENDED]
        for flow in live:
            with contextlib.suppress(ApiError):
                if flow.kind == "transfer" and flow.transfer:
                    self.client.cancel_transfer(flow.transfer)
                    flow.state = "CANCELLED"
                elif flow.reservation:
                    self.client.delete_reservation(flow.reservation)
                    flow.state = "RELEASED"
                self.recording.event(self.now(), "release", message=f"end of the timeline: {flow.name} released",
                                     name=flow.name)
        self.drain()

    # -- watching ------------------------------------------------------------------------

    def _watch_transfer(self, name: str, transfer: str) -> None:
        from northbound.client import ApiError

        with contextlib.suppress(ApiError, ValueError):
            for event in self.client.watch_transfer(transfer):
                self._transfer_events.put((name, event))

    def _stamp(self, event) -> float:
        """An event's time on this player's clock (snapshots carry none: now)."""
        micros = event.time.ToMicroseconds() if event.HasField("time") else 0
        return self.rel(micros / 1e6) if micros > 0 else self.now()

    def drain(self) -> None:
        """Turn what the watch streams saw into the recording (names resolved now)."""
        while True:
            try:
                name, event = self._transfer_events.get_nowait()
            except queue.Empty:
                break
            self._transfer_seen(name, event)
        while True:
            try:
                event = self.emulation.events.get_nowait()
            except queue.Empty:
                return
            self._reservation_seen(event)

    def _transfer_seen(self, name: str, event) -> None:
        from northbound.proto.tsdn.v1 import transfer_pb2

        transfer = event.transfer
        flow = self.recording.flows.get(name)
        at = self._stamp(event)
        state = transfer_pb2.TransferState.Name(transfer.state).removeprefix("TRANSFER_")
        if event.reason == "rate" and event.previous_state == event.state:
            self.recording.rate(RateSample(at, name, transfer.nominal_bps, transfer.bandwidth_bps,
                                           tuple(transfer.path), state))
            return
        if flow is not None:
            flow.state, flow.reason = state, transfer.reason
            if transfer.path:
                flow.path = tuple(transfer.path)
        if event.previous_state != event.state or event.reason:
            self.recording.event(at, "transfer", message=f"{name}: {state}: {event.reason}", flow=name,
                                 state=state)

    def _reservation_seen(self, payload) -> None:
        from northbound.convert import decision_in
        from northbound.proto.tsdn.v1 import bandwidth_pb2

        reservation = payload.reservation
        of_transfer = reservation.labels.get("tsdn/transfer", "")
        if reservation.id in self.ignored or (of_transfer and of_transfer in self.ignored):
            return
        name = self._by_reservation.get(reservation.id) or self._by_transfer.get(of_transfer) \
            or f"reservation {reservation.id[:8]}"
        at = self._stamp(payload)
        state = bandwidth_pb2.ReservationState.Name(reservation.state)
        path = tuple(reservation.path.route[1:-1]) if reservation.path.route else ()
        links = tuple(reservation.path.links)
        decision = decision_in(payload.decision) if payload.HasField("decision") else None
        typed: dict[str, Any] = {"decision": decisions.to_dict(decision)} if decision is not None else {}
        flow = self.recording.flows.get(name)
        if flow is not None:
            if flow.kind == "reservation":
                flow.state, flow.reason = state, reservation.state_reason
            if path:
                flow.path = path
        previous = self._reservation_paths.get(reservation.id)
        if path:
            self._reservation_paths[reservation.id] = (path, links)
        # A move between parallel links keeps the switches: the links tell it.
        moved = bool(previous and previous[0] and path and (path, links) != previous)
        if moved:
            assert previous is not None
            previous_path, previous_links = previous
            extra: dict[str, Any] = {}
            if decision is not None and decision.relieves:
                relieved = decision.relieves.removeprefix("reservations/")
                extra["relieves"] = self._by_reservation.get(relieved, decision.relieves)
            self.recording.event(at, "reroute", message=f"{name}: {' '.join(previous_path)} -> "
                                 f"{' '.join(path)} ({payload.reason})", flow=name,
                                 old=list(previous_path), new=list(path), reason=payload.reason,
                                 old_links=list(previous_links), new_links=list(links),
                                 cause=decision.cause if decision is not None else None, **extra, **typed)
        if SEGMENT_LABEL in reservation.labels:
            self._segment_seen(name, reservation, payload.reason, at)
        if self._reservation_states.get(reservation.id) != reservation.state:
            self._reservation_states[reservation.id] = reservation.state
            self.recording.event(at, "reservation", message=f"{name}: {state}: {payload.reason}", flow=name,
                                 state=state, path=list(path), links=list(links), **typed)
        elif decision is not None and decision.verdict and not moved:
            # A verdict that changed no state nor path: why the controller left the flow where it was.
            self.recording.event(at, "decision", message=f"{name}: {payload.reason}", flow=name,
                                 verdict=decision.verdict, reason=payload.reason, path=list(path), **typed)

    def _segment_seen(self, name: str, reservation, reason: str, at: float) -> None:
        """A reservation with a remote end: once its reason names its WAN segment (the neighbour
        confirmed it and the controller committed the local part), record it and deliver the circuit
        to the remote DTN, as the neighbour's edge would."""
        found = SEGMENT_NOTE.search(reservation.state_reason) or SEGMENT_NOTE.search(reason)
        if found is None:
            return
        known = self.recording.segments.get(name)
        if known is not None and known.connection_id == found["connection"] and known.reservation == reservation.id:
            return
        flow = self.recording.flows.get(name)
        ends = (flow.src, flow.dst) if flow is not None else ()
        remote = next((d for d in ends if d in self.recording.remote_dtns), "")
        segment = NsiSegment(name, reservation.id, remote, found["nsa"], found["connection"], found["port"],
                             int(found["vlan"]), at)
        self.recording.segments[name] = segment
        delivered = ""
        if remote:
            try:
                delivered = f"; {self._deliver(remote, segment.vlan)}"
            except (RuntimeError, OSError, subprocess.SubprocessError) as error:
                delivered = f"; the circuit could not be delivered to {remote}: {error}"
        self.recording.event(at, "nsi_segment", message=f"{name}: WAN segment {segment.connection_id} at {segment.nsa} "
                             f"via {segment.interdomain}, VLAN {segment.vlan}{delivered}", flow=name,
                             connection=segment.connection_id, nsa=segment.nsa, port=segment.interdomain,
                             vlan=segment.vlan, remote_dtn=remote)

    def _deliver(self, dtn: str, vlan: int) -> str:
        """Make the remote DTN's port on its WAN bridge an access port of `vlan`: the bridge strips the
        circuit's VLAN towards the DTN and adds it from the DTN (no 802.1Q needed in the host)."""
        net = self.emulation.net
        if net is None:
            raise RuntimeError("no Mininet network")
        intf = net.host(dtn).defaultIntf()
        link = intf.link
        if link is None:
            raise RuntimeError(f"{intf.name} of {dtn} is not cabled")
        bridge_port = link.intf2 if link.intf1 is intf else link.intf1
        done = subprocess.run(["ovs-vsctl", "--timeout=10", "set", "port", bridge_port.name, f"tag={vlan}"],
                              capture_output=True, text=True, timeout=20, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ovs-vsctl set port {bridge_port.name} tag={vlan}: {done.stderr.strip()}")
        return f"{bridge_port.name} (the neighbour's edge towards {dtn}) is an access port of VLAN {vlan}"

    def segments_ended(self) -> None:
        """After the last release: wait until each neighbour says every segment's connection is
        terminated (querySummarySync), or the deadline; record what each said."""
        if not self.recording.segments:
            return
        requester = nsa_id(default_domain(self.topology.name))  # the controller runs without --domain
        urls = {p.peer.nsa: p.peer.url or "" for p in self.topology.spec.interdomain}
        deadline = time.monotonic() + SEGMENT_END_DEADLINE
        pending = {s.flow: s for s in self.recording.segments.values()}
        while pending:
            by_nsa: dict[str, list[NsiSegment]] = {}
            for segment in pending.values():
                by_nsa.setdefault(segment.nsa, []).append(segment)
            for nsa, segments in by_nsa.items():
                try:
                    said = lifecycles(urls.get(nsa, ""), nsa, requester, [s.connection_id for s in segments])
                except Exception as error:  # whatever the query raised is the answer recorded
                    said = {s.connection_id: f"query failed: {error}" for s in segments}
                for segment in segments:
                    segment.end = said.get(segment.connection_id, f"unknown to {nsa}")
                    if segment.end == "Terminated":
                        segment.ended = self.now()
                        del pending[segment.flow]
                        self.recording.event(self.now(), "nsi_segment_end",
                                             message=f"{segment.flow}: {segment.connection_id} at {nsa} terminated "
                                                     "(the neighbour's querySummarySync)",
                                             flow=segment.flow, connection=segment.connection_id, nsa=nsa,
                                             lifecycle=segment.end)
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # polling interval of the neighbours' answer, with a deadline
        for segment in pending.values():
            self.recording.event(self.now(), "nsi_segment_end",
                                 message=f"{segment.flow}: {segment.connection_id} at {segment.nsa} not terminated "
                                         f"{SEGMENT_END_DEADLINE:g} s after the end: {segment.end}",
                                 flow=segment.flow, connection=segment.connection_id, nsa=segment.nsa,
                                 lifecycle=segment.end)


def bandwidth_state(state: int) -> str:
    from northbound.proto.tsdn.v1 import bandwidth_pb2

    return bandwidth_pb2.ReservationState.Name(state)
