"""The SENSE API's discovery and manifests: what a client learns of this network's terminals.

Each DTN is a SENSE site of its own: `urn:ogf:network:DOMAIN:DTN` is its root URI and its domain,
with one peer point (its access port) and its IPv6 pool. A lookup by name finds the DTN of that
name (the Rucio-SENSE DMM looks its RSEs up this way), then those whose name contains it. A
manifest template's `?variable?` values are filled in for the terminal its SPARQL names with
`FILTER regex(str(?site), 'URN')`; SPARQL itself is not evaluated (docs/sense.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from sdn_app.core.address_pool import AddressPools
from sdn_app.core.errors import InvalidArgument, NotFound
from sdn_app.core.reservation import Principal, require_role
from sdn_app.core.sense_intents import Urns
from sdn_app.core.topology import Topology
from sdn_app.core.validation import shown

MANIFEST_VARIABLES = ("metadata", "hostname", "ipv4", "ipv6_pool", "uri")
_SITE_FILTER = re.compile(r"FILTER\s+regex\s*\(\s*str\s*\(\s*\?site\s*\)\s*,\s*'([^']{1,512})'\s*\)", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"^\?(\w{1,64})\?$")


class Discovery:
    """Lookups, domain descriptions and manifests of one network (pure, read-only)."""

    def __init__(self, urns: Urns, topology: Topology, pools: AddressPools):
        self.urns = urns
        self.topology = topology
        self.pools = pools

    def lookup(self, name: str) -> list[dict[str, str]]:
        """`GET /discover/lookup/NAME`: the terminals a name finds (the DTN of that name first, then
        those whose name contains it), or the DTN a URN names."""
        if not isinstance(name, str) or not name or len(name) > 512:
            raise InvalidArgument("name: 1 to 512 characters")
        under = self.urns.under(name)
        if under is not None:
            dtns = [under]
        else:
            folded = name.lower()
            dtns = sorted((d for d in self.topology.dtns if folded in d.lower()),
                          key=lambda d: (d.lower() != folded, d))
        return [{"resource": self.urns.of(d), "name/tag/value": d, "type": "/sitename"} for d in dtns]

    def root_uri(self, uri: str) -> str:
        """`GET /discover/lookup/URI/rooturi`: a terminal is its own site (its URN); the network's
        root is itself."""
        if uri.lower() == self.urns.root.lower():
            return self.urns.root
        dtn = self.urns.under(uri)
        if dtn is None:
            raise NotFound(f"{shown(uri)} is no resource of this network ({self.urns.root})")
        return self.urns.of(dtn)

    def domain(self, uri: str, url: str) -> dict[str, Any]:
        """`GET /discover/URI`: a terminal's (or the whole network's) description, its peer points."""
        dtns = self._dtns_of(uri)
        single = len(dtns) == 1 and uri.lower() != self.urns.root.lower()
        out = {"domain_uri": self.urns.of(dtns[0]) if single else self.urns.root,
               "domain_name": dtns[0] if single else self.urns.domain, "domain_url": url,
               "peer_points": [self._peer_point(d) for d in dtns]}
        if single and (pool := self.pools.pool_of(dtns[0])) is not None:
            out["ipv6_pool"] = str(pool)
        return out

    def domains(self, url: str) -> list[dict[str, str]]:
        """`GET /discover/domains`: the network and each terminal (each its own SENSE site)."""
        return [{"domain_uri": self.urns.root, "domain_name": self.urns.domain, "domain_url": url}] + [
            {"domain_uri": self.urns.of(d), "domain_name": d, "domain_url": url} for d in sorted(self.topology.dtns)]

    def ipv6_pool(self, uri: str) -> dict[str, Any]:
        """`GET /discover/URI/ipv6pool`: the pools of a terminal (or of every terminal)."""
        dtns = self._dtns_of(uri)
        single = len(dtns) == 1 and uri.lower() != self.urns.root.lower()
        return {"domain_uri": self.urns.of(dtns[0]) if single else self.urns.root,
                "domain_name": f"{self.urns.of(dtns[0]) if single else self.urns.root}:ipv6-pool",
                "routing": [{"ipv6_subnet_pool": str(pool), "service_uri": self.urns.of(d)}
                            for d in dtns if (pool := self.pools.pool_of(d)) is not None]}

    def _dtns_of(self, uri: str) -> list[str]:
        if uri.lower() == self.urns.root.lower():
            return sorted(self.topology.dtns)
        dtn = self.urns.under(uri)
        if dtn is None:
            raise NotFound(f"{shown(uri)}: no domain of this network ({self.urns.root}, or a terminal "
                           f"{self.urns.of('DTN')})")
        return [dtn]

    def _peer_point(self, dtn: str) -> dict[str, str]:
        spec = self.topology.dtn(dtn)
        return {"port_name": dtn, "port_uri": self.urns.of(dtn), "port_capacity": str(spec.nic_speed),
                "port_vlan_pool": "any", "peer_uri": f"{self.urns.root}:{spec.switch}:port+{spec.port}",
                "peer_capacity": str(spec.nic_speed), "peer_vlan_pool": "any"}

    # -- manifests ---------------------------------------------------------------------------------

    def manifest(self, principal: Principal, template: Any, uuid: str | None = None) -> dict[str, str]:
        """`POST /service/manifest`: a template's `?variable?` values filled in for the terminal its
        SPARQL names (`FILTER regex(str(?site), 'URN')`): `metadata` (each /64 of the terminal's
        pool and the DTN that holds it, as JSON text), `hostname`, `ipv4`, `ipv6_pool`, `uri`.
        `uuid` (the instance it was asked about, maybe a placeholder) is only echoed back."""
        require_role(principal, "read manifests")
        if not isinstance(template, dict):
            raise InvalidArgument(f"manifest: the template is a JSON object, got {shown(template)}")
        query = " ".join(v for k, v in template.items() if k in ("sparql", "sparql-ext") and isinstance(v, str))
        site = _SITE_FILTER.search(query)
        if site is None:
            raise InvalidArgument("manifest: name the terminal in its sparql or sparql-ext with FILTER "
                                  f"regex(str(?site), '{self.urns.of('DTN')}'); tsdn does not evaluate SPARQL")
        dtn = self.urns.under(site[1])
        if dtn is None:
            raise NotFound(f"manifest: {shown(site[1])} is not a terminal of this network ({self.urns.of('DTN')})")
        required = str(template.get("required", "false")).lower() == "true"
        values = self._manifest_values(dtn)
        filled = {}
        for key, value in template.items():
            if key in ("sparql", "sparql-ext", "required"):
                continue
            try:
                filled[key] = _fill(value, values, key)
            except InvalidArgument:
                if required:
                    raise
        return {"serviceUUID": uuid or "", "jsonTemplate": json.dumps(filled)}

    def _manifest_values(self, dtn: str) -> dict[str, str]:
        spec = self.topology.dtn(dtn)
        pool = self.pools.pool_of(dtn)
        blocks = {} if pool is None else {str(net): dtn for net in (
            pool.subnets(new_prefix=64) if pool.prefixlen <= 64 else [pool])}
        return {"metadata": json.dumps(blocks), "hostname": dtn, "ipv4": spec.ipv4,
                "ipv6_pool": str(pool) if pool is not None else "", "uri": self.urns.of(dtn)}


def _fill(value: Any, values: Mapping[str, str], where: str) -> Any:
    """`value` with every `?name?` string replaced by `values[name]`."""
    if isinstance(value, str):
        match = _PLACEHOLDER.fullmatch(value)
        if match is None:
            return value
        name = match[1].lower()
        if name not in values:
            raise InvalidArgument(f"manifest: {where}: ?{match[1]}?: tsdn fills in {', '.join(MANIFEST_VARIABLES)}")
        return values[name]
    if isinstance(value, dict):
        return {k: _fill(v, values, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, values, f"{where}[{i}]") for i, v in enumerate(value)]
    return value

