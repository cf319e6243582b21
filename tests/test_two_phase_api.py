"""Holds, provisioning and elastic shares through the real gRPC API, the `tsdn` command line and
the live map in a real headless Chromium, against a real controller on loopback."""

from __future__ import annotations

import json
import urllib.request
from datetime import datetime

import grpc
import pytest
import yaml

from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from tests.browser import chromium
from tests.conftest import TOKENS
from tests.test_cli_reservations import running, tsdn  # noqa: F401  (the `running` fixture)
from tests.waiting import wait_for

G = 10**9


@pytest.fixture
def prioritised(tmp_path, start_controller):
    """A ledger-only sc16 controller whose tokens give `dmm` priority 5 and `rucio` the default 1."""
    entries = [{"principal": p, "role": role, "token": token, **({"priority": 5} if p == "dmm" else {})}
               for p, (role, token) in {**TOKENS, "dmm": ("service", "dmm-token-0123456789abcdef")}.items()]
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": entries}))
    path.chmod(0o600)
    return start_controller(tokens=path, listen_http="127.0.0.1:0", hold_timeout=30.0)


def client(controller, who: str) -> TsdnClient:
    token = "dmm-token-0123456789abcdef" if who == "dmm" else TOKENS[who][1]
    return TsdnClient(controller.address, token, timeout=10)


def test_hold_commit_abort_and_the_data_plane_over_grpc(prioritised):
    rucio, fts = client(prioritised, "rucio"), client(prioritised, "fts")
    held = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 100 * G, duration=3600, hold=True)
    assert held.state == pb.HELD and held.HasField("hold_expire_time")
    assert held.hold_expire_time.seconds - held.create_time.seconds == 30
    with pytest.raises(ApiError) as denied:
        fts.commit_reservation(held.name)
    assert denied.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert rucio.get_reservation(held.name).state == pb.HELD
    committed = rucio.commit_reservation(held.name)
    assert committed.state == pb.ACTIVE and not committed.HasField("hold_expire_time")
    released = rucio.unprovision_reservation(held.name)
    assert released.state == pb.RESERVED and not released.provision
    assert rucio.provision_reservation(held.name).state == pb.ACTIVE
    with pytest.raises(ApiError) as refused:
        rucio.abort_reservation(held.name)
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION and "not HELD" in str(refused.value)

    other = rucio.create_reservation("caltech-a-dtn1", "ucsd-dtn1", 10 * G, duration=3600, hold=True)
    assert rucio.abort_reservation(other.name).state == pb.RELEASED
    with pytest.raises(ApiError) as ended:
        rucio.commit_reservation(other.name)
    assert ended.value.code is grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(ApiError) as unknown:
        rucio.commit_reservation("reservations/" + "a" * 32)
    assert unknown.value.code is grpc.StatusCode.NOT_FOUND


def test_priorities_and_elastic_terms_over_grpc(prioritised):
    dmm, rucio = client(prioritised, "dmm"), client(prioritised, "rucio")
    with pytest.raises(ApiError) as above:
        rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 10 * G, priority=2)
    assert above.value.code is grpc.StatusCode.PERMISSION_DENIED and "priority" in str(above.value)
    with pytest.raises(ApiError) as inverted:
        dmm.create_reservation("caltech-a-dtn1", "starlight-dtn1", 50 * G, ceiling_bps=40 * G)
    assert inverted.value.code is grpc.StatusCode.INVALID_ARGUMENT and "ceiling_bps" in str(inverted.value)
    assert list(dmm.list_reservations()) == []
    elastic = dmm.create_reservation("caltech-a-dtn1", "starlight-dtn1", 10 * G, ceiling_bps=200 * G)
    assert (elastic.priority, elastic.ceiling_bps, elastic.share_bps) == (5, 200 * G, 200 * G)
    lower = dmm.modify_reservation(elastic.name, priority=2)
    assert lower.priority == 2
    # a guaranteed one takes 250G of the DTN's 400G: the elastic one (10G-200G) shrinks, typed and counted
    rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 250 * G)
    shrunk = dmm.get_reservation(elastic.name)
    assert shrunk.share_bps == 150 * G
    [decision] = [h.decision for h in shrunk.history if h.decision.kind == pb.DECISION_SHARED]
    assert (decision.shares[0].before_bps, decision.shares[0].after_bps) == (200 * G, 150 * G)
    metrics = urllib.request.urlopen(f"http://{prioritised.http_address}/metrics", timeout=10).read().decode()
    assert 'tsdn_share_changes_total{direction="shrank"} 1.0' in metrics
    with pytest.raises(ApiError) as raised:
        dmm.modify_reservation(elastic.name, priority=6)
    assert raised.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert dmm.get_reservation(elastic.name).priority == 2


def test_the_command_line_holds_commits_and_lists_shares(running):  # noqa: F811
    _, env, _, _ = running
    done = tsdn(env, "path", "request", "caltech-a-dtn1", "starlight-dtn1", "-b", "10G", "--ceiling", "100G",
                "--hold", "--duration", "1h", "--json")
    assert done.returncode == 0, done.stderr
    held = json.loads(done.stdout)
    assert held["state"] == "HELD" and held["ceiling_bps"] == str(100 * G)
    committed = tsdn(env, "path", "commit", held["id"])
    assert committed.returncode == 0 and "ACTIVE" in committed.stdout
    assert "elastic: floor 10G, ceiling 100G, share now 100G, priority 1" in committed.stdout
    listed = tsdn(env, "path", "list")
    header, _, row = listed.stdout.splitlines()[:3]
    assert header.split()[5:10] == ["BANDWIDTH", "PRIO", "FLOOR", "CEILING", "SHARE"]
    assert row.split()[5:10] == ["10G", "1", "10G", "100G", "100G"]
    bad = tsdn(env, "path", "request", "caltech-a-dtn1", "ucsd-dtn1", "-b", "10G", "--priority", "2")
    assert bad.returncode != 0 and "priority: 2 is above rucio's own priority 1" in bad.stderr
    aborted = tsdn(env, "path", "abort", held["id"])
    assert aborted.returncode != 0 and "not HELD" in aborted.stderr


@pytest.fixture
def browser():
    yield from chromium()


def test_the_map_shows_priority_floor_ceiling_and_share(prioritised, browser):
    dmm = client(prioritised, "dmm")
    made = dmm.create_reservation("caltech-a-dtn1", "starlight-dtn1", 10 * G, ceiling_bps=200 * G, priority=3)
    browser.get(f"http://{prioritised.http_address}/")
    entry = f'#legend li[data-reservation="{made.id}"] .terms'

    def terms() -> str | None:
        return browser.execute_script("const e = document.querySelector(arguments[0]);"
                                      "return e ? e.textContent : null;", entry)
    wait_for(lambda: terms() is not None, "the reservation in the map's legend", 15, interval=0.2)
    assert terms() == "elastic 10G-200G, share 200G, priority 3"


def test_by_when_could_a_data_set_arrive(running):  # noqa: F811
    _, env, _, _ = running
    asked = tsdn(env, "path", "availability", "caltech-a-dtn1", "starlight-dtn1", "--size", "40TB", "--json")
    assert asked.returncode == 0, asked.stderr
    found = json.loads(asked.stdout)
    [step] = found["schedule"]  # an empty sc16: one step at about the path's 400G (its DTNs' NICs)
    assert 0.995 * 400 * G <= int(step["bandwidth_bps"]) <= 400 * G  # just enough to end at a whole second
    length = (datetime.fromisoformat(step["end_time"]) - datetime.fromisoformat(step["start_time"])).total_seconds()
    assert 800 <= length <= 802  # 40 TB at 400G: 800 s
    human = tsdn(env, "path", "availability", "caltech-a-dtn1", "starlight-dtn1", "--size", "40TB")
    assert "40TB could arrive by" in human.stdout and "400G" in human.stdout
    bad = tsdn(env, "path", "availability", "caltech-a-dtn1", "starlight-dtn1", "--size", "0")
    assert bad.returncode != 0 and "size" in bad.stderr


def test_a_hold_times_out_on_its_own_and_frees_its_booking(start_controller, tokens_file):
    controller = start_controller(tokens=tokens_file, hold_timeout=1.0)
    rucio = client(controller, "rucio")
    held = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 400 * G, duration=3600, hold=True)
    with pytest.raises(ApiError) as full:  # the hold counts against the DTN's 400G NIC
        rucio.create_reservation("caltech-a-dtn1", "ucsd-dtn1", 10 * G, duration=3600)
    assert full.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    events = rucio.watch(held.name, include_existing=True, timeout=20)
    expired = next(e for e in events if e.state == pb.EXPIRED)  # nobody asks: the controller's clock does it
    assert expired.previous_state == pb.HELD and "hold timed out" in expired.reason
    assert rucio.create_reservation("caltech-a-dtn1", "ucsd-dtn1", 10 * G, duration=3600).state == pb.ACTIVE
    with pytest.raises(ApiError) as late:
        rucio.commit_reservation(held.name)
    assert late.value.code is grpc.StatusCode.FAILED_PRECONDITION and "hold expired at" in str(late.value)
