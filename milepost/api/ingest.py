"""Events posted by workers and clients, from the wire to the engine service.

Every field of every event is checked first (one 422 naming them all), contexts are
resolved (`result.reference` from the result store) and masked, then the batch goes to
the engine (`Lifecycle.report`), which checks it against the runs, fences it and folds it
with the decisions in one transaction (`engine.reporting`). An engine refusal is answered
as the API always did: `EventsInvalid` as 422 with its problems placed in the request.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from milepost import sanitize
from milepost.api import errors as api_errors
from milepost.api import noetl_events
from milepost.api.auth import EVENT_ROLES
from milepost.api.schemas import EventIn
from milepost.core import client_events, logs
from milepost.core import events as ev
from milepost.engine.errors import CommandNotFound, EventsInvalid, ExecutionTerminal
from milepost.engine.fence import REPORT_TYPES
from milepost.engine.id_spaces import FUTURE_ID_SKEW_S
from milepost.engine.lifecycle import ClaimRequest, Lifecycle, Reported
from milepost.errors import ExecutionNotFound, MilepostError
from milepost.ids import as_id, timestamp_of
from milepost.store.port import EventIdConflict

ENGINE_TYPES = ev.EVENT_TYPES - EVENT_ROLES.keys()
"""Written by the engine itself: a client cannot start, step or end a run by posting them.
Every known type no role may post (`auth.EVENT_ROLES`): the two tables cannot drift."""

Loc = tuple[str | int, ...]


def convert(
    items: Sequence[EventIn],
    engine: Lifecycle,
    batch: bool,
    actor: str | None = None,
    owner: str | None = None,
) -> list[ev.Event]:
    """Wire events -> core events; raises one 422 naming every bad field of every event.
    `actor`: the caller's identity, which a cancel request it posts is logged with;
    `owner`: its token (hash), whose leased machine ids its event ids may be minted on."""
    problems: list[dict[str, Any]] = []
    out: list[ev.Event] = []
    now = engine.clock()
    chosen = [item.event_id for item in items if item.event_id is not None]
    refused = engine.client_id_refusals(chosen, owner) if chosen else {}
    for i, item in enumerate(items):
        loc: Loc = ("body", "events", i) if batch else ("body",)
        given, leftover = noetl_events.object_payload(item)
        context, found = _resolve_context(item, given, engine, loc)
        ref, more = noetl_events.reference(item, loc)
        context, most = noetl_events.with_reference(context, ref, loc)
        found += more + most + _problems(item, context, loc)
        found += _future_id(item, now, loc) or _chosen_id(item, refused, loc)
        if found:
            problems.extend(found)
            continue
        out.append(_event(item, context, leftover, engine, now, actor))
    if problems:
        raise api_errors.invalid(problems)
    return out


def _resolve_context(
    item: EventIn, given: dict[str, Any] | None, engine: Lifecycle, loc: Loc
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The event's context: top level (`context`/`payload`, when an object: `given`),
    `result.context`, or the result-store entry that `result.reference.uri` names."""
    result = item.result
    if given is not None:
        if result is not None and (result.context is not None or result.reference is not None):
            return {}, [
                {
                    "loc": [*loc, "context"],
                    "msg": "give the context once: top-level `context`/`payload` or "
                    "`result.context`/`result.reference`",
                }
            ]
        return given, []
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
        value = json.loads(engine.result(uri))
    except (MilepostError, ValueError):
        return {}, [{"loc": where, "msg": f"{uri!r} is not in this server's result store"}]
    if not isinstance(value, dict):
        return {}, [{"loc": where, "msg": "the referenced result is not a JSON object"}]
    return value, []


def _problems(item: EventIn, context: dict[str, Any], loc: Loc) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    etype = ev.canonical_type(item.event_type)
    if not noetl_events.known(etype):
        # a worker's event the engine does not know: stored as informative, never folded,
        # its context as it came (a NoETL `command_id` is not one of the engine's)
        return found
    if etype not in EVENT_ROLES:  # a client type is one some role may post; others: the engine's
        found.append(
            {
                "loc": [*loc, "event_type"],
                "msg": f"{etype!r} is written by the engine, not accepted from clients",
            }
        )
    if etype in REPORT_TYPES:
        found.extend(_report_problems(item, context, loc))
    elif context.get("command_id") is not None and as_id(context["command_id"]) is None:
        found.append(
            {
                "loc": [*loc, "context", "command_id"],
                "msg": "an id is an integer or a string of digits",
            }
        )
    return found


def _future_id(item: EventIn, now: float, loc: Loc) -> list[dict[str, Any]]:
    if item.event_id is None:
        return []
    ahead = timestamp_of(item.event_id) - now
    if ahead <= FUTURE_ID_SKEW_S:
        return []
    return [
        {
            "loc": [*loc, "event_id"],
            "msg": f"the id was minted {ahead:.0f} s ahead of the server's clock (at most "
            f"{FUTURE_ID_SKEW_S:g} s): the clock of the client that minted it is most "
            "likely wrong; set it right (NTP), or leave the id out",
        }
    ]


def _chosen_id(item: EventIn, refused: dict[int, str], loc: Loc) -> list[dict[str, Any]]:
    """422 for a client id another process could mint (`engine.id_spaces`): that append,
    a run start or another worker's report, would fail. A 422, not a 409: the id is wrong
    whatever the log holds, like one from the future."""
    if item.event_id is None or item.event_id not in refused:
        return []
    return [{"loc": [*loc, "event_id"], "msg": refused[item.event_id]}]


def _report_problems(item: EventIn, context: dict[str, Any], loc: Loc) -> list[dict[str, Any]]:
    meta = item.meta or {}
    found: list[dict[str, Any]] = []
    cid = context.get("command_id")
    if cid is None:
        found.append(
            {
                "loc": [*loc, "context", "command_id"],
                "msg": "a report names its command: context.command_id",
            }
        )
    elif as_id(cid) is None:
        found.append(
            {
                "loc": [*loc, "context", "command_id"],
                "msg": "an id is an integer or a string of digits",
            }
        )
    epoch = meta.get("epoch", context.get("epoch"))
    if epoch is None:
        found.append(
            {
                "loc": [*loc, "meta", "epoch"],
                "msg": "a report carries the epoch of its lease: meta.epoch or context.epoch",
            }
        )
    elif isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        where = "meta" if "epoch" in meta else "context"
        found.append({"loc": [*loc, where, "epoch"], "msg": "the epoch is a non-negative integer"})
    return found


def _event(
    item: EventIn,
    context: dict[str, Any],
    leftover: Any,
    engine: Lifecycle,
    now: float,
    actor: str | None,
) -> ev.Event:
    etype = ev.canonical_type(item.event_type)
    # a report's result comes from a worker that has redacted its declared secrets and
    # patterns already: masking keys again would turn `{"next_page_token": ...}` into `***`
    # here and not in embedded mode, one playbook with two results
    payload = (
        _mask_strings(dict(context)) if etype in REPORT_TYPES else sanitize.mask(dict(context))
    )
    meta = sanitize.mask(dict(item.meta or {}))
    if leftover is not None:  # a payload that is no object: no context, kept for people
        meta["payload"] = sanitize.mask(leftover)
    status = item.status or (item.result.status if item.result else None)
    return client_events.posted(
        item.event_id or engine.new_id(),
        item.execution_id,
        etype,
        item.created_at if item.created_at is not None else now,
        step=item.step,
        status=status.upper() if status else None,
        payload=payload,
        meta=meta,
        parent_event_id=item.parent_event_id,
        worker_id=item.worker_id,
        actor=actor,
    )


def _mask_strings(value: Any) -> Any:
    """`sanitize.mask_patterns` on every string value, at any depth; keys left as they are."""
    if isinstance(value, str):
        return sanitize.mask_patterns(value)
    if isinstance(value, dict):
        return {k: _mask_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_strings(v) for v in value]
    return value


def ingest(
    engine: Lifecycle,
    items: Sequence[EventIn],
    batch: bool,
    claim: ClaimRequest | None = None,
    actor: str | None = None,
    owner: str | None = None,
) -> Reported:
    """Convert a batch and report it to the engine; nothing is written unless every event
    is valid. `claim`: claim the reporting worker's next commands in the same transaction;
    `actor`, `owner`: the caller's identity and token (`convert`)."""
    events = convert(items, engine, batch, actor, owner)
    # `convert` keeps the batch's order; masked like a report's result (`_mask_strings`)
    printed = {
        event.event_id: [
            dataclasses.replace(c, text=sanitize.mask_patterns(c.text))
            for c in logs.from_wire(i.model_dump() for i in item.logs)
        ]
        for item, event in zip(items, events, strict=True)
        if item.logs and event.event_type in REPORT_TYPES
    }
    try:
        return engine.report(events, claim, printed)
    except EventsInvalid as exc:
        raise api_errors.invalid(
            [{**p, "loc": wire_loc(batch, p["loc"])} for p in exc.problems]
        ) from None


def wire_loc(batch: bool, loc: list[Any]) -> list[Any]:
    """An engine problem's `loc` ([index of the event, *field]) as the request has it."""
    if not loc or not isinstance(loc[0], int):
        return list(loc)
    return ["body", "events", *loc] if batch else ["body", *loc[1:]]


REJECTIONS: tuple[type[Exception], ...] = (
    api_errors.ApiError,
    EventIdConflict,
    ExecutionNotFound,
    CommandNotFound,
    ExecutionTerminal,
)
"""What refuses a batch: each of its events is counted `rejected`."""
