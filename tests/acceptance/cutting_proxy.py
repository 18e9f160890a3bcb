"""A TCP proxy in front of a `milepost server` that a test can cut: every connection open
through it is closed at once (a proxy's idle timeout, a load balancer's restart), while new
ones still go through. It records the request lines it forwards, so a test can tell a
client that streams from one that polls."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator

_REQUEST = re.compile(rb"(GET|POST|PUT|DELETE|PATCH) (\S+) HTTP/1\.[01]\r\n")


class CuttingProxy:
    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._requests: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def requests(self) -> list[str]:
        """`GET /path?query` of every request forwarded, in order."""
        with self._lock:
            return list(self._requests)

    def cut(self) -> int:
        """Close every open connection (both sides); how many were cut."""
        with self._lock:
            socks, self._open = self._open, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        return len(socks) // 2

    def close(self) -> None:
        self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self._target)
            with self._lock:
                self._open += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        pending = b""
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if upstream:  # the request lines, even one split across two reads
                    pending, end = pending + data, 0
                    for found in _REQUEST.finditer(pending):
                        with self._lock:
                            self._requests.append(f"{found[1].decode()} {found[2].decode()}")
                        end = found.end()
                    pending = pending[end:][-300:]
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def cutting_proxy(target_port: int) -> Iterator[CuttingProxy]:
    proxy = CuttingProxy(target_port)
    try:
        yield proxy
    finally:
        proxy.close()
