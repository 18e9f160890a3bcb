"""The orchestrator: the single place that turns decisions into writes.

For each execution it keeps the folded state in memory with the watermark (the `seq`
of the last event folded) and applies only newer events. `process` takes reports from
workers (or nothing, to just re-evaluate), folds them, asks `decide` until it has
nothing more to say, and appends the reports and every decided event in ONE
transaction. Only after that commit are the new commands handed out, so every event
is durable before anything acts on it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from milepost import sanitize
from milepost.core import actions, cancellation, start, teardown
from milepost.core import decide as dc
from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.core.work import WorkItem, work_item
from milepost.engine import snapshots
from milepost.engine.seal import Sealer, WorkloadUnreadable
from milepost.errors import ConcurrencyConflict, ExecutionNotFound, PlaybookNotFound
from milepost.ids import Snowflake
from milepost.playbook import load, model
from milepost.store import port
from milepost.store.port import Store

log = logging.getLogger(__name__)

MAX_DECISIONS_PER_TRIGGER = 100_000
ENGINE_ERROR = "engine_error"
"""The `code` of the error of a run ended because deciding raised."""
OPTIMISTIC_TRIES = 3
"""Shared mode: decisions made on the cached state before the executions are locked."""
LOCKED_TRIES = 10
ID_CONFLICT_TRIES = 5
"""Decisions made again, with fresh ids, when an id the orchestrator chose was taken."""
ENDED_KEPT = 256


@dataclass(slots=True)
class Outcome:
    """What one `process` call produced."""

    issued: list[tuple[int, st.Command]] = field(default_factory=list)
    """Commands issued by this call; those not `claimed` in it are announced to workers."""
    finished: list[st.ExecutionState] = field(default_factory=list)
    wake_at: dict[int, float] = field(default_factory=dict)
    events: list[ev.Event] = field(default_factory=list)
    claimed: port.Claimed = field(default_factory=list)
    """Commands claimed for the worker named by `process(..., claim=...)`."""
    engine_errors: list[int] = field(default_factory=list)
    """Executions whose deciding raised in this call (`kind: engine`): ended FAILED, or
    tearing down before they do."""
    ignored: list[ev.Event] = field(default_factory=list)
    """Incoming events of executions that had already ended: not stored, so that a run's
    log always ends with its terminal event (a late report, a cancel after the end)."""


class Orchestrator:
    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], int] | None = None,
        machine_id: int = 0,
        snapshot_every: int = snapshots.EVERY,
        shared: bool = False,
        secret_key: str | None = None,
    ) -> None:
        self.store = store
        self.sealer = Sealer(store, secret_key)
        """Seals a start's workload out of the log (`engine.seal`); `secret_key` None reads
        MILEPOST_SECRET_KEY."""
        self.shared = shared
        """Other processes write to the same executions (servers on one database)."""
        self.clock = clock
        self.new_id = new_id or Snowflake(machine_id, clock)
        self.snapshot_every = snapshot_every
        self._states: dict[int, st.ExecutionState] = {}
        self._ended: collections.OrderedDict[int, st.ExecutionState] = collections.OrderedDict()
        """The last ended executions' states: their status is asked for right after the end."""
        self._snapshotted: dict[int, int] = {}
        self._playbooks: dict[tuple[str, int | None], model.Playbook] = {}
        self._registered: dict[tuple[str, str], int] = {}

    # -- playbooks -------------------------------------------------------------------------

    def register(self, playbook_text: str, playbook: model.Playbook) -> tuple[str, int]:
        """Store this text in the catalog (a new version only if it changed)."""
        known = self._registered.get((playbook.path, playbook_text))
        if known is not None:  # registering the same text again changes nothing
            return playbook.path, known
        entry = self.store.register_playbook(playbook.path, playbook_text, self.clock())
        self._playbooks[(entry.path, entry.version)] = playbook
        self._registered[(playbook.path, playbook_text)] = entry.version
        return entry.path, entry.version

    def playbook_for(self, state: st.ExecutionState) -> model.Playbook:
        return self.catalog_playbook(state.path, state.version)

    def catalog_playbook(self, path: str, version: int | None) -> model.Playbook:
        """A catalog entry's playbook, parsed once and then cached."""
        key = (path, version)
        pb = self._playbooks.get(key)
        if pb is None:
            entry = self.store.get_playbook(path, version)
            if entry is None:
                raise PlaybookNotFound(
                    f"playbook {path!r} version {version} is not in the catalog", path=path
                )
            pb = load.load_text(entry.content, source=f"catalog:{entry.path}@{entry.version}")
            self._playbooks[key] = pb
        return pb

    # -- executions ------------------------------------------------------------------------

    def start(
        self,
        playbook: model.Playbook,
        version: int,
        workload: dict[str, Any],
        *,
        parent_execution_id: int | None = None,
        execution_id: int | None = None,
        parent_command_id: int | None = None,
        claim: port.ClaimRequest | None = None,
        started_by: str | None = None,
        origin: actions.Origin | None = None,
    ) -> tuple[int, Outcome]:
        """Start an execution of a registered playbook; returns its id and the first work
        (`claim`: claimed for a worker in the start's transaction). `started_by`: the
        identity starting it (a child inherits its parent's), who may not approve it."""
        merged = deep_merge(playbook.workload, workload)
        parent = (
            None
            if parent_execution_id is None
            else (
                self.cached(parent_execution_id) or self.state(parent_execution_id, workload=False)
            )
        )
        self._playbooks.setdefault((playbook.path, version), playbook)
        seals: dict[int, tuple[dict[str, Any], str | None]] = {}
        for tries_left in range(ID_CONFLICT_TRIES, 0, -1):
            xid = execution_id or self.new_id()
            now = self.clock()
            if xid not in seals:  # a retry of the same execution reuses its sealed entry
                seals[xid] = self.sealer.seal(xid, merged, now)
            shown, sealed = seals[xid]
            started = start.started(
                self.new_id(),
                xid,
                now,
                playbook,
                version,
                shown,
                parent_execution_id=parent_execution_id,
                parent=parent,
                parent_command_id=parent_command_id,
                sealed=sealed,
                started_by=started_by,
                origin=origin,
            )
            self._states[xid] = st.ExecutionState(execution_id=xid)
            try:
                reused = origin.events(xid, started.event_id, now, self.new_id) if origin else []
                return xid, self.process([started, *reused], claim=claim)
            except port.EventIdConflict:
                self.forget(xid)
                if tries_left == 1:
                    raise
                log.warning(
                    "an event id of a new execution was taken: new ids", extra={"execution_id": xid}
                )
        raise AssertionError("unreachable")

    def state(self, execution_id: int, *, workload: bool = True) -> st.ExecutionState:
        """The current state, rebuilt from the latest snapshot plus newer events if not cached.

        `workload=False`: the sealed workload is not opened (WorkloadUnreadable without its
        key), for callers that read only the status and the watermark (`milepost cancel`)."""
        state = self.cached(execution_id)
        if state is None:
            state = self._rebuild(execution_id)
            self._states[execution_id] = state
        if workload:
            self._open(state)
        return state

    def _open(self, state: st.ExecutionState) -> None:
        """Give the state the real workload when its start sealed it (`engine.seal`). The
        mark lives on the state, so a rebuilt state is opened again."""
        if state.sealed_workload is None or state.workload_secrets is not None:
            return
        real = self.sealer.open(state.sealed_workload)
        state.workload = real
        state.workload_secrets = tuple(sanitize.sensitive_values(real))

    def cached(self, execution_id: int) -> st.ExecutionState | None:
        """The state in memory, as of this orchestrator's last look at the log (or None)."""
        return self._states.get(execution_id) or self._ended.get(execution_id)

    def fold_logged(self, execution_id: int, logged: Sequence[ev.Event]) -> None:
        """Fold events the store has just committed for this engine (a claim's
        `command.claimed`, in seq order) into the cached state when they come right after
        what it holds: nothing can be in between, so the next call need not read them back
        as another writer's. Otherwise (folded already, or the log moved past the cache)
        the next look at the log folds them. Call holding the execution's lock."""
        state = self._states.get(execution_id)
        if state is not None and logged and state.last_seq == logged[0].seq - 1:
            fl.fold(state, logged)

    def _rebuild(self, execution_id: int) -> st.ExecutionState:
        state: st.ExecutionState | None = None
        snap = self.store.load_snapshot(execution_id)
        if snap is not None:
            state = snapshots.load(snap[1], execution_id)
        events = self.store.load(execution_id, after_seq=state.last_seq if state else 0)
        if state is None and not events:
            raise ExecutionNotFound(f"no execution {execution_id}", execution_id=str(execution_id))
        state = fl.fold(state, events)
        self._snapshotted[execution_id] = state.event_count
        return state

    def forget(self, execution_id: int) -> None:
        """Drop the cached state (it is rebuilt from the log when next asked for)."""
        self._states.pop(execution_id, None)
        self._ended.pop(execution_id, None)
        self._snapshotted.pop(execution_id, None)

    def retire(self, execution_id: int) -> None:
        """An execution ended: keep its state among the last `ENDED_KEPT` ended ones (an
        ended run's state never changes, so it needs no refresh), not among the live ones."""
        state = self._states.pop(execution_id, None)
        self._snapshotted.pop(execution_id, None)
        if state is None or not state.terminal:
            return
        self._ended[execution_id] = state
        while len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)

    def request_cancel(self, execution_id: int) -> Outcome:
        return self.process([cancellation.request(self.new_id(), execution_id, self.clock())])

    # -- the loop --------------------------------------------------------------------------

    def process(
        self,
        reports: Sequence[ev.Event] = (),
        also: Iterable[int] = (),
        *,
        refresh: bool = False,
        claim: port.ClaimRequest | None = None,
        check_claims: bool = False,
    ) -> Outcome:
        """Fold reports, decide, append everything in one transaction, return new work.

        `also` names executions to re-evaluate without a report (a retry timer, a resume);
        `refresh` first folds whatever other writers appended since the watermark; `claim`
        claims queued commands for a worker in the same transaction (`Outcome.claimed`);
        `check_claims` has the store check the reports' claims in that transaction
        (`port.ClaimMoved` comes through: nothing was written).

        With `shared=True` (several servers on one database) decisions are optimistic:
        made on the cached state, appended only if no other writer moved those logs since
        (`expect`), else made again on the fresh log. After a few lost races the
        executions are locked across processes so one writer cannot starve.
        """
        by_exec: dict[int, list[ev.Event]] = {}
        for report in reports:
            by_exec.setdefault(report.execution_id, []).append(report)
        for xid in also:
            by_exec.setdefault(xid, [])
        for tries_left in range(ID_CONFLICT_TRIES, 0, -1):
            try:
                return self._process_any(by_exec, refresh, claim, check_claims)
            except port.EventIdConflict as exc:
                # an id this orchestrator chose was in the log already (a client posted it,
                # or another process minted it): the states were forgotten, decide again
                # with fresh ids. A report's own id is its sender's to fix (409).
                taken = {int(i) for i in exc.fields.get("event_ids", ())}
                if tries_left == 1 or not taken or any(r.event_id in taken for r in reports):
                    raise
                log.warning(
                    "an event id the orchestrator chose was taken: deciding again",
                    extra={"event_ids": sorted(taken)},
                )
        raise AssertionError("unreachable")

    def _process_any(
        self,
        by_exec: dict[int, list[ev.Event]],
        refresh: bool,
        claim: port.ClaimRequest | None,
        check_claims: bool,
    ) -> Outcome:
        if not self.shared:
            return self._process(by_exec, refresh, claim, check_claims, expect=False)
        for _ in range(OPTIMISTIC_TRIES):
            try:
                return self._process(by_exec, False, claim, check_claims, expect=True)
            except port.LogMoved:
                continue  # `_process` dropped the states it had folded into: rebuilt next
        with contextlib.ExitStack() as locks:
            for xid in sorted(by_exec):  # one order everywhere: no deadlock between servers
                locks.enter_context(self.store.lock_execution(xid))
            for _ in range(LOCKED_TRIES):
                try:
                    return self._process(by_exec, True, claim, check_claims, expect=True)
                except port.LogMoved:
                    continue  # an optimistic writer got in first; it cannot keep doing so
        raise ConcurrencyConflict(
            "the log of these executions kept moving",
            execution_ids=[str(x) for x in sorted(by_exec)],
        )

    def _process(
        self,
        by_exec: dict[int, list[ev.Event]],
        refresh: bool,
        claim: port.ClaimRequest | None,
        check_claims: bool,
        *,
        expect: bool,
    ) -> Outcome:
        out = Outcome()
        now = self.clock()
        to_append: list[ev.Event] = []
        watermarks: dict[int, int] = {}
        try:
            for xid, incoming in by_exec.items():
                state = self._states.get(xid) or self._ended.pop(xid, None)
                if state is None:  # rebuilt from the log as it is now: nothing to refresh
                    state = (
                        st.ExecutionState(execution_id=xid)
                        if _starts(incoming)
                        else self._rebuild(xid)
                    )
                elif refresh and state.last_seq:
                    fl.fold(state, self.store.load(xid, after_seq=state.last_seq))
                self._states[xid] = state
                watermarks[xid] = state.last_seq
                if state.terminal:
                    # an ended run's log ends with its end: nothing goes after it
                    out.ignored.extend(e for e in incoming if e.event_id not in state.seen)
                    # a known id goes to the store, which tells a repeat (nothing written)
                    # from another event under that id (EventIdConflict)
                    to_append.extend(e for e in incoming if e.event_id in state.seen)
                    continue
                repeats: list[ev.Event] = []
                reports = fl.fold_reports(state, incoming, repeats)
                to_append.extend(reports)
                to_append.extend(_redacted(state, self._decide(state, now, out, reports)))
                # the store leaves out a repeat of the same event and refuses another event
                # with a known id (EventIdConflict): a repeat is never dropped unchecked
                to_append.extend(repeats)
            stored, out.claimed = self.store.append_and_claim(
                to_append, claim, expect=watermarks if expect else None, check_claims=check_claims
            )
        except Exception:
            for xid in by_exec:
                self.forget(xid)  # the cache may hold events that were never committed
            raise
        self._advance(stored, watermarks, out)
        out.events = stored
        return out

    def _decide(
        self, state: st.ExecutionState, now: float, out: Outcome, reports: Sequence[ev.Event]
    ) -> list[ev.Event]:
        if state.terminal:
            return []
        opened: model.Playbook | None = None  # once the run can be decided on
        try:
            # a catalog entry that no longer loads, or a sealed workload without its key,
            # ends the run like a bug in decide: refusing every report would hang it
            pb = self.playbook_for(state)
            self._open(state)
            opened = pb
            return self._decide_all(state, pb, now, out)
        except (port.StoreError, ConcurrencyConflict):
            raise  # the store's trouble, not the run's: the caller retries the report
        except Exception as exc:
            return self._engine_failure(state, reports, exc, now, out, opened)

    def _decide_all(
        self, state: st.ExecutionState, pb: model.Playbook, now: float, out: Outcome
    ) -> list[ev.Event]:
        settled = dc.settle(state, pb, now, self.new_id, limit=MAX_DECISIONS_PER_TRIGGER)
        if settled.wake_at is not None:
            out.wake_at[state.execution_id] = settled.wake_at
        return settled.events

    def _engine_failure(
        self,
        state: st.ExecutionState,
        reports: Sequence[ev.Event],
        exc: Exception,
        now: float,
        out: Outcome,
        pb: model.Playbook | None,
    ) -> list[ev.Event]:
        """Deciding raised (a bug in decide, a render error that escaped): the reports are
        kept, the run ends FAILED naming the exception, the worker's call succeeds. A run
        that cannot be decided would otherwise stay RUNNING and refuse every report. When
        its playbook loaded and its workload opened (`pb`), its teardown steps run first
        (`core.teardown.after_engine_error`); a run already tearing down ends with the
        status it was given, whatever failed."""
        xid = state.execution_id
        log.error(
            "engine error: execution %s failed while deciding",
            xid,
            exc_info=exc,
            extra={"execution_id": xid, "action": "engine_error"},
        )
        message = f"{type(exc).__name__}: {exc}"
        code = exc.code if isinstance(exc, WorkloadUnreadable) else ENGINE_ERROR
        error = {
            "step": None,
            "task": None,
            "kind": "engine",
            "code": code,
            "message": message,
            "reason": f"engine error: {message}",
        }
        # the decide loop may have folded part of a decision: start again from the log
        # plus this call's reports (as stored: stale marks included)
        fresh = self._rebuild(xid) if state.last_seq else st.ExecutionState(execution_id=xid)
        fl.fold(fresh, reports)
        out.engine_errors.append(xid)
        out.wake_at.pop(xid, None)  # no timer of the decisions that raised stands
        torn = None
        try:
            torn = self._tear_down_after(fresh, pb, error, now, out)
        except (port.StoreError, ConcurrencyConflict):
            raise
        except Exception:
            log.exception(
                "engine error: execution %s cannot tear down",
                xid,
                extra={"execution_id": xid, "action": "engine_error"},
            )
        if torn is not None:
            self._states[xid] = torn[0]
            return torn[1]
        cause = reports[-1].event_id if reports else state.causes.last  # what was decided on
        failed = teardown.failed_at_once(xid, error, cause, self.new_id(), now)
        fl.fold(fresh, [failed])
        self._states[xid] = fresh
        return [failed]

    def _tear_down_after(
        self,
        state: st.ExecutionState,
        pb: model.Playbook | None,
        error: dict[str, Any],
        now: float,
        out: Outcome,
    ) -> tuple[st.ExecutionState, list[ev.Event]] | None:
        """The state and events of a run that still tears down after an engine error: its
        live commands settled and its teardown started, then decided on (only teardown
        moves from then); a run already tearing down ends with the status decided before.
        None when its playbook names no teardown step (or `pb` is None: its playbook or
        workload could not be read, and a run not tearing down yet cannot start)."""
        trial = fl.clone(state)
        if pb is not None:
            self._open(trial)
        rows = self.store.get_commands(sorted(trial.commands)) if trial.commands else {}
        epochs = {cid: row.epoch for cid, row in rows.items()}
        events = teardown.after_engine_error(trial, pb, error, now, self.new_id, epochs)
        if not events:
            return None
        fl.fold(trial, events)
        if trial.terminal or pb is None:
            return trial, events
        started = fl.clone(trial)
        try:
            return trial, events + self._decide_all(trial, pb, now, out)
        except (port.StoreError, ConcurrencyConflict):
            raise
        except Exception:
            log.exception(
                "engine error: execution %s raised again as it started tearing down",
                state.execution_id,
                extra={"execution_id": state.execution_id, "action": "engine_error"},
            )
        # deciding on its teardown raised too: it ends, with the status it was given
        ending = teardown.after_engine_error(started, pb, error, now, self.new_id, {})
        fl.fold(started, ending)
        return started, events + ending

    def _advance(self, stored: list[ev.Event], watermarks: dict[int, int], out: Outcome) -> None:
        """Move watermarks past what was stored; fold anything another writer slipped in."""
        seqs: dict[int, list[int]] = {}
        for event in stored:
            seqs.setdefault(event.execution_id, []).append(event.seq)
        # the claims this call made, numbered after its own events in the same transaction:
        # folded here, so the next call does not read them back as another writer's (those
        # of runs this call does not hold: `Lifecycle.claimed`)
        claims = claims_by_run(out.claimed)
        for xid, logged in claims.items():
            if xid in watermarks:
                seqs.setdefault(xid, []).extend(e.seq for e in logged)
        for xid, before in watermarks.items():
            state = self._states[xid]
            mine = sorted(seqs.get(xid, ()))
            # seqs are distinct: they are before+1 .. before+n exactly when the last is
            if mine and mine[-1] != before + len(mine):
                # another writer appended in between (ours are numbered in one run, after
                # theirs): fold its events and ask to be woken at once, so decide sees them
                # too; claims and releases (the store's) change no decision: no wake
                one_run = mine[-1] - mine[0] == len(mine) - 1
                theirs = self.store.load(
                    xid, after_seq=before, before_seq=mine[0] if one_run else None
                )
                fl.fold(state, theirs)
                state.last_seq = max(state.last_seq, mine[-1])
                ours = {e.event_id for e in stored}.union(e.event_id for e in claims.get(xid, ()))
                if any(
                    e.event_type not in ev.CLAIM_EVENTS and e.event_id not in ours for e in theirs
                ):
                    out.wake_at[xid] = self.clock()
            elif mine:
                state.last_seq = mine[-1]
            if xid in claims:
                fl.fold(state, claims[xid])  # numbered after ours: after whatever `theirs` held
            self._maybe_snapshot(state)
            if state.terminal:
                out.finished.append(state)
        for event in stored:
            if event.event_type == ev.COMMAND_ISSUED:
                cmd = self._states[event.execution_id].commands.get(
                    int(event.payload["command_id"])
                )
                if cmd is not None:
                    out.issued.append((event.execution_id, cmd))

    def work_for(self, execution_id: int, cmd: st.Command, epoch: int = 0) -> WorkItem:
        """The work item of a live command, with the render context as it is now (`epoch`:
        of the claim it runs under)."""
        state = self.state(execution_id)
        return work_item(state, self.playbook_for(state), cmd, epoch)

    def _maybe_snapshot(self, state: st.ExecutionState) -> None:
        done = self._snapshotted.get(state.execution_id, 0)
        if not snapshots.due(state.event_count, done, self.snapshot_every) or state.last_seq == 0:
            return
        # the next one is spaced from here, whether this one is saved or not
        self._snapshotted[state.execution_id] = state.event_count
        if state.sealed_workload is not None:
            # values derived from the real workload are all over the fold (ctx, pending args,
            # results): no snapshot of a sealed run, which only costs a longer rebuild
            return
        try:
            self.store.save_snapshot(state.execution_id, state.last_seq, snapshots.dump(state))
        except Exception:  # a snapshot only shortens rebuilds: the run goes on without it
            log.warning(
                "snapshot of execution %s not saved",
                state.execution_id,
                exc_info=True,
                extra={"execution_id": state.execution_id, "action": "snapshot_failed"},
            )


def claims_by_run(claimed: port.Claimed) -> dict[int, list[ev.Event]]:
    """The `command.claimed` events the store handed back with `claimed`, by execution, in
    seq order."""
    claims: dict[int, list[ev.Event]] = {}
    for _, lease in claimed:
        if lease.event is not None:
            claims.setdefault(lease.event.execution_id, []).append(lease.event)
    for logged in claims.values():
        logged.sort(key=lambda e: e.seq)
    return claims


def _redacted(state: st.ExecutionState, events: list[ev.Event]) -> list[ev.Event]:
    """The decided events as the log keeps them: a run whose workload was sealed renders
    its real values into `set`, arc args and `step.enter`; the store gets `***` for them.
    The state folded the real ones, so this process's later steps still read them."""
    if state.workload_secrets is None or not events:
        return events
    redactor = sanitize.Redactor(state.workload_secrets)
    return [dataclasses.replace(e, payload=redactor.value(e.payload)) for e in events]


def _starts(events: list[ev.Event]) -> bool:
    return bool(events) and events[0].event_type == ev.EXECUTION_STARTED


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key, other values are replaced; `over` wins (DSL 1, workload)."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
