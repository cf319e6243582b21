"""etcd as several controllers reach it: `etcd://HOST:PORT[,HOST:PORT...]`, any member answering.

The client is `etcd3gw` (OpenStack's, over etcd's JSON gateway): maintained, pure Python over
`requests`, and it exposes etcd's transactions as they are, which fencing needs (a compare on the
leader key's create revision). A call goes to the member that answered last; a member that
cannot be reached is skipped for the next. A call that timed out may still have been applied:
`Ambiguous` says so, and the caller must not assume either way.
"""

from __future__ import annotations

import base64
import logging
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sdn_app.core.errors import InvalidArgument, Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
SCHEME = "etcd://"
REQUEST_TIMEOUT = 1.0  # seconds: within a lease of 2 s, a frozen member must not hold us up longer


def import_etcd3gw() -> Any:
    """The etcd3gw module, imported without the deprecation warning its thread pool library's import
    of eventlet prints at every start."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import etcd3gw
        import etcd3gw.exceptions
    return etcd3gw


class Ambiguous(Unavailable):
    """etcd did not answer in time: the request may or may not have been applied."""


@dataclass(frozen=True)
class Endpoint:
    """One etcd member's client address."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_store(url: str) -> tuple[Endpoint, ...]:
    """The members of `etcd://HOST:PORT[,HOST:PORT...]`; `InvalidArgument` naming what is wrong."""
    if not url.startswith(SCHEME):
        raise InvalidArgument(f"--store {url!r}: expected etcd://HOST:PORT[,HOST:PORT...]")
    endpoints = []
    for part in url[len(SCHEME):].split(","):
        host, sep, port = part.strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgument(f"--store {url!r}: {part.strip()!r} is not HOST:PORT with a port from 1 to 65535")
        endpoints.append(Endpoint(host, int(port)))
    return tuple(dict.fromkeys(endpoints))


def b64(text: str | bytes) -> str:
    """A key or value as etcd's JSON gateway takes it."""
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def unb64(text: str) -> bytes:
    """A key or value as etcd's JSON gateway gives it."""
    return base64.b64decode(text)


def prefix_end(prefix: str) -> str:
    """The end of the key range holding every key that starts with `prefix`."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class Etcd:
    """A client of one etcd cluster that fails over between its members."""

    def __init__(self, url: str, timeout: float = REQUEST_TIMEOUT):
        """Clients of every member of `url` (nothing is contacted yet)."""
        etcd3gw = import_etcd3gw()

        self.url = url
        self.endpoints = parse_store(url)
        self.timeout = timeout
        self._clients = [etcd3gw.Etcd3Client(host=e.host, port=e.port, timeout=timeout, api_path="/v3/")
                         for e in self.endpoints]
        self._current = 0
        self._lock = threading.Lock()

    def call(self, request: Callable[[Any], T], what: str, idempotent: bool = True) -> T:
        """`request(client)` on the member that answered last, else on each other one in turn.

        `Unavailable` naming every member's failure when none answers. A member that times out
        is passed over for the next one, unless the request is not `idempotent` (a transaction):
        then `Ambiguous` (it may have been applied there), and the next call starts elsewhere."""
        exceptions = import_etcd3gw().exceptions

        with self._lock:
            first = self._current
        failures = []
        for offset in range(len(self._clients)):
            index = (first + offset) % len(self._clients)
            member = self.endpoints[index]
            try:
                result = request(self._clients[index])
            except (exceptions.ConnectionTimeoutError, exceptions.InternalServerError) as error:
                timed_out = isinstance(error, exceptions.ConnectionTimeoutError) or "time" in str(error)
                if timed_out and not idempotent:
                    self._pass_over(index)
                    raise Ambiguous(f"etcd member {member} did not answer {what} within {self.timeout:g}s "
                                    f"({_short(error)}); it may have been applied") from None
                problem = f"no answer within {self.timeout:g}s" if timed_out else _short(error)
                failures.append(f"{member}: {problem}")
                continue
            except exceptions.ConnectionFailedError as error:
                failures.append(f"{member}: cannot connect ({_short(error) if str(error).strip() else 'refused'})")
                continue
            except exceptions.Etcd3Exception as error:
                raise Unavailable(f"etcd member {member} refused to {what}: {_short(error)}") from None
            with self._lock:
                self._current = index
            return result
        self._pass_over(first)
        raise Unavailable(f"etcd ({self.url}) cannot {what}: " + "; ".join(failures))

    def _pass_over(self, index: int) -> None:
        """Start the next call at the member after `index`."""
        with self._lock:
            self._current = (index + 1) % len(self._clients)

    def txn(self, compare: list[dict], success: list[dict], failure: list[dict] | None = None,
            what: str = "commit a transaction") -> dict:
        """One etcd transaction (gateway JSON): the response, `succeeded` always present."""
        body = {"compare": compare, "success": success, "failure": failure or []}
        response = self.call(lambda client: client.transaction(body), what, idempotent=False)
        response["succeeded"] = bool(response.get("succeeded", False))
        return response

    def range(self, key: str, end: str | None = None, what: str = "read",
              min_mod_revision: int = 0) -> tuple[list[dict], int]:
        """The key-values from `key` (up to `end`, else just `key`), changed at `min_mod_revision` or
        later, and the store's revision then."""
        body: dict[str, Any] = {"key": b64(key)}
        if end is not None:
            body["range_end"] = b64(end)
        if min_mod_revision:
            body["min_mod_revision"] = str(min_mod_revision)
        response = self.call(lambda client: client.post(client.get_url("/kv/range"), json=body), what)
        return response.get("kvs", []), int(response["header"]["revision"])

    def grant(self, ttl: int) -> int:
        """A new lease of `ttl` seconds: its id."""
        response = self.call(lambda client: client.post(client.get_url("/lease/grant"), json={"TTL": ttl}),
                             "grant a lease")
        return int(response["ID"])

    def keepalive(self, lease: int) -> int:
        """Renew `lease`: its TTL now (0 or less: it had expired)."""
        response = self.call(lambda client: client.post(client.get_url("/lease/keepalive"), json={"ID": lease}),
                             "renew the lease")
        return int(response.get("result", {}).get("TTL", -1))

    def revoke(self, lease: int) -> None:
        """End `lease` now, deleting its keys."""
        self.call(lambda client: client.post(client.get_url("/kv/lease/revoke"), json={"ID": lease}),
                  "revoke the lease")


def _short(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text if len(text) <= 200 else text[:200] + "..."
