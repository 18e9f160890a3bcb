"""HTTP client of the milepost server (docs/server-contract.md), sync and async.

Each route is described once, as a `_Call` (method, path, body, how to read the reply);
`MilepostClient` sends it with `httpx.Client`, `AsyncMilepostClient` with
`httpx.AsyncClient`. Every error reply becomes an `ServerRefused` carrying the status and the
stable `code` of the body; a server that cannot be reached raises `ServerUnavailable`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from milepost.errors import MilepostError

TERMINAL_STATUSES = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
EVENTS_PAGE = 1000
WAIT_LONG_POLL = 30.0
"""Longest `wait` the client asks `GET /api/executions/{id}/status` to hold a reply (the
server takes up to 60 s); a long-poll is asked again until the run ends or time is up."""
WAIT_FIRST_POLL = 0.05
WAIT_MAX_POLL = 1.0
"""Back-off between asks when the server answers at once (one that ignores `wait`)."""


class ServerRefused(MilepostError):
    """The server refused the request.

    `status` is the HTTP status, `code` the stable code of the body, `fields` the rest of
    the body (`problems`, `errors`, the execution's `status` of `already_terminal`...).
    """

    code = "server_refused"

    def __init__(self, status: int, code: str, message: str, /, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.status = status
        self.code = code

    def to_dict(self) -> dict[str, Any]:
        """The error body as the server sent it, plus `http_status`."""
        return {**super().to_dict(), "http_status": self.status}

    @property
    def transient(self) -> bool:
        """A server-side failure (5xx, 429) that may go away by itself."""
        return self.status >= 500 or self.status == 429


class ServerUnavailable(MilepostError):
    """The server could not be reached."""

    code = "server_unavailable"


class NoServer(MilepostError):
    """No server URL: pass one or set MILEPOST_SERVER_URL."""

    code = "no_server"


class WaitTimeout(MilepostError):
    """The execution did not end in time."""

    code = "wait_timeout"


# --------------------------------------------------------------------------------------------
# The routes


def _identity(body: Any) -> Any:
    return body


@dataclass(frozen=True, slots=True)
class _Call:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    parse: Callable[[Any], Any] = _identity
    none_on_404: bool = False
    hold: float = 0.0
    """Seconds the server may hold the reply (a long-poll): added to the read timeout."""


def _key(value: int | str) -> str:
    return str(value)


@dataclass(frozen=True, slots=True)
class ParentClaim:
    """The live claim of the command that starts a child (`playbook` tool): a `worker` token
    may start, watch and cancel executions only with it (docs/server-contract.md, Auth)."""

    command_id: int | str
    epoch: int

    def fields(self) -> dict[str, Any]:
        return {"parent_command_id": _key(self.command_id), "parent_epoch": self.epoch}


def _proof(claim: ParentClaim | None) -> dict[str, Any]:
    return {} if claim is None else claim.fields()


def _register(content: str) -> _Call:
    return _Call("POST", "/api/catalog/register", {"content": content})


def _catalog_list(path: str | None) -> _Call:
    body = {"path": path} if path else {}
    return _Call("POST", "/api/catalog/list", body, parse=lambda b: b["entries"])


def _resource(path: str, version: int | None) -> _Call:
    body: dict[str, Any] = {"path": path}
    if version is not None:
        body["version"] = version
    return _Call("POST", "/api/catalog/resource", body)


def _execute(path: str, workload: dict[str, Any] | None, version: int | None,
             parent_execution_id: int | str | None,
             claim: ParentClaim | None = None) -> _Call:  # fmt: skip
    body: dict[str, Any] = {"path": path, "workload": workload or {}, **_proof(claim)}
    if version is not None:
        body["version"] = version
    if parent_execution_id is not None:
        body["parent_execution_id"] = _key(parent_execution_id)
    return _Call("POST", "/api/execute", body, parse=lambda b: str(b["execution_id"]))


def _executions(status: str | None, path: str | None, limit: int, offset: int) -> _Call:
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if status:
        params["status"] = status
    if path:
        params["path"] = path
    return _Call("GET", "/api/executions", params=params, parse=lambda b: b["items"])


def _status(execution_id: int | str, wait: float | None = None,
            claim: ParentClaim | None = None) -> _Call:  # fmt: skip
    path = f"/api/executions/{_key(execution_id)}/status"
    if not wait or wait <= 0:
        return _Call("GET", path, params=_proof(claim))
    wait = round(wait, 3)
    return _Call("GET", path, params={"wait": wait, **_proof(claim)}, hold=wait)


def _execution(execution_id: int | str, events_limit: int | None,
               events_after: int | None) -> _Call:  # fmt: skip
    params: dict[str, Any] = {}
    if events_limit is not None:
        params["events_limit"] = events_limit
    if events_after is not None:
        params["events_after"] = events_after
    return _Call("GET", f"/api/executions/{_key(execution_id)}", params=params)


def _cancel(execution_id: int | str, claim: ParentClaim | None = None) -> _Call:
    return _Call("POST", f"/api/executions/{_key(execution_id)}/cancel", {},
                 params=_proof(claim))  # fmt: skip


def _command(event_id: int | str) -> _Call:
    return _Call("GET", f"/api/commands/{_key(event_id)}")


def _claim(event_id: int | str, worker_id: str, lease_seconds: float | None) -> _Call:
    body: dict[str, Any] = {"worker_id": worker_id}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    return _Call("POST", f"/api/commands/{_key(event_id)}/claim", body)


def _claim_next(worker_id: str, limit: int, lease_seconds: float | None,
                pool: str | None) -> _Call:  # fmt: skip
    body: dict[str, Any] = {"worker_id": worker_id, "limit": limit}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    if pool is not None:
        body["pool"] = pool
    return _Call("POST", "/api/commands/claim", body, parse=lambda b: list(b["commands"]))


def _heartbeat(event_id: int | str, worker_id: str, epoch: int,
               lease_seconds: float | None) -> _Call:  # fmt: skip
    body: dict[str, Any] = {"worker_id": worker_id, "epoch": epoch}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    return _Call("POST", f"/api/commands/{_key(event_id)}/heartbeat", body)


def _machine_id(worker_id: str, machine_id: int | None) -> _Call:
    body: dict[str, Any] = {"worker_id": worker_id}
    if machine_id is not None:
        body["machine_id"] = machine_id
    return _Call("POST", "/api/workers/machine-id", body)


def _release(event_id: int | str, worker_id: str, epoch: int) -> _Call:
    body = {"worker_id": worker_id, "epoch": epoch}
    return _Call("POST", f"/api/commands/{_key(event_id)}/release", body)


def batch_body(events: list[dict[str, Any]],
               claim: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The body of `POST /api/events/batch` (and of a worker channel message)."""
    body: dict[str, Any] = {"events": events}
    if claim is not None:
        body["claim"] = claim  # milepost extension: the reply carries `commands`
    return body


def _post_events(events: list[dict[str, Any]], claim: dict[str, Any] | None = None) -> _Call:
    return _Call("POST", "/api/events/batch", batch_body(events, claim))


def _credential(name: str) -> _Call:
    return _Call("GET", f"/api/credentials/{quote(name, safe='')}",
                 params={"include_data": "true"}, parse=_credential_data,
                 none_on_404=True)  # fmt: skip


def _credential_data(body: Any) -> dict[str, Any] | None:
    """The credential's data with its `type` (the shape the tools' lookups take)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        return None
    data: dict[str, Any] = dict(body["data"])
    if body.get("type") is not None:
        data.setdefault("type", body["type"])
    return data


def _put_credential(name: str, type_: str, data: dict[str, Any]) -> _Call:
    return _Call("POST", "/api/credentials", {"name": name, "type": type_, "data": data})


# --------------------------------------------------------------------------------------------
# Replies


def _error_of(response: httpx.Response) -> ServerRefused:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        text = response.text.strip()[:500] or response.reason_phrase
        code = "internal" if response.status_code >= 500 else f"http_{response.status_code}"
        return ServerRefused(response.status_code, code, text)
    return error_of_body(response.status_code, body, response.reason_phrase)


def error_of_body(status: int, body: dict[str, Any], fallback: str = "") -> ServerRefused:
    """The ServerRefused of an error body `{code, message, ...fields}` (HTTP or the worker channel)."""
    code = str(body.get("code") or f"http_{status}")
    message = str(body.get("message") or body.get("detail") or fallback)
    fields = {k: v for k, v in body.items() if k not in ("code", "message")}
    return ServerRefused(status, code, message, **fields)


def _reply(call: _Call, response: httpx.Response) -> Any:
    if call.none_on_404 and response.status_code == 404:
        return None
    if response.status_code >= 400:
        raise _error_of(response)
    if not response.content:
        return call.parse({})
    try:
        body = response.json()
    except ValueError as exc:
        raise ServerRefused(response.status_code, "invalid_response",
                       f"{call.method} {call.path}: the reply is not JSON") from exc  # fmt: skip
    return call.parse(body)


def _settings(server_url: str | None, token: str | None) -> tuple[str, dict[str, str]]:
    url = server_url or os.environ.get("MILEPOST_SERVER_URL")
    if not url:
        raise NoServer()
    token = token or os.environ.get("MILEPOST_TOKEN") or None
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return url.rstrip("/"), headers


def _unreachable(call: _Call, base_url: str, exc: httpx.HTTPError) -> ServerUnavailable:
    return ServerUnavailable(f"{call.method} {base_url}{call.path}: {type(exc).__name__}: {exc}",
                             url=base_url)  # fmt: skip


def _wait_timeout(execution_id: int | str, status: dict[str, Any],
                  timeout: float | None) -> WaitTimeout:  # fmt: skip
    return WaitTimeout(f"execution {execution_id} is still {status.get('status')} after "
                       f"{timeout or 0:g}s", execution_id=str(execution_id))  # fmt: skip


def _timeout(default: httpx.Timeout, call: _Call) -> httpx.Timeout:
    """The client's timeouts, with the read timeout stretched by what the call may be held."""
    if call.hold <= 0:
        return default
    read = None if default.read is None else default.read + call.hold
    return httpx.Timeout(connect=default.connect, read=read, write=default.write,
                         pool=default.pool)  # fmt: skip


class _Wait:
    """How `wait` long-polls, for both clients: what `wait` to ask, how long to pause.

    Each ask holds on the server until the run ends or `min(time left, WAIT_LONG_POLL)`
    passes, so the end is seen as soon as the server sees it. A reply that is not terminal
    and came back in much less than the wait asked is from a server that ignores `wait`:
    then pause with back-off (as the client did before long-polls) so it never busy-loops.
    """

    def __init__(self, timeout: float | None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.delay = WAIT_FIRST_POLL
        self.asked = 0.0
        self.sent_at = 0.0

    def ask(self) -> float:
        """The `wait` of the next status call."""
        self.sent_at = time.monotonic()
        left = WAIT_LONG_POLL if self.deadline is None else self.deadline - self.sent_at
        self.asked = max(0.0, min(left, WAIT_LONG_POLL))
        return self.asked

    def pause(self) -> float | None:
        """Seconds to sleep before asking again (the reply was not terminal); None: time's up."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return None
        if now - self.sent_at >= self.asked / 2:  # the server held the reply: ask again now
            self.delay = WAIT_FIRST_POLL
            return 0.0
        pause = self.delay
        self.delay = min(self.delay * 2, WAIT_MAX_POLL)
        return pause if self.deadline is None else min(pause, self.deadline - now)


def _events_page(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list(body.get("events") or [])


def _next_after(body: dict[str, Any]) -> int | None:
    """The `events_after` of the next page, None after the last one.

    The server says `events_next` (the seq to continue after); without it a full page
    means there may be more, continued after the seq of its last event.
    """
    if "events_next" in body:
        nxt = body["events_next"]
        return None if nxt is None else int(nxt)
    page = _events_page(body)
    if len(page) < EVENTS_PAGE or page[-1].get("seq") is None:
        return None
    return int(page[-1]["seq"])


# --------------------------------------------------------------------------------------------
# Sync


class MilepostClient:
    """A blocking client of the milepost server.

    Args:
        server_url: the server's base URL; default `MILEPOST_SERVER_URL`.
        token: a bearer token; default `MILEPOST_TOKEN`.
        timeout: seconds per request.
        transport: an httpx transport replacing the network (tests).
    """

    def __init__(self, server_url: str | None = None, token: str | None = None, *,
                 timeout: float = 30,
                 transport: httpx.BaseTransport | None = None) -> None:  # fmt: skip
        self.base_url, headers = _settings(server_url, token)
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                  transport=transport)  # fmt: skip

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MilepostClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _do(self, call: _Call) -> Any:
        try:
            response = self._http.request(call.method, call.path, json=call.json,
                                          params=call.params or None,
                                          timeout=_timeout(self._http.timeout, call))  # fmt: skip
        except httpx.HTTPError as exc:
            raise _unreachable(call, self.base_url, exc) from exc
        return _reply(call, response)

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._do(_Call("GET", "/health"))
        return result

    def register(self, content: str) -> dict[str, Any]:
        """Register a playbook's YAML; returns `{path, version, catalog_id}`."""
        result: dict[str, Any] = self._do(_register(content))
        return result

    def catalog(self, path: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._do(_catalog_list(path))
        return result

    def resource(self, path: str, version: int | None = None) -> dict[str, Any]:
        """A catalog entry with its `content`."""
        result: dict[str, Any] = self._do(_resource(path, version))
        return result

    def execute(self, path: str, workload: dict[str, Any] | None = None,
                version: int | None = None, *, parent_execution_id: int | str | None = None,
                claim: ParentClaim | None = None) -> str:  # fmt: skip
        """Start a run; returns its execution id. `claim`: a worker's proof (a child)."""
        result: str = self._do(_execute(path, workload, version, parent_execution_id, claim))
        return result

    def executions(self, status: str | None = None, path: str | None = None,
                   limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:  # fmt: skip
        result: list[dict[str, Any]] = self._do(_executions(status, path, limit, offset))
        return result

    def status(self, execution_id: int | str, *, wait: float | None = None,
               claim: ParentClaim | None = None) -> dict[str, Any]:  # fmt: skip
        """The run's status; with `wait`, held by the server until the run ends or `wait`
        seconds pass (at most 60)."""
        result: dict[str, Any] = self._do(_status(execution_id, wait, claim))
        return result

    def execution(self, execution_id: int | str, events_limit: int | None = None,
                  events_after: int | None = None) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = self._do(_execution(execution_id, events_limit, events_after))
        return result

    def events(self, execution_id: int | str) -> list[dict[str, Any]]:
        """Every event of a run, in log order (paged)."""
        events: list[dict[str, Any]] = []
        after: int | None = None
        while True:
            body = self.execution(execution_id, EVENTS_PAGE, after)
            events.extend(_events_page(body))
            if (after := _next_after(body)) is None:
                return events

    def cancel(self, execution_id: int | str, *,
               claim: ParentClaim | None = None) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = self._do(_cancel(execution_id, claim))
        return result

    def wait(self, execution_id: int | str, timeout: float | None = None, *,
             claim: ParentClaim | None = None) -> dict[str, Any]:  # fmt: skip
        """Long-poll the status (`_Wait`) until the run ends; returns the status reply.

        Raises:
            WaitTimeout: the run did not end within `timeout` seconds.
        """
        plan = _Wait(timeout)
        while True:
            status = self.status(execution_id, wait=plan.ask(), claim=claim)
            if status.get("status") in TERMINAL_STATUSES:
                return status
            if (pause := plan.pause()) is None:
                raise _wait_timeout(execution_id, status, timeout)
            if pause > 0:
                time.sleep(pause)

    def command(self, event_id: int | str) -> dict[str, Any]:
        result: dict[str, Any] = self._do(_command(event_id))
        return result

    def claim(self, event_id: int | str, worker_id: str,
              lease_seconds: float | None = None) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = self._do(_claim(event_id, worker_id, lease_seconds))
        return result

    def claim_next(self, worker_id: str, limit: int = 1, lease_seconds: float | None = None,
                   pool: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
        result: list[dict[str, Any]] = self._do(_claim_next(worker_id, limit, lease_seconds, pool))
        return result

    def heartbeat(self, event_id: int | str, worker_id: str, epoch: int,
                  lease_seconds: float | None = None) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = self._do(_heartbeat(event_id, worker_id, epoch, lease_seconds))
        return result

    def release(self, event_id: int | str, worker_id: str, epoch: int) -> dict[str, Any]:
        result: dict[str, Any] = self._do(_release(event_id, worker_id, epoch))
        return result

    def post_events(self, events: list[dict[str, Any]],
                    claim: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = self._do(_post_events(events, claim))
        return result

    def credential(self, name: str) -> dict[str, Any] | None:
        """A credential's data (worker and admin roles), None when it is not registered."""
        result: dict[str, Any] | None = self._do(_credential(name))
        return result

    def put_credential(self, name: str, type_: str, data: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._do(_put_credential(name, type_, data))
        return result


# --------------------------------------------------------------------------------------------
# Async


class AsyncMilepostClient:
    """The same client over `httpx.AsyncClient` (the worker's). Use as `async with`."""

    def __init__(self, server_url: str | None = None, token: str | None = None, *,
                 timeout: float = 30,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:  # fmt: skip
        self.base_url, headers = _settings(server_url, token)
        self.headers = headers
        """What every request carries (the bearer token): other channels to the server use it."""
        self.timeout = timeout
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout,
                                       transport=transport)  # fmt: skip

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMilepostClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _do(self, call: _Call) -> Any:
        try:
            response = await self._http.request(call.method, call.path, json=call.json,
                                                params=call.params or None,
                                                timeout=_timeout(self._http.timeout, call))  # fmt: skip
        except httpx.HTTPError as exc:
            raise _unreachable(call, self.base_url, exc) from exc
        return _reply(call, response)

    async def health(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(_Call("GET", "/health"))
        return result

    async def register(self, content: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(_register(content))
        return result

    async def catalog(self, path: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._do(_catalog_list(path))
        return result

    async def resource(self, path: str, version: int | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(_resource(path, version))
        return result

    async def execute(self, path: str, workload: dict[str, Any] | None = None,
                      version: int | None = None, *,
                      parent_execution_id: int | str | None = None,
                      claim: ParentClaim | None = None) -> str:  # fmt: skip
        call = _execute(path, workload, version, parent_execution_id, claim)
        result: str = await self._do(call)
        return result

    async def executions(self, status: str | None = None, path: str | None = None,
                         limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:  # fmt: skip
        result: list[dict[str, Any]] = await self._do(_executions(status, path, limit, offset))
        return result

    async def status(self, execution_id: int | str, *, wait: float | None = None,
                     claim: ParentClaim | None = None) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = await self._do(_status(execution_id, wait, claim))
        return result

    async def execution(self, execution_id: int | str, events_limit: int | None = None,
                        events_after: int | None = None) -> dict[str, Any]:  # fmt: skip
        call = _execution(execution_id, events_limit, events_after)
        result: dict[str, Any] = await self._do(call)
        return result

    async def events(self, execution_id: int | str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        after: int | None = None
        while True:
            body = await self.execution(execution_id, EVENTS_PAGE, after)
            events.extend(_events_page(body))
            if (after := _next_after(body)) is None:
                return events

    async def cancel(self, execution_id: int | str, *,
                     claim: ParentClaim | None = None) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = await self._do(_cancel(execution_id, claim))
        return result

    async def wait(self, execution_id: int | str, timeout: float | None = None, *,
                   claim: ParentClaim | None = None) -> dict[str, Any]:  # fmt: skip
        plan = _Wait(timeout)
        while True:
            status = await self.status(execution_id, wait=plan.ask(), claim=claim)
            if status.get("status") in TERMINAL_STATUSES:
                return status
            if (pause := plan.pause()) is None:
                raise _wait_timeout(execution_id, status, timeout)
            if pause > 0:
                await asyncio.sleep(pause)

    async def command(self, event_id: int | str) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(_command(event_id))
        return result

    async def claim(self, event_id: int | str, worker_id: str,
                    lease_seconds: float | None = None) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = await self._do(_claim(event_id, worker_id, lease_seconds))
        return result

    async def claim_next(self, worker_id: str, limit: int = 1,
                         lease_seconds: float | None = None,
                         pool: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
        call = _claim_next(worker_id, limit, lease_seconds, pool)
        result: list[dict[str, Any]] = await self._do(call)
        return result

    async def heartbeat(self, event_id: int | str, worker_id: str, epoch: int,
                        lease_seconds: float | None = None) -> dict[str, Any]:  # fmt: skip
        call = _heartbeat(event_id, worker_id, epoch, lease_seconds)
        result: dict[str, Any] = await self._do(call)
        return result

    async def release(self, event_id: int | str, worker_id: str, epoch: int) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(_release(event_id, worker_id, epoch))
        return result

    async def machine_id(self, worker_id: str, machine_id: int | None = None) -> dict[str, Any]:
        """Lease a machine id for this worker's event ids, or renew `machine_id`:
        `{machine_id, expires_at, renewed}` (a new id when the one held was lost)."""
        result: dict[str, Any] = await self._do(_machine_id(worker_id, machine_id))
        return result

    async def post_events(self, events: list[dict[str, Any]],
                          claim: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = await self._do(_post_events(events, claim))
        return result

    async def credential(self, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self._do(_credential(name))
        return result

    async def put_credential(self, name: str, type_: str,
                             data: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        result: dict[str, Any] = await self._do(_put_credential(name, type_, data))
        return result
