"""The driver lease of each execution an embedded engine drives (table `execution_driver`).

One process drives a run at a time: `milepost run` takes the lease before anything is
written, renews it every third of its ttl and gives it back on a clean exit; `resume`
takes it over from a holder known to be dead, or once its lease expired. A process that
finds its lease taken stops driving that run (`DriverLost`). This is the embedded
transport's concern: a server-driven run has no driver lease.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Callable, Iterable

from milepost.errors import MilepostError
from milepost.store.port import DriverLease, Store

log = logging.getLogger(__name__)


class DriverLost(MilepostError):
    """Another process took over this execution: this one stopped driving it."""

    code = "driver_lost"


class ServerDriven(MilepostError):
    """No embedded process ever drove this execution: a server did."""

    code = "server_driven"


def driver_holder() -> str:
    """Who drives, for a person reading the lease: `host:pid:suffix` (the suffix tells two
    engines of one process apart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def holder_alive(holder: str) -> bool | None:
    """Whether the process `holder` names still exists, when it is of this host: False means
    it cannot renew its lease, True that it may. None for other hosts (and unreadable
    holders): only their lease's renewal or expiry tells. (Containers that share a hostname
    but not a pid namespace would fool it; they do not share one by default.)"""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    return True


class Drivers:
    """The leases one engine holds, and the runs it lost to another process."""

    def __init__(
        self, store: Store, clock: Callable[[], float], ttl: float, on_lost: Callable[[int], None]
    ) -> None:
        if not ttl > 0:  # also NaN: the keeper would spin, or never renew
            raise MilepostError(
                f"the driver lease ttl must be a positive number of seconds, not {ttl}",
                setting="MILEPOST_DRIVER_TTL",
            )
        self.store = store
        self.clock = clock
        self.ttl = ttl
        self.holder = driver_holder()
        self.on_lost = on_lost
        """Called with an execution another process took over."""
        self.driven: dict[int, float] = {}
        """Executions this engine holds the driver lease of -> when that lease expires."""
        self.lost: dict[int, DriverLease | None] = {}
        """Executions another process took over -> its lease: nothing more is done for them."""

    def take(self, xid: int, replace: str | None = None) -> None:
        """Take (or take over from `replace`) the lease; DriverBusy while another holds it."""
        lease = self.store.acquire_driver(xid, self.holder, self.clock(), self.ttl, replace=replace)
        self.driven[xid] = lease.expires_at
        self.lost.pop(xid, None)

    def holds(self, xid: int) -> bool:
        """Whether this engine may still write for `xid`. Near its expiry (the loop stalled,
        the process was stopped) the lease is renewed first, so a process that wakes up
        after another took over does not append on its behalf."""
        if xid in self.lost:
            return False
        until = self.driven.get(xid)
        if until is None or self.clock() < until - self.ttl / 3:
            return True
        return self.renew(xid)

    def renew(self, xid: int) -> bool:
        now = self.clock()
        try:
            held = self.store.renew_driver(xid, self.holder, now, self.ttl)
        except Exception:  # unknown: trust the lease only as long as it lasts
            log.exception("could not renew the driver lease of %s", xid)
            return now < self.driven.get(xid, now)
        if held:
            self.driven[xid] = now + self.ttl
            return True
        self._lose(xid)
        return False

    def _lose(self, xid: int) -> None:
        """Another process drives `xid` now: dispatch, report and decide nothing more for it."""
        try:
            lease = self.store.get_driver(xid)
        except Exception:  # only the message would name the new holder
            lease = None
        log.warning(
            "execution %s taken over by %s: no longer driving it",
            xid,
            lease.holder if lease else "another process",
        )
        self.driven.pop(xid, None)
        self.lost[xid] = lease
        self.on_lost(xid)

    def lost_error(self, xid: int) -> DriverLost:
        lease = self.lost.get(xid)
        holder = lease.holder if lease else "another process"
        return DriverLost(
            f"execution {xid} was taken over by {holder}; this process stopped driving it",
            execution_id=str(xid),
            holder=holder,
        )

    def tend(self, active: set[int]) -> None:
        """Renew the leases of live runs. Those of ended runs are left to lapse, not
        released: a run that ended needs no driver (resume reads its terminal state before
        any lease), and a release would cost every run a transaction (W3: 200 runs)."""
        for xid in list(self.driven):
            if xid in active:
                self.renew(xid)
            else:
                del self.driven[xid]

    def release(self, xids: Iterable[int]) -> None:
        for xid in xids:
            self.driven.pop(xid, None)
            try:
                self.store.release_driver(xid, self.holder, self.clock())
            except Exception:  # it lapses on its own within one ttl
                log.exception("could not release the driver lease of %s", xid)

    def fence(self, xids: Iterable[int]) -> set[int]:
        """Of these executions, those this engine no longer drives."""
        if not self.driven and not self.lost:
            return set()
        return {x for x in set(xids) if not self.holds(x)}
