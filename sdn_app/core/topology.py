"""The WAN model: switches, directed link capacities and DTN attachments over networkx.

Every physical link becomes two `LinkDirection`s (one per direction, each with its own
capacity), and every DTN's access link two more; bandwidth is booked per direction. The
switch graph is a `networkx.MultiDiGraph` so parallel links between two switches stay
distinct.

Domains. An interdomain port (a switch port leading to a neighbouring domain) gives two
directions of kind "interdomain" (`to-rnp->scinet:28`, `scinet:28->to-rnp`) with the port's
capacity. A remote DTN, at a site in that neighbouring domain, has no access link of its own:
its directions are its interdomain port's, shared with every other remote DTN beyond that port
and with the port itself, so what is booked across the port is counted once, against the port.
Endpoints (what a path may start or end at) are DTNs, ours and remote, and interdomain ports.
A remote DTN may be reached through more interdomain ports than its `beyond` (`also_beyond`, all
towards the same neighbour): a path to it names the one it uses (`PathRequest.via`), and `access`,
`endpoint` and `vlan_range` take that port (`via`; None: `beyond`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import networkx as nx

from sdn_app.core.errors import InvalidArgument, NotFound
from sdn_app.core.topology_schema import (
    DEFAULT_DTN_VLANS,
    DtnSpec,
    InterdomainSpec,
    LinkSpec,
    SiteSpec,
    SwitchSpec,
    TopologySpec,
    load_topology_spec,
)


@dataclass(frozen=True, slots=True)
class LinkDirection:
    """One direction of a link: from `src` port `src_port` to `dst` port `dst_port`.

    For a DTN's access link one end is the DTN itself (its port is 0); for an interdomain
    port's, the port's name stands for the neighbouring domain (its port is 0 too).
    """

    id: str
    link: str
    src: str
    src_port: int
    dst: str
    dst_port: int
    capacity: int
    latency_ms: float | None
    kind: str

    @property
    def is_access(self) -> bool:
        """Whether this direction joins an endpoint to its switch (a DTN's access link, or an
        interdomain port's link to the neighbouring domain), rather than two switches."""
        return self.kind in ("access", "interdomain")

    @property
    def is_interdomain(self) -> bool:
        """Whether this direction crosses an interdomain port."""
        return self.kind == "interdomain"


def direction_id(src: str, src_port: int, dst: str, dst_port: int) -> str:
    """Name a direction `src:port->dst:port` (port 0, the DTN side, is left out)."""
    left = f"{src}:{src_port}" if src_port else src
    right = f"{dst}:{dst_port}" if dst_port else dst
    return f"{left}->{right}"


class Topology:
    """A validated WAN: lookups by name and the directed switch graph for path search."""

    def __init__(self, spec: TopologySpec, source: str = "<memory>"):
        self.spec = spec
        self.source = source
        self.name = spec.name
        self.switches: dict[str, SwitchSpec] = {s.name: s for s in spec.switches}
        self.links: dict[str, LinkSpec] = {link.label: link for link in spec.links}
        self.dtns: dict[str, DtnSpec] = {d.name: d for d in spec.dtns}  # remote DTNs included
        self.interdomain: dict[str, InterdomainSpec] = {p.name: p for p in spec.interdomain}
        self.sites: dict[str, SiteSpec] = {s.name: s for s in spec.sites}
        self.directions: dict[str, LinkDirection] = {}
        self.link_directions: dict[str, tuple[LinkDirection, LinkDirection]] = {}
        self.graph = nx.MultiDiGraph(name=spec.name)
        self.graph.add_nodes_from(self.switches)
        for link in spec.links:
            forward = self._add_direction(link, link.a, link.a_port, link.b, link.b_port,
                                          link.capacity_ab or link.capacity)
            backward = self._add_direction(link, link.b, link.b_port, link.a, link.a_port,
                                           link.capacity_ba or link.capacity)
            self.link_directions[link.label] = (forward, backward)
        self._access: dict[str, tuple[LinkDirection, LinkDirection]] = {}
        for port in spec.interdomain:
            inward = LinkDirection(direction_id(port.name, 0, port.switch, port.port), port.name, port.name, 0,
                                   port.switch, port.port, port.capacity, port.latency_ms, "interdomain")
            outward = LinkDirection(direction_id(port.switch, port.port, port.name, 0), port.name, port.switch,
                                    port.port, port.name, 0, port.capacity, port.latency_ms, "interdomain")
            self.directions[inward.id] = inward
            self.directions[outward.id] = outward
            self._access[port.name] = (inward, outward)
        for dtn in spec.dtns:
            if dtn.beyond is not None:
                self._access[dtn.name] = self._access[dtn.beyond]
                continue
            up = LinkDirection(direction_id(dtn.name, 0, dtn.switch, dtn.port), dtn.name,
                               dtn.name, 0, dtn.switch, dtn.port, dtn.nic_speed, None, "access")
            down = LinkDirection(direction_id(dtn.switch, dtn.port, dtn.name, 0), dtn.name,
                                 dtn.switch, dtn.port, dtn.name, 0, dtn.nic_speed, None, "access")
            self.directions[up.id] = up
            self.directions[down.id] = down
            self._access[dtn.name] = (up, down)
        self.all_links_have_latency = bool(spec.links) and all(
            link.latency_ms is not None for link in spec.links
        )
        self.adjacency: dict[str, dict[str, tuple[LinkDirection, ...]]] = {name: {} for name in self.switches}
        for direction in self.directions.values():
            if not direction.is_access:
                out = self.adjacency[direction.src]
                out[direction.dst] = (*out.get(direction.dst, ()), direction)
        self._by_dpid = {s.dpid: s.name for s in spec.switches}
        self._by_pair: dict[frozenset[str], list[str]] = {}
        for link in spec.links:
            self._by_pair.setdefault(frozenset((link.a, link.b)), []).append(link.label)

    def _add_direction(self, link: LinkSpec, src: str, src_port: int, dst: str, dst_port: int,
                       capacity: int | None) -> LinkDirection:
        assert capacity is not None  # the schema check guarantees one per direction
        direction = LinkDirection(direction_id(src, src_port, dst, dst_port), link.label,
                                  src, src_port, dst, dst_port, capacity, link.latency_ms, link.kind)
        self.directions[direction.id] = direction
        self.graph.add_edge(src, dst, key=direction.id, direction=direction)
        return direction

    @cached_property
    def protectable_groups(self) -> dict[str, int]:
        """Switch -> id of its 2-edge-connected component: two switches can be joined by
        link-disjoint paths only when they share an id (parallel links count as two)."""
        simple = nx.Graph()
        simple.add_nodes_from(self.switches)
        multiplicity: dict[frozenset[str], int] = {}
        for link in self.spec.links:
            simple.add_edge(link.a, link.b)
            pair = frozenset((link.a, link.b))
            multiplicity[pair] = multiplicity.get(pair, 0) + 1
        simple.remove_edges_from([(u, v) for u, v in nx.bridges(simple) if multiplicity[frozenset((u, v))] == 1])
        return {node: i for i, part in enumerate(nx.connected_components(simple)) for node in part}

    def unreachable_dtn_warnings(self, listed: int = 10, pairs: int = 10) -> list[str]:
        """One line per two parts of the switch graph that no link joins and that both hold DTNs:
        such DTNs can never reach each other (e.g. `dtns a-dtn1, b-dtn1 cannot reach c-dtn1: no
        link joins {s1,s2} and {s3}`). At most `pairs` lines, then one counting the rest; each
        list of names is cut after `listed`."""
        simple = nx.Graph()
        simple.add_nodes_from(self.switches)
        simple.add_edges_from((link.a, link.b) for link in self.spec.links)
        order = {name: i for i, name in enumerate(self.switches)}
        dtns_on: dict[str, list[str]] = {}
        for dtn in self.spec.dtns:
            dtns_on.setdefault(dtn.switch, []).append(dtn.name)
        parts = sorted((sorted(part, key=order.__getitem__) for part in nx.connected_components(simple)),
                       key=lambda part: order[part[0]])
        with_dtns = [(part, [d for s in part for d in dtns_on.get(s, ())]) for part in parts]
        with_dtns = [(part, dtns) for part, dtns in with_dtns if dtns]

        def names(items: list[str]) -> str:
            return ", ".join(items[:listed]) + (f" and {len(items) - listed} more" if len(items) > listed else "")

        lines = []
        total = len(with_dtns) * (len(with_dtns) - 1) // 2
        for i, (part_a, dtns_a) in enumerate(with_dtns):
            for part_b, dtns_b in with_dtns[i + 1:]:
                if len(lines) == pairs:
                    return [*lines, f"... and {total - pairs} more such pairs: the DTNs are in {len(with_dtns)} "
                                    "parts that no link joins"]
                lines.append(f"dtns {names(dtns_a)} cannot reach {names(dtns_b)}: no link joins "
                             f"{{{names(part_a)}}} and {{{names(part_b)}}}")
        return lines

    @classmethod
    def load(cls, path: str | Path) -> Topology:
        """Read, validate and model the topology file at `path`."""
        return cls(load_topology_spec(path), str(path))

    def capacities(self) -> dict[str, int]:
        """Return every direction's capacity in bits/s, access links included."""
        return {d.id: d.capacity for d in self.directions.values()}

    def dtn(self, name: str) -> DtnSpec:
        """Return the DTN called `name` or raise `NotFound` listing the known ones."""
        try:
            return self.dtns[name]
        except KeyError:
            known = ", ".join(sorted(self.dtns)[:12]) or "none"
            raise NotFound(f"unknown DTN {name!r} in topology {self.name} (known: {known})") from None

    def access(self, dtn: str, via: str | None = None) -> tuple[LinkDirection, LinkDirection]:
        """Return the (DTN->switch, switch->DTN) directions of `dtn`'s access link.

        For a remote DTN, and for an interdomain port named itself, the port's (inward, outward)
        directions: every remote DTN beyond one port shares them with the port. A remote DTN is
        reached through interdomain port `via` (None: its `beyond`); `via` means nothing for other
        endpoints.
        """
        port = self.via(dtn, via)
        if port is not None:
            return self._access[port]
        try:
            return self._access[dtn]
        except KeyError:
            self.dtn(dtn)  # raises NotFound naming it
            raise

    def via(self, name: str, via: str | None) -> str | None:
        """The interdomain port through which endpoint `name` is reached when a path names `via`:
        for a remote DTN `via` itself (None: its `beyond`), which must be one of its ports
        (`InvalidArgument` naming them otherwise); None for every other endpoint."""
        dtn = self.dtns.get(name)
        if dtn is None or dtn.beyond is None:
            return None
        if via is None:
            return dtn.beyond
        if via not in dtn.ports:
            raise InvalidArgument(f"via: {via!r} is not an interdomain port that reaches {name} "
                                  f"(its ports: {', '.join(dtn.ports)})")
        return via

    def remote_ports(self, name: str) -> tuple[str, ...]:
        """The interdomain ports that reach remote DTN `name`, `beyond` first (an own DTN or an
        interdomain port: none)."""
        dtn = self.dtns.get(name)
        return () if dtn is None else dtn.ports

    @property
    def remote_dtns(self) -> list[str]:
        """The names of the remote DTNs (at sites beyond an interdomain port), in file order."""
        return [d.name for d in self.spec.dtns if d.beyond is not None]

    def _endpoint_not_found(self, name: str) -> NotFound:
        known = ", ".join(sorted([*self.dtns, *self.interdomain])[:12]) or "none"
        return NotFound(f"unknown endpoint {name!r} in topology {self.name}: not a DTN or interdomain port "
                        f"(known: {known})")

    def endpoint(self, name: str, via: str | None = None) -> tuple[str, int]:
        """Return the (switch, port) where endpoint `name` (a DTN of ours, a remote DTN or an
        interdomain port) meets this domain; raise `NotFound` naming it when it is none of these.
        A remote DTN meets it at interdomain port `via` (None: its `beyond`)."""
        port = self.via(name, via)
        found = self.interdomain.get(port) if port is not None else self.dtns.get(name) or self.interdomain.get(name)
        if found is None:
            raise self._endpoint_not_found(name)
        return found.switch, found.port

    def vlan_range(self, name: str, via: str | None = None) -> tuple[int, int]:
        """Return the (first, last) VLANs usable at endpoint `name`: an own DTN's `vlans` (by
        default 2-4094), or the interdomain port's for the port and every remote DTN beyond it
        (through port `via`, None: its `beyond`)."""
        if name in self.interdomain:
            return self.interdomain[name].vlans
        dtn = self.dtns.get(name)
        if dtn is None:
            raise self._endpoint_not_found(name)
        port = self.via(name, via)
        if port is not None:
            return self.interdomain[port].vlans
        return dtn.vlans or DEFAULT_DTN_VLANS

    def domain_of(self, name: str) -> str | None:
        """Return the NSA id of the domain endpoint `name` lies in: None for our own (our DTNs, and
        an interdomain port, which is our edge), the peer's NSA for a remote DTN."""
        dtn = self.dtns.get(name)
        if dtn is None:
            if name in self.interdomain:
                return None
            raise self._endpoint_not_found(name)
        return None if dtn.beyond is None else self.interdomain[dtn.beyond].peer.nsa

    def is_remote(self, name: str) -> bool:
        """Whether endpoint `name` is a remote DTN (raises `NotFound` for no endpoint)."""
        return self.domain_of(name) is not None

    def remote_site_dtns(self, port: str) -> list[str]:
        """The remote DTNs beyond interdomain port `port`, in file order."""
        if port not in self.interdomain:
            known = ", ".join(sorted(self.interdomain)[:12]) or "none"
            raise NotFound(f"unknown interdomain port {port!r} in topology {self.name} (known: {known})")
        return [d.name for d in self.spec.dtns if d.beyond == port]

    def switch_by_dpid(self, dpid: int) -> str | None:
        """Return the name of the switch with datapath id `dpid`, if declared."""
        return self._by_dpid.get(dpid)

    def site_of(self, switch: str) -> SiteSpec | None:
        """Return the site that holds `switch`, if any."""
        for site in self.spec.sites:
            if switch in site.switches:
                return site
        return None

    def resolve_links(self, ref: str) -> list[str]:
        """Return link names meant by `ref`: a link name, or `a--b` for every link between a and b."""
        if ref in self.links:
            return [ref]
        if "--" in ref:
            left, _, right = ref.partition("--")
            found = self._by_pair.get(frozenset((left, right)))
            if found and left != right:
                return list(found)
        raise NotFound(f"unknown link {ref!r} in topology {self.name}: give a link name or 'switch--switch'")

    def resolve_elements(self, refs: Iterable[str], what: str) -> tuple[frozenset[str], frozenset[str]]:
        """Split switch names and link references in `refs` into (switches, link names).

        Raises `InvalidArgument` naming `what` (the request field) for anything unknown.
        """
        switches: set[str] = set()
        links: set[str] = set()
        for ref in refs:
            if ref in self.switches:
                switches.add(ref)
                continue
            try:
                links.update(self.resolve_links(ref))
            except NotFound:
                raise InvalidArgument(
                    f"{what}: {ref!r} is neither a switch nor a link of topology {self.name}"
                ) from None
        return frozenset(switches), frozenset(links)

    def summary(self) -> str:
        """One line: name and counts."""
        line = (f"{self.name}: {len(self.switches)} switches, {len(self.links)} links, "
                f"{len(self.dtns)} DTNs, {len(self.sites)} sites")
        if self.interdomain:
            line += f", {len(self.interdomain)} interdomain ports ({len(self.remote_dtns)} remote DTNs)"
        return line
