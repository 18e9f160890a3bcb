"""The engine service's plain reads (`Lifecycle` is one): rows of the projections and the
tables beside the log, read without an execution's lock, and the workers registry's
check-ins. Kept apart from `engine/lifecycle.py`, the calls that fold and decide."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine import approvals, seal, worker_pools, workers
from milepost.engine.errors import command_not_found
from milepost.errors import ExecutionNotFound, MilepostError
from milepost.store import port


class StoreReads:
    """Reads of `store` at `clock()`: a mixin of `Lifecycle`, which supplies both."""

    store: port.Store

    if TYPE_CHECKING:

        @property
        def clock(self) -> Callable[[], float]: ...

    def execution(self, execution_id: int, what: str = "execution") -> port.ExecutionRow:
        """The execution's projection row; ExecutionNotFound (`what` names it: "parent
        execution") when there is none."""
        row = self.store.get_execution(execution_id)
        if row is None:
            raise ExecutionNotFound(f"no {what} {execution_id}", execution_id=str(execution_id))
        return row

    def ended(self, execution_id: int) -> bool:
        """The projection's status (one row, no lock): cheap enough to poll."""
        row = self.store.get_execution(execution_id)
        return row is None or row.status in st.TERMINAL

    def executions(
        self,
        *,
        status: str | None,
        path: str | None,
        limit: int,
        offset: int,
        since: float | None = None,
        before: port.Keyset | None = None,
    ) -> list[port.ExecutionRow]:
        return self.store.list_executions(
            status=status, path=path, limit=limit, offset=offset, since=since, before=before
        )

    def steps_exited(self, execution_ids: Sequence[int]) -> dict[int, int]:
        return self.store.steps_exited(execution_ids)

    def changed_executions(self, after: port.Keyset, limit: int) -> list[port.ExecutionRow]:
        """Rows past `after` by (updated_at, execution_id): new, progressing and ended runs."""
        return self.store.changed_executions(after, limit)

    def playbook_usage(self, path: str | None = None) -> list[port.UsageRow]:
        """Usage summed per playbook path, provider and model."""
        return self.store.playbook_usage(path)

    def logs(
        self,
        execution_id: int,
        *,
        step: str | None = None,
        after: int = 0,
        limit: int = port.LOG_PAGE,
    ) -> list[port.LogRow]:
        """What its attempts printed, past the cursor `after` (`engine.attempt_logs`)."""
        return self.store.attempt_logs(execution_id, step=step, after=after, limit=limit)

    def events(
        self, execution_id: int, after_seq: int = 0, limit: int | None = None
    ) -> list[ev.Event]:
        return self.store.load(execution_id, after_seq=after_seq, limit=limit)

    def command(self, command_id: int) -> port.CommandRow:
        row = self.store.get_command(command_id)
        if row is None:
            raise command_not_found(command_id)
        return row

    def result(self, uri: str) -> bytes:
        """A stored result (`milepost://results/...`), as the result store keeps it."""
        return self.store.get_blob(uri)

    def run_result(self, execution_id: int, result_id: int) -> Any:
        """A result of this run kept in the result store (`milepost://results/<execution_id>/
        <result_id>`: a large report's payload, keyed by its event id), as JSON; None when
        the run has no such entry. The store refuses another run's entry, and a sealed
        workload (the real secrets of a start request) is never one to show."""
        uri = f"{port.BLOB_PREFIX}{execution_id}/{result_id}"
        try:
            data = self.store.get_blob(uri)
        except MilepostError:
            return None
        if seal.is_sealed(data):
            return None
        try:
            return json.loads(data)
        except ValueError:
            return None

    def catalog_entry(self, path: str, version: int | None = None) -> port.CatalogEntry | None:
        return self.store.get_playbook(path, version)

    def catalog_entries(self) -> list[port.CatalogEntry]:
        return self.store.list_playbooks()

    def missing_workers(self, execution_id: int | None = None) -> list[worker_pools.Missing]:
        """The pools with queued commands (of one run, else of all) and no live worker."""
        return worker_pools.missing(self.store, self.clock(), execution_id)

    def check_in(self, who: workers.CheckIn, holder: str, held: int | None) -> tuple[int, bool]:
        """A worker's machine id (`held` renewed while still `holder`'s, else a new one:
        (id, renewed)) and its registry row seen now (`engine.workers`)."""
        return workers.lease_machine_id(self.store, self.clock(), who, holder, held)

    def check_out(self, who: workers.CheckIn, holder: str, held: int | None) -> None:
        """A worker's clean stop: its machine id given back, its registry row removed."""
        workers.check_out(self.store, self.clock(), who, holder, held)

    def workers(
        self, *, pool: str | None = None, status: str | None = None
    ) -> list[workers.RegisteredWorker]:
        """The workers registry (live or lost, with the commands each holds)."""
        return workers.workers(self.store, self.clock(), pool=pool, status_=status)

    def approval(self, approval_id: int) -> port.ApprovalRow:
        return approvals.approval(self.store, approval_id)

    def approvals(
        self,
        *,
        status: str | None = None,
        execution_id: int | None = None,
        approver: str | None = None,
        risk: str | None = None,
        limit: int = 100,
        after: int | None = None,
        decided: bool | None = None,
    ) -> list[port.ApprovalRow]:
        return self.store.list_approvals(
            status=status,
            execution_id=execution_id,
            approver=approver,
            risk=risk,
            limit=limit,
            after=after,
            decided=decided,
        )
