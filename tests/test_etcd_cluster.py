"""The etcd test harness is real: one node stores and returns a key and takes a transaction of
10,000 controller-sized rows (--max-txn-ops, --max-request-bytes), three members replicate a key,
one member of three may die (quorum 2) while writes and compare-and-swap go on, two may not
(no quorum: a write fails), a member rejoins with what was written while it was down, a port
taken meanwhile is survived, a member that cannot start says why, and close() cleans up after
itself only.

Without etcd (TSDN_ETCD, else /usr/bin/etcd) the tests skip saying so (and fail in CI, see
conftest.py). Waits have deadlines; nothing asserts on wall-clock durations.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import requests
from etcd3gw import exceptions as etcd_exceptions
from etcd3gw.utils import _encode

from benchmarks.etcd_cluster import MAX_TXN_OPS, EtcdCluster, EtcdError, etcd_binary
from tests.waiting import wait_for

BINARY, WHY_NOT = etcd_binary()
needs_etcd = pytest.mark.skipif(BINARY is None, reason=WHY_NOT)


def new_leader(cluster: EtcdCluster, not_this: int) -> int:
    """The member the running ones agree is leader, once it is not `not_this`."""
    return wait_for(lambda: (leader := cluster.leader()) is not None and leader != not_this and leader + 1,
                    "the running etcd members to elect a new leader") - 1


def compare_and_swap(cluster: EtcdCluster, index: int, key: str, revision: int, value: str) -> bool:
    """Put `value` at `key` through member `index` only if the key was last modified at `revision`:
    the shape of a controller's fenced transaction."""
    response = cluster.client(index).transaction({
        "compare": [{"key": _encode(key), "result": "EQUAL", "target": "MOD", "mod_revision": revision}],
        "success": [{"request_put": {"key": _encode(key), "value": _encode(value)}}],
        "failure": [],
    })
    return bool(response.get("succeeded", False))


def mod_revision(cluster: EtcdCluster, index: int, key: str) -> int:
    """The revision at which `key` was last modified, read through member `index`."""
    [(_value, meta)] = cluster.client(index).get(key, metadata=True)
    return int(meta["mod_revision"])


def test_one_node_stores_and_returns_a_key(etcd: EtcdCluster):
    assert etcd.url == f"etcd://127.0.0.1:{etcd.members[0].client_port}"
    assert etcd.client().get_prefix("/tsdn/") == []  # a fresh store of its own
    etcd.client().put("/tsdn/ring8/reservations/r1", '{"bandwidth": 100000000000}')
    assert etcd.client().get("/tsdn/ring8/reservations/r1") == [b'{"bandwidth": 100000000000}']


def test_one_transaction_carries_ten_thousand_rows(etcd: EtcdCluster):
    row = json.dumps({"id": "b" * 36, "reservation": "r" * 36, "link": "s1-s2", "direction": "forward",
                      "bandwidth": 100 * 10**9, "start": 1700000000.0, "end": 1700007200.0})
    puts = [{"request_put": {"key": _encode(f"/tsdn/ring8/rows/bookings/{i:036d}"), "value": _encode(row)}}
            for i in range(MAX_TXN_OPS)]
    response = etcd.client(timeout=30).transaction({"compare": [], "success": puts, "failure": []})
    assert response.get("succeeded")
    client = etcd.client()
    counted = client.post(client.get_url("/kv/range"), json={
        "key": _encode("/tsdn/ring8/rows/bookings/"), "range_end": _encode("/tsdn/ring8/rows/bookings0"),
        "count_only": True})
    assert int(counted["count"]) == MAX_TXN_OPS
    assert client.get(f"/tsdn/ring8/rows/bookings/{MAX_TXN_OPS - 1:036d}") == [row.encode()]


def test_three_members_replicate_a_key(etcd_cluster: EtcdCluster):
    ports = [member.client_port for member in etcd_cluster.members]
    assert len(set(ports)) == 3
    assert etcd_cluster.endpoints == ",".join(f"127.0.0.1:{port}" for port in ports)
    assert etcd_cluster.url == "etcd://" + etcd_cluster.endpoints
    etcd_cluster.client(0).put("/tsdn/ring8/bookings/b1", "written via member 0")
    assert etcd_cluster.client(2).get("/tsdn/ring8/bookings/b1") == [b"written via member 0"]


def test_one_member_of_three_killed_writes_and_compare_and_swap_go_on(etcd_cluster: EtcdCluster):
    etcd_cluster.client(0).put("/tsdn/ring8/leader-generation", "1")
    leader = wait_for(lambda: (index := etcd_cluster.leader()) is not None and index + 1, "an etcd leader") - 1
    etcd_cluster.kill_member(leader)  # the hardest one to lose: a new election must happen
    survivors = [i for i in range(3) if i != leader]
    new_leader(etcd_cluster, not_this=leader)

    for writer in survivors:
        reader = survivors[1 - survivors.index(writer)]
        etcd_cluster.client(writer).put(f"/tsdn/ring8/transfers/via-{writer}", "ok")
        assert etcd_cluster.client(reader).get(f"/tsdn/ring8/transfers/via-{writer}") == [b"ok"]

    key = "/tsdn/ring8/leader-generation"
    seen = mod_revision(etcd_cluster, survivors[0], key)
    assert compare_and_swap(etcd_cluster, survivors[0], key, seen, "2")
    assert not compare_and_swap(etcd_cluster, survivors[1], key, seen, "3"), "a stale revision won"
    assert etcd_cluster.client(survivors[1]).get(key) == [b"2"]


def test_two_members_of_three_killed_a_write_fails(etcd_cluster: EtcdCluster):
    etcd_cluster.kill_member(0)
    etcd_cluster.kill_member(1)
    with pytest.raises(etcd_exceptions.Etcd3Exception):
        etcd_cluster.client(2, timeout=1.0).put("/tsdn/ring8/bookings/no-quorum", "x")

    etcd_cluster.start_member(1)  # quorum again (2 of 3): the same survivor takes writes
    etcd_cluster.client(2).put("/tsdn/ring8/bookings/quorum", "y")
    assert etcd_cluster.client(1).get("/tsdn/ring8/bookings/quorum") == [b"y"]


def test_a_stopped_member_rejoins_with_what_was_written_meanwhile(etcd_cluster: EtcdCluster):
    etcd_cluster.stop_member(1)
    assert not etcd_cluster.members[1].running
    with pytest.raises(etcd_exceptions.ConnectionFailedError):
        etcd_cluster.client(1).get("/tsdn/ring8/agents/dtn1")
    etcd_cluster.client(0).put("/tsdn/ring8/agents/dtn1", "online")

    etcd_cluster.start_member(1)
    assert etcd_cluster.client(1).get("/tsdn/ring8/agents/dtn1") == [b"online"]
    command = etcd_cluster.members[1].process.args
    assert command[command.index("--initial-cluster-state") + 1] == "existing"


@needs_etcd
def test_a_port_taken_meanwhile_is_survived_with_new_ports(tmp_path: Path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]

        class FirstPeerPortTaken(EtcdCluster):
            attempts = 0

            def pick_ports(self, count: int) -> list[int]:
                ports = super().pick_ports(count)
                FirstPeerPortTaken.attempts += 1
                if FirstPeerPortTaken.attempts == 1:
                    ports[1] = taken  # member 0's peer port
                return ports

        with FirstPeerPortTaken(3, tmp_path) as cluster:
            assert FirstPeerPortTaken.attempts == 2
            assert taken not in [p for m in cluster.members for p in (m.client_port, m.peer_port)]
            cluster.client(0).put("k", "v")
            assert cluster.client(2).get("k") == [b"v"]
            assert "address already in use" in (tmp_path / "m0.log").read_text()


@needs_etcd
def test_a_member_that_cannot_start_raises_with_its_log_tail(tmp_path: Path):
    # The last of a repeated flag wins: an election timeout below 5 heartbeats, which etcd refuses.
    with pytest.raises(EtcdError, match=r"(?s)m0 exited.*election-timeout.*should be at least"):
        EtcdCluster(1, tmp_path, extra_args=["--election-timeout", "50"])


@needs_etcd
def test_close_kills_every_member_and_removes_only_its_data_dirs(tmp_path: Path):
    (tmp_path / "keep.txt").write_text("not the cluster's")
    cluster = EtcdCluster(3, tmp_path)
    cluster.stop_member(2)
    processes = [member.process for member in cluster.members]
    assert all(member.data_dir.is_dir() for member in cluster.members)

    cluster.close()
    assert all(process is not None and process.poll() is not None for process in processes)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{cluster.members[0].client_url}/health", timeout=1.0)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["keep.txt", "m0.log", "m1.log", "m2.log"]
