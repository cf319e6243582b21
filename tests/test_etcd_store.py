"""The controllers' state in a real etcd: what one leader stores the next one loads, a create is in
one etcd transaction (calls flushed together share one), and a deposed leader's flush lands
nowhere (fenced on the leader key)."""

from __future__ import annotations

import json
import time

import pytest

from sdn_app.core import transfer_store
from sdn_app.core.clock import SystemClock
from sdn_app.core.errors import Fenced, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role, State, Terms
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.ha.etcd import Etcd, b64, prefix_end, unb64
from sdn_app.ha.store import EtcdReplica, leader_key, row_prefix
from topologies import builtin_topology

ADMIN = Principal("noc", Role.ADMIN)
NAMESPACE = "ring8"


@pytest.fixture(scope="module")
def topology() -> Topology:
    return Topology.load(builtin_topology("ring8"))


def elect(etcd: Etcd) -> int:
    """Take the leader key (as an election would): the generation, its create revision."""
    key = leader_key(NAMESPACE)
    etcd.txn([], [{"request_delete_range": {"key": b64(key)}}])
    response = etcd.txn([{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                        [{"request_put": {"key": b64(key), "value": b64(json.dumps({"address": "test"}))}}])
    assert response["succeeded"]
    return int(response["header"]["revision"])


def leader_book(etcd: Etcd, topology: Topology) -> ReservationBook:
    ledger = Ledger(topology.capacities(), replica=EtcdReplica(etcd, NAMESPACE, elect(etcd)))
    return ReservationBook(topology, ledger, SystemClock())


def request(src: str, dst: str, gbps: int) -> PathRequest:
    now = time.time()
    return PathRequest(src, dst, gbps * 10**9, now, now + 3600)


def stored(etcd: Etcd, table: str) -> dict[str, dict]:
    prefix = row_prefix(NAMESPACE, table)
    kvs, _ = etcd.range(prefix, prefix_end(prefix))
    return {json.loads(unb64(kv["value"]))["id"]: kv for kv in kvs}


def test_the_next_leader_loads_what_the_last_one_committed(etcd, topology):
    client = Etcd(etcd.url)
    first = leader_book(client, topology)
    kept = first.create(ADMIN, request("dtn1", "dtn5", 60))
    released = first.create(ADMIN, request("dtn2", "dtn6", 30))
    first.release(ADMIN, released.name)
    first.ledger.flush()

    second = leader_book(client, topology)
    assert second.get(ADMIN, kept.name).route == kept.route
    assert second.get(ADMIN, released.name).state.is_final
    assert [b.id for b in second.ledger.bookings()] == [kept.id]
    with pytest.raises(NoCapacity):  # the loaded booking holds its capacity: 60G + 60G on s1>s2 does not fit
        second.create(ADMIN, request("dtn1", "dtn3", 60))


def test_a_hold_and_an_elastic_share_survive_a_failover(etcd, topology):
    client = Etcd(etcd.url)
    first = leader_book(client, topology)
    held = first.create(ADMIN, request("dtn1", "dtn5", 60), terms=Terms(hold=True))
    elastic = first.create(Principal("noc", Role.ADMIN, priority=5), request("dtn2", "dtn6", 10),
                           terms=Terms(ceiling=50 * 10**9, priority=3))
    share = first.get(ADMIN, elastic.name).meter_bps
    assert 10 * 10**9 < share <= 50 * 10**9
    first.ledger.flush()

    second = leader_book(client, topology)  # the next leader
    kept = second.get(ADMIN, held.name)
    assert kept.state is State.HELD and kept.hold_until == held.hold_until
    with pytest.raises(NoCapacity):  # the hold still counts against capacity
        second.create(ADMIN, request("dtn1", "dtn3", 60))
    shared = second.get(ADMIN, elastic.name)
    assert (shared.ceiling, shared.priority, shared.meter_bps) == (50 * 10**9, 3, share)
    assert second.commit(ADMIN, held.name).state is State.ACTIVE


def test_a_create_is_one_etcd_transaction(etcd, topology):
    client = Etcd(etcd.url)
    book = leader_book(client, topology)
    made = book.create(ADMIN, request("dtn1", "dtn5", 10))
    assert made.id not in stored(client, "reservations")  # staged until the flush
    book.ledger.flush()
    booking, reservation = stored(client, "bookings")[made.id], stored(client, "reservations")[made.id]
    assert booking["mod_revision"] == reservation["mod_revision"]  # one revision: both or neither


def test_a_deposed_leaders_flush_lands_nowhere(etcd, topology):
    client = Etcd(etcd.url)
    old = leader_book(client, topology)
    before = old.create(ADMIN, request("dtn1", "dtn5", 10))
    old.ledger.flush()
    new = leader_book(client, topology)  # another election: the old leader's generation is gone
    _, revision = client.range(leader_key(NAMESPACE))

    late = old.create(ADMIN, request("dtn2", "dtn6", 10), request_id="late")  # decided on its own copy ...
    with pytest.raises(Fenced, match="no longer the leader"):
        old.ledger.flush()  # ... and never stored
    assert old.create(ADMIN, request("dtn2", "dtn6", 10), request_id="late").id == late.id  # a retry finds it ...
    with pytest.raises(Fenced):
        old.ledger.flush()  # ... but the answer never goes out: nothing to store, and still refused
    old.release(ADMIN, before.name)
    with pytest.raises(Fenced):  # not later either
        old.ledger.flush()
    assert client.range(leader_key(NAMESPACE))[1] == revision  # etcd unchanged
    assert late.id not in stored(client, "reservations")
    assert new.get(ADMIN, before.name).state is before.state
    assert new.create(ADMIN, request("dtn2", "dtn6", 10)).state.value in ("ACTIVE", "PROVISIONING")


def test_a_row_upserted_twice_in_one_batch_is_stored_once(etcd, topology):
    """The stores write with upserts (a transfer, an agent, a SENSE instance saved again in the same
    batch); the replica's change capture must not fail them ("UNIQUE constraint failed")."""
    client = Etcd(etcd.url)
    book = leader_book(client, topology)
    ledger = book.ledger
    ledger.write(transfer_store.create_table)
    for state in ("QUEUED", "RUNNING"):
        row = transfer_store.Row(id="t1", owner="rucio", request_id="", reservation_id="", state=state,
                                 body={"state": state})
        ledger.write(lambda db, row=row: (transfer_store.save(db, row), transfer_store.save(db, row)))
    ledger.flush()
    row = json.loads(unb64(stored(client, "transfers")["t1"]["value"]))
    assert row["state"] == "RUNNING" and json.loads(row["body"])["state"] == "RUNNING"
