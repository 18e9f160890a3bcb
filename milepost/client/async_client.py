"""The asynchronous client of the server (`httpx.AsyncClient`): the worker's."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from milepost.client import exchange, polling, routes
from milepost.client.routes import ParentClaim


class AsyncMilepostClient:
    """The same client over `httpx.AsyncClient` (the worker's). Use as `async with`."""

    def __init__(
        self,
        server_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.servers, headers = exchange.connection(server_url, token)
        self.headers = headers
        """What every request carries (the bearer token): other channels to the server use it."""
        self.timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    @property
    def base_url(self) -> str:
        """The server asked now (one of `servers`)."""
        return self.servers.current

    def server_failed(self, url: str) -> None:
        """`url` did not answer (a request, or another channel to it): ask the next server
        from now on (`exchange.Servers`)."""
        if self.servers.failed(url):
            self._http.base_url = httpx.URL(self.base_url)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMilepostClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _do(self, call: routes.Call) -> Any:
        url = self.base_url
        try:
            response = await self._http.request(
                call.method,
                call.path,
                json=call.json,
                params=call.params or None,
                timeout=exchange.timeout(self._http.timeout, call),
            )
        except httpx.HTTPError as exc:
            self.server_failed(url)
            raise exchange.unreachable(call, url, exc) from exc
        return exchange.reply(call, response)

    async def health(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.Call("GET", "/health"))
        return result

    async def register(self, content: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.register(content))
        return result

    async def catalog(self, path: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._do(routes.catalog_list(path))
        return result

    async def resource(self, path: str, version: int | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.resource(path, version))
        return result

    async def execute(
        self,
        path: str,
        workload: dict[str, Any] | None = None,
        version: int | None = None,
        *,
        parent_execution_id: int | str | None = None,
        claim: ParentClaim | None = None,
    ) -> str:
        call = routes.execute(path, workload, version, parent_execution_id, claim)
        result: str = await self._do(call)
        return result

    async def executions(
        self, status: str | None = None, path: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._do(
            routes.executions(status, path, limit, offset)
        )
        return result

    async def status(
        self,
        execution_id: int | str,
        *,
        wait: float | None = None,
        claim: ParentClaim | None = None,
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.status(execution_id, wait, claim))
        return result

    async def execution(
        self,
        execution_id: int | str,
        events_limit: int | None = None,
        events_after: int | None = None,
    ) -> dict[str, Any]:
        call = routes.execution(execution_id, events_limit, events_after)
        result: dict[str, Any] = await self._do(call)
        return result

    async def events(self, execution_id: int | str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        after: int | None = None
        while True:
            body = await self.execution(execution_id, polling.EVENTS_PAGE, after)
            events.extend(polling.events_page(body))
            if (after := polling.next_after(body)) is None:
                return events

    async def cancel(
        self, execution_id: int | str, *, claim: ParentClaim | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.cancel(execution_id, claim))
        return result

    async def wait(
        self,
        execution_id: int | str,
        timeout: float | None = None,
        *,
        claim: ParentClaim | None = None,
    ) -> dict[str, Any]:
        plan = polling.WaitPlan(timeout)
        while True:
            status = await self.status(execution_id, wait=plan.ask(), claim=claim)
            if status.get("status") in polling.TERMINAL_STATUSES:
                return status
            if (pause := plan.pause()) is None:
                raise polling.wait_timeout(execution_id, status, timeout)
            if pause > 0:
                await asyncio.sleep(pause)

    async def approvals(
        self,
        *,
        status: str | None = None,
        execution_id: int | str | None = None,
        approver: str | None = None,
        risk: str | None = None,
        limit: int = 100,
        after: int | str | None = None,
    ) -> dict[str, Any]:
        """One page of approvals, by id: `{items, limit, next}`; pass `next` as `after`
        for the following page (None: this one is the last)."""
        result: dict[str, Any] = await self._do(
            routes.approvals(status, execution_id, approver, risk, limit, after)
        )
        return result

    async def approval(self, approval_id: int | str) -> dict[str, Any]:
        """One approval with what the step will do and the votes."""
        result: dict[str, Any] = await self._do(routes.approval(approval_id))
        return result

    async def decide_approval(
        self, approval_id: int | str, decision: str, reason: str | None = None
    ) -> dict[str, Any]:
        """Vote `approve` or `deny` as the token's user; the approval as the vote leaves it."""
        result: dict[str, Any] = await self._do(
            routes.decide_approval(approval_id, decision, reason)
        )
        return result

    async def command(self, event_id: int | str) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.command(event_id))
        return result

    async def claim(
        self, event_id: int | str, worker_id: str, lease_seconds: float | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.claim(event_id, worker_id, lease_seconds))
        return result

    async def claim_next(
        self,
        worker_id: str,
        limit: int = 1,
        lease_seconds: float | None = None,
        pool: str | None = None,
    ) -> list[dict[str, Any]]:
        call = routes.claim_next(worker_id, limit, lease_seconds, pool)
        result: list[dict[str, Any]] = await self._do(call)
        return result

    async def heartbeat(
        self, event_id: int | str, worker_id: str, epoch: int, lease_seconds: float | None = None
    ) -> dict[str, Any]:
        call = routes.heartbeat(event_id, worker_id, epoch, lease_seconds)
        result: dict[str, Any] = await self._do(call)
        return result

    async def release(self, event_id: int | str, worker_id: str, epoch: int) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.release(event_id, worker_id, epoch))
        return result

    async def machine_id(
        self,
        worker_id: str,
        machine_id: int | None = None,
        *,
        pool: str | None = None,
        worker: dict[str, Any] | None = None,
        release: bool = False,
    ) -> dict[str, Any]:
        """Lease a machine id for this worker's event ids, or renew `machine_id`:
        `{machine_id, expires_at, renewed}` (a new id when the one held was lost). `pool`:
        the pool the worker serves (DSL 10.6); `worker`: its check-in in the workers
        registry (name, host, pid, version, ttl); `release`: a clean stop, the id given
        back and the worker out of the registry."""
        result: dict[str, Any] = await self._do(
            routes.machine_id(worker_id, machine_id, pool, worker, release)
        )
        return result

    async def post_events(
        self, events: list[dict[str, Any]], claim: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.post_events(events, claim))
        return result

    async def credential(self, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self._do(routes.credential(name))
        return result

    async def put_credential(self, name: str, type_: str, data: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self._do(routes.put_credential(name, type_, data))
        return result
