"""The blocking client of the server (`httpx.Client`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from milepost.client import event_stream, exchange, polling, routes
from milepost.client.routes import ParentClaim


class MilepostClient:
    """A blocking client of the milepost server.

    Args:
        server_url: the server's base URL, or several of one database, comma-separated
            (a server that does not answer: the next one); default `MILEPOST_SERVER_URL`.
        token: a bearer token; default `MILEPOST_TOKEN`.
        timeout: seconds per request.
        transport: an httpx transport replacing the network (tests).
    """

    def __init__(
        self,
        server_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.servers, headers = exchange.connection(server_url, token)
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    @property
    def base_url(self) -> str:
        """The server asked now (one of `servers`)."""
        return self.servers.current

    def server_failed(self, url: str) -> None:
        """`url` did not answer: ask the next server from now on (`exchange.Servers`)."""
        if self.servers.failed(url):
            self._http.base_url = httpx.URL(self.base_url)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MilepostClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _do(self, call: routes.Call) -> Any:
        url = self.base_url
        try:
            response = self._http.request(
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

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._do(routes.Call("GET", "/health"))
        return result

    def register(self, content: str) -> dict[str, Any]:
        """Register a playbook's YAML; returns `{path, version, catalog_id}`."""
        result: dict[str, Any] = self._do(routes.register(content))
        return result

    def catalog(self, path: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._do(routes.catalog_list(path))
        return result

    def resource(self, path: str, version: int | None = None) -> dict[str, Any]:
        """A catalog entry with its `content`."""
        result: dict[str, Any] = self._do(routes.resource(path, version))
        return result

    def execute(
        self,
        path: str,
        workload: dict[str, Any] | None = None,
        version: int | None = None,
        *,
        parent_execution_id: int | str | None = None,
        claim: ParentClaim | None = None,
    ) -> str:
        """Start a run; returns its execution id. `claim`: a worker's proof (a child)."""
        result: str = self._do(routes.execute(path, workload, version, parent_execution_id, claim))
        return result

    def executions(
        self,
        status: str | None = None,
        path: str | None = None,
        limit: int = 100,
        offset: int = 0,
        since: float | None = None,
    ) -> list[dict[str, Any]]:
        """Executions newest first; `since`: started at or after it (epoch seconds)."""
        result: list[dict[str, Any]] = self._do(
            routes.executions(status, path, limit, offset, since)
        )
        return result

    def describe(self, execution_id: int | str) -> dict[str, Any]:
        """The run step by step: attempts, workers, times, input, failure output."""
        result: dict[str, Any] = self._do(routes.describe(execution_id))
        return result

    def event_page(
        self,
        execution_id: int | str,
        *,
        step: str | None = None,
        types: str | None = None,
        after: int = 0,
        limit: int = polling.EVENTS_PAGE,
        tail: int | None = None,
    ) -> dict[str, Any]:
        """Events past seq `after` of this step and these types (comma-separated; `command`
        is `command.*`): `{events, next, last_seq}`; `tail`: only the last ones."""
        result: dict[str, Any] = self._do(
            routes.event_page(
                execution_id, step=step, types=types, after=after, limit=limit, tail=tail
            )
        )
        return result

    def status(
        self,
        execution_id: int | str,
        *,
        wait: float | None = None,
        claim: ParentClaim | None = None,
    ) -> dict[str, Any]:
        """The run's status; with `wait`, held by the server until the run ends or `wait`
        seconds pass (at most 60)."""
        result: dict[str, Any] = self._do(routes.status(execution_id, wait, claim))
        return result

    def execution(
        self,
        execution_id: int | str,
        events_limit: int | None = None,
        events_after: int | None = None,
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._do(
            routes.execution(execution_id, events_limit, events_after)
        )
        return result

    def diagnosis(self, execution_id: int | str) -> dict[str, Any]:
        """Why the run is not moving, or why it ended: `{..., findings: [...]}`."""
        result: dict[str, Any] = self._do(routes.diagnosis(execution_id))
        return result

    def logs(
        self, execution_id: int | str, *, step: str | None = None, after: int = 0, limit: int = 500
    ) -> dict[str, Any]:
        """One page of what the run's attempts printed: `{status, entries, next}` (pass
        `next` as `after` for the page that follows)."""
        result: dict[str, Any] = self._do(routes.logs(execution_id, step, after, limit))
        return result

    def stream_events(self, execution_id: int | str, after: int = 0) -> Iterator[dict[str, Any]]:
        """The run's events past seq `after` as the server stores them (its SSE stream,
        resumed after a dropped connection), until the run ended; `event_stream.NoStream`
        from a server without the stream."""
        return event_stream.follow(self._http, self.base_url, execution_id, after)

    def events(self, execution_id: int | str) -> list[dict[str, Any]]:
        """Every event of a run, in log order (paged)."""
        events: list[dict[str, Any]] = []
        after: int | None = None
        while True:
            body = self.execution(execution_id, polling.EVENTS_PAGE, after)
            events.extend(polling.events_page(body))
            if (after := polling.next_after(body)) is None:
                return events

    def cancel(
        self, execution_id: int | str, *, claim: ParentClaim | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._do(routes.cancel(execution_id, claim))
        return result

    def wait(
        self,
        execution_id: int | str,
        timeout: float | None = None,
        *,
        claim: ParentClaim | None = None,
    ) -> dict[str, Any]:
        """Long-poll the status (`WaitPlan`) until the run ends; returns the status reply.

        Raises:
            WaitTimeout: the run did not end within `timeout` seconds.
        """
        plan = polling.WaitPlan(timeout)
        while True:
            status = self.status(execution_id, wait=plan.ask(), claim=claim)
            if status.get("status") in polling.TERMINAL_STATUSES:
                return status
            if (pause := plan.pause()) is None:
                raise polling.wait_timeout(execution_id, status, timeout)
            if pause > 0:
                time.sleep(pause)

    def workers(self, *, pool: str | None = None, status: str | None = None) -> dict[str, Any]:
        """The workers registry: `{items: [{name, pools, host, pid, status, running, ...}]}`."""
        result: dict[str, Any] = self._do(routes.workers(pool, status))
        return result

    def retry(
        self, execution_id: int | str, step: str, reason: str | None = None
    ) -> dict[str, Any]:
        """A new attempt now of a step that failed and waits, or is lost or stuck."""
        result: dict[str, Any] = self._do(routes.retry(execution_id, step, reason))
        return result

    def skip(
        self, execution_id: int | str, step: str, result: Any, reason: str | None = None
    ) -> dict[str, Any]:
        """Complete a step with `result`; the run goes on from it."""
        acted: dict[str, Any] = self._do(routes.skip(execution_id, step, result, reason))
        return acted

    def restart(self, execution_id: int | str, from_step: str | None = None) -> dict[str, Any]:
        """A new run of a FAILED or CANCELLED one from a step, earlier results reused."""
        result: dict[str, Any] = self._do(routes.restart(execution_id, from_step))
        return result

    def rerun(self, execution_id: int | str) -> dict[str, Any]:
        """A new run with the same playbook version and inputs."""
        result: dict[str, Any] = self._do(routes.rerun(execution_id))
        return result

    def restarts(self, execution_id: int | str) -> dict[str, Any]:
        """`{execution_id, restarted_from, restarts}`: a run's restart links."""
        result: dict[str, Any] = self._do(routes.restarts(execution_id))
        return result

    def approvals(
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
        result: dict[str, Any] = self._do(
            routes.approvals(status, execution_id, approver, risk, limit, after)
        )
        return result

    def approval(self, approval_id: int | str) -> dict[str, Any]:
        """One approval with what the step will do and the votes."""
        result: dict[str, Any] = self._do(routes.approval(approval_id))
        return result

    def decide_approval(
        self, approval_id: int | str, decision: str, reason: str | None = None
    ) -> dict[str, Any]:
        """Vote `approve` or `deny` as the token's user; the approval as the vote leaves it."""
        result: dict[str, Any] = self._do(routes.decide_approval(approval_id, decision, reason))
        return result

    def command(self, event_id: int | str) -> dict[str, Any]:
        result: dict[str, Any] = self._do(routes.command(event_id))
        return result

    def claim(
        self, event_id: int | str, worker_id: str, lease_seconds: float | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._do(routes.claim(event_id, worker_id, lease_seconds))
        return result

    def claim_next(
        self,
        worker_id: str,
        limit: int = 1,
        lease_seconds: float | None = None,
        pool: str | None = None,
    ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._do(
            routes.claim_next(worker_id, limit, lease_seconds, pool)
        )
        return result

    def heartbeat(
        self, event_id: int | str, worker_id: str, epoch: int, lease_seconds: float | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._do(
            routes.heartbeat(event_id, worker_id, epoch, lease_seconds)
        )
        return result

    def release(self, event_id: int | str, worker_id: str, epoch: int) -> dict[str, Any]:
        result: dict[str, Any] = self._do(routes.release(event_id, worker_id, epoch))
        return result

    def post_events(
        self, events: list[dict[str, Any]], claim: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._do(routes.post_events(events, claim))
        return result

    def usage(self, path: str | None = None) -> list[dict[str, Any]]:
        """Usage summed per playbook, provider and model (of `path` only, when given)."""
        result: list[dict[str, Any]] = self._do(routes.usage(path))
        return result

    def credential(self, name: str) -> dict[str, Any] | None:
        """A credential's data (worker and admin roles), None when it is not registered."""
        result: dict[str, Any] | None = self._do(routes.credential(name))
        return result

    def put_credential(self, name: str, type_: str, data: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._do(routes.put_credential(name, type_, data))
        return result

    def credentials(self) -> list[dict[str, Any]]:
        """The credentials' names, types and times (never their data)."""
        result: list[dict[str, Any]] = self._do(routes.credentials())
        return result

    def delete_credential(self, name: str) -> bool:
        """False when there was no such credential."""
        return self._do(routes.delete_credential(name)) is not None
