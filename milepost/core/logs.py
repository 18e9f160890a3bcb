"""What an attempt printed: its captured streams, capped (head and tail kept, the middle
cut and counted), and their wire form.

Logs are not state: the fold never sees them. A report carries them beside its event
(`AttemptResult.logs`, the wire event's `logs`), the engine stores them in `attempt_log`
(`engine.attempt_logs`). Stdlib only: the python tool's worker processes import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from milepost.records import record

STDOUT = "stdout"
STDERR = "stderr"
TRACEBACK = "traceback"
STREAMS = (STDOUT, STDERR, TRACEBACK)
DEFAULT_CAP = 64 * 1024
"""Bytes kept of one stream of one attempt (`MILEPOST_LOG_CAP_BYTES`)."""
MIN_CAP = 256
SEAM = 256
"""Bytes dropped on each side of a cut (at most a quarter of each half): what a secret
split by the cut would leave of itself."""


@record
class Captured:
    """One stream of one attempt: its text (with a marker where its middle was cut) and
    the bytes cut."""

    stream: str
    text: str
    cut: int = 0


def marker(cut: int) -> str:
    return f"\n[... {cut} bytes cut ...]\n"


class Capped:
    """A text stream kept within `limit` bytes of UTF-8: its first half and its last half,
    and the count of the bytes cut between them. Memory stays bounded whatever is written."""

    def __init__(self, limit: int = DEFAULT_CAP) -> None:
        self.limit = max(int(limit), MIN_CAP)
        self._half = self.limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.cut = 0

    def write(self, text: str) -> None:
        data = text.encode("utf-8", errors="replace")
        room = self._half - len(self._head)  # the tail starts once the head is full
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data
        keep = self.limit - len(self._head)
        if len(self._tail) > 2 * keep:  # trimmed now and then, not on every write
            self.cut += len(self._tail) - keep
            del self._tail[: len(self._tail) - keep]

    def value(self) -> Captured | None:
        """None when nothing was written (no `stream`: the caller names it)."""
        if not self._head and not self._tail:
            return None
        keep = self.limit - len(self._head)
        over = max(len(self._tail) - keep, 0)
        cut = self.cut + over
        if not cut:  # whole: a character split between head and tail joins again
            return Captured("", bytes(self._head + self._tail).decode("utf-8", "replace"))
        # the python tool's worker cuts before the runner redacts: a secret split by the
        # cut would leave pieces no redaction recognises, so the bytes beside the cut go too
        seam = min(SEAM, self._half // 4)
        head_bytes, tail_bytes = self._head[: len(self._head) - seam], self._tail[over + seam :]
        cut += len(self._head) - len(head_bytes) + len(self._tail) - over - len(tail_bytes)
        # the cut may split a character: its pieces are dropped
        head = bytes(head_bytes).decode("utf-8", errors="ignore")
        tail = bytes(tail_bytes).decode("utf-8", errors="ignore")
        return Captured("", head + marker(cut) + tail, cut)


def capped(stream: str, pieces: Iterable[Captured | str], limit: int) -> Captured | None:
    """The pieces of one stream (several tasks of a pipeline, each perhaps cut already)
    as one capped `Captured`; None when they hold no text."""
    texts: list[str] = []
    cut = marks = 0
    for piece in pieces:
        if isinstance(piece, Captured):
            cut += piece.cut
            marks += len(marker(piece.cut)) if piece.cut else 0
            piece = piece.text
        texts.append(piece)
    sink = Capped(limit + marks)  # a piece's own marker does not count: a cut text is not cut again
    for text in texts:
        sink.write(text)
    found = sink.value()
    if found is None:
        return None
    return Captured(stream, found.text, found.cut + cut)


def to_wire(logs: Iterable[Captured]) -> list[dict[str, Any]]:
    return [{"stream": c.stream, "text": c.text, "cut": c.cut} for c in logs]


def from_wire(items: Iterable[Mapping[str, Any]]) -> list[Captured]:
    """Wire entries (checked by the API's schema) as `Captured`."""
    return [Captured(str(i["stream"]), str(i["text"]), int(i.get("cut") or 0)) for i in items]
