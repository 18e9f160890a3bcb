"""Which event ids a client may choose: the machine-id spaces nobody else will mint in.

A snowflake names its maker by its machine id (`ids.machine_of`), one leased per live
process (`store.machine_ids`): servers, `milepost run`, CLI commands, and workers through
their server. A client that chooses the ids of the events it posts (a worker's reports, a
NoETL worker, a script) could choose one a server or a worker is about to mint: that
append would fail (409 `event_id_conflict`), a run start or another worker's report. So a
server takes a client's id only when no other process will ever mint it:

- on a machine id the poster's token leased (a worker's own reports), minted no later than
  `FUTURE_ID_SKEW_S` after that lease's end: nobody else may take the id before
  `RETAKE_AFTER_S` after that end (`store.machine_ids.pick_machine_id`), and mints later;
- else minted `CLIENT_ID_AGE_S` or more before the lease of its machine id began (before
  now when nobody holds it): a holder mints from its lease's start on, a later holder from
  a later start. A NoETL worker's ids (another epoch: weeks in the past here) pass.

Every other id is refused (422), by every server alike: the rule reads the table all the
servers and workers lease from. The table is read at most every `READ_EVERY_S`, and again
before an id is refused (a lease taken on another server since); a read that old accepts
nothing the fresh table would not: a row only grows its lease by renewals, a new holder
starts later than the read, and a given-back id stays its holder's for `RETAKE_AFTER_S`.
The rule assumes the clocks of servers and workers agree within `FUTURE_ID_SKEW_S`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable

from milepost.ids import machine_of, timestamp_of
from milepost.store import port

FUTURE_ID_SKEW_S = 10.0
"""How far ahead of the server's clock a client's event id may have been minted (clock
skew): an id from further ahead could be one the engine is about to mint for itself."""
CLIENT_ID_AGE_S = 60.0
"""How long before the lease of its machine id began an id must have been minted for a
client that does not hold that lease to post it."""
READ_EVERY_S = 1.0
"""Seconds a read of the lease table serves before it is read again."""


def refusal(
    event_id: int, owner: str | None, lease: port.MachineLease | None, now: float
) -> str | None:
    """Why a client of token `owner` may not post `event_id` (None: it may), given the
    lease of the id's machine id as read (None: no row)."""
    machine, minted = machine_of(event_id), timestamp_of(event_id)
    if lease is not None and owner is not None and lease.owner == owner:
        if minted <= lease.expires_at + FUTURE_ID_SKEW_S:
            return None
        return (
            f"the id was minted on machine id {machine} after your lease of it ended: "
            "lease a machine id again (POST /api/workers/machine-id) and mint on it"
        )
    began = now if lease is None else (lease.leased_at or -math.inf)
    if minted < began - CLIENT_ID_AGE_S:
        return None
    whose = (
        "nobody leases it now, and the next process to lease it could mint that id"
        if lease is None
        else "it is leased by another process, which mints its own ids on it"
        if lease.expires_at > now
        else "its ids are still those of the process that leased it last"
    )
    return (
        f"the id carries machine id {machine}, not one your token leased: {whose}; leave "
        "the id out, or mint it on a machine id from POST /api/workers/machine-id"
    )


class IdSpaces:
    """The lease table as last read, and the rule (`refusal`) applied to client ids."""

    def __init__(self, store: port.Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock
        self._mutex = threading.Lock()
        self._leases: dict[int, port.MachineLease] = {}
        self._read_at = -math.inf

    def refusals(self, event_ids: Iterable[int], owner: str | None) -> dict[int, str]:
        """event id -> why a client of token `owner` may not post it, for those it may not."""
        ids = list(event_ids)
        if not ids:
            return {}
        now = self.clock()
        leases = self._read(now, fresh=False)
        found = self._judge(ids, owner, leases, now)
        if found:  # a lease taken since the last read (on another server): look again
            found = self._judge(ids, owner, self._read(now, fresh=True), now)
        return found

    @staticmethod
    def _judge(
        ids: list[int], owner: str | None, leases: dict[int, port.MachineLease], now: float
    ) -> dict[int, str]:
        found: dict[int, str] = {}
        for event_id in ids:
            why = refusal(event_id, owner, leases.get(machine_of(event_id)), now)
            if why is not None:
                found[event_id] = why
        return found

    def _read(self, now: float, *, fresh: bool) -> dict[int, port.MachineLease]:
        with self._mutex:
            if fresh or now - self._read_at > READ_EVERY_S or now < self._read_at:
                self._leases = {r.machine_id: r for r in self.store.machine_leases()}
                self._read_at = now
            return self._leases
