"""Helpers of the API suite: a server with one token per role, playbooks, a fake worker."""

from __future__ import annotations

import contextlib
import socket
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import uvicorn
from fastapi.testclient import TestClient

from milepost.api import auth
from milepost.api.app import create_app
from milepost.api.deps import Services
from milepost.core import events as ev
from milepost.core.work import AttemptResult, WorkItem, report_events
from milepost.credentials import new_key
from milepost.settings import Settings
from tests.shared import wait_for

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\n"


def playbook(path: str, body: str) -> str:
    return (
        f"{HEADER}metadata: {{name: {path.rsplit('/', 1)[-1]}, path: {path}}}\n"
        + textwrap.dedent(body)
    )


HELLO = playbook(
    "tests/hello",
    """
workload: {name: World}
workflow:
  - step: start
    tool: {kind: python, input: {name: "{{ workload.name }}"}, code: "result = {'greeting': 'Hello, ' + name}"}
    next: shout
  - step: shout
    tool: {kind: python, input: {text: "{{ start.greeting }}"}, code: "result = {'loud': text.upper()}"}
""",
)

LOOP = playbook(
    "tests/loop",
    """
workload: {items: [1, 2, 3]}
workflow:
  - step: each
    loop: {in: "{{ workload['items'] }}", iterator: n, spec: {mode: parallel, max_in_flight: 3}}
    tool: {kind: python, input: {n: "{{ n }}"}, code: "result = n * 10"}
    next: total
  - step: total
    tool: {kind: python, input: {rows: "{{ each }}"}, code: "result = sum(rows)"}
""",
)

RETRY = playbook(
    "tests/retry",
    """
workflow:
  - step: flaky
    spec: {retry: {max_attempts: 3, backoff: fixed, delay: 30, retry_on: [error]}}
    tool: {kind: python, code: "result = 1"}
""",
)

GPU = playbook(
    "tests/gpu",
    """
workflow:
  - step: train
    spec: {pool: gpu}
    tool: {kind: python, code: "result = 1"}
""",
)
"""One step on pool `gpu`: queued until a worker of that pool claims it."""

ROLES = auth.ROLES


class FakeClock:
    """The server's clock, moved by the test: what the reconciler's deadlines read."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


class Api:
    """A TestClient with a token per role: `api.post(path, json, role="worker")`."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.tokens = {
            role: auth.create_token(self.store, role, f"test-{role}", time.time()) for role in ROLES
        }

    @property
    def services(self) -> Services:
        services: Services = self.client.app.state.services  # type: ignore[attr-defined]
        return services

    @property
    def store(self) -> Any:
        return self.services.store

    def headers(self, role: str | None) -> dict[str, str]:
        return {} if role is None else {"Authorization": f"Bearer {self.tokens[role]}"}

    def call(
        self, method: str, path: str, role: str | None = "admin", **kw: Any
    ) -> httpx2.Response:
        return self.client.request(method, path, headers=self.headers(role), **kw)

    def get(self, path: str, role: str | None = "admin", **kw: Any) -> httpx2.Response:
        return self.call("GET", path, role, **kw)

    def post(
        self, path: str, json: Any = None, role: str | None = "admin", **kw: Any
    ) -> httpx2.Response:
        return self.call("POST", path, role, json=json, **kw)

    # -- flows -----------------------------------------------------------------------------

    def register(self, text: str = HELLO) -> dict[str, Any]:
        return ok(self.post("/api/catalog/register", {"content": text}))

    def execute(self, text: str = HELLO, **body: Any) -> str:
        entry = self.register(text)
        return str(ok(self.post("/api/execute", {"path": entry["path"], **body}))["execution_id"])

    def claim_next(self, worker: str = "w1", **body: Any) -> list[dict[str, Any]]:
        reply = ok(self.post("/api/commands/claim", {"worker_id": worker, **body}, role="worker"))
        return list(reply["commands"])

    def claim_one(self, worker: str = "w1", **body: Any) -> dict[str, Any]:
        commands = self.claim_next(worker, **body)
        assert len(commands) == 1, commands
        return commands[0]

    def complete(
        self,
        command: dict[str, Any],
        result: Any = None,
        *,
        ok_: bool = True,
        epoch: int | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        events = report_wire(command, result, ok_=ok_, epoch=epoch, error=error)
        return ok(self.post("/api/events/batch", {"events": events}, role="worker"))

    def status(self, xid: str) -> dict[str, Any]:
        return ok(self.get(f"/api/executions/{xid}/status"))

    def event_types(self, xid: str) -> list[str]:
        return [e.event_type for e in self.store.load(int(xid))]


_ids = iter(range(10**15, 10**16))


def work_item(command: dict[str, Any], epoch: int | None = None) -> WorkItem:
    lease = command.get("lease") or {}
    return WorkItem(
        command_id=int(command["command_id"]),
        execution_id=int(command["execution_id"]),
        step=command["step"],
        run=command["run"],
        index=command["index"],
        attempt=command["attempt"],
        idempotency_key=command["idempotency_key"],
        context=command["context"],
        args=command["args"],
        epoch=lease.get("epoch", 0) if epoch is None else epoch,
    )


def report_wire(
    command: dict[str, Any],
    result: Any = None,
    *,
    ok_: bool = True,
    epoch: int | None = None,
    error: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The worker's report of an attempt (`report_events`), as it travels on the wire."""
    outcome = AttemptResult(
        ok=ok_,
        result=result,
        error=None if ok_ else (error or {"kind": "error", "message": "boom"}),
    )
    events = report_events(work_item(command, epoch), outcome, next(_ids), time.time(), "w1")
    return [wire(e) for e in events]


def wire(event: ev.Event) -> dict[str, Any]:
    return {
        "event_id": str(event.event_id),
        "execution_id": str(event.execution_id),
        "event_type": event.event_type,
        "step": event.step,
        "status": event.status,
        "result": {"status": event.status, "context": event.payload},
        "meta": event.meta,
        "worker_id": event.worker_id,
        "created_at": event.created_at,
    }


def ok(response: httpx2.Response) -> dict[str, Any]:
    assert response.status_code == 200, (response.status_code, response.text)
    body: dict[str, Any] = response.json()
    return body


def error(response: httpx2.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return body


def settings_for(db_url: str, **over: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "database_urls": None,
        "secret_key": new_key(),
        "reconcile_interval": 0.0,
        "nats_url": None,
    }
    values.update(over)
    return Settings(**values)


@contextlib.contextmanager
def start_server(db_url: str, clock: Callable[[], float] = time.time, **over: Any) -> Iterator[Api]:
    app = create_app(settings_for(db_url, **over), clock=clock)
    with TestClient(app) as client:
        yield Api(client)


class LiveServer:
    """A server on a loopback port (uvicorn in a thread, the whole HTTP stack) and its
    tokens: `url`, `token(role)`, `services`."""

    def __init__(self, url: str, services: Services) -> None:
        self.url = url
        self.services = services
        self.tokens = {
            role: auth.create_token(services.store, role, f"live-{role}", time.time())
            for role in ROLES
        }

    def headers(self, role: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def post(self, path: str, body: Any = None, role: str = "admin") -> dict[str, Any]:
        """POST over HTTP as `role`; the reply's body, which must be a success."""
        reply = httpx2.post(f"{self.url}{path}", json=body, headers=self.headers(role), timeout=10)
        return ok(reply)

    def execute(self, text: str = HELLO) -> str:
        """A run of `text`, registered then started over HTTP as the admin: its id."""
        path = self.post("/api/catalog/register", {"content": text})["path"]
        return str(self.post("/api/execute", {"path": path})["execution_id"])


@contextlib.contextmanager
def live_server(db_url: str, startup: float = 30.0, **over: Any) -> Iterator[LiveServer]:
    app = create_app(settings_for(db_url, **over))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound before uvicorn starts: no race for a free port
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(
            lambda: server.started or not thread.is_alive(), "the server to start", timeout=startup
        )
        assert server.started, "the server did not start"
        yield LiveServer(f"http://127.0.0.1:{port}", app.state.services)
    finally:
        server.should_exit = True
        thread.join(startup)
        sock.close()
