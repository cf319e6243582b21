"""The SENSE orchestrator API under /sense/api: the subset the Rucio-SENSE DMM and the `sense-o-api`
client use (docs/sense.md), an HTTP adapter over the core's `SenseDesk`.

    api = SenseApi(context)      # mounted by the HTTP server (sdn_app/web/server.py)

A client's config points `API_ENDPOINT` at `http(s)://HOST:PORT/sense/api` and `AUTH_ENDPOINT` at
`.../sense/api/auth/token`: a password grant whose username is a tsdn principal and whose
password is that principal's tsdn token answers with that token as the access (and refresh)
token, which the client then sends as `Authorization: Bearer` like every tsdn client.

Every handler reads and checks the request here (JSON bodies, UUIDs, query flags), then runs one
call on the core's thread (`worker.call_async`): the desk decides, this module only translates.
Errors are SENSE's body, `{"exception": "...", "status": N}` with `Content-Type:
application/json`, which `sense-o-api` prints as `Returned code N with error ...`. Statuses are
bare text (`CREATE - READY`). `sync=true` on provision and reprovision waits (up to
`SYNC_TIMEOUT`) until the switches confirmed the flows, watching the reservation's events.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid as uuids
from collections.abc import Callable
from html import unescape
from typing import Any, TypeVar

from aiohttp import web

from sdn_app.core.errors import InvalidArgument, Unauthenticated
from sdn_app.core.reservation import State
from sdn_app.core.sense import LABEL, SenseDesk, View, instance_uuid
from sdn_app.core.validation import shown
from sdn_app.web.api import PRINCIPAL, ApiContext, CoreDesk

log = logging.getLogger("tsdn.sense")
T = TypeVar("T")
PREFIX = "/sense/api"
TOKEN_PATH = f"{PREFIX}/auth/token"
SYNC_TIMEOUT = 60.0  # seconds `sync=true` waits for the switches before answering with the status then
TOKEN_LIFETIME = 3600  # what the token endpoint announces; the token itself lasts as long as the tokens file has it
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
_TEMPLATE = re.compile(r"<jsonTemplate>(.*)</jsonTemplate>", re.DOTALL)


class SenseApi:
    """The SENSE API (`HttpApi`): instances, profiles, intents, discovery, address pools, manifests
    and a token endpoint, for the network `context.domain`."""

    prefix = PREFIX

    def __init__(self, context: ApiContext):
        self.context = context
        self.public = frozenset({TOKEN_PATH})
        self._desk = CoreDesk(context.worker, lambda book: SenseDesk(book, context.domain))
        self._closing = asyncio.Event()

    # -- the HttpApi protocol --------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        p = self.prefix
        routes = [
            ("POST", "/auth/token", self._token),
            ("GET", "/instance", self._new_instance),
            ("POST", "/instance/{uuid}", self._create),
            ("GET", "/instance/{uuid}", self._instance),
            ("DELETE", "/instance/{uuid}", self._delete),
            ("GET", "/instance/{uuid}/status", self._status),
            ("GET", "/instance/{uuid}/status/phase", self._phase),
            ("GET", "/instance/{uuid}/status/configuration", self._configuration),
            ("GET", "/instance/{uuid}/substatus", self._substatus),
            ("POST", "/instance/{uuid}/modify", self._modify),
            ("PUT", "/instance/{uuid}/{action}", self._operate),
            ("DELETE", "/service/{uuid}", self._delete),
            ("GET", "/intent/instance/{uuid}", self._intents),
            ("GET", "/intent/{uuid}", self._intent),
            ("GET", "/profile", self._profiles),
            ("POST", "/profile", self._create_profile),
            ("GET", "/profile/{search}", self._profile),
            ("PUT", "/profile/{uuid}", self._update_profile),
            ("DELETE", "/profile/{uuid}", self._delete_profile),
            ("GET", "/discover", self._domains),
            ("GET", "/discover/domains", self._domains),
            ("GET", "/discover/service/instances", self._service_instances),
            ("GET", "/discover/lookup/{uri}/rooturi", self._root_uri),
            ("GET", "/discover/lookup/{name}", self._lookup),
            ("GET", "/discover/{domain}", self._domain),
            ("GET", "/discover/{domain}/peers", self._domain),
            ("GET", "/discover/{domain}/ipv6pool", self._ipv6_pool),
            ("GET", "/address/allocate/{pool}/{scope}", self._allocations),
            ("POST", "/address/allocate/{pool}", self._allocate),
            ("DELETE", "/address/allocate/{pool}/name/{name}/{scope}", self._free_name),
            ("DELETE", "/address/allocate/{pool}/{address}/{scope}", self._free_address),
            ("DELETE", "/address/allocate/{pool}/{scope}", self._free_scope),
            ("PUT", "/address/affiliate/{pool}/name/{name}/{scope}/{uri:.+}", self._affiliate),
            ("PUT", "/address/affiliate/{pool}/{address}/{scope}/{uri:.+}", self._affiliate),
            ("POST", "/service/manifest", self._manifest),
            ("POST", "/service/manifest/{uuid}/json", self._manifest),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, p + path, handler)

    def error(self, status: int, message: str) -> web.Response:
        """SENSE's error body: `{"exception": message, "status": status}` as JSON."""
        return _json({"exception": message, "status": status}, status)

    async def close(self) -> None:
        """Wake every `sync=true` wait (the server is stopping)."""
        self._closing.set()

    # -- plumbing ----------------------------------------------------------------------------------

    async def _core(self, fn: Callable[[SenseDesk], T]) -> T:
        """`fn(desk)` on the core's thread."""
        return await self._desk.call(fn)

    def _base_url(self, request: web.Request) -> str:
        return f"{request.scheme}://{request.host}{self.prefix}"

    # -- tokens ------------------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        """OAuth 2 token endpoint (RFC 6749): `password` (username: the principal, password: its
        tsdn token) and `refresh_token` grants, answered with the tsdn token itself."""
        form = await request.post()
        grant = form.get("grant_type")
        if grant == "password":
            username, secret = str(form.get("username", "")), str(form.get("password", ""))
        elif grant == "refresh_token":
            username, secret = "", str(form.get("refresh_token", ""))
        else:
            return _oauth_error(400, "unsupported_grant_type", f"grant_type {shown(grant)}: tsdn takes password "
                                "(username: your principal, password: your tsdn token) or refresh_token")
        if not secret:
            return _oauth_error(400, "invalid_request", "password (your tsdn token) is required")
        try:
            principal = self.context.authenticate(f"Bearer {secret}")
        except Unauthenticated:
            return _oauth_error(401, "invalid_grant", "Invalid user credentials: the password is not a tsdn token")
        if grant == "password" and username != principal.name:
            return _oauth_error(401, "invalid_grant", f"Invalid user credentials: the token is not {shown(username)}'s")
        return _json({"access_token": secret, "token_type": "Bearer", "expires_in": TOKEN_LIFETIME,
                      "refresh_token": secret, "refresh_expires_in": TOKEN_LIFETIME, "scope": "tsdn"})

    # -- instances ---------------------------------------------------------------------------------

    async def _new_instance(self, request: web.Request) -> web.Response:
        """`GET /instance`: a fresh UUID to create an instance under (nothing is kept yet)."""
        _ = request[PRINCIPAL]
        return _text(str(uuids.uuid4()))

    async def _create(self, request: web.Request) -> web.Response:
        principal, uuid, body = request[PRINCIPAL], request.match_info["uuid"], await _body(request, "intent")
        answer = await self._core(lambda desk: desk.create(principal, uuid, body))
        log.info("%s: instance %s %s", principal.name, answer.view.instance.uuid, answer.view.status)
        return _json(answer.as_json())

    async def _modify(self, request: web.Request) -> web.Response:
        principal, uuid, body = request[PRINCIPAL], request.match_info["uuid"], await _body(request, "intent")
        _flag(request, "sync")
        _flag(request, "proceed")
        answer = await self._core(lambda desk: desk.modify(principal, uuid, body))
        log.info("%s: instance %s %s (%s)", principal.name, answer.view.instance.uuid, answer.view.status,
                 answer.view.instance.note)
        return _json(answer.as_json())

    async def _operate(self, request: web.Request) -> web.Response:
        """`PUT /instance/UUID/provision|cancel|reprovision|delete[?sync=true&force=true]`."""
        principal, action = request[PRINCIPAL], request.match_info["action"]
        uuid = instance_uuid(request.match_info["uuid"])
        if action == "delete":
            return await self._delete(request)
        if action not in ("provision", "cancel", "reprovision"):
            raise InvalidArgument(f"{shown(action)}: tsdn operates instances with provision, cancel, reprovision "
                                  "and delete")
        sync, force = _flag(request, "sync"), _flag(request, "force")
        if request.query.get("intent") not in (None, "", "last"):
            raise InvalidArgument("intent: tsdn operates on an instance's last intent only (intent=last)")
        hub = self.context.worker.hub
        subscription = hub.subscribe(lambda e: e.reservation.labels.get(LABEL) == uuid) if sync else None
        try:
            view = await self._core(lambda desk: desk.operate(principal, uuid, action, force))
            if subscription is not None and view.status.substate == "COMMITTING":
                view = await self._settle(subscription, view, principal, uuid)
        finally:
            if subscription is not None:
                hub.unsubscribe(subscription)
        log.info("%s: instance %s %s: %s", principal.name, uuid, action, view.status)
        if sync and view.status.substate == "FAILED":
            return self.error(502, f"{action} failed: instance {uuid} is {view.status}: {view.status.detail}")
        return _text(str(view.status))

    async def _settle(self, subscription: Any, view: View, principal: Any, uuid: str) -> View:
        """Wait until the reservation being provisioned is confirmed or failed (or `SYNC_TIMEOUT`)."""
        assert view.reservation is not None
        reservation_id = view.reservation.id
        loop = asyncio.get_running_loop()
        subscription.wake_on(loop)
        deadline = loop.time() + SYNC_TIMEOUT
        while not self._closing.is_set():
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    event = await subscription.next_async()
            except TimeoutError:
                break
            if event is None:
                break
            if event.reservation.id == reservation_id and event.reservation.state is not State.PROVISIONING:
                break
        return await self._core(lambda desk: desk.view(principal, uuid))

    async def _delete(self, request: web.Request) -> web.Response:
        principal, uuid = request[PRINCIPAL], request.match_info["uuid"]
        await self._core(lambda desk: desk.delete(principal, uuid))
        log.info("%s: instance %s deleted", principal.name, uuid)
        return _text("deleted")

    async def _view(self, request: web.Request) -> View:
        principal, uuid = request[PRINCIPAL], request.match_info["uuid"]
        return await self._core(lambda desk: desk.view(principal, uuid))

    async def _instance(self, request: web.Request) -> web.Response:
        return _json((await self._view(request)).as_json())

    async def _status(self, request: web.Request) -> web.Response:
        return _text(str((await self._view(request)).status))

    async def _phase(self, request: web.Request) -> web.Response:
        return _text((await self._view(request)).status.superstate)

    async def _substatus(self, request: web.Request) -> web.Response:
        return _text((await self._view(request)).status.substate)

    async def _configuration(self, request: web.Request) -> web.Response:
        status = (await self._view(request)).status
        return _text("UNSTABLE" if status.substate == "COMMITTING" else "STABLE")

    async def _intents(self, request: web.Request) -> web.Response:
        principal, uuid = request[PRINCIPAL], request.match_info["uuid"]
        return _json(await self._core(lambda desk: desk.intents(principal, uuid)))

    async def _intent(self, request: web.Request) -> web.Response:
        principal, uuid = request[PRINCIPAL], request.match_info["uuid"]
        return _json(await self._core(lambda desk: desk.intent(principal, uuid)))

    # -- profiles ----------------------------------------------------------------------------------

    async def _profiles(self, request: web.Request) -> web.Response:
        principal = request[PRINCIPAL]
        return _json([p.slim() for p in await self._core(lambda desk: desk.profiles.listed(principal))])

    async def _profile(self, request: web.Request) -> web.Response:
        principal, search = request[PRINCIPAL], request.match_info["search"]
        return _json((await self._core(lambda desk: desk.profiles.get(principal, search))).full())

    async def _create_profile(self, request: web.Request) -> web.Response:
        principal, body = request[PRINCIPAL], await _body(request, "profile")
        profile = await self._core(lambda desk: desk.profiles.create(principal, body))
        log.info("%s: service profile %s (%s) created", principal.name, profile.name, profile.uuid)
        return _text(profile.uuid)

    async def _update_profile(self, request: web.Request) -> web.Response:
        principal, uuid, body = request[PRINCIPAL], request.match_info["uuid"], await _body(request, "profile")
        return _json((await self._core(lambda desk: desk.profiles.update(principal, uuid, body))).full())

    async def _delete_profile(self, request: web.Request) -> web.Response:
        principal, uuid = request[PRINCIPAL], request.match_info["uuid"]
        await self._core(lambda desk: desk.profiles.delete(principal, uuid))
        return _text("deleted")

    # -- discovery ---------------------------------------------------------------------------------

    async def _domains(self, request: web.Request) -> web.Response:
        url = self._base_url(request)
        return _json({"domains": await self._core(lambda desk: desk.discovery.domains(url))})

    async def _service_instances(self, request: web.Request) -> web.Response:
        principal, search = request[PRINCIPAL], request.query.get("search", "")
        views = await self._core(lambda desk: desk.views(principal, search))
        return _json({"instances": [view.as_json() for view in views]})

    async def _lookup(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        return _json({"results": await self._core(lambda desk: desk.discovery.lookup(name))})

    async def _root_uri(self, request: web.Request) -> web.Response:
        uri = request.match_info["uri"]
        return _text(await self._core(lambda desk: desk.discovery.root_uri(uri)))

    async def _domain(self, request: web.Request) -> web.Response:
        uri, url = request.match_info["domain"], self._base_url(request)
        return _json(await self._core(lambda desk: desk.discovery.domain(uri, url)))

    async def _ipv6_pool(self, request: web.Request) -> web.Response:
        uri = request.match_info["domain"]
        return _json(await self._core(lambda desk: desk.discovery.ipv6_pool(uri)))

    # -- address pools -----------------------------------------------------------------------------

    async def _allocations(self, request: web.Request) -> web.Response:
        principal, pool, scope = request[PRINCIPAL], request.match_info["pool"], request.match_info["scope"]
        found = await self._core(lambda desk: desk.pools.listed(principal, pool, scope))
        return _json([a.as_json() for a in found])

    async def _allocate(self, request: web.Request) -> web.Response:
        principal, pool, body = request[PRINCIPAL], request.match_info["pool"], await _body(request, "allocation")
        allocation = await self._core(lambda desk: desk.pools.allocate(principal, pool, body))
        log.info("%s: %s allocated %s as %s", principal.name, pool, allocation.prefix, allocation.name)
        return _text(allocation.prefix)

    async def _free(self, request: web.Request, name: str | None = None, address: str | None = None) -> web.Response:
        principal, pool, scope = request[PRINCIPAL], request.match_info["pool"], request.match_info["scope"]
        freed = await self._core(lambda desk: desk.pools.free(principal, pool, scope, name, address))
        for allocation in freed:
            log.info("%s: %s freed %s (%s)", principal.name, pool, allocation.prefix, allocation.name)
        return _json({"freed": [a.as_json() for a in freed]})

    async def _free_name(self, request: web.Request) -> web.Response:
        return await self._free(request, name=request.match_info["name"])

    async def _free_address(self, request: web.Request) -> web.Response:
        return await self._free(request, address=request.match_info["address"])

    async def _free_scope(self, request: web.Request) -> web.Response:
        return await self._free(request)

    async def _affiliate(self, request: web.Request) -> web.Response:
        principal, info = request[PRINCIPAL], request.match_info
        pool, scope, uri = info["pool"], info["scope"], info["uri"]
        name, address = info.get("name"), info.get("address")
        allocation = await self._core(lambda desk: desk.pools.affiliate(principal, pool, scope, uri, name, address))
        return _json(allocation.as_json())

    # -- manifests ---------------------------------------------------------------------------------

    async def _manifest(self, request: web.Request) -> web.Response:
        """`POST /service/manifest` (the template inside `<serviceManifest><jsonTemplate>` XML, as
        sense-o-api sends it) and `POST /service/manifest/UUID/json` (the template as JSON)."""
        principal, uuid = request[PRINCIPAL], request.match_info.get("uuid")
        text = _decode(await request.read(), "manifest")
        if text.lstrip().startswith("<"):
            match = _TEMPLATE.search(text)
            if match is None:
                raise InvalidArgument("manifest: expected <serviceManifest><jsonTemplate>{...}</jsonTemplate>"
                                      "</serviceManifest> or a JSON template")
            text = unescape(match[1])
        template = _parse(text, "manifest template")
        return _json(await self._core(lambda desk: desk.discovery.manifest(principal, template, uuid)))


def _json(data: Any, status: int = 200) -> web.Response:
    """JSON with `Content-Type: application/json` exactly (sense-o-api parses nothing else)."""
    return web.Response(status=status, body=json.dumps(data, allow_nan=False).encode(),
                        headers={**NO_STORE, "Content-Type": "application/json"})


def _text(text: str) -> web.Response:
    return web.Response(body=text.encode(), headers={**NO_STORE, "Content-Type": "text/plain; charset=utf-8"})


def _oauth_error(status: int, error: str, description: str) -> web.Response:
    return _json({"error": error, "error_description": description}, status)


def _decode(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{what}: not UTF-8 text (byte {exc.start})") from None


def _parse(text: str, what: str) -> Any:
    if not text.strip():
        raise InvalidArgument(f"{what}: the request has no body; send JSON")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{what}: not JSON: {str(exc)[:200]}") from None


async def _body(request: web.Request, what: str) -> Any:
    """The request's JSON body (whatever its Content-Type says: sense-o-api may send JSON labelled XML)."""
    return _parse(_decode(await request.read(), what), what)


def _flag(request: web.Request, name: str) -> bool:
    """A query flag: true/false (absent: false)."""
    value = request.query.get(name)
    if value is None or value.lower() in ("false", "0", ""):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise InvalidArgument(f"{name}: true or false, got {shown(value)}")

