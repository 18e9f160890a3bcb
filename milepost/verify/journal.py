"""The verify suite's worker: `milepost worker` as it is, whose reports go through a
channel that notes, in a journal file, every event id the server said the log holds
(stored, stored stale, or a repeat of one stored). "No event a worker reported missing
from the log" is checked against these files.

Run as `python -m milepost.verify.journal FILE`; the settings come from the environment,
as for `milepost worker`. A line is written (unbuffered) once the reply arrived: a SIGKILL
loses at most the reply in flight, which then was never acknowledged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from milepost.client import AsyncMilepostClient
from milepost.worker.channel import ChannelClient
from milepost.worker.main import worker_main


class JournalChannel(ChannelClient):
    def __init__(self, http: AsyncMilepostClient, journal: Path) -> None:
        super().__init__(http)
        self._journal = journal.open("a", buffering=1)

    async def post_events(
        self, events: list[dict[str, Any]], claim: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        reply = await super().post_events(events, claim)
        held = [*(reply.get("stored_ids") or ()), *(reply.get("duplicates") or ())]
        if held:
            self._journal.write("".join(f"{event_id}\n" for event_id in held))
        return reply


def read(paths: list[Path]) -> set[int]:
    """Every event id the journals name."""
    ids: set[int] = set()
    for path in paths:
        if path.exists():
            ids.update(int(line) for line in path.read_text().split() if line.strip().isdigit())
    return ids


def main() -> int:
    journal = Path(sys.argv[1])
    return worker_main(channel=lambda http: JournalChannel(http, journal))


if __name__ == "__main__":
    sys.exit(main())
