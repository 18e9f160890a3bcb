"""A local HTTP receiver for tests: records every POST and answers as told (webhooks,
the refund API of examples/approval.yaml)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    body: bytes
    headers: dict[str, str]
    """Lower-cased names."""

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers each POST with the next of `statuses` (then 200, with `reply` as JSON);
    "hang" holds the reply until `release` is set."""

    statuses: list[int | str] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    reply: Any = None
    url: str = ""

    def answer(self) -> int | str:
        return self.statuses.pop(0) if self.statuses else 200


@contextlib.contextmanager
def serve() -> Iterator[Receiver]:
    """A receiver on a free loopback port (`url` is its root, no trailing slash)."""
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            state.received.append(Received(self.path, raw, headers))
            status = state.answer()
            if status == "hang":
                state.release.wait(10)
                status = 200
            reply = json.dumps(state.reply).encode() if state.reply is not None else b""
            self.send_response(int(status))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
