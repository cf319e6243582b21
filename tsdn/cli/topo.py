"""`tsdn topo ...`: validate, show and import topology files; a controller's link status."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from sdn_app.core.errors import InvalidArgument
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import MAX_TOPOLOGY_BYTES, dump_topology_spec, format_vlans
from sdn_app.core.units import format_bandwidth, parse_bandwidth
from topologies import resolve_topology
from tsdn.cli.reservations import _client_options
from tsdn.output import print_json, table


def register(commands: argparse._SubParsersAction) -> None:
    """Add `topo` and its subcommands."""
    parser = commands.add_parser("topo", help="topology files: validate, show, import; a controller's link status")
    sub = parser.add_subparsers(dest="topo_command", metavar="SUBCOMMAND", required=True)

    validate = sub.add_parser("validate", help="check a topology file; exit 2 with every problem if invalid")
    validate.add_argument("file", help="topology YAML, or a built-in name (sc16, ring8, sc16-nsi)")
    validate.set_defaults(run=run_validate)

    show = sub.add_parser("show", help="print a topology's switches, links, DTNs and sites")
    show.add_argument("file", help="topology YAML, or a built-in name (sc16, ring8, sc16-nsi)")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(run=run_show)

    imp = sub.add_parser("import", help="convert an Internet Topology Zoo GraphML file to a topology file")
    imp.add_argument("file", help="GraphML file from the Internet Topology Zoo")
    imp.add_argument("--link-capacity", required=True, metavar="BW",
                     help="capacity of links whose speed the file does not give, e.g. 100G")
    imp.add_argument("--dtns", action="store_true", help="attach one DTN <node>-dtn to every node")
    imp.add_argument("--name", help="topology name (default: the file's network name)")
    imp.add_argument("--interdomain", action="append", default=[], metavar="NODE=NSA,STP,VLANS[,URL]",
                     help="the node leads to another domain: its attachment becomes an interdomain port to the "
                          "neighbour with NSA id NSA, whose STP facing it is STP, with VLANs VLANS (repeatable)")
    imp.add_argument("-o", "--output", help="where to write the YAML (default: standard output)")
    imp.set_defaults(run=run_import)

    status = sub.add_parser("status", help="on a running controller: switches connected, link states (port "
                                           "status and LLDP), wiring that differs from the topology")
    _client_options(status, run_status)


def load(ref: str) -> Topology:
    """Load the topology named by a path or built-in name."""
    return Topology.load(resolve_topology(ref))


def run_validate(args: argparse.Namespace) -> int:
    """`tsdn topo validate FILE`: the summary, then the domains (each interdomain port with its
    peer and the remote DTNs beyond it) when the file has any."""
    topology = load(args.file)
    for warning in topology.unreachable_dtn_warnings():
        print(f"tsdn: warning: {topology.source}: {warning}", file=sys.stderr)
    print(f"ok: {topology.source}: {topology.summary()}")
    for line in domain_lines(topology):
        print(line)
    return 0


def domain_lines(topology: Topology) -> list[str]:
    """What `topo validate` says of a topology's domains: nothing when it has no interdomain port."""
    if not topology.interdomain:
        return []
    peers = sorted({port.peer.nsa for port in topology.interdomain.values()})
    lines = ["", f"domains: ours and {len(peers)} neighbour(s) ({', '.join(peers)}), "
                 f"through {len(topology.interdomain)} interdomain port(s)"]
    site_of = {dtn: site.name for site in topology.spec.sites for dtn in site.dtns}
    for port in topology.spec.interdomain:
        latency = "" if port.latency_ms is None else f", {port.latency_ms:g} ms"
        lines.append(f"  {port.name} at {port.switch}:{port.port}: {format_bandwidth(port.capacity)} per direction"
                     f"{latency}, VLANs {format_vlans(port.vlans)}")
        lines.append(f"    peer NSA  {port.peer.nsa}")
        lines.append(f"    peer STP  {port.peer.stp}")
        if port.peer.url is not None:
            lines.append(f"    provider  {port.peer.url}")
        beyond = topology.remote_site_dtns(port.name)
        if not beyond:
            lines.append("    remote DTNs: none")
        for name in beyond:
            dtn = topology.dtns[name]
            site = f", site {site_of[name]}" if name in site_of else ""
            lines.append(f"    remote DTN {name}: STP {dtn.stp}{site}")
    return lines


def run_show(args: argparse.Namespace) -> int:
    """`tsdn topo show FILE [--json]`."""
    topology = load(args.file)
    if args.json:
        data = topology.spec.model_dump(mode="json")
        data["source"] = topology.source
        print_json(data)
        return 0
    print(topology.summary())
    if topology.spec.description:
        print(topology.spec.description.strip())
    print()
    print(table(
        ["SWITCH", "DPID", "PORTS", "SITE"],
        [(s.name, f"{s.dpid:#018x}", len(s.ports), _site_name(topology, s.name)) for s in topology.spec.switches],
    ))
    print()
    rows = []
    for link in topology.spec.links:
        forward, backward = topology.link_directions[link.label]
        capacity = format_bandwidth(forward.capacity)
        if backward.capacity != forward.capacity:
            capacity += f"/{format_bandwidth(backward.capacity)}"
        rows.append((link.label, f"{link.a}:{link.a_port}", f"{link.b}:{link.b_port}", capacity,
                     "" if link.latency_ms is None else f"{link.latency_ms:g}", link.kind))
    print(table(["LINK", "A", "B", "CAPACITY", "LATENCY_MS", "KIND"], rows))
    if topology.spec.dtns:
        print()
        print(table(
            ["DTN", "ATTACHED", "IPV4", "MAC", "NIC", "NUMA"],
            [(d.name, f"{d.switch}:{d.port}" + (f" (beyond {d.beyond})" if d.beyond else ""), d.ipv4, d.mac,
              format_bandwidth(d.nic_speed),
              "unknown" if d.numa_node < 0 else d.numa_node) for d in topology.spec.dtns],
        ))
    return 0


def _site_name(topology: Topology, switch: str) -> str:
    site = topology.site_of(switch)
    return site.name if site else "-"


def run_import(args: argparse.Namespace) -> int:
    """`tsdn topo import FILE.graphml --link-capacity BW [--dtns] [-o OUT.yaml]`."""
    from topologies.zoo_import import import_zoo

    capacity = parse_bandwidth(args.link_capacity, "--link-capacity")
    result = import_zoo(args.file, capacity, with_dtns=args.dtns, name=args.name, interdomain=args.interdomain)
    text = dump_topology_spec(result.spec)
    size = len(text.encode())
    if size > MAX_TOPOLOGY_BYTES:  # tsdn could not load what it wrote
        raise InvalidArgument(f"{args.file}: the topology would be a {size:,}-byte file; a topology file may have "
                              f"at most {MAX_TOPOLOGY_BYTES:,} bytes")
    for warning in result.warnings:
        print(f"tsdn: warning: {warning}", file=sys.stderr)
    summary = Topology(result.spec).summary()
    if args.output is None:
        sys.stdout.write(text)
    else:
        try:
            _write_atomically(Path(args.output), text)
        except OSError as exc:
            raise InvalidArgument(f"--output {args.output}: cannot write: {exc.strerror or exc}") from None
        print(f"wrote {args.output}: {summary}", file=sys.stderr)
    return 0


def _write_atomically(target: Path, text: str) -> None:
    """Write `text` to `target` so that readers see the old file or the whole new one."""
    directory = target.resolve().parent
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_status(args: argparse.Namespace, client) -> int:
    """`tsdn topo status [--json]`: one line per link, then wiring mismatches and absent switches."""
    from google.protobuf.json_format import MessageToDict

    from northbound.proto.tsdn.v1 import topology_pb2 as topo_pb

    status = client.get_topology_status()
    if args.json:
        print_json(MessageToDict(status, preserving_proto_field_name=True))
        return 0
    connected = [s for s in status.switches if s.connected]
    if not status.controlled:
        print(f"topology {status.topology}: {status.note}")
        return 0
    print(f"topology {status.topology}: {len(connected)} of {len(status.switches)} switches connected")
    print()

    def age(link, field: str) -> str:
        return f"{getattr(link, field):.1f}s" if link.HasField(field) else "never"

    print(table(["LINK", "STATE", "A", "B", "LLDP A>B", "LLDP B>A", "REASON"],
                [(link.name, topo_pb.LinkStatus.State.Name(link.state), link.a, link.b,
                  age(link, "lldp_age_a_to_b_s"), age(link, "lldp_age_b_to_a_s"), link.reason)
                 for link in status.links]))
    if status.mismatches:
        print()
        print("wiring mismatches:")
        for m in status.mismatches:
            print(f"  {m.message}")
    absent = [s.name for s in status.switches if not s.connected]
    if absent:
        print()
        print(f"switches not connected: {', '.join(absent)}")
    return 0
