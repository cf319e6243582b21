"""AgentService on a real controller (loopback gRPC): a `tsdn agent run` process registers with
its host facts, heartbeats, is LOST once killed, and registers again after a controller restart."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
import yaml

from dtn_agent.agent import run_agent
from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import agent_pb2 as pb
from sdn_app.core.errors import InvalidArgument
from tests.conftest import TOKENS
from tests.fake_sysfs import FakeHost
from tests.waiting import wait_for
from topologies import builtin_topology
from tsdn.controller import Controller, ControllerConfig

TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"
DTN = "caltech-a-dtn1"


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    """A fake DTN: 32 CPUs on two NUMA nodes, a 100G NIC on a PCIe Gen3 x16 link."""
    root = tmp_path / "root"
    (FakeHost(root, hostname="dtn-test").cpus("0-31", {0: "0-15", 1: "16-31"})
     .nic("ens1f0", speed=100000, mtu=9000, numa_node=1, local_cpulist="16-31",
          link=("8.0 GT/s PCIe", 16, "8.0 GT/s PCIe", 16)))
    return root


def _token_file(tmp_path: Path, principal: str) -> Path:
    path = tmp_path / f"{principal}.token"
    path.write_text(TOKENS[principal][1] + "\n")
    path.chmod(0o600)
    return path


def _tsdn(*args: str, token_file: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TSDN_TOKEN_FILE": str(token_file)}
    return subprocess.run([TSDN, *args], capture_output=True, text=True, timeout=60, env=env)


def _listed(address: str, token_file: Path) -> dict[str, dict]:
    done = _tsdn("agent", "list", "--json", "--controller", address, token_file=token_file)
    assert done.returncode == 0, done.stderr
    return {a["dtn"]: a for a in json.loads(done.stdout)}


def _collect(stream, into: list) -> threading.Thread:
    def run() -> None:
        with contextlib.suppress(ApiError):
            into.extend(stream)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_agent_process_registers_heartbeats_and_is_lost_when_killed(start_controller, tokens_file, tmp_path,
                                                                     host_root):
    controller = start_controller(tokens=tokens_file, agent_timeout=1.0)
    service_token = _token_file(tmp_path, "rucio")
    watcher = TsdnClient(controller.address, token=TOKENS["rucio"][1])
    events: list[pb.AgentEvent] = []
    stream = watcher.watch_agents(timeout=60)
    collector = _collect(stream, events)
    agent = subprocess.Popen(
        [TSDN, "agent", "run", "--controller", controller.address, "--name", DTN, "--token-file",
         str(_token_file(tmp_path, "dtn-agent")), "--root", str(host_root), "--heartbeat-interval", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        listed = wait_for(lambda: _listed(controller.address, service_token).get(DTN), "the agent to be listed",
                          timeout=20)
        assert listed["name"] == f"agents/{DTN}" and listed["state"] == "ONLINE"
        assert listed["principal"] == "dtn-agent"
        [nic] = listed["facts"]["nics"]
        assert nic["name"] == "ens1f0" and int(nic["speed_bps"]) == 100 * 10**9 and nic["mtu"] == 9000
        assert nic["numa_node"] == 1 and nic["local_cpus"] == list(range(16, 32))
        assert int(nic["pcie_usable_bps"]) > int(nic["capacity_bps"]) == 100 * 10**9
        assert listed["facts"]["hostname"] == "dtn-test" and len(listed["facts"]["cpus"]) == 32
        # Heartbeats keep it ONLINE well past the timeout.
        registered = controller.worker.call(controller.agents.get, DTN).registered
        wait_for(lambda: controller.worker.call(controller.agents.get, DTN).last_heartbeat > registered + 2,
                 "heartbeats for more than twice the timeout", timeout=20)
        assert controller.worker.call(controller.agents.get, DTN).state.value == "ONLINE"
        human = _tsdn("agent", "list", "--controller", controller.address, token_file=service_token)
        assert human.returncode == 0 and DTN in human.stdout and "ONLINE" in human.stdout
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        agent.stderr.close()
    lost = wait_for(lambda: [e for e in events if e.state == pb.LOST], "a LOST event", timeout=20)
    assert lost[0].agent.dtn == DTN and lost[0].previous_state == pb.ONLINE
    assert lost[0].reason == "no heartbeat for 1 s"
    assert events[0].reason == "registered"
    listed = _listed(controller.address, service_token)[DTN]
    assert listed["state"] == "LOST" and listed["state_reason"] == "no heartbeat for 1 s"
    watcher.close()  # cancels the stream
    collector.join(10)
    assert not collector.is_alive()


def test_agent_stops_cleanly_on_sigterm(controller, tmp_path, host_root):
    agent = subprocess.Popen(
        [TSDN, "agent", "run", "--controller", controller.address, "--name", DTN, "--token-file",
         str(_token_file(tmp_path, "dtn-agent")), "--root", str(host_root), "--heartbeat-interval", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: DTN in {a.dtn for a in controller.worker.call(controller.agents.list)},
                 "the agent to register")
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(10) == 0
        assert "stopping" in agent.stderr.read()
        agent.stderr.close()


def test_service_token_cannot_register_and_agent_token_cannot_list(client_for):
    with pytest.raises(ApiError) as refused:
        client_for("rucio").register_agent(DTN, pb.HostFacts())
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert "only agent and admin tokens" in refused.value.message
    agent = client_for("dtn-agent")
    agent.register_agent(DTN, pb.HostFacts())
    with pytest.raises(ApiError) as listing:
        agent.list_agents()
    assert listing.value.code is grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(ApiError) as heartbeat:
        client_for("dtn-agent").heartbeat("caltech-a-dtn2")
    assert heartbeat.value.code is grpc.StatusCode.NOT_FOUND
    assert client_for("noc").get_agent(f"agents/{DTN}").state == pb.ONLINE


def test_bad_dtn_name_is_refused_with_the_reason(controller, client_for, tmp_path, host_root):
    with pytest.raises(ApiError) as refused:
        client_for("dtn-agent").register_agent("no-such-dtn", pb.HostFacts())
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "dtn 'no-such-dtn': not a DTN of topology" in refused.value.message
    done = subprocess.run(
        [TSDN, "agent", "run", "--controller", controller.address, "--name", "no-such-dtn", "--token-file",
         str(_token_file(tmp_path, "dtn-agent")), "--root", str(host_root)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "the controller refused this agent: dtn 'no-such-dtn': not a DTN of topology" in done.stderr


def test_bound_agent_token_acts_for_its_own_dtn_only(start_controller, tmp_path):
    tokens = tmp_path / "bound.yaml"
    tokens.write_text(yaml.safe_dump({"tokens": [
        {"principal": "agent1", "role": "agent", "token": "agent1-token-0123456789", "dtn": DTN}]}))
    tokens.chmod(0o600)
    controller = start_controller(tokens=tokens)
    with TsdnClient(controller.address, token="agent1-token-0123456789") as client:
        client.register_agent(DTN, pb.HostFacts())
        with pytest.raises(ApiError) as refused:
            client.register_agent("caltech-a-dtn2", pb.HostFacts())
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert f"bound to dtn '{DTN}'" in refused.value.message
    tokens.write_text(yaml.safe_dump({"tokens": [
        {"principal": "agent1", "role": "agent", "token": "agent1-token-0123456789", "dtn": "nowhere"}]}))
    with pytest.raises(InvalidArgument, match="agent agent1: dtn 'nowhere' is not a DTN of topology"):
        start_controller(tokens=tokens)


def test_agent_registers_again_after_the_controller_restarts(tmp_path, tokens_file, host_root):
    def controller(port: int = 0) -> Controller:
        started = Controller(ControllerConfig(topology=builtin_topology("sc16"), listen_grpc=f"127.0.0.1:{port}",
                                              state=tmp_path / "tsdn.db", tokens=tokens_file))
        started.start()
        return started

    def known(c: Controller) -> bool:
        return DTN in {a.dtn for a in c.worker.call(c.agents.list)}

    first = controller()
    stop = threading.Event()
    errors: list[BaseException] = []

    def agent() -> None:
        try:
            run_agent(first.address, DTN, TOKENS["dtn-agent"][1], host_root, heartbeat_interval=0.1, stop=stop,
                      timeout=2.0)
        except BaseException as error:  # handed to the test's thread
            errors.append(error)
    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    second = None
    try:
        wait_for(lambda: known(first), "the agent to register with the first controller")
        first.stop(grace=0.2)
        second = controller(first.port)
        wait_for(lambda: known(second), "the agent to register again with the restarted controller", timeout=20)
    finally:
        stop.set()
        thread.join(10)
        first.stop(grace=0.2)
        if second is not None:
            second.stop(grace=0.2)
    assert not thread.is_alive() and errors == []
