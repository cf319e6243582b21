"""The SENSE API's service profiles: an intent template and the paths intents may edit in it.

A profile is made from a manifest (`POST /profile`: `{"name", "description", "editable", "data":
the template, "edit": [{"path", "valid", "description"}]}`) and found by UUID or name. Every tsdn
offers one built in, `tsdn-dnc` (`builtin_profile`), which the Rucio-SENSE DMM can name in its
`profile_uuid`. Profiles are rows of the `sense_profiles` table (`sense_store`); they belong to
the principal that made them (admins change and delete all), and everyone may read them.
"""

from __future__ import annotations

import copy
import json
import uuid as uuids
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sdn_app.core import sense_store as store
from sdn_app.core.clock import Clock
from sdn_app.core.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NoCapacity,
    NotFound,
    PermissionDenied,
)
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservation import Principal, require_role
from sdn_app.core.sense_intents import EditRule, check_depth, read_edit_rules
from sdn_app.core.units import format_time
from sdn_app.core.validation import shown

MAX_PROFILES = 1000
BUILTIN_PROFILE = "tsdn-dnc"  # the profile every tsdn offers (docs/sense.md)


@dataclass(frozen=True)
class Profile:
    """A stored service profile: an intent template and the paths intents may edit."""

    uuid: str
    name: str
    owner: str
    description: str
    created: float
    edited: float
    template: Mapping[str, Any]
    rules: tuple[EditRule, ...] = ()
    editable: bool = False
    builtin: bool = False

    def slim(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "name": self.name, "owner": self.owner, "description": self.description,
                "created": format_time(self.created), "last_edited": format_time(self.edited), "authorized": True,
                "editable": self.editable, "licenses": []}

    def full(self) -> dict[str, Any]:
        return {**self.slim(), "json": json.dumps(self.template, sort_keys=True),
                "edit": [{"path": r.path, "valid": r.valid, "description": r.description} for r in self.rules]}

    def row(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "created": self.created, "edited": self.edited,
                "template": self.template, "editable": self.editable,
                "edit": [{"path": r.path, "valid": r.valid, "description": r.description} for r in self.rules]}


def builtin_profile(domain: str) -> Profile:
    """The profile every tsdn offers: one dnc connection between two terminals, editable where the
    Rucio-SENSE DMM edits (terminals, their prefixes and VLANs, bandwidth, schedule)."""
    template = {"service": "dnc", "data": {"type": "Multi-Path P2P VLAN", "connections": [{
        "name": "Connection 1",
        "terminals": [{"uri": "", "vlan_tag": "any", "ipv6_prefix_list": ""},
                      {"uri": "", "vlan_tag": "any", "ipv6_prefix_list": ""}],
        "bandwidth": {"qos_class": "guaranteedCapped", "capacity": "1000"}}]}}
    paths = [f"data.connections[0].terminals[{i}].{key}" for i in (0, 1)
             for key in ("uri", "ipv6_prefix_list", "vlan_tag")]
    paths += ["data.connections[0].bandwidth.capacity", "data.connections[0].bandwidth.qos_class",
              "data.connections[0].schedule.start", "data.connections[0].schedule.end",
              "data.connections[0].schedule.duration", "data.connections[0].name"]
    rules = tuple(EditRule(p, "", "") for p in paths)
    return Profile(str(uuids.uuid5(uuids.NAMESPACE_URL, f"tsdn:{domain}:{BUILTIN_PROFILE}")), BUILTIN_PROFILE,
                   "tsdn", "A data network connection between two DTNs of this network (guaranteedCapped 1 Gbit/s "
                   "unless edited)", 0.0, 0.0, template, rules, False, True)


class ServiceProfiles:
    """Every profile of one controller; not thread-safe: the core thread calls it."""

    def __init__(self, ledger: Ledger, clock: Clock, domain: str):
        self.ledger = ledger
        self.clock = clock
        self.builtin = builtin_profile(domain)
        self._profiles: dict[str, Profile] = {self.builtin.uuid: self.builtin}
        for row in store.load(ledger, store.PROFILES):
            self._profiles[row.id] = self._read(row)

    @staticmethod
    def _read(row: store.Stored) -> Profile:
        body = row.reader
        template = body.value("template")
        if not isinstance(template, dict):
            body.bad("template", "expected an object")
        rules = tuple(EditRule(r.text("path"), r.text("valid"), r.text("description")) for r in body.children("edit"))
        return Profile(row.id, body.text("name"), row.owner, body.text("description"), body.number("created"),
                       body.number("edited"), template, rules, body.flag("editable"))

    def listed(self, principal: Principal) -> list[Profile]:
        """Every profile, the built-in one first."""
        require_role(principal, "read service profiles")
        return sorted(self._profiles.values(), key=lambda p: (not p.builtin, p.created, p.name))

    def get(self, principal: Principal, search: str) -> Profile:
        """A profile by UUID or name."""
        require_role(principal, "read service profiles")
        if search in self._profiles:
            return self._profiles[search]
        named = [p for p in self._profiles.values() if p.name == search]
        if not named:
            raise NotFound(f"service profile {shown(search)}: no profile of that UUID or name (GET /profile lists "
                           f"them; {BUILTIN_PROFILE} is built in)")
        return named[0]

    def create(self, principal: Principal, body: Any) -> Profile:
        """`POST /profile`: a profile from a manifest {name, description, editable, data, edit}."""
        require_role(principal, "create service profiles")
        if len(self._profiles) >= MAX_PROFILES:
            raise NoCapacity(f"{len(self._profiles)} service profiles, the most tsdn keeps; delete some")
        now = self.clock.now()
        profile = self._read_manifest(body, Profile(str(uuids.uuid4()), "", principal.name, "", now, now, {}))
        self.ledger.write(lambda db: store.save(db, store.PROFILES, profile.uuid, profile.owner, profile.row()))
        self._profiles[profile.uuid] = profile
        return profile

    def update(self, principal: Principal, uuid: str, body: Any) -> Profile:
        """`PUT /profile/UUID`: replace a profile's name, description, template or edit rules."""
        old = self._own_profile(principal, uuid)
        profile = self._read_manifest(body, replace(old, edited=self.clock.now()))
        self.ledger.write(lambda db: store.save(db, store.PROFILES, profile.uuid, profile.owner, profile.row()))
        self._profiles[profile.uuid] = profile
        return profile

    def delete(self, principal: Principal, uuid: str) -> None:
        """`DELETE /profile/UUID` (instances made with it keep their connections)."""
        profile = self._own_profile(principal, uuid)
        self.ledger.write(lambda db: store.delete(db, store.PROFILES, profile.uuid))
        del self._profiles[profile.uuid]

    def _own_profile(self, principal: Principal, uuid: str) -> Profile:
        profile = self.get(principal, uuid)
        if profile.builtin:
            raise FailedPrecondition(f"service profile {profile.name} is built in; create a profile of your own")
        if not principal.may_see(profile.owner):
            raise PermissionDenied(f"service profile {profile.name} belongs to {profile.owner}")
        return profile

    def _read_manifest(self, body: Any, base: Profile) -> Profile:
        if not isinstance(body, dict):
            raise InvalidArgument(f"profile: expected a JSON object with name, data and edit, got {shown(body)}")
        name = body.get("name", base.name)
        if not isinstance(name, str) or not 1 <= len(name) <= 128 or not name.isprintable():
            raise InvalidArgument(f"name: {shown(name)}: 1 to 128 printable characters")
        if any(p.name == name and p.uuid != base.uuid for p in self._profiles.values()):
            raise AlreadyExists(f"service profile {name} exists; choose another name")
        description = body.get("description", base.description)
        if not isinstance(description, str) or len(description) > 4096:
            raise InvalidArgument("description: text of at most 4096 characters")
        editable = body.get("editable", base.editable)
        if not isinstance(editable, bool):
            raise InvalidArgument(f"editable: true or false, got {shown(editable)}")
        template: Any = body.get("data", base.template if base.template else None)
        if isinstance(template, str):
            try:
                template = json.loads(template)
            except (ValueError, RecursionError):
                raise InvalidArgument("data: not JSON: the profile's intent template, e.g. {\"service\": \"dnc\", "
                                      "\"data\": {\"connections\": [...]}}") from None
        check_depth(template, "data")
        if not isinstance(template, dict) or not isinstance(template.get("data"), dict):
            raise InvalidArgument("data: the profile's intent template, an object with a data object: {\"service\": "
                                  "\"dnc\", \"data\": {\"connections\": [...]}}")
        if template.get("service", "dnc") != "dnc":
            raise InvalidArgument(f"data.service: {shown(template.get('service'))}: tsdn provides the dnc service only")
        rules = read_edit_rules(body["edit"]) if "edit" in body else base.rules
        return replace(base, name=name, description=description, editable=editable,
                       template=copy.deepcopy(template), rules=rules)
