"""Traffic between Mininet hosts for the system tests: real iperf3, parsed from its JSON."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

import pytest

from tests.waiting import wait_for


@dataclass
class Iperf3Run:
    """A running iperf3 client and its one-shot server; `report()` waits for the end."""

    command: list[str]
    server: subprocess.Popen
    client: subprocess.Popen
    seconds: float

    def report(self) -> dict:
        """The client's JSON report; fails the test when iperf3 stalls or reports an error."""
        try:
            try:
                out, err = self.client.communicate(timeout=self.seconds + 30)
            except subprocess.TimeoutExpired:
                self.client.kill()
                out, err = self.client.communicate()
                pytest.fail(f"{' '.join(self.command)} did not finish within {self.seconds + 30:g} s: {out}{err}")
            try:
                report = json.loads(out)
            except json.JSONDecodeError:
                pytest.fail(f"iperf3 client printed no JSON report: {out}{err}")
            assert "error" not in report, f"iperf3: {report['error']}"
            return report
        finally:
            if self.server.poll() is None:
                self.server.kill()
            self.server.wait(timeout=10)


def start_iperf3(client_host, server_host, server_ip: str, seconds: float = 3, offered_mbps: float | None = None,
                 udp: bool = False) -> Iperf3Run:
    """Start iperf3 for `seconds` from `client_host` to `server_host` (at `offered_mbps`, or as fast
    as TCP goes, one report per second) once the server listens."""
    server = server_host.popen(["iperf3", "-s", "-1", "-p", "5201"])

    def listening():
        assert server.poll() is None, f"iperf3 server exited: {server.communicate()}"
        return server_host.pexec("ss", "-Hltn", "sport = :5201")[0].strip()

    try:
        wait_for(listening, "the iperf3 server to listen", 10, interval=0.1)
    except BaseException:
        server.kill()
        server.wait(timeout=10)
        raise
    command = ["iperf3", "-c", server_ip, "-p", "5201", "-t", f"{seconds:g}", "-i", "1", "-J",
               "--connect-timeout", "5000",
               *(["-b", f"{offered_mbps:g}M"] if offered_mbps is not None else []), *(["-u"] if udp else [])]
    return Iperf3Run(command, server, client_host.popen(command), seconds)


def iperf3(client_host, server_host, server_ip: str, offered_mbps: float | None = None, udp: bool = False) -> float:
    """Run iperf3 for 3 s from `client_host` to `server_host`; return the Mbit/s received."""
    report = start_iperf3(client_host, server_host, server_ip, 3, offered_mbps, udp).report()
    return report["end"]["sum_received"]["bits_per_second"] / 1e6
