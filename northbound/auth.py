"""Who is calling: bearer tokens from a file, mapped to a principal and a role.

Tokens file (YAML), readable only by the controller's user:

    tokens:
      - principal: rucio          # a data-management service: its own reservations only
        role: service
        token: "long-random-secret"
      - principal: noc
        role: admin               # everything
        sha256: "9f86d08..."      # or store only the token's SHA-256 (hex)
      - principal: dtn-caltech-1
        role: agent               # DTN agents: register, heartbeat, report; no reservations
        dtn: caltech-a-dtn1       # optional: the one DTN this agent token may act for
      - principal: cms-dmm
        role: service
        priority: 5               # elastic sharing weight, 1-1000 (default 1); requests may ask lower
        token: "another-secret"
      - principal: campus-nsa
        role: service
        certificate: nsa.campus.example   # or a TLS client certificate's subject CN (HTTP side, with
                                          # --client-ca: NSI requesters authenticate this way)

An agent token with `dtn:` may register and heartbeat for that DTN only; an agent token
without it may act for any DTN of the topology (fine in a lab, not at a show). `dtn:` is
accepted on agent tokens only.

Without a tokens file the controller runs in development mode: allowed only on a loopback
address, every caller is the admin `dev` (priority 1000, the highest), and the start-up log says
so loudly.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sdn_app.core.errors import InvalidArgument, Unauthenticated
from sdn_app.core.reservation import MAX_PRIORITY, Principal, Role
from sdn_app.core.topology_schema import (
    capped_problems,
    describe_validation_error,
    field_path,
    read_text_file,
    read_yaml,
)

log = logging.getLogger(__name__)
DEV_PRINCIPAL = Principal("dev", Role.ADMIN, MAX_PRIORITY)
MIN_TOKEN_LENGTH = 16
MAX_TOKENS_FILE_BYTES = 256 * 1024  # about 2,000 entries; a show has a few dozen
MAX_TOKENS = 2048


class _TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    principal: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}$")]
    role: Role
    token: Annotated[str, Field(min_length=MIN_TOKEN_LENGTH, max_length=512, pattern=r"^[\x21-\x7e]+$")] | None = None
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    certificate: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[\x20-\x7e]+$")] | None = None
    dtn: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    # The highest priority (sharing weight) the principal's requests may carry; theirs by default.
    priority: Annotated[int, Field(ge=1, le=MAX_PRIORITY, strict=True)] = 1

    @model_validator(mode="after")
    def _one_secret(self) -> _TokenEntry:
        if sum(secret is not None for secret in (self.token, self.sha256, self.certificate)) != 1:
            raise ValueError("give exactly one of token, sha256 or certificate")
        if self.dtn is not None and self.role is not Role.AGENT:
            raise ValueError(f"dtn is for agent tokens only (this one has role {self.role})")
        return self

    @property
    def digest(self) -> str:
        return self.sha256 or _digest(self.token or "")


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: Annotated[list[_TokenEntry], Field(min_length=1, max_length=MAX_TOKENS)]


def _describe(exc: ValidationError, source: str) -> list[str]:
    """`describe_validation_error`, except that a bad token is described, never echoed: it is a secret."""
    lines = describe_validation_error(exc, source)
    for i, error in enumerate(exc.errors()):
        if error["loc"][-1:] == ("token",):
            lines[i] = (f"{source}: {field_path(error['loc'])}: must be {MIN_TOKEN_LENGTH} to 512 printable "
                        "ASCII characters without spaces")
    return lines


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authenticator:
    """Maps `authorization: Bearer <token>` metadata to a `Principal`."""

    def __init__(self, principals_by_digest: dict[str, Principal] | None,
                 agent_dtns: dict[str, str] | None = None, by_certificate: dict[str, Principal] | None = None):
        """`None` means development mode: no tokens, every caller is `DEV_PRINCIPAL`.
        `agent_dtns` maps an agent principal to the one DTN it may act for; `by_certificate` a TLS
        client certificate's subject CN to its principal."""
        self._by_digest = principals_by_digest
        self._by_certificate = dict(by_certificate or {})
        self.agent_dtns: dict[str, str] = dict(agent_dtns or {})

    def bound_dtn(self, principal: Principal) -> str | None:
        """The only DTN `principal` may act for as an agent; None: any (no `dtn:` in its token)."""
        return self.agent_dtns.get(principal.name) if principal.role is Role.AGENT else None

    @property
    def development_mode(self) -> bool:
        """Whether calls are accepted without tokens."""
        return self._by_digest is None

    @classmethod
    def from_file(cls, path: str | Path) -> Authenticator:
        """Load a tokens file; errors name the file and field."""
        source = str(path)
        text = read_text_file(path, MAX_TOKENS_FILE_BYTES, "tokens file")
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise InvalidArgument(f"{source}: cannot read tokens file: {exc.strerror or exc}") from None
        data = read_yaml(text, source)
        if isinstance(data, dict) and isinstance(data.get("tokens"), list) and len(data["tokens"]) > MAX_TOKENS:
            raise InvalidArgument(f"{source}: tokens: {len(data['tokens']):,} entries; at most {MAX_TOKENS:,} "
                                  "are accepted")
        try:
            parsed = _TokensFile.model_validate(data)
        except ValidationError as exc:
            problems = "\n  ".join(capped_problems(_describe(exc, source), source))
            raise InvalidArgument(f"invalid tokens file:\n  {problems}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("tokens file %s is readable by other users; chmod 600 it", source)
        by_digest: dict[str, Principal] = {}
        by_certificate: dict[str, Principal] = {}
        agent_dtns: dict[str, str | None] = {}
        priorities: dict[str, int] = {}
        for i, entry in enumerate(parsed.tokens):
            if entry.certificate is not None:
                if entry.certificate in by_certificate:
                    raise InvalidArgument(f"{source}: tokens[{i}]: certificate {entry.certificate!r} is given twice")
                if entry.role is Role.AGENT:
                    raise InvalidArgument(f"{source}: tokens[{i}]: agents authenticate with tokens, not "
                                          "certificates")
                by_certificate[entry.certificate] = Principal(entry.principal, entry.role, entry.priority)
                continue
            if entry.digest in by_digest:
                raise InvalidArgument(f"{source}: tokens[{i}]: the same token is given twice")
            if priorities.setdefault(entry.principal, entry.priority) != entry.priority:
                raise InvalidArgument(f"{source}: tokens[{i}]: priority {entry.priority} for {entry.principal}, "
                                      f"given priority {priorities[entry.principal]} in an earlier entry")
            by_digest[entry.digest] = Principal(entry.principal, entry.role, entry.priority)
            if entry.role is Role.AGENT:
                if entry.principal in agent_dtns and agent_dtns[entry.principal] != entry.dtn:
                    raise InvalidArgument(f"{source}: tokens[{i}]: agent {entry.principal} is given another "
                                          f"dtn than in an earlier entry ({agent_dtns[entry.principal]!r})")
                agent_dtns[entry.principal] = entry.dtn
        return cls(by_digest, {p: dtn for p, dtn in agent_dtns.items() if dtn is not None}, by_certificate)

    def authenticate(self, metadata: Sequence[tuple[str, str | bytes]]) -> Principal:
        """The principal whose token is in `metadata`, or `Unauthenticated` saying what is wrong."""
        if self._by_digest is None:
            return DEV_PRINCIPAL
        values = [v for k, v in metadata if k == "authorization"]
        if not values:
            raise Unauthenticated("no credentials: send metadata 'authorization: Bearer <token>'")
        value = values[0] if isinstance(values[0], str) else values[0].decode(errors="replace")
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("malformed authorization metadata: expected 'Bearer <token>'")
        principal = self._by_digest.get(_digest(token.strip()))  # a hash lookup leaks nothing about the token
        if principal is None:
            raise Unauthenticated("unknown token")
        return principal


    def authenticate_certificate(self, subject_cn: str) -> Principal | None:
        """The principal of a TLS client certificate whose subject CN is `subject_cn` (the TLS layer
        checked it against --client-ca); None when the tokens file names no such certificate."""
        if self._by_digest is None:
            return DEV_PRINCIPAL
        return self._by_certificate.get(subject_cn)


def is_loopback(address: str) -> bool:
    """Whether a listen address `host:port` is on the loopback interface only (or is a local
    `unix:PATH` socket)."""
    if address.startswith("unix:"):
        return True
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plaintext_token_addresses(addresses: Sequence[str], tokens: bool, tls: bool) -> list[str]:
    """The listen addresses where bearer tokens would cross a network in plaintext: with tokens and
    without TLS, every address beyond loopback and unix: sockets (empty otherwise)."""
    if not tokens or tls:
        return []
    return [address for address in addresses if not is_loopback(address)]
