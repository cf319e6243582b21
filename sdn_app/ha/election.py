"""Leader election on an etcd lease: one leader at a time, with a generation that grows each election.

A candidate grants itself a lease of `ttl` seconds and creates the leader key on it, only if the
key does not exist (one transaction). The key's create revision is the leader's generation: etcd
revisions only grow, so each election's is larger than every earlier one's. The leader renews its
lease every `ttl / 4` seconds. It counts itself leader only while its last renewal was *sent*
less than `ttl` ago (the lease cannot have expired before then, whatever happened since), so after
a freeze (SIGSTOP, a long pause) it knows it may be deposed before it asks anyone. Losers poll the
key and run again as soon as it is gone (deleted with the lease of a dead leader).

A leader whose process is gone (its advertised gRPC port refuses connections three looks in a
row) need not be waited for: a follower revokes its lease at once. This only speeds up failover,
never decides safety: were the leader alive after all, its next transaction would fail its
compare on the leader key and the switches would refuse its writes (a newer MASTER generation).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sdn_app.core.errors import InvalidArgument, TsdnError
from sdn_app.ha.etcd import Etcd, b64, unb64

log = logging.getLogger(__name__)
MAX_TTL = 60
POLL_INTERVAL = 0.1  # seconds between looks at the leader key while following
DEAD_AFTER = 3  # looks in a row finding the leader's gRPC port closed: its process is gone (not merely rebinding)


@dataclass(frozen=True)
class Leader:
    """Who leads: the gRPC address clients are sent to, and the generation of its election."""

    address: str
    generation: int
    host: str = ""
    pid: int = 0


def check_ttl(ttl: int) -> int:
    """`ttl` when it is a lease etcd grants (whole seconds, 2 to 60); `InvalidArgument` naming --lease-ttl."""
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 2 <= ttl <= MAX_TTL:
        raise InvalidArgument(f"--lease-ttl: whole seconds from 2 to {MAX_TTL} (etcd grants no shorter lease "
                              f"with its default election timeout), got {ttl!r}")
    return ttl


class Election:
    """This controller's candidacy; `on_elected(generation)` and `on_deposed(reason)` run on its thread."""

    def __init__(self, etcd: Etcd, key: str, address: str, ttl: int,
                 on_elected: Callable[[int], None], on_deposed: Callable[[str], None]):
        self.etcd = etcd
        self.key = key
        self.address = address
        self.ttl = check_ttl(ttl)
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self.generation = 0
        self.lease = 0
        self._renewal_sent = -float("inf")  # monotonic time of the last renewal the lease answered alive
        self._stop = threading.Event()
        self._deposing = threading.Lock()
        self._deposed = False
        self._leader: Leader | None = None
        self._thread = threading.Thread(target=self._run, name="tsdn-election", daemon=True)

    def start(self) -> None:
        """Start campaigning."""
        self._thread.start()

    def stop(self, resign: bool = True) -> None:
        """Stop; a leader revokes its lease (`resign`) so that a follower takes over at once."""
        self._stop.set()
        if resign and self.lease:
            try:
                self.etcd.revoke(self.lease)
            except TsdnError as error:
                log.warning("could not resign (the lease ends by itself within %ds): %s", self.ttl, error)
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def is_leader(self) -> bool:
        """Whether this controller surely still leads: elected, and its lease renewed less than a TTL ago."""
        return self.generation > 0 and time.monotonic() - self._renewal_sent < self.ttl

    def leader(self) -> Leader | None:
        """The leader as last seen (this controller when it leads)."""
        return self._leader

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._campaign():
                    self._lead()
                    return
            except TsdnError as error:
                log.warning("election: %s", error)
                self._stop.wait(POLL_INTERVAL * 5)

    def _campaign(self) -> bool:
        """One attempt: True when elected; else waits until the key is gone (or a while) and False."""
        if not self.lease:
            self.lease = self.etcd.grant(self.ttl)
            self._renewal_sent = time.monotonic()
        value = json.dumps({"address": self.address, "host": socket.gethostname(), "pid": os.getpid()})
        sent = time.monotonic()
        response = self.etcd.txn(
            [{"key": b64(self.key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            [{"request_put": {"key": b64(self.key), "value": b64(value), "lease": str(self.lease)}}],
            [{"request_range": {"key": b64(self.key)}}], what="campaign for leader")
        if response["succeeded"]:
            self.generation = int(response["header"]["revision"])
            self._renewal_sent = sent
            self._leader = Leader(self.address, self.generation, socket.gethostname(), os.getpid())
            return True
        kvs = response["responses"][0].get("response_range", {}).get("kvs", [])
        if kvs and int(kvs[0].get("lease", 0)) == self.lease:
            # Our own key: an earlier attempt that timed out (Ambiguous) was applied after all.
            self.generation = int(kvs[0]["create_revision"])
            self._leader = Leader(self.address, self.generation, socket.gethostname(), os.getpid())
            return True
        self._leader = _leader_of(kvs[0]) if kvs else None
        # Keep our own lease alive while we wait, so the next attempt needs no new one.
        refused = 0
        while not self._stop.wait(POLL_INTERVAL):
            if time.monotonic() - self._renewal_sent > self.ttl / 4:
                sent = time.monotonic()
                if self.etcd.keepalive(self.lease) <= 0:
                    self.lease = 0
                    return False
                self._renewal_sent = sent
            kvs, _ = self.etcd.range(self.key, what="read the leader key")
            if not kvs:
                return False
            seen, self._leader = self._leader, _leader_of(kvs[0])
            if seen != self._leader:
                refused = 0  # another leader: its port is judged afresh
            refused = refused + 1 if self._leader is not None and _refuses(self._leader.address) else 0
            if refused >= DEAD_AFTER:
                log.warning("the leader %s (generation %d) refuses connections: its process is gone; ending its lease "
                            "now rather than in up to %ds", self._leader.address, self._leader.generation, self.ttl)
                self.etcd.revoke(int(kvs[0].get("lease", 0)))
                return False
        return False

    def _lead(self) -> None:
        log.warning("elected leader: generation %d (lease %x, TTL %ds)", self.generation, self.lease, self.ttl)
        try:
            self._on_elected(self.generation)
        except Exception as error:
            log.exception("taking over as leader failed")
            self.depose(f"taking over failed: {error}")
            return
        while not self._stop.wait(self.ttl / 4):
            sent = time.monotonic()
            try:
                alive = self.etcd.keepalive(self.lease) > 0
            except TsdnError as error:
                if self.is_leader():
                    log.warning("lease renewal failed, retrying: %s", error)
                    continue
                self.depose(f"the lease could not be renewed for {self.ttl}s: {error}")
                return
            if not alive or not self.is_leader():
                # A renewal after a freeze longer than the TTL may still find the lease alive (etcd
                # expires leases lazily): our own clock already said we may be deposed. Never resume.
                self.depose("the lease expired (this controller was frozen or cut off longer than its TTL)")
                return
            self._renewal_sent = sent

    def depose(self, reason: str) -> None:
        """Stop leading at once (this controller can no longer write safely): the lease is revoked,
        so that another controller is elected without waiting for it to expire. Once only."""
        with self._deposing:
            if self._deposed:
                return
            self._deposed = True
        self.generation = 0
        try:
            self.etcd.revoke(self.lease)
        except TsdnError as error:
            log.warning("could not revoke the lease (it expires within %ds): %s", self.ttl, error)
        if not self._stop.is_set():
            self._on_deposed(reason)


def _refuses(address: str) -> bool:
    """Whether nothing listens at `address` (HOST:PORT): the connection is refused at once. A
    timeout or an unreachable host says nothing (a frozen process, a partition): False."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=POLL_INTERVAL):
            return False
    except ConnectionRefusedError:
        return True
    except (OSError, ValueError):
        return False


def _leader_of(kv: dict) -> Leader | None:
    try:
        data = json.loads(unb64(kv.get("value", "")))
        return Leader(str(data["address"]), int(kv.get("create_revision", 0)), str(data.get("host", "")),
                      int(data.get("pid", 0)))
    except (ValueError, KeyError, TypeError):
        return None
