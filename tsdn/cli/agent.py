"""`tsdn agent ...`: what a DTN is (NICs, PCIe, RDMA, NUMA) and whether it is tuned for WAN transfers;
the agent process itself (`run`), and the agents a controller knows (`list`)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys
from pathlib import Path

from sdn_app.core.errors import InvalidArgument
from sdn_app.core.units import format_bandwidth, format_time
from tsdn.cli.reservations import _as_dict, _client_options, _epoch, _exit_code
from tsdn.output import EXIT_REFUSED, fail, print_json, table


def register(commands: argparse._SubParsersAction) -> None:
    """Add `agent` and its subcommands."""
    parser = commands.add_parser("agent", help="on a DTN: host facts and preflight tuning checks")
    sub = parser.add_subparsers(dest="agent_command", metavar="SUBCOMMAND", required=True)

    facts = sub.add_parser("facts", help="NICs (speed, MTU, NUMA, PCIe, usable capacity), RDMA devices, CPUs")
    facts.add_argument("--json", action="store_true", help="machine-readable output")
    facts.add_argument("--root", default="/", metavar="DIR", help="read /sys and /proc under DIR (default: /)")
    facts.add_argument("--all", action="store_true", help="include virtual interfaces (veths, bridges, tun)")
    facts.set_defaults(run=run_facts)

    preflight = sub.add_parser("preflight", help="fasterdata-style tuning checks; exit 1 if any check fails")
    preflight.add_argument("--json", action="store_true", help="machine-readable output")
    preflight.add_argument("--root", default="/", metavar="DIR", help="read /sys and /proc under DIR (default: /)")
    preflight.add_argument("--nic", metavar="NAME", help="check this NIC only (default: every physical NIC)")
    preflight.set_defaults(run=run_preflight)

    run = sub.add_parser("run", help="run the agent: register this DTN with the controller and send heartbeats")
    run.add_argument("--controller", default=os.environ.get("TSDN_CONTROLLER", "127.0.0.1:50051"),
                     metavar="HOST:PORT[,HOST:PORT...]",
                     help="controller's gRPC address, or those of several controllers sharing a store (the agent "
                          "follows the leader) (env TSDN_CONTROLLER)")
    run.add_argument("--name", required=True, metavar="DTN", help="this host's DTN name in the topology")
    run.add_argument("--token-file", default=os.environ.get("TSDN_TOKEN_FILE"), metavar="FILE",
                     help="file holding the agent's bearer token (env TSDN_TOKEN_FILE)")
    run.add_argument("--tls-ca", metavar="PEM", help="use TLS, trusting this CA certificate")
    run.add_argument("--root", default="/", metavar="DIR", help="read /sys and /proc under DIR (default: /)")
    run.add_argument("--heartbeat-interval", type=float, default=5.0, metavar="S",
                     help="seconds between heartbeats (default 5; keep it well under the controller's "
                          "--agent-timeout)")
    run.add_argument("--timeout", type=float, default=10.0, metavar="S", help="deadline per call (default 10)")
    run.add_argument("--nic", metavar="IFACE",
                     help="the data NIC: transfers are pinned to its NUMA node's CPUs and its capacity is the "
                          "DTN's (default: the NIC of highest capacity)")
    run.add_argument("--fdt-jar", default=os.environ.get("TSDN_FDT_JAR") or None, metavar="PATH",
                     help="fdt.jar, for transfers with the fdt engine (env TSDN_FDT_JAR)")
    run.add_argument("--listen", default="0.0.0.0", metavar="HOST",
                     help="address receivers listen on for transfer data (default 0.0.0.0)")
    run.add_argument("--advertise", default="", metavar="HOST",
                     help="address the sender is told to connect to, used by a controller that controls no "
                          "switches (default: the DTN's address in the topology)")
    run.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    run.set_defaults(run=run_agent)

    listing = sub.add_parser("list", help="the agents a controller knows: state, last heartbeat, NICs")
    _client_options(listing, run_list)


def _bw(bps: int | None) -> str:
    return "unknown" if bps is None else format_bandwidth(bps)


def run_facts(args: argparse.Namespace) -> int:
    """`tsdn agent facts [--json] [--root DIR] [--all]`."""
    from dtn_agent.host import read_host_facts
    from dtn_agent.pinning import format_cpulist

    facts = read_host_facts(args.root, include_virtual=args.all)
    if args.json:
        print_json(facts.to_dict())
        return 0
    nodes = len(facts.numa_nodes)
    print(f"host {facts.hostname or 'unknown'} (kernel {facts.kernel or 'unknown'}): "
          f"{len(facts.cpus_online)} CPUs online ({format_cpulist(facts.cpus_online) or 'unknown'}), "
          f"{nodes} NUMA node{'s' if nodes != 1 else ''}")
    for node, cpus in facts.numa_nodes.items():
        print(f"  node{node}: CPUs {format_cpulist(cpus) or 'none'}")
    print()
    if facts.nics:
        rows = []
        for nic in facts.nics:
            pcie = nic.pcie
            rows.append((
                nic.name, nic.kind, nic.operstate, _bw(nic.speed_bps), nic.mtu or "unknown",
                "unknown" if nic.numa_node is None else nic.numa_node,
                format_cpulist(nic.local_cpus) or "-", nic.driver or "-",
                f"{pcie.address} {pcie.describe()}" if pcie else "-",
                _bw(nic.capacity_bps), nic.limit, ",".join(nic.rdma_devices) or "-",
            ))
        print(table(["NIC", "KIND", "STATE", "SPEED", "MTU", "NUMA", "LOCAL_CPUS", "DRIVER", "PCIE", "CAPACITY",
                     "LIMIT", "RDMA"], rows))
    else:
        print("no NICs" + ("" if args.all else " with a device (use --all to list virtual interfaces)"))
    if facts.rdma:
        print()
        rows = []
        for device in facts.rdma:
            netdevs = ",".join(device.netdevs) or "-"
            if not device.ports:
                rows.append((device.name, "-", "unknown", "unknown", "unknown", netdevs))
            for port in device.ports:
                rows.append((device.name, port.port, port.state or "unknown", port.rate or "unknown",
                             port.link_layer or "unknown", ",".join(port.netdevs) or netdevs))
        print(table(["RDMA", "PORT", "STATE", "RATE", "LINK_LAYER", "NETDEV"], rows))
    if facts.warnings:
        print()
        for warning in facts.warnings:
            print(f"warning: {warning}")
    notes = facts.notes + [f"{nic.name}: {note}" for nic in facts.nics for note in nic.notes]
    if notes:
        print()
        for note in notes:
            print(f"note: {note}")
    return 0


def run_preflight(args: argparse.Namespace) -> int:
    """`tsdn agent preflight [--json] [--root DIR] [--nic NAME]`: exit 1 when any check fails."""
    from dtn_agent.preflight import run_preflight as preflight

    report = preflight(args.root, nic=args.nic)
    code = EXIT_REFUSED if report.failed else 0
    if args.json:
        print_json(report.to_dict())
        return code
    print(table(["CHECK", "SUBJECT", "STATUS", "FOUND", "RECOMMENDED"],
                [(c.name, c.subject, c.status.upper(), c.found, c.recommended) for c in report.checks]))
    details = [c for c in report.checks if c.status != "pass" and c.detail]
    if details:
        print()
        for c in details:
            subject = "" if c.subject == "host" else f" ({c.subject})"
            print(f"{c.status}: {c.name}{subject}: {c.detail}")
    counts = report.counts()
    print()
    print(f"{report.basis_note}; " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return code


def _read_file(path: str | None, option: str) -> bytes | None:
    if not path:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"{option} {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise InvalidArgument(f"{option} {path}: the file is empty")
    return data


def _check_host(host: str, option: str) -> None:
    """InvalidArgument unless `host` is an IP address or a name this host resolves."""
    if not host or host != host.strip() or any(c.isspace() for c in host):
        raise InvalidArgument(f"{option} {host!r}: not a host name or IP address")
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidArgument(f"{option} {host}: not an IP address, and the name does not resolve ({exc})") from None


def run_agent(args: argparse.Namespace) -> int:
    """`tsdn agent run --controller HOST:PORT --name DTN --token-file F [--root DIR] [--nic IFACE]
    [--fdt-jar PATH] [--listen HOST] [--advertise HOST]`: until SIGINT or SIGTERM."""
    from dtn_agent.agent import run_agent as agent
    from northbound.client import ApiError

    token_bytes = _read_file(args.token_file, "--token-file")
    token = token_bytes.decode(errors="replace").strip() if token_bytes is not None else None
    tls_ca = _read_file(args.tls_ca, "--tls-ca")
    if not args.heartbeat_interval > 0:
        raise InvalidArgument(f"--heartbeat-interval: must be positive, got {args.heartbeat_interval}")
    if not args.timeout > 0:
        raise InvalidArgument("--timeout: must be positive")
    if not Path(args.root).is_dir():
        raise InvalidArgument(f"--root {args.root}: not a directory")
    if args.fdt_jar is not None and not Path(args.fdt_jar).is_file():
        given = "--fdt-jar" if os.environ.get("TSDN_FDT_JAR") != args.fdt_jar else "TSDN_FDT_JAR"
        raise InvalidArgument(f"{given} {args.fdt_jar}: no such file")
    _check_host(args.listen, "--listen")
    if args.advertise:
        _check_host(args.advertise, "--advertise")
    if args.nic:
        from dtn_agent.host import read_host_facts

        try:
            read_host_facts(args.root).nic(args.nic)
        except InvalidArgument as error:
            raise InvalidArgument(f"--nic {args.nic}: {error}") from None
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        agent(args.controller, args.name, token, args.root, args.heartbeat_interval, timeout=args.timeout,
              tls_ca=tls_ca, nic=args.nic, fdt_jar=args.fdt_jar, listen=args.listen, advertise=args.advertise)
    except ApiError as error:
        return fail(f"the controller refused this agent: {error.message}", _exit_code(error.code.name))
    return 0


def run_list(args: argparse.Namespace, client) -> int:
    """`tsdn agent list [--json]`."""
    from northbound.proto.tsdn.v1 import agent_pb2 as pb

    agents = client.list_agents()
    if args.json:
        print_json([_as_dict(a) for a in agents])
        return 0
    rows = []
    for a in agents:
        nics = ", ".join(f"{n.name} {_bw(n.capacity_bps if n.HasField('capacity_bps') else None)}"
                         for n in a.facts.nics) or "-"
        rows.append((a.dtn, pb.AgentState.Name(a.state), format_time(_epoch(a.last_heartbeat_time)),
                     a.facts.hostname or "-", nics, a.state_reason or "-"))
    print(table(["DTN", "STATE", "LAST_HEARTBEAT", "HOST", "NICS (CAPACITY)", "REASON"], rows))
    return 0
