"""Path labels: which route directions are in use, their VLAN ids, and their shared entries.

`PathTable` (one, owned by the core's `Installs`; pure and deterministic) hands each path key
(`label_plans.PathKey`) in use a label and keeps its shared entries installed while anyone
uses it:

- `use(owner, key)` takes a reference for `owner` (a reservation direction,
  `"<id>/forward"`) and returns the label and the ingress group of the path. A key new to the
  table gets a label: a preferred one derived from the key (so the same key tends to get the
  same label after a restart), else the next free one upward, wrapping; `NoCapacity` when
  every label of the range is taken. A protected key uses its backup's (unprotected) key
  itself, owned by `path-<label>`. Installing a new key's entries is queued as a `Change`
  of its own (`take_changes`), which changes that rely on it name in `needs`.
- `drop(owner)` lets go of every key `owner` uses. A key nobody uses stays installed for the
  grace period (`grace` seconds: a reservation moving back finds its old path ready, at no
  cost), then `expire` queues the removal of its entries and frees the label and its ids.
  Using the key again within the grace keeps it.
- Labels never collide: one label is one key in the whole domain, whatever switches it
  crosses, until the key is removed.

After a restart the table is rebuilt from the reservations' routes (in their creation order):
a label may come out other than before, when two keys wanted the same one; reconciliation then
rewrites the switches that hold the old one (as for meter and group ids).
"""

from __future__ import annotations

import hashlib
import math

from sdn_app.core.errors import NoCapacity
from sdn_app.core.label_plans import PathKey, PathUse, path_plan
from sdn_app.core.plans import MAX_LABEL, PATH_OWNER, FlowPlan, IdAllocator, plan_steps
from sdn_app.core.reservation import Change
from sdn_app.core.topology import Topology

DEFAULT_LABELS = (2, MAX_LABEL)  # VLAN 1 is many switches' default VLAN: left alone
DEFAULT_GRACE = 300.0  # seconds a path nobody uses stays installed


def parse_label_range(text: str) -> tuple[int, int]:
    """`"2-4094"` as (2, 4094); ValueError naming what is wrong (not VLAN ids, empty, reversed)."""
    low, sep, high = text.partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        raise ValueError(f"{text!r} is not a range of VLAN ids like 2-4094") from None
    if not sep or not 1 <= first <= last <= MAX_LABEL:
        raise ValueError(f"{text!r}: VLAN ids from 1 to {MAX_LABEL}, the first not above the last")
    return first, last


class PathTable:
    """The labels of the path keys in use, their users and their installed shared entries."""

    def __init__(self, topology: Topology, ids: IdAllocator, labels: tuple[int, int] = DEFAULT_LABELS,
                 grace: float = DEFAULT_GRACE):
        first, last = labels
        if not 1 <= first <= last <= MAX_LABEL:
            raise ValueError(f"labels {first}-{last}: VLAN ids from 1 to {MAX_LABEL}")
        if not grace >= 0:
            raise ValueError(f"grace must be zero or more seconds, got {grace!r}")
        self.topology = topology
        self.ids = ids
        self.first, self.last = first, last
        self.grace = grace
        self._label: dict[PathKey, int] = {}
        self._key: dict[int, PathKey] = {}
        self._users: dict[PathKey, set[str]] = {}
        self._idle: dict[PathKey, float] = {}  # nobody uses it since then
        self._plans: dict[PathKey, FlowPlan] = {}
        self._uses: dict[str, set[PathKey]] = {}  # owner -> keys
        self._changes: list[Change] = []

    def __len__(self) -> int:
        """Path keys installed (in use or within their grace)."""
        return len(self._plans)

    def label(self, key: PathKey) -> int | None:
        """The label of `key`, None when it has none."""
        return self._label.get(key)

    def key(self, label: int) -> PathKey | None:
        """The path key holding `label`."""
        return self._key.get(label)

    def plans(self) -> list[FlowPlan]:
        """The shared entries of every installed key."""
        return list(self._plans.values())

    def keys_of(self, owner: str) -> frozenset[PathKey]:
        """The keys `owner` uses now."""
        return frozenset(self._uses.get(owner, ()))

    def use(self, owner: str, key: PathKey, now: float) -> PathUse:
        """Take a reference on `key` for `owner`; its label (and ingress group when protected)."""
        label = self._label.get(key)
        if label is None:
            label = self._install(key, now)
        self._users.setdefault(key, set()).add(owner)
        self._uses.setdefault(owner, set()).add(key)
        self._idle.pop(key, None)
        plan = self._plans[key]
        group = None
        if key.backup is not None:
            first = key.hops[0].switch
            group = next(g.group_id for g in plan.groups if g.switch == first and len(g.buckets[0]) == 3)
        return PathUse(label, group)

    def check_room(self, keys: list[PathKey]) -> None:
        """Raise `NoCapacity` when `keys` (and their backups' keys) need more new labels than are free."""
        new = {k for key in keys for k in (key, key.backup_key()) if k is not None and k not in self._label}
        free = self.last - self.first + 1 - len(self._key)
        if len(new) > free:
            raise NoCapacity(f"every path label ({self.first}-{self.last}) is in use: {len(self._key)} route "
                             "directions; widen --path-labels or release reservations on other routes")

    def drop(self, owner: str, now: float, keep: frozenset[PathKey] = frozenset()) -> None:
        """Let go of every key `owner` uses but those in `keep`; keys left unused start their grace."""
        for key in list(self._uses.get(owner, ())):
            if key in keep:
                continue
            self._uses[owner].discard(key)
            users = self._users[key]
            users.discard(owner)
            if not users:
                self._idle[key] = now
        if not self._uses.get(owner, True):
            del self._uses[owner]

    def next_expiry(self) -> float:
        """When the next unused key's grace ends (math.inf: none waiting)."""
        return min(self._idle.values(), default=-math.inf) + self.grace if self._idle else math.inf

    def expire(self, now: float) -> None:
        """Queue the removal of the keys unused for the grace period, freeing their labels."""
        while True:
            due = sorted((since, self._label[key]) for key, since in self._idle.items() if since + self.grace <= now)
            if not due:
                return
            for _, label in due:
                self._remove(self._key[label], now)

    def take_changes(self) -> list[Change]:
        """The path installs and removals queued since the last call, in order."""
        changes, self._changes = self._changes, []
        return changes

    def _install(self, key: PathKey, now: float) -> int:
        label = self._free_label(key)
        self._label[key], self._key[label] = label, key
        backup_label = None
        try:
            if key.backup is not None:
                backup_key = key.backup_key()
                assert backup_key is not None
                backup_label = self.use(f"{PATH_OWNER}{label}", backup_key, now).label
            plan = path_plan(self.topology, key, label, self.ids, backup_label)
        except Exception:
            del self._label[key], self._key[label]
            self.ids.release(f"{PATH_OWNER}{label}")
            if backup_label is not None:
                self.drop(f"{PATH_OWNER}{label}", now)
            raise
        self._plans[key] = plan
        needs = frozenset({backup_label}) if backup_label is not None else frozenset()
        self._changes.append(Change(plan.reservation_id, tuple(plan_steps(None, plan)), False, needs=needs,
                                    makes=frozenset({label})))
        return label

    def _remove(self, key: PathKey, now: float) -> None:
        label = self._label.pop(key)
        del self._key[label]
        self._idle.pop(key, None)
        self._users.pop(key, None)
        plan = self._plans.pop(key)
        self._changes.append(Change(plan.reservation_id, tuple(plan_steps(plan, None)), False,
                                    makes=frozenset({label})))
        self.ids.release(plan.reservation_id)
        self.drop(plan.reservation_id, now)  # a protected key's backup key

    def _free_label(self, key: PathKey) -> int:
        size = self.last - self.first + 1
        digest = hashlib.blake2b(repr((key.hops, key.backup)).encode(), digest_size=8).digest()
        start = int.from_bytes(digest, "big") % size
        for offset in range(size):
            label = self.first + (start + offset) % size
            if label not in self._key:
                return label
        raise NoCapacity(f"every path label ({self.first}-{self.last}) is in use: {size} route directions; "
                         "widen --path-labels or release reservations on other routes")  # check_room said so first

