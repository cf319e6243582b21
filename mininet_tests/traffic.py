"""Traffic between Mininet hosts for the system tests: real iperf3, parsed from its JSON."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.waiting import wait_for


def iperf3(client_host, server_host, server_ip: str, offered_mbps: float | None = None, udp: bool = False) -> float:
    """Run iperf3 for 3 s from `client_host` to `server_host` (at `offered_mbps`, or as fast as TCP
    goes); return the Mbit/s received. Fails the test when iperf3 stalls or reports an error."""
    server = server_host.popen(["iperf3", "-s", "-1", "-p", "5201"])
    try:
        def listening():
            assert server.poll() is None, f"iperf3 server exited: {server.communicate()}"
            return server_host.pexec("ss", "-Hltn", "sport = :5201")[0].strip()

        wait_for(listening, "the iperf3 server to listen", 10, interval=0.1)
        command = ["iperf3", "-c", server_ip, "-p", "5201", "-t", "3", "-J", "--connect-timeout", "5000",
                   *(["-b", f"{offered_mbps:g}M"] if offered_mbps is not None else []), *(["-u"] if udp else [])]
        client = client_host.popen(command)
        try:
            out, err = client.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            client.kill()
            out, err = client.communicate()
            pytest.fail(f"{' '.join(command)} did not finish within 30 s: {out}{err}")
        try:
            report = json.loads(out)
        except json.JSONDecodeError:
            pytest.fail(f"iperf3 client printed no JSON report: {out}{err}")
        assert "error" not in report, report["error"]
        return report["end"]["sum_received"]["bits_per_second"] / 1e6
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=10)
