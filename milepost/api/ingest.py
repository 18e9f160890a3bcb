"""Events posted by workers: checked, sanitized, fenced, then folded with the decisions.

The whole batch is checked before anything is written (all or nothing), then goes to the
orchestrator in ONE `process` call: the reports and every event decided from them are
appended in one transaction. A report whose epoch is not the command's live epoch (the
lease expired and the command was re-issued, or it was already settled) is kept in the
log with `meta.stale = true`; the fold skips it, so it changes nothing.

Reports of claims this server handed out (`Runtime.handed`) skip the read of their
command rows: the append checks the claims in its transaction and, if one moved, writes
nothing, and the batch takes the careful way (read the rows, mark stale, process again).

After the end of a run its log ends with its terminal event: reports for an ended
execution are accepted but not stored (`Ingested.ignored`: a late worker must not retry),
any other event for it is refused (409 `execution_terminal`). An event naming a step its
execution's playbook does not have, or a command that does not exist, is refused.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from milepost import sanitize
from milepost.api import errors as api_errors
from milepost.api.auth import EVENT_ROLES
from milepost.api.checks import parse_id
from milepost.api.runtime import Runtime
from milepost.api.schemas import EventIn
from milepost.core import events as ev
from milepost.core import state as st
from milepost.core.ids import machine_of, timestamp_of
from milepost.engine.orchestrator import Outcome
from milepost.errors import ExecutionNotFound, MilepostError
from milepost.playbook import model
from milepost.store import port

ENGINE_TYPES = ev.EVENT_TYPES - EVENT_ROLES.keys()
"""Written by the engine itself: a client cannot start, step or end a run by posting them.
Every known type no role may post (`auth.EVENT_ROLES`): the two tables cannot drift."""

REPORT_TYPES = frozenset({ev.COMMAND_COMPLETED, ev.COMMAND_FAILED, ev.CALL_DONE, ev.CALL_ERROR})
"""Reports for a command: they carry `context.command_id` and an epoch, and are fenced."""

Loc = tuple[str | int, ...]

FUTURE_ID_SKEW_S = 10.0
"""How far ahead of the server's clock a client's event id may have been minted (clock
skew): an id from further ahead could be one the engine is about to mint for itself."""


@dataclass(slots=True)
class Ingested:
    events: list[ev.Event]
    stored_ids: set[int] = field(default_factory=set)
    stale_ids: set[int] = field(default_factory=set)
    duplicate_ids: set[int] = field(default_factory=set)
    """Repeats of events the log already held (same execution, type, step and content)."""
    claimed: port.Claimed = field(default_factory=list)
    written: set[int] = field(default_factory=set)
    """Executions this call appended to: the runtime's states of them are the log's head."""
    ignored: dict[int, str] = field(default_factory=dict)
    """Event id -> why it was accepted but not stored (its execution had ended)."""


def convert(items: Sequence[EventIn], runtime: Runtime, store: port.Store,
            batch: bool) -> list[ev.Event]:  # fmt: skip
    """Wire events -> core events; raises one 422 naming every bad field of every event."""
    problems: list[dict[str, Any]] = []
    out: list[ev.Event] = []
    now = runtime.clock()
    own = runtime.machine_id() if any(item.event_id is not None for item in items) else None
    for i, item in enumerate(items):
        loc: Loc = ("body", "events", i) if batch else ("body",)
        context, found = _resolve_context(item, store, loc)
        found += _problems(item, context, loc) + _future_id(item, now, loc)
        found += _engine_id(item, own, loc)
        if found:
            problems.extend(found)
            continue
        out.append(_event(item, context, runtime, now))
    if problems:
        raise api_errors.invalid(problems)
    return out


def _resolve_context(item: EventIn, store: port.Store,
                     loc: Loc) -> tuple[dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
    """The event's context: top level (`context`/`payload`), `result.context`, or the
    result-store entry that `result.reference.uri` names."""
    result = item.result
    if item.context is not None:
        if result is not None and (result.context is not None or result.reference is not None):
            return {}, [{"loc": [*loc, "context"],
                         "msg": "give the context once: top-level `context`/`payload` or "
                                "`result.context`/`result.reference`"}]  # fmt: skip
        return item.context, []
    if result is None:
        return {}, []
    if result.context is not None:
        return result.context, []
    if result.reference is None:
        return {}, []
    uri = result.reference.get("uri")
    where = [*loc, "result", "reference", "uri"]
    if not isinstance(uri, str):
        return {}, [{"loc": where, "msg": "a reference names its result by `uri`"}]
    try:
        value = json.loads(store.get_blob(uri))
    except (MilepostError, ValueError):
        return {}, [{"loc": where, "msg": f"{uri!r} is not in this server's result store"}]
    if not isinstance(value, dict):
        return {}, [{"loc": where, "msg": "the referenced result is not a JSON object"}]
    return value, []


def _problems(item: EventIn, context: dict[str, Any], loc: Loc) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    etype = ev.canonical_type(item.event_type)
    if etype not in ev.EVENT_TYPES:
        found.append({"loc": [*loc, "event_type"], "msg": f"unknown event type {item.event_type!r}"})
    elif etype not in EVENT_ROLES:  # a client type is one some role may post; others: the engine's
        found.append({"loc": [*loc, "event_type"],
                      "msg": f"{etype!r} is written by the engine, not accepted from clients"})  # fmt: skip
    if etype in REPORT_TYPES:
        found.extend(_report_problems(item, context, loc))
    elif context.get("command_id") is not None and _as_id(context["command_id"]) is None:
        found.append({"loc": [*loc, "context", "command_id"],
                      "msg": "an id is an integer or a string of digits"})  # fmt: skip
    return found


def _future_id(item: EventIn, now: float, loc: Loc) -> list[dict[str, Any]]:
    if item.event_id is None:
        return []
    ahead = timestamp_of(item.event_id) - now
    if ahead <= FUTURE_ID_SKEW_S:
        return []
    return [{"loc": [*loc, "event_id"],
             "msg": f"the id was minted {ahead:.0f} s ahead of the server's clock (at most "
                    f"{FUTURE_ID_SKEW_S:g} s): the clock of the client that minted it is most "
                    "likely wrong; set it right (NTP), or leave the id out"}]  # fmt: skip


def _engine_id(item: EventIn, own: int | None, loc: Loc) -> list[dict[str, Any]]:
    """422 for a client id in this server's own id space: the engine does not mint again
    the ids it makes outside a decision (a cancel request, a lease's expiry), so a
    squatted one would make them fail with 409. A 422, not a 409: the id is wrong
    whatever the log holds, like one from the future."""
    if item.event_id is None or own is None or machine_of(item.event_id) != own:
        return []
    return [{"loc": [*loc, "event_id"],
             "msg": f"the id carries machine id {own}, the one this server mints its own "
                    "events with: leave it out, or mint it with a machine id from "
                    "POST /api/workers/machine-id"}]  # fmt: skip


def _report_problems(item: EventIn, context: dict[str, Any],
                     loc: Loc) -> list[dict[str, Any]]:  # fmt: skip
    meta = item.meta or {}
    found: list[dict[str, Any]] = []
    cid = context.get("command_id")
    if cid is None:
        found.append({"loc": [*loc, "context", "command_id"],
                      "msg": "a report names its command: context.command_id"})  # fmt: skip
    elif _as_id(cid) is None:
        found.append({"loc": [*loc, "context", "command_id"],
                      "msg": "an id is an integer or a string of digits"})  # fmt: skip
    epoch = meta.get("epoch", context.get("epoch"))
    if epoch is None:
        found.append({"loc": [*loc, "meta", "epoch"],
                      "msg": "a report carries the epoch of its lease: meta.epoch or "
                             "context.epoch"})  # fmt: skip
    elif isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        where = "meta" if "epoch" in meta else "context"
        found.append({"loc": [*loc, where, "epoch"], "msg": "the epoch is a non-negative integer"})
    return found


def _as_id(value: Any) -> int | None:
    try:
        return parse_id(value)
    except ValueError:
        return None


def _event(item: EventIn, context: dict[str, Any], runtime: Runtime, now: float) -> ev.Event:
    etype = ev.canonical_type(item.event_type)
    # a report's result comes from a worker that has redacted its declared secrets and
    # patterns already: masking keys again would turn `{"next_page_token": ...}` into `***`
    # here and not in embedded mode, one playbook with two results
    payload = (_mask_strings(dict(context)) if etype in REPORT_TYPES
               else sanitize.mask(dict(context)))  # fmt: skip
    meta = sanitize.mask(dict(item.meta or {}))
    if etype in REPORT_TYPES:
        # the fold and the projections read these as integers
        payload["command_id"] = _as_id(payload["command_id"])
        meta["epoch"] = int(meta.get("epoch", payload.get("epoch")))
    status = item.status or (item.result.status if item.result else None)
    return ev.new_event(
        item.event_id or runtime.new_id(), item.execution_id, etype,
        item.created_at if item.created_at is not None else now, step=item.step,
        status=status.upper() if status else ev.default_status(etype), payload=payload,
        meta=meta, parent_event_id=item.parent_event_id, worker_id=item.worker_id,
    )  # fmt: skip


def _mask_strings(value: Any) -> Any:
    """`sanitize.mask_patterns` on every string value, at any depth; keys left as they are."""
    if isinstance(value, str):
        return sanitize.mask_patterns(value)
    if isinstance(value, dict):
        return {k: _mask_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_strings(v) for v in value]
    return value


def ingest(runtime: Runtime, store: port.Store, items: Sequence[EventIn], batch: bool,
           claim: port.ClaimRequest | None = None) -> Ingested:  # fmt: skip
    """Check, fence and process a batch; nothing is written unless every event is valid.
    `claim`: claim the reporting worker's next commands in the same transaction."""
    events = convert(items, runtime, store, batch)
    # the epochs read here must not move before the append
    with runtime.locked({e.execution_id for e in events}):
        _check_executions(runtime, events, batch)
        _check_named_commands(store, events, batch)
        outcome: Outcome | None = None
        fenced = events
        if runtime.handed.vouches(events):
            # reports of claims handed out here: the append checks them in its transaction
            with contextlib.suppress(port.ClaimMoved):
                outcome = runtime.process(events, claim=claim, check_claims=True)
        if outcome is None:
            fenced = _fence(store, events)
            outcome = runtime.process(fenced, claim=claim)
        runtime.handed.forget(events)
    # what went in: the server's fence (epochs) and the orchestrator's (settled commands)
    stored = {e.event_id: e for e in outcome.events}
    result = Ingested(events=[stored.get(e.event_id, e) for e in fenced])
    result.stored_ids = set(stored) & {e.event_id for e in fenced}
    result.stale_ids = {e.event_id for e in result.events
                        if e.meta.get("stale") and e.event_id in stored}  # fmt: skip
    result.claimed = outcome.claimed
    result.written = {e.execution_id for e in outcome.events}
    ended = {state.execution_id: state.status for state in outcome.finished}
    result.ignored = {e.event_id: f"execution {e.execution_id} is "
                      f"{ended.get(e.execution_id, 'ended')}: nothing is stored after its end"
                      for e in outcome.ignored}  # fmt: skip
    # the store refuses another event with a known id (409), so one neither stored nor
    # left out after the run's end is a repeat
    result.duplicate_ids = {e.event_id for e in fenced} - result.stored_ids - set(result.ignored)
    # settling skips a run that has ended, so a cancel left out after the end settles nothing
    cancels = {e.execution_id for e in fenced if e.event_type == ev.EXECUTION_CANCEL_REQUESTED}
    if cancels:
        runtime.settle_cancelled(cancels)
    return result


def _loc(batch: bool, index: int, *field: str) -> list[str | int]:
    return ["body", "events", index, *field] if batch else ["body", *field]


def _check_executions(runtime: Runtime, events: list[ev.Event], batch: bool) -> None:
    """Every execution exists (404), every `step` is one of its playbook (422), and none has
    ended unless the events are reports (stored as nothing, later) or already in its log
    (409 `execution_terminal`). The state is looked up again only for non-reports: a report
    for an ended run is the orchestrator's to leave out, on the state it decides on."""
    positions: dict[int, list[int]] = {}
    for i, event in enumerate(events):
        positions.setdefault(event.execution_id, []).append(i)
    problems: list[dict[str, Any]] = []
    ended: list[tuple[int, str]] = []
    for xid, at in sorted(positions.items()):
        steps = {step for i in at if (step := events[i].step) is not None}
        others = [events[i].event_id for i in at if events[i].event_type not in REPORT_TYPES]
        try:
            status, unknown, new = runtime.read(xid, functools.partial(_look, steps, others),
                                                refresh=bool(others))  # fmt: skip
        except ExecutionNotFound:
            raise api_errors.execution_not_found(xid) from None
        problems += [{"loc": _loc(batch, i, "step"),
                      "msg": f"execution {xid} has no step {events[i].step!r}"}
                     for i in at if events[i].step in unknown]  # fmt: skip
        if status in st.TERMINAL and new:
            ended.append((xid, status))
    if problems:
        raise api_errors.invalid(problems)
    if ended:
        xid, status = ended[0]
        raise api_errors.conflict("execution_terminal", f"execution {xid} is {status}: it "
                                  "takes no more events", execution_id=str(xid), status=status)  # fmt: skip


def _look(steps: set[str], ids: list[int], state: st.ExecutionState,
          playbook: model.Playbook) -> tuple[str, set[str], bool]:  # fmt: skip
    """The status, which of `steps` the playbook lacks, and whether any of `ids` is new."""
    return state.status, steps - set(playbook.steps), any(i not in state.seen for i in ids)


def _check_named_commands(store: port.Store, events: list[ev.Event], batch: bool) -> None:
    """An event that is not a report but names a command (`context.command_id`) names one
    of its own execution (reports are checked by the fence)."""
    named = {i: int(cid) for i, e in enumerate(events) if e.event_type not in REPORT_TYPES
             and (cid := _as_id(e.payload.get("command_id"))) is not None}  # fmt: skip
    if not named:
        return
    rows = store.get_commands(sorted(set(named.values())))
    for i, cid in named.items():
        row = rows.get(cid)
        if row is None:
            raise api_errors.not_found("command_not_found", f"no command {cid}",
                                       command_id=str(cid))  # fmt: skip
        if row.execution_id != events[i].execution_id:
            raise api_errors.invalid([{"loc": _loc(batch, i, "context", "command_id"),
                                       "msg": f"command {cid} belongs to execution "
                                              f"{row.execution_id}, not {events[i].execution_id}"}])  # fmt: skip


def _fence(store: port.Store, events: list[ev.Event]) -> list[ev.Event]:
    """Mark reports that are not from the command's live claim as stale: the lease epoch
    is not the command's current epoch (it expired and the command was re-issued, or was
    released), or the command is queued (no attempt holds it). Reports for commands the
    run no longer waits for are marked by the orchestrator, on the state it decides on."""
    rows = store.get_commands([int(e.payload["command_id"]) for e in events
                               if e.event_type in REPORT_TYPES])  # fmt: skip
    out: list[ev.Event] = []
    for event in events:
        if event.event_type not in REPORT_TYPES:
            out.append(event)
            continue
        cid = int(event.payload["command_id"])
        row = rows.get(cid)
        if row is None:
            raise api_errors.not_found("command_not_found", f"no command {cid}",
                                       command_id=str(cid))  # fmt: skip
        if row.execution_id != event.execution_id:
            raise api_errors.invalid([{"loc": ["context", "command_id"],
                                       "msg": f"command {cid} belongs to execution "
                                              f"{row.execution_id}, not {event.execution_id}"}])  # fmt: skip
        why = _stale_reason(row, int(event.meta["epoch"]))
        if why is None:
            out.append(event)
        else:
            out.append(replace(event, meta={**event.meta, "stale": True, "stale_reason": why}))
    return out


def _stale_reason(row: port.CommandRow, epoch: int) -> str | None:
    if row.epoch != epoch:
        return f"epoch {epoch} is not the live epoch {row.epoch}"
    if row.status == port.COMMAND_QUEUED:
        return "the command is queued: no attempt holds it"
    return None
