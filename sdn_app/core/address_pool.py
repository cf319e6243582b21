"""The SENSE address API's IPv6 pools: a prefix per Rucio rule and site, affiliated with a terminal,
freed when the rule is done.

Each DTN with an `ipv6_pool` in the topology file (a /56 to a /64) is one pool. A pool is asked for
by name: the DTN's name, or any name ending in `-DTN` (the Rucio-SENSE DMM asks for
`RUCIO_Site_BGP_Subnet_Pool-<site>`; the longest DTN name that ends it wins). An allocation is a
subnet (`batch: subnet`, `netmask: /64` by default) named by its caller (the DMM: the rule id),
unique per pool and scope; asking again for the same name returns the same prefix. Prefixes are
handed out lowest first, never two overlapping in one pool. An allocation may be affiliated with
a URI under its DTN's URN (the terminal, or a resource of it such as the prefix list of an
instance); freeing one that a live instance's reservation still matches is refused.

Allocations are stored in the `sense_addresses` table of the state file (`sense_store`) and read
back at start; they belong to the principal that made them (admins see and free all).
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sdn_app.core import sense_store as store
from sdn_app.core.clock import Clock
from sdn_app.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NoCapacity, NotFound
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservation import Principal, require_role
from sdn_app.core.sense_intents import Urns
from sdn_app.core.topology import Topology
from sdn_app.core.validation import shown

DEFAULT_SCOPE = "default"
DEFAULT_NETMASK = 64
MAX_PER_POOL = 4096  # allocations in one pool (a /56 holds 256 /64s)
_NAME = re.compile(r"^[A-Za-z0-9._:@+=~-]{1,128}$")  # allocation names and scopes travel in URL paths


@dataclass(frozen=True)
class Allocation:
    """A prefix handed out of DTN `dtn`'s pool to `owner`, named `name` in `scope`."""

    id: str
    dtn: str
    pool: str  # the pool's name as it was asked for
    scope: str
    name: str
    prefix: str  # canonical text: 2001:db8:8:100::/64
    owner: str
    created: float
    affiliation: str = ""  # the URI it is affiliated with ("": none)

    @property
    def network(self) -> ipaddress.IPv6Network:
        return ipaddress.IPv6Network(self.prefix)

    def as_json(self) -> dict[str, Any]:
        """As the address API shows it."""
        return {"name": self.name, "pool": self.pool, "scope": self.scope, "type": "IPv6", "address": self.prefix,
                "dtn": self.dtn, "owner": self.owner, "created": self.created, "affiliation": self.affiliation}

    def row(self) -> dict[str, Any]:
        return {"dtn": self.dtn, "pool": self.pool, "scope": self.scope, "name": self.name, "prefix": self.prefix,
                "created": self.created, "affiliation": self.affiliation}


def check_name(value: Any, field: str) -> str:
    """An allocation's name or scope: 1 to 128 of letters, digits and `._:@+=~-`."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidArgument(f"{field}: {shown(value)}: 1 to 128 letters, digits or ._:@+=~- (no spaces or slashes)")
    return value


def read_prefix(value: str, field: str) -> ipaddress.IPv6Network:
    """An address as a path gives it (`2001:db8:8:100:0:0:0:0/64`, `2001:db8:8:100::/64`)."""
    try:
        return ipaddress.IPv6Network(value.strip(), strict=True)
    except ValueError:
        raise InvalidArgument(f"{field}: {shown(value)} is not an IPv6 network like 2001:db8:8:100::/64") from None


class AddressPools:
    """Every DTN's pool and its allocations; not thread-safe: the core thread calls it."""

    def __init__(self, topology: Topology, ledger: Ledger, clock: Clock, urns: Urns):
        self.topology = topology
        self.ledger = ledger
        self.clock = clock
        self.urns = urns
        # which live instance still matches a prefix (None: none): freeing it is refused then
        self.in_use: Callable[[str], str | None] = lambda prefix: None
        self.pools = {name: ipaddress.IPv6Network(dtn.ipv6_pool) for name, dtn in topology.dtns.items()
                      if dtn.ipv6_pool is not None}
        self._allocations: dict[str, Allocation] = {}
        for row in store.load(ledger, store.ADDRESSES):
            body = row.reader
            allocation = Allocation(row.id, body.text("dtn"), body.text("pool"), body.text("scope"), body.text("name"),
                                    body.text("prefix"), row.owner, body.number("created"), body.text("affiliation"))
            if allocation.dtn in self.pools and allocation.network.subnet_of(self.pools[allocation.dtn]):
                self._allocations[allocation.id] = allocation
            # an allocation out of a pool the topology no longer gives is left in the file, unused

    # -- pools -----------------------------------------------------------------------------

    def dtn_of(self, pool: str) -> str:
        """The DTN whose pool `pool` names: the DTN's name, or a name ending in `-DTN`."""
        if not isinstance(pool, str) or not pool or len(pool) > 256:
            raise InvalidArgument(f"pool: {shown(pool)}: name a pool (a DTN's name, e.g. "
                                  "RUCIO_Site_BGP_Subnet_Pool-DTN)")
        matches = [dtn for dtn in self.pools if pool == dtn or pool.endswith("-" + dtn)]
        if not matches:
            named = ", ".join(sorted(self.pools)[:8]) or "none (no DTN has an ipv6_pool in the topology file)"
            raise NotFound(f"address pool {shown(pool)}: no DTN's pool; a pool is named after its DTN (e.g. "
                           f"RUCIO_Site_BGP_Subnet_Pool-DTN); DTNs with a pool: {named}")
        return max(matches, key=len)

    def pool_of(self, dtn: str) -> ipaddress.IPv6Network | None:
        """DTN `dtn`'s pool (None: it has none)."""
        return self.pools.get(dtn)

    # -- reading -----------------------------------------------------------------------------

    def listed(self, principal: Principal, pool: str, scope: str | None = None) -> list[Allocation]:
        """The allocations of a pool (in `scope`, or all) the caller may see, lowest prefix first."""
        dtn = self.dtn_of(pool)
        return sorted((a for a in self._allocations.values() if a.dtn == dtn and principal.may_see(a.owner)
                       and (scope is None or a.scope == scope)), key=lambda a: a.network)

    def holding(self, dtn: str, prefix: str) -> Allocation | None:
        """The allocation of exactly `prefix` in DTN `dtn`'s pool (None: not allocated)."""
        return next((a for a in self._allocations.values() if a.dtn == dtn and a.prefix == prefix), None)

    def count(self) -> int:
        return len(self._allocations)

    # -- changing ------------------------------------------------------------------------------

    def allocate(self, principal: Principal, pool: str, request: Any) -> Allocation:
        """Allocate a subnet of `pool` for `request` (the address API's body: `type`, `name`,
        `allocate: {scope, batch, netmask}`); the same name again returns the same allocation."""
        require_role(principal, "allocate addresses")
        dtn = self.dtn_of(pool)
        if not isinstance(request, dict):
            raise InvalidArgument(f"allocation: expected a JSON object with type, name and allocate, got "
                                  f"{shown(request)}")
        kind = request.get("type", "IPv6")
        if kind != "IPv6":
            raise InvalidArgument(f"type: {shown(kind)}: tsdn's pools hold IPv6 prefixes only")
        name = check_name(request.get("name"), "name")
        options = request.get("allocate", {})
        if not isinstance(options, dict):
            raise InvalidArgument(f"allocate: expected an object with scope, batch and netmask, got {shown(options)}")
        scope = check_name(options.get("scope", DEFAULT_SCOPE), "allocate.scope")
        batch = options.get("batch", "subnet")
        if batch != "subnet":
            raise InvalidArgument(f"allocate.batch: {shown(batch)}: tsdn allocates subnets only (batch \"subnet\" "
                                  "with a netmask such as /64)")
        network = self.pools[dtn]
        length = _netmask(options.get("netmask", DEFAULT_NETMASK), network)
        earlier = next((a for a in self._allocations.values()
                        if a.dtn == dtn and a.scope == scope and a.name == name), None)
        if earlier is not None:
            if earlier.owner == principal.name and earlier.network.prefixlen == length:
                return earlier
            raise AlreadyExists(f"pool {pool} scope {scope}: the name {name} is taken ({earlier.prefix}); free it or "
                                "use another name")
        taken = sorted((a.network for a in self._allocations.values() if a.dtn == dtn),
                       key=lambda n: int(n.network_address))
        if len(taken) >= MAX_PER_POOL:
            raise NoCapacity(f"pool {pool} ({network}): {len(taken)} allocations, the most one pool holds; free some")
        found = _first_free(network, length, taken)
        if found is None:
            raise NoCapacity(f"pool {pool} ({network}) has no free /{length}: {len(taken)} allocated; free some "
                             f"(DELETE /address/allocate/{pool}/name/NAME/{scope})")
        allocation = Allocation(uuid.uuid4().hex, dtn, pool, scope, name, str(found), principal.name,
                                self.clock.now())
        self.ledger.write(lambda db: store.save(db, store.ADDRESSES, allocation.id, allocation.owner,
                                                allocation.row()))
        self._allocations[allocation.id] = allocation
        return allocation

    def free(self, principal: Principal, pool: str, scope: str, name: str | None = None,
             address: str | None = None) -> list[Allocation]:
        """Free the caller's allocations of a pool in `scope`: the one named `name`, the one of
        `address`, or (neither) all of them. Freeing nothing is no error (a retry after a
        success); a prefix a live instance still matches is `FailedPrecondition`."""
        require_role(principal, "free addresses")
        dtn = self.dtn_of(pool)
        scope = check_name(scope, "scope")
        chosen = [a for a in self._allocations.values() if a.dtn == dtn and a.scope == scope
                  and principal.may_see(a.owner)]
        if name is not None:
            name = check_name(name, "name")
            chosen = [a for a in chosen if a.name == name]
        elif address is not None:
            network = read_prefix(address, "address")
            chosen = [a for a in chosen if a.network == network]
        for allocation in chosen:
            holder = self.in_use(allocation.prefix)
            if holder is not None:
                raise FailedPrecondition(f"{allocation.prefix} ({allocation.name}) is matched by the flows of "
                                         f"instance {holder}: cancel that instance first")

        def write(db: Any) -> None:
            for allocation in chosen:
                store.delete(db, store.ADDRESSES, allocation.id)
        if chosen:
            self.ledger.write(write)
        for allocation in chosen:
            del self._allocations[allocation.id]
        return sorted(chosen, key=lambda a: a.network)

    def affiliate(self, principal: Principal, pool: str, scope: str, uri: str, name: str | None = None,
                  address: str | None = None) -> Allocation:
        """Affiliate the allocation named `name` (or of `address`) with `uri`, which must be its DTN's
        URN or lie under it (`urn:ogf:network:DOMAIN:DTN:...`)."""
        require_role(principal, "affiliate addresses")
        dtn = self.dtn_of(pool)
        scope = check_name(scope, "scope")
        if not isinstance(uri, str) or not uri or len(uri) > 512:
            raise InvalidArgument(f"uri: {shown(uri)}: a URI under {self.urns.of(dtn)}")
        if self.urns.under(uri) != dtn:
            raise InvalidArgument(f"uri: {shown(uri)} is not under {self.urns.of(dtn)}, the terminal whose pool "
                                  f"{pool} is")
        candidates = [a for a in self._allocations.values() if a.dtn == dtn and a.scope == scope
                      and principal.may_see(a.owner)]
        if name is not None:
            name = check_name(name, "name")
            found = next((a for a in candidates if a.name == name), None)
            what = f"named {name}"
        else:
            network = read_prefix(address or "", "address")
            found = next((a for a in candidates if a.network == network), None)
            what = f"of {network}"
        if found is None:
            raise NotFound(f"pool {pool} scope {scope}: no allocation {what}")
        if found.affiliation == uri:
            return found
        new = replace(found, affiliation=uri)
        self.ledger.write(lambda db: store.save(db, store.ADDRESSES, new.id, new.owner, new.row()))
        self._allocations[new.id] = new
        return new


def _netmask(value: Any, pool: ipaddress.IPv6Network) -> int:
    text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    match = re.fullmatch(r"/?(\d{1,3})", text)
    if match is None:
        raise InvalidArgument(f"allocate.netmask: {shown(value)}: a prefix length like /64")
    length = int(match[1])
    if not pool.prefixlen <= length <= 128:
        raise InvalidArgument(f"allocate.netmask: /{length} does not fit pool {pool}: from /{pool.prefixlen} to /128")
    return length


def _first_free(pool: ipaddress.IPv6Network, length: int,
                taken: list[ipaddress.IPv6Network]) -> ipaddress.IPv6Network | None:
    """The lowest /`length` of `pool` that overlaps none of `taken` (sorted by address)."""
    size = 1 << (128 - length)
    candidate = int(pool.network_address)
    end = int(pool.broadcast_address) + 1
    for network in taken:
        low, high = int(network.network_address), int(network.broadcast_address) + 1
        if candidate + size <= low:
            break
        if high > candidate:
            candidate = -(-high // size) * size  # the next aligned block after it
    if candidate + size > end:
        return None
    return ipaddress.IPv6Network((candidate, length))
