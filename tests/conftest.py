"""Shared fixtures: a real controller serving gRPC on a loopback port, tokens, clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as bandwidth_pb
from northbound.proto.tsdn.v1 import transfer_pb2 as transfer_pb
from sdn_app.core.clock import Clock, SystemClock
from tests.nsi_peers import onsa, opennsa, opennsa_build  # noqa: F401  (fixtures for every test module)
from tests.nsi_schemas import schemas  # noqa: F401  (a fixture for every test module)
from topologies import builtin_topology
from tsdn.controller import Controller, ControllerConfig

TRANSFER_ENDED = {transfer_pb.TRANSFER_SUCCEEDED, transfer_pb.TRANSFER_FAILED, transfer_pb.TRANSFER_CANCELLED}

# principal -> (role, token)
TOKENS = {
    "rucio": ("service", "rucio-token-0123456789abcdef"),
    "fts": ("service", "fts-token-0123456789abcdef"),
    "noc": ("admin", "noc-token-0123456789abcdef"),
    "dtn-agent": ("agent", "agent-token-0123456789abcdef"),
}


def follow_transfer(client: TsdnClient, name: str,
                    on_event: Callable[[transfer_pb.TransferEvent], None] = lambda e: None,
                    timeout: float = 120) -> list[transfer_pb.TransferEvent]:
    """The transfer's events until it ends (the watch ends then; `timeout` bounds the wait)."""
    events = []
    for event in client.watch_transfer(name, timeout=timeout):
        events.append(event)
        on_event(event)
        if event.state in TRANSFER_ENDED:
            break
    assert events and events[-1].state in TRANSFER_ENDED, f"{name} did not end: {events[-1:] or 'no events'}"
    return events


def reservation_released(client: TsdnClient, transfer: transfer_pb.Transfer) -> bool:
    """Whether the transfer's reservation is RELEASED."""
    return client.get_reservation(transfer.reservation).state == bandwidth_pb.RELEASED


def write_dtn_tokens(folder: Path, service: tuple[str, str], agent_tokens: dict[str, str]) -> Path:
    """A tokens file in `folder` with the service (principal, token) and one agent token bound to
    each DTN of `agent_tokens` (DTN -> token), principal `agent-<dtn>`."""
    entries = [{"principal": service[0], "role": "service", "token": service[1]}]
    entries += [{"principal": f"agent-{dtn}", "role": "agent", "token": token, "dtn": dtn}
                for dtn, token in agent_tokens.items()]
    path = folder / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": entries}))
    path.chmod(0o600)
    return path


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    """A tokens file with two services, an admin and an agent (see TOKENS)."""
    path = tmp_path / "tokens.yaml"
    entries = [{"principal": p, "role": role, "token": token} for p, (role, token) in TOKENS.items()]
    path.write_text(yaml.safe_dump({"tokens": entries}))
    path.chmod(0o600)
    return path


@pytest.fixture
def start_controller(tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    """Start real controllers on 127.0.0.1 (a free port each); all are stopped after the test.

    Keyword arguments override `ControllerConfig` fields (topology defaults to sc16, state to
    tmp_path/tsdn.db so a second controller on the same state sees the first one's work; only
    after the first stopped: one controller per state file).
    """
    started: list[Controller] = []

    def start(topology: str | Path = "sc16", clock: Clock | None = None, **overrides) -> Controller:
        path = builtin_topology(topology) if isinstance(topology, str) else topology
        settings = {"listen_grpc": "127.0.0.1:0", "state": tmp_path / "tsdn.db", **overrides}
        config = ControllerConfig(topology=path, clock=clock or SystemClock(), **settings)
        controller = Controller(config)
        controller.start()
        started.append(controller)
        return controller

    yield start
    for controller in started:
        controller.stop(grace=0.5)


@pytest.fixture
def controller(start_controller, tokens_file) -> Controller:
    """A controller on sc16 with the tokens of TOKENS."""
    return start_controller(tokens=tokens_file)


@pytest.fixture
def client_for(controller) -> Iterator[Callable[[str | None], TsdnClient]]:
    """`client_for("rucio")`: a client of `controller` with that principal's token (None: no token)."""
    clients: list[TsdnClient] = []

    def make(principal: str | None, **options) -> TsdnClient:
        token = TOKENS[principal][1] if principal else None
        client = TsdnClient(controller.address, token=token, timeout=10, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
