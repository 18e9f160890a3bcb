"""What the approval tests of both transports share: a local HTTP API that counts what the
gated steps do to it, and the gated playbooks.

`Upstream` is the outside world an approval protects: every request is recorded with its
headers (`Idempotency-Key`, the playbooks' `X-Operation-Key`), so "the tool never ran" and
"it ran once per key" are checked outside the engine. A path can be held: its request is
recorded, then blocks until released (a worker killed mid-request); and it can be told
what to answer next (a 503 the gated step retries).
"""

from __future__ import annotations

import contextlib
import json
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\n"
HOLD_SECONDS = 60.0
"""The longest a held request waits for its release (a test that forgot it fails, not hangs)."""


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-case."""
    body: Any


class Upstream:
    """A threaded HTTP server on 127.0.0.1 recording every request; answers `{"n": <count of
    this path>}`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._held: dict[str, threading.Event] = {}
        self._answers: dict[str, list[int]] = {}
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                upstream._serve(self)

            def do_POST(self) -> None:
                upstream._serve(self)

            def log_message(self, *args: Any) -> None:  # quiet: pytest shows failures only
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        request = Request(
            handler.command, handler.path, {k.lower(): v for k, v in handler.headers.items()}, body
        )
        with self._lock:
            self._requests.append(request)
            count = sum(1 for r in self._requests if r.path == request.path)
            held = self._held.get(request.path)
        if held is not None:
            held.wait(HOLD_SECONDS)
        with self._lock:  # what to answer is read once released: a test may set it meanwhile
            answers = self._answers.get(request.path)
            status = answers.pop(0) if answers else 200
        reply = json.dumps({"n": count}).encode()
        with contextlib.suppress(OSError):  # the caller was killed while held
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(reply)))
            handler.end_headers()
            handler.wfile.write(reply)

    def requests(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self._requests if r.path == path]

    def count(self, path: str) -> int:
        return len(self.requests(path))

    def hold(self, path: str) -> None:
        """Requests to `path` block (after being recorded) until `release(path)`."""
        with self._lock:
            self._held[path] = threading.Event()

    def answer(self, path: str, *statuses: int) -> None:
        """The next requests to `path` are answered with `statuses`, in order; then 200."""
        with self._lock:
            self._answers[path] = list(statuses)

    def release(self, path: str) -> None:
        with self._lock:
            held = self._held.pop(path, None)
        if held is not None:
            held.set()

    def close(self) -> None:
        with self._lock:
            for held in self._held.values():
                held.set()
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    try:
        yield server
    finally:
        server.close()


# -- playbooks ---------------------------------------------------------------------------------


def playbook(path: str, body: str) -> str:
    return (
        HEADER
        + f"metadata: {{name: {path.rsplit('/', 1)[-1]}, path: {path}}}\n"
        + textwrap.dedent(body)
    )


def pay_tool(url: str, *, amount: str = "{{ workload.amount }}", indent: int = 4) -> str:
    """The gated side effect: POST {url} with the amount and the operation key."""
    pad = " " * indent
    return (
        f'{pad}tool: {{kind: http, method: POST, url: "{url}",\n'
        f'{pad}       headers: {{X-Operation-Key: "{{{{ operation_key }}}}"}},\n'
        f'{pad}       json: {{amount: "{amount}"}}}}\n'
    )


def gated(
    path: str,
    url: str,
    *,
    approvers: str = "[user:alice, user:bob]",
    quorum: int = 1,
    expires_in: str = "1h",
    self_ok: bool = False,
) -> str:
    """One gated step paying `workload.amount` to `url`."""
    return playbook(
        path,
        f"""\
workload: {{amount: 7200}}
workflow:
  - step: start
    tool: {{kind: noop}}
    next: pay
  - step: pay
    spec:
      approval: {{approvers: {approvers}, quorum: {quorum}, expires_in: {expires_in},
                  allow_self_approval: {str(self_ok).lower()}, risk: high}}
{pay_tool(url)}""",
    )


def raced(path: str, url: str, *, what: str) -> str:
    """A gated step beside a branch that sets `ctx.amount` to 9000 after the request:
    `what` is `policy` (the policy reads it: false at dispatch) or `input` (the call reads
    it: it changed since it was approved)."""
    if what == "policy":
        approval = (
            '{approvers: [user:alice], policy: {check: "{{ (ctx.amount | default(100)) '
            '<= 5000 }}", reason: "amount {{ ctx.amount }} exceeds the 5,000 limit"}}'
        )
        tool = pay_tool(url, amount="{{ workload.amount }}")
    else:
        approval = "{approvers: [user:alice]}"
        tool = pay_tool(url, amount="{{ ctx.amount | default(100) }}")
    return playbook(
        path,
        f"""\
workload: {{amount: 100}}
workflow:
  - step: start
    tool: {{kind: noop}}
    next: {{spec: {{mode: inclusive}}, arcs: [{{step: raise_amount}}, {{step: pay}}]}}
  - step: raise_amount
    tool: {{kind: noop}}
    set: {{ctx.amount: 9000}}
  - step: pay
    spec:
      approval: {approval}
{tool}""",
    )


CHANGES = {
    "expiry": "{ctx.noted: true}",
    "policy": "{ctx.frozen: true}",
    "input": "{ctx.amount: 9000}",
}
"""What the `change` branch of `retried` sets, by what it invalidates."""


def retried(path: str, url: str, *, what: str, expires_in: str = "1h", liveness: str = "") -> str:
    """A gated `pay` (POST `{url}/pay`, the amount `ctx.amount`, default 100) retried on a
    503 or a lost worker, its policy `ctx.frozen` not set, beside a branch `change` that
    calls `{url}/change` (hold it to choose when) and then sets what `what` names
    (`CHANGES`): `policy` makes the policy false, `input` changes the call, `expiry` sets
    something neither reads. `liveness`: pay's `spec.liveness` (its lease), if any."""
    lease = f"\n      liveness: {liveness}" if liveness else ""
    return playbook(
        path,
        f"""\
workflow:
  - step: start
    tool: {{kind: noop}}
    next: {{spec: {{mode: inclusive}}, arcs: [{{step: change}}, {{step: pay}}]}}
  - step: change
    tool: {{kind: http, method: POST, url: "{url}/change"}}
    set: {CHANGES[what]}
  - step: pay
    spec:
      retry: {{max_attempts: 3, retry_on: [server_error, lost], delay: 0.5}}{lease}
      approval:
        approvers: [user:alice]
        expires_in: {expires_in}
        policy: {{check: "{{{{ not (ctx.frozen | default(false)) }}}}", reason: "payments are frozen"}}
{pay_tool(url + "/pay", amount="{{ ctx.amount | default(100) }}")}""",
    )


def loop_writing_ctx(path: str, url: str) -> str:
    """A sequential gated loop whose iteration 0 writes `ctx.seen`, which iteration 1's call
    reads: approved once with `ctx.seen` unset, iteration 1 renders a different call."""
    return playbook(
        path,
        f"""\
workflow:
  - step: start
    tool: {{kind: noop}}
    next: pay
  - step: pay
    spec:
      approval: {{approvers: [user:alice]}}
    loop: {{in: [0, 1], iterator: i, spec: {{mode: sequential}}}}
    tool:
      - name: call
        kind: http
        method: POST
        url: "{url}"
        json: {{i: "{{{{ i }}}}", seen: "{{{{ ctx.seen | default('none') }}}}"}}
        set: {{ctx.seen: "{{{{ i }}}}"}}
""",
    )
