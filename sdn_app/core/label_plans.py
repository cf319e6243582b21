"""Label-switched flow plans: shared path entries on the transit switches, two entries per
reservation direction at its ingress.

The per-hop design (`plans.plan_for`) puts every reservation's own flows on every switch of
its path. Here, as in the WANs that moved to tunnels (B4, SWAN), a packet is classified once,
at its ingress switch, and carries a path label the rest of the way:

- A path key (`PathKey`) is one route direction: the hops from a DTN's access port to the
  other DTN's, and the backup's hops when it is protected, with what its egress does with the
  label (pop it, or rewrite it to the VLAN of a tagged end: `egress_vlan`) and, when it is
  protected, whether frames arrive tagged at its ingress (`tagged_ingress`: its shared
  fast-failover group rewrites their tag instead of pushing one). Each key in use has one VLAN id,
  its label (`labels.PathTable` allocates them), and its entries, shared by every
  reservation direction on it (`path_plan`, cookie `plans.path_cookie(label)`, priority
  `LABEL_PRIORITY`, table 0):
  - unprotected: each transit switch matches (in_port, label) and outputs; the egress switch
    matches (in_port, label), pops the tag (or sets it to `egress_vlan`) and outputs to the DTN;
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
    only (`plans.UNTAGGED`), or those tagged with the end's VLAN when the request names one
    (`PathRequest.src_vlan`, `dst_vlan`), the direction's traffic (addresses or prefixes,
    with the ARP or neighbour-solicitation twin; a VLAN circuit, both ends tagged, matches
    in_port and VLAN only, every frame, no twin); it applies the meter, writes the
    direction's metadata (`metadata_of`) and goes to table `STEER_TABLE`;
  - a steer entry in table `STEER_TABLE` matching that metadata (and the end's VLAN, if any):
    push the label (set it, on a frame tagged at its end) and output to the primary's first port, or (protected) the
    path's fast-failover group, or (both ends on one switch) output straight to the other
    end, the tag pushed, rewritten or popped as that end wants.
  Moving a reservation changes its steer entries only: one flow-mod per direction, whatever
  the path's length. Its meter and classifiers stay.
- Default deny holds: a DTN's frame is classified only untagged (or with its end's own VLAN),
  so a DTN that sends a frame with another tag matches nothing (table-miss drop) and cannot
  ride another reservation's path; label entries match only switch-to-switch in-ports; every
  label leads to exactly one end port with one treatment, so a reservation's packets reach
  only its peer. The book keeps one VLAN at one port to one live reservation at a time.

Why VLAN ids and not MPLS labels: push/set/pop of an 802.1Q tag and matching `vlan_vid` are
in every OpenFlow 1.3 switch a show borrows (Dell, Pica8, Arista, Corsa, Brocade agents), in
the TCAM key of every merchant-silicon pipeline; MPLS push/pop is optional in OpenFlow 1.3 and
absent or restricted to special tables on several of them. A DTN's own traffic is untagged
(the reservations classify on that), so the VLAN tag is free on the ring's links; an end with a
VLAN of its own (an NSI circuit's) has its tag rewritten to the label at the ingress and back at
the egress, so the links still carry path labels only. The price is
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
    when it is protected (then the key is another than the unprotected one on the same hops).

    `egress_vlan`: None, the egress pops the label; N, it rewrites the label to VLAN N (an end
    whose frames are tagged). `tagged_ingress` (protected keys only, where the ingress group is
    the key's): frames arrive tagged, so the group's buckets rewrite the tag, not push one."""

    hops: tuple[Hop, ...]
    backup: tuple[Hop, ...] | None = None
    egress_vlan: int | None = None
    tagged_ingress: bool = False

    def __post_init__(self) -> None:
        if self.tagged_ingress and self.backup is None:
            raise ValueError("tagged_ingress belongs to protected keys only (an unprotected key has no "
                             "ingress entry of its own)")

    def backup_key(self) -> PathKey | None:
        """The backup's own (unprotected) key, with the same egress treatment; None unprotected."""
        return PathKey(self.backup, egress_vlan=self.egress_vlan) if self.backup is not None else None

    def describe(self) -> str:
        """`s1 -> s2 -> s3` (and ` protected by s1 -> s4 -> s3`, ` to VLAN 1780`), for people."""
        text = " -> ".join(h.switch for h in self.hops)
        if self.backup is not None:
            text += " protected by " + " -> ".join(h.switch for h in self.backup)
        if self.tagged_ingress:
            text += " from a tagged end"
        if self.egress_vlan is not None:
            text += f" to VLAN {self.egress_vlan}"
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


def path_keys(route: Route | Path, src_vlan: int | None = None,
              dst_vlan: int | None = None) -> dict[str, PathKey | None]:
    """The path key of each direction of a reservation on `route` (None: both ends on one
    switch), whose src and dst ends carry VLANs `src_vlan` and `dst_vlan` (None: untagged)."""
    if isinstance(route, Path):
        route = Route(route)
    primary = tuple(route.primary.hops)
    if len(primary) < 2:
        return {FORWARD: None, REVERSE: None}
    backup = tuple(route.backup.hops) if route.backup is not None else None
    protected = backup is not None
    return {FORWARD: PathKey(primary, backup, dst_vlan, protected and src_vlan is not None),
            REVERSE: PathKey(reversed_hops(primary), reversed_hops(backup) if backup is not None else None,
                             src_vlan, protected and dst_vlan is not None)}


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

    def group(switch: str, buckets: tuple[tuple[int, ...], ...], retag: bool = False) -> int:
        group_id = ids.group_id(switch, owner, buckets)
        groups.append(GroupSpec(switch=switch, dpid=dpid(switch), group_id=group_id, buckets=buckets, retag=retag))
        return group_id

    hops = key.hops
    n = len(hops) - 1
    last = hops[n]
    if key.egress_vlan is None:
        flow(last.switch, last.in_port, EGRESS_POP, output=last.out_port, pop_label=True)
    else:
        flow(last.switch, last.in_port, EGRESS_POP, output=last.out_port, set_label=key.egress_vlan)
    if key.backup is None:
        for hop in hops[1:n]:
            flow(hop.switch, hop.in_port, TRANSIT, output=hop.out_port)
    else:
        assert backup_label is not None
        group(hops[0].switch, ingress_buckets(key, label, backup_label), retag=key.tagged_ingress)
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
              src_prefix: str | None = None, dst_prefix: str | None = None, src_vlan: int | None = None,
              dst_vlan: int | None = None) -> FlowPlan:
    """The per-reservation entries of the label design: per direction, its meter, classifiers
    (traffic and its address-resolution twin) and steer entry, using the path of `uses[direction]`
    (None: both ends on one switch). `src_vlan`, `dst_vlan`: the VLAN of each end's frames (None:
    untagged; both: a VLAN circuit, `plans.traffic_of`); the `uses` must be those of
    `path_keys(route, src_vlan, dst_vlan)`. Checks as `plans.plan_for`; meter ids come from `ids`."""
    cookie = reservation_cookie(reservation_id)
    t = traffic_of(topology, src_dtn, dst_dtn, route, bandwidth_bps, src_prefix, dst_prefix,
                   src_vlan=src_vlan, dst_vlan=dst_vlan)
    flows: list[FlowSpec] = []
    meters: list[MeterSpec] = []
    shared: set[tuple[str, int]] = set()
    directions = ((FORWARD, PRIORITY, t.forward, t.primary, bandwidth_bps, src_vlan, dst_vlan),
                  (REVERSE, REVERSE_PRIORITY, t.reverse, reversed_hops(t.primary), reverse_rate(bandwidth_bps),
                   dst_vlan, src_vlan))
    for direction, priority, traffic, hops, rate, vlan_in, vlan_out in directions:
        ingress = hops[0]
        switch, dpid = ingress.switch, topology.switches[ingress.switch].dpid
        meter_id = ids.meter_id(switch, reservation_id, direction)
        meters.append(MeterSpec(switch=switch, dpid=dpid, meter_id=meter_id, rate_bps=rate,
                                burst_bits=burst_bits(rate), direction=direction))
        metadata = metadata_of(reservation_id, direction)
        classify = Match(**{**_fields(traffic), "in_port": ingress.in_port,
                            "vlan_vid": UNTAGGED if vlan_in is None else vlan_in})
        common = {"switch": switch, "dpid": dpid, "cookie": cookie, "direction": direction}
        classifiers = [(classify, meter_id)] + ([(replace(classify, **t.twin), None)] if t.twin is not None else [])
        for match, meter in classifiers:
            flows.append(FlowSpec(**common, priority=priority, match=match, meter_id=meter, goto_table=STEER_TABLE,
                                  write_metadata=metadata, role=INGRESS, stage=1))
        use = uses.get(direction)
        if use is None:
            if len(hops) > 1:
                raise ValueError(f"{reservation_id} {direction}: a path of {len(hops)} switches needs its label")
            action: dict = {"output": ingress.out_port, **_retagged(vlan_in, vlan_out)}
        elif use.group_id is not None:
            action = {"group_id": use.group_id}
            shared.add((switch, use.group_id))
        elif vlan_in is None:
            action = {"output": ingress.out_port, "push_label": use.label}
        else:
            action = {"output": ingress.out_port, "set_label": use.label}
        # A tagged end's steer entry matches its VLAN too: OpenFlow lets an entry rewrite or pop a tag
        # only when its match says there is one (Open vSwitch refuses it otherwise: OFPBAC_MATCH_INCONSISTENT).
        flows.append(FlowSpec(**common, table_id=STEER_TABLE, priority=priority, match=Match(eth_type=None,
                              metadata=metadata, vlan_vid=vlan_in), role=STEER, stage=0, **action))
    return FlowPlan(reservation_id, cookie, src_dtn, dst_dtn, tuple(flows), tuple(meters), (), frozenset(shared))


def _retagged(vlan_in: int | None, vlan_out: int | None) -> dict:
    """The tag change of a frame going straight from an end with `vlan_in` to one with `vlan_out`
    on one switch (None: untagged there)."""
    if vlan_out is None:
        return {} if vlan_in is None else {"pop_label": True}
    return {"push_label": vlan_out} if vlan_in is None else {"set_label": vlan_out}


def _fields(match: Match) -> dict:
    return {name: getattr(match, name) for name in Match.__slots__}  # type: ignore[attr-defined]
