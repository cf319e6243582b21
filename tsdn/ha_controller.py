"""`tsdn controller --store etcd://...`: one of several controllers sharing their state in etcd.

Every controller connects to the switches (SLAVE) and serves the gRPC API from the start. While it
follows, `northbound.follower` answers reads from a copy of the stored reservations and sends
every other call to the leader. When elected it claims OpenFlow MASTER with
the election's generation on every switch, loads the state from etcd and becomes a full
`Controller` on the same ports: the existing reconciliation makes every switch what the
reservations want, and installs and moves in flight resume. A deposed leader writes nothing more
(its etcd transactions fail their compare on the leader key, the switches took its MASTER role
away) and re-executes itself as a follower.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from northbound.follower import FollowerServer, ReservationView
from northbound.server import api_access, host_port
from sdn_app.core.errors import TsdnError
from sdn_app.core.topology import Topology
from sdn_app.ha.election import Election
from sdn_app.ha.etcd import Etcd
from sdn_app.ha.store import EtcdReplica, leader_key
from tsdn.controller import Controller, ControllerConfig

log = logging.getLogger(__name__)

MASTER_CONFIRMED = "OpenFlow MASTER confirmed by"  # logged once the switches answered the claim
REJOIN_RETRY = 2.0  # seconds between tries of a deposed leader cut off from etcd


class _FencedFabric:
    """The fabric as an elected leader's core uses it: every write refused once `leads()` says no."""

    def __init__(self, fabric: Any, leads: Callable[[], bool]):
        object.__setattr__(self, "_fabric", fabric)
        object.__setattr__(self, "_leads", leads)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fabric, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._fabric, name, value)

    def apply_many(self, changes: Any, timeout: float = 5.0) -> list[str | None]:
        if not self._leads():
            return ["this controller is no longer the leader: nothing sent to the switches"] * len(changes)
        return self._fabric.apply_many(changes, timeout)

    def reconcile(self, switch: str, expected: Any, timeout: float = 5.0) -> Any:
        if not self._leads():
            raise RuntimeError("this controller is no longer the leader: nothing sent to the switches")
        return self._fabric.reconcile(switch, expected, timeout)


REJOIN = "TSDN_HA_REJOIN"  # set in a re-executed deposed leader: wait for etcd rather than fail


def reexec(reason: str) -> None:
    """Start this process again from scratch, as a follower (the deposed leader's way back)."""
    log.error("deposed: %s; restarting as a follower", reason)
    logging.shutdown()
    os.environ[REJOIN] = "1"
    os.execv(sys.executable, [sys.executable, *sys.argv])


def _reach(etcd: Etcd, key: str) -> None:
    """Check etcd answers; a deposed leader cut off from it (a partition) waits until it does."""
    while True:
        try:
            etcd.range(key, what="answer (checked at start)")
            return
        except TsdnError as error:
            if not os.environ.get(REJOIN):
                raise
            log.warning("waiting for etcd to rejoin as a follower: %s", error)
            time.sleep(REJOIN_RETRY)


class HAController:
    """One controller of several sharing `config.store`: follows, and leads when elected."""

    def __init__(self, config: ControllerConfig, on_deposed: Callable[[str], None] = reexec):
        """Check etcd answers, connect to the switches (SLAVE) and bind the API; nothing served until `start`."""
        assert config.store is not None
        self.config = config
        self.topology = Topology.load(config.topology)
        self.namespace = self.topology.name
        self.etcd = Etcd(config.store)
        _reach(self.etcd, leader_key(self.namespace))
        self.auth, _, _ = api_access(config)  # refused here as by a single controller
        self._on_deposed = on_deposed
        self.leader: Controller | None = None
        self._replica: EtcdReplica | None = None
        self.fabric = None
        if config.listen_openflow is not None:
            from sdn_app.openflow.fabric import start_openflow

            host, port = host_port(config.listen_openflow, "--listen-openflow")
            self.fabric = start_openflow(self.topology, host, port, config.emulation_scale,
                                             bundles=config.bundles)
        self.election = Election(self.etcd, leader_key(self.namespace), config.advertise or config.listen_grpc,
                                 config.lease_ttl, self._elected, self._deposed)
        try:
            self.follower: FollowerServer | None = FollowerServer(
                config, self.auth, ReservationView(self.etcd, self.namespace, self.topology), self.election.leader)
        except BaseException:
            if self.fabric is not None:
                self.fabric.stop()
            raise
        # Port 0 picked a port: the leader serves on that same one, and says so to the others.
        host = config.listen_grpc.rsplit(":", 1)[0]
        self.config = config = replace(config, listen_grpc=f"{host}:{self.follower.port}")
        self.election.address = self.advertise = config.advertise or config.listen_grpc

    @property
    def address(self) -> str:
        """The gRPC address served."""
        return self.config.listen_grpc

    def start(self) -> None:
        """Serve as a follower and campaign."""
        assert self.follower is not None
        if self.fabric is not None:
            # SLAVE (no writes, no packet-outs) until elected, with the leader's generation: an older
            # one would be refused by switches as stale.
            kvs, _ = self.etcd.range(leader_key(self.namespace), what="read the leader key")
            self.fabric.claim_role(False, int(kvs[0].get("create_revision", 0)) if kvs else 0)
        self.follower.start()
        self.election.start()
        log.info("tsdn controller (high availability): store %s, namespace %s, lease %ds, advertised as %s",
                 self.config.store, self.namespace, self.config.lease_ttl, self.advertise)

    def _elected(self, generation: int) -> None:
        if self.fabric is not None:
            claims = self.fabric.claim_role(True, generation)
            refused = {switch: why for switch, why in claims.items() if why}
            log.warning("%s %d of %d switch(es), generation %d", MASTER_CONFIRMED, len(claims) - len(refused),
                        len(claims), generation)
            if refused:
                log.warning("OpenFlow MASTER refused by %d switch(es): %s", len(refused),
                            "; ".join(f"{s}: {why}" for s, why in sorted(refused.items())))
        replica = self._replica = EtcdReplica(self.etcd, self.namespace, generation, self._fenced)
        fabric = _FencedFabric(self.fabric, self.election.is_leader) if self.fabric is not None else None
        # The follower's server keeps the port until the leader's binds it: a port closed for long
        # would tell the other controllers that this one's process is gone.
        self.leader = Controller(self.config, replica=replica, fabric=fabric, before_bind=self._stop_following)
        self.leader.start()
        log.warning("leading: generation %d, %d reservation row(s) loaded from %s", generation,
                    len(replica.rows("reservations")), self.config.store)

    def _stop_following(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None

    def _fenced(self, why: str) -> None:
        """A commit found this controller may no longer write (on the core thread): step down now,
        from another thread (stepping down stops the core)."""
        threading.Thread(target=self.election.depose, args=(why,), name="tsdn-step-down", daemon=True).start()

    def _deposed(self, reason: str) -> None:
        if self._replica is not None:
            self._replica.fenced = f"deposed: {reason}"  # not one more commit, even if the lease lives on
        self._on_deposed(reason)

    def stop(self) -> None:
        """Stop serving; a leader resigns so that a follower takes over at once."""
        self.election.stop(resign=True)
        if self.leader is not None:
            self.leader.stop()
        if self.follower is not None:
            self.follower.stop()
        if self.fabric is not None:
            self.fabric.stop()
