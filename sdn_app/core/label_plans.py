"""Label-switched flow plans: shared path entries on the transit switches, two entries per
reservation direction at its ingress.

The per-hop design (`plans.plan_for`) puts every reservation's own flows on every switch of
its path. Here, as in the WANs that moved to tunnels (B4, SWAN), a packet is classified once,
at its ingress switch, and carries a path label the rest of the way:

- A path key (`PathKey`) is one route direction: the hops from a DTN's access port to the
  other DTN's, and the backup's hops when it is protected. Each key in use has one VLAN id,
  its label (`labels.PathTable` allocates them), and its entries, shared by every
  reservation direction on it (`path_plan`, cookie `plans.path_cookie(label)`, priority
  `LABEL_PRIORITY`, table 0):
  - unprotected: each transit switch matches (in_port, label) and outputs; the egress switch
    matches (in_port, label), pops the tag and outputs to the DTN;
  - protected (primary p0..pn, backup q0 = p0 .. qm = pn, the backup key's label B): the
    ingress switch p0 holds a fast-failover group, bucket 1 watching the primary's out-port
    (push the label, out there), bucket 2 the backup's (push B, out there); transit switches
    pi match (in_port, label) into a fast-failover group (out, else back out the in-port:
    crankback) and packets sent back on their out-port go on back out their in-port; at p0
    a crankback arriving on the primary's out-port is relabelled B and sent on the backup.
    The backup key's own entries (unprotected) carry it from there. So a single failed link
    anywhere on the primary is survived with the controller stopped, as with per-hop plans.
- Per reservation direction (`edge_plan`, the reservation's cookie):
  - a classifier in table 0 on the ingress switch: the DTN's access port, untagged frames
    only (`plans.UNTAGGED`), the direction's traffic (addresses or prefixes, with the ARP or
    neighbour-solicitation twin); it applies the meter, writes the direction's metadata
    (`metadata_of`) and goes to table `STEER_TABLE`;
  - a steer entry in table `STEER_TABLE` matching that metadata: push the label and output
    to the primary's first port, or (protected) the path's fast-failover group, or (both DTNs
    on one switch) output straight to the other DTN.
  Moving a reservation changes its steer entries only: one flow-mod per direction, whatever
  the path's length. Its meter and classifiers stay.
- Default deny holds: a DTN's frame is classified only untagged, so a DTN that sends a
  labelled frame matches nothing (table-miss drop) and cannot ride another reservation's
  path; label entries match only switch-to-switch in-ports; every label leads to exactly one
  DTN, so a reservation's packets reach only its peer.

Why VLAN ids and not MPLS labels: push/set/pop of an 802.1Q tag and matching `vlan_vid` are
in every OpenFlow 1.3 switch a show borrows (Dell, Pica8, Arista, Corsa, Brocade agents), in
the TCAM key of every merchant-silicon pipeline; MPLS push/pop is optional in OpenFlow 1.3 and
absent or restricted to special tables on several of them. A DTN's own traffic is untagged
(the reservations classify on that), so the VLAN tag is free on the ring's links. The price is
4,094 labels per domain, far above the distinct route directions a show uses (sc16 with
10,000 reservations uses a few hundred).

Why a label per path and not per link: one id names the path on every switch (a flow dump or
a capture says which route a packet is on), nothing is swapped hop by hop, and a move is one
steer change at the ingress, exactly as with per-link labels.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sdn_app.core.paths import Hop, Path, Route
from sdn_app.core.plans import (
    FORWARD,
    IN_PORT,
    INGRESS,
    PRIORITY,
    REVERSE,
    REVERSE_PRIORITY,
    TRANSIT,
    UNTAGGED,
    FlowPlan,
    FlowSpec,
    GroupSpec,
    IdAllocator,
    Match,
    MeterSpec,
    burst_bits,
    path_cookie,
    reservation_cookie,
    reverse_rate,
    reversed_hops,
    traffic_of,
)
from sdn_app.core.topology import Topology

STEER_TABLE = 1
LABEL_PRIORITY = 1100
STEER = "steer"  # role of a steer entry
EGRESS_POP = "egress"  # role of a path's last entry (pops the label)
CRANKBACK = "crankback"


@dataclass(frozen=True, slots=True)
class PathKey:
    """One route direction from DTN access port to DTN access port, and its backup's hops
    when it is protected (then the key is another than the unprotected one on the same hops)."""

    hops: tuple[Hop, ...]
    backup: tuple[Hop, ...] | None = None

    def describe(self) -> str:
        """`s1 -> s2 -> s3` (and ` protected by s1 -> s4 -> s3`), for people."""
        text = " -> ".join(h.switch for h in self.hops)
        if self.backup is not None:
            text += " protected by " + " -> ".join(h.switch for h in self.backup)
        return text


@dataclass(frozen=True, slots=True)
class PathUse:
    """What a reservation direction needs of its path: the label, and the fast-failover group
    on the ingress switch of a protected path (None otherwise)."""

    label: int
    group_id: int | None = None


def metadata_of(reservation_id: str, direction: str) -> int:
    """The metadata the classifiers of `reservation_id`'s `direction` write: its cookie's 48 id
    bits and a direction bit, unique per reservation direction."""
    low = reservation_cookie(reservation_id) & ((1 << 48) - 1)
    return low << 1 | (1 if direction == REVERSE else 0)


def path_keys(route: Route | Path) -> dict[str, PathKey | None]:
    """The path key of each direction of a reservation on `route` (None: both DTNs on one switch)."""
    if isinstance(route, Path):
        route = Route(route)
    primary = tuple(route.primary.hops)
    if len(primary) < 2:
        return {FORWARD: None, REVERSE: None}
    backup = tuple(route.backup.hops) if route.backup is not None else None
    return {FORWARD: PathKey(primary, backup),
            REVERSE: PathKey(reversed_hops(primary), reversed_hops(backup) if backup is not None else None)}


def ingress_buckets(key: PathKey, label: int, backup_label: int) -> tuple[tuple[int, int, int], ...]:
    """The buckets of a protected path's fast-failover group at its ingress switch."""
    assert key.backup is not None
    first, alternate = key.hops[0], key.backup[0]
    return ((first.out_port, first.out_port, label), (alternate.out_port, alternate.out_port, backup_label))


def path_plan(topology: Topology, key: PathKey, label: int, ids: IdAllocator,
              backup_label: int | None = None) -> FlowPlan:
    """The shared entries of path `key` with VLAN id `label` (see the module docstring); a
    protected key needs `backup_label`, the label of its backup's own (unprotected) key.
    Group ids come from `ids`, owned by `path-<label>`."""
    if len(key.hops) < 2:
        raise ValueError(f"path {key.describe()} crosses no link: it needs no label")
    if (key.backup is None) != (backup_label is None):
        raise ValueError(f"path {key.describe()}: a backup label goes with a backup, and only then")
    owner = f"path-{label}"
    cookie = path_cookie(label)
    flows: list[FlowSpec] = []
    groups: list[GroupSpec] = []

    def dpid(switch: str) -> int:
        return topology.switches[switch].dpid

    def flow(hop_switch: str, in_port: int, role: str, **action) -> None:
        flows.append(FlowSpec(switch=hop_switch, dpid=dpid(hop_switch), priority=LABEL_PRIORITY, cookie=cookie,
                              match=Match(in_port=in_port, eth_type=None, vlan_vid=label), role=role,
                              stage=0, **action))

    def group(switch: str, buckets: tuple[tuple[int, ...], ...]) -> int:
        group_id = ids.group_id(switch, owner, buckets)
        groups.append(GroupSpec(switch=switch, dpid=dpid(switch), group_id=group_id, buckets=buckets))
        return group_id

    hops = key.hops
    n = len(hops) - 1
    last = hops[n]
    flow(last.switch, last.in_port, EGRESS_POP, output=last.out_port, pop_label=True)
    if key.backup is None:
        for hop in hops[1:n]:
            flow(hop.switch, hop.in_port, TRANSIT, output=hop.out_port)
    else:
        assert backup_label is not None
        group(hops[0].switch, ingress_buckets(key, label, backup_label))
        flow(hops[0].switch, hops[0].out_port, CRANKBACK, output=key.backup[0].out_port, set_label=backup_label)
        for hop in hops[1:n]:
            flow(hop.switch, hop.in_port, TRANSIT,
                 group_id=group(hop.switch, ((hop.out_port, hop.out_port), (hop.in_port, IN_PORT))))
            flow(hop.switch, hop.out_port, CRANKBACK, output=hop.in_port)
    first, final = hops[0], hops[n]
    return FlowPlan(owner, cookie, f"{first.switch}:{first.in_port}", f"{final.switch}:{final.out_port}",
                    tuple(flows), (), tuple(groups))


def edge_plan(topology: Topology, reservation_id: str, src_dtn: str, dst_dtn: str, route: Route | Path,
              bandwidth_bps: int, ids: IdAllocator, uses: dict[str, PathUse | None], *,
              src_prefix: str | None = None, dst_prefix: str | None = None) -> FlowPlan:
    """The per-reservation entries of the label design: per direction, its meter, classifiers
    (traffic and its address-resolution twin) and steer entry, using the path of `uses[direction]`
    (None: both DTNs on one switch). Checks as `plans.plan_for`; meter ids come from `ids`."""
    cookie = reservation_cookie(reservation_id)
    t = traffic_of(topology, src_dtn, dst_dtn, route, bandwidth_bps, src_prefix, dst_prefix)
    flows: list[FlowSpec] = []
    meters: list[MeterSpec] = []
    shared: set[tuple[str, int]] = set()
    directions = ((FORWARD, PRIORITY, t.forward, t.primary, bandwidth_bps),
                  (REVERSE, REVERSE_PRIORITY, t.reverse, reversed_hops(t.primary), reverse_rate(bandwidth_bps)))
    for direction, priority, traffic, hops, rate in directions:
        ingress = hops[0]
        switch, dpid = ingress.switch, topology.switches[ingress.switch].dpid
        meter_id = ids.meter_id(switch, reservation_id, direction)
        meters.append(MeterSpec(switch=switch, dpid=dpid, meter_id=meter_id, rate_bps=rate,
                                burst_bits=burst_bits(rate), direction=direction))
        metadata = metadata_of(reservation_id, direction)
        classify = Match(**{**_fields(traffic), "in_port": ingress.in_port, "vlan_vid": UNTAGGED})
        common = {"switch": switch, "dpid": dpid, "cookie": cookie, "direction": direction}
        for match, meter in ((classify, meter_id), (replace(classify, **t.twin), None)):
            flows.append(FlowSpec(**common, priority=priority, match=match, meter_id=meter, goto_table=STEER_TABLE,
                                  write_metadata=metadata, role=INGRESS, stage=1))
        use = uses.get(direction)
        if use is None:
            if len(hops) > 1:
                raise ValueError(f"{reservation_id} {direction}: a path of {len(hops)} switches needs its label")
            action: dict = {"output": ingress.out_port}
        elif use.group_id is not None:
            action = {"group_id": use.group_id}
            shared.add((switch, use.group_id))
        else:
            action = {"output": ingress.out_port, "push_label": use.label}
        flows.append(FlowSpec(**common, table_id=STEER_TABLE, priority=priority, match=Match(eth_type=None,
                              metadata=metadata), role=STEER, stage=0, **action))
    return FlowPlan(reservation_id, cookie, src_dtn, dst_dtn, tuple(flows), tuple(meters), (), frozenset(shared))


def _fields(match: Match) -> dict:
    return {name: getattr(match, name) for name in Match.__slots__}  # type: ignore[attr-defined]
