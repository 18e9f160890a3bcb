"""What NoETL workers post to the event routes, mapped to the events the engine takes
(DSL 12.3). Every form lands in the same checks, fence and transaction as milepost's own:
this module only says what a NoETL field means.

NoETL's shapes (its server's `EventRequest`/`BatchEventRequest`, its worker's
`ExecutorEvent`): `name` for `event_type`, `node_name` for `step`, `payload` for `context`
(aliases in `schemas_events`); a batch `{execution_id, worker_id, events: [...]}` whose
events name neither; `result_kind: ref` with `result_uri` (the result is in a store the
worker wrote to) or `refs` with `event_ids` (the results are those events'); event types of
NoETL's own (stored as informative: `core.events.informative`); a payload that is not an
object.
"""

from __future__ import annotations

from typing import Any

from milepost.api import errors as api_errors
from milepost.api.schemas import EventBatchIn
from milepost.api.schemas_events import EventFields, EventIn
from milepost.core import events as ev

Loc = tuple[str | int, ...]
Problem = dict[str, Any]

REFERENCE_KINDS = frozenset({"ref", "refs"})


def batch_items(body: EventBatchIn) -> list[EventIn]:
    """The batch's events, each with its execution and worker: its own, else the batch's
    (NoETL's batch names them once, at the top). 422 naming every event that has none, or
    another execution than the batch's."""
    problems: list[Problem] = []
    out: list[EventIn] = []
    for i, item in enumerate(body.events):
        loc = ["body", "events", i, "execution_id"]
        xid = item.execution_id if item.execution_id is not None else body.execution_id
        if xid is None:
            problems.append(
                {
                    "loc": loc,
                    "msg": "an event names its execution: here, or for "
                    "the whole batch in `execution_id`",
                }
            )
            continue
        if body.execution_id is not None and xid != body.execution_id:
            problems.append(
                {
                    "loc": loc,
                    "msg": f"the batch is for execution {body.execution_id}, this event for {xid}",
                }
            )
            continue
        fields = {name: getattr(item, name) for name in EventFields.model_fields}
        fields["worker_id"] = item.worker_id or body.worker_id
        # validated already, field by field: constructing again would check it twice
        out.append(
            EventIn.model_construct(
                item.model_fields_set | {"execution_id"}, execution_id=xid, **fields
            )
        )
    if problems:
        raise api_errors.invalid(problems)
    return out


def known(event_type: str) -> bool:
    """A type the engine folds; any other is a worker's informative event."""
    return ev.canonical_type(event_type) in ev.EVENT_TYPES


def object_payload(item: EventIn) -> tuple[dict[str, Any] | None, Any]:
    """The payload as the engine takes it (an object, or None) and what is left over: a
    payload that is not an object (NoETL's may be a list or a scalar) is no context, and is
    kept in the event's `meta.payload` rather than dropped."""
    value = item.context
    if value is None or isinstance(value, dict):
        return value, None
    return None, value


def reference(item: EventIn, loc: Loc) -> tuple[dict[str, Any] | None, list[Problem]]:
    """The reference object a NoETL result by reference is stored as (the step's result,
    `payload.result`): `{kind: ref, uri}` or `{kind: refs, event_ids}` (ids as digit strings,
    as the API writes ids), None for a result given inline."""
    kind = item.result_kind
    uri, ids = item.result_uri, item.event_ids
    if kind is None and (uri is not None or ids is not None):
        kind = "ref" if ids is None else "refs"  # what it names says which kind it is
    if kind not in REFERENCE_KINDS:
        if uri is not None or ids is not None:
            return None, [
                {
                    "loc": [*loc, "result_kind"],
                    "msg": f"`result_kind: {kind}` carries its result inline: "
                    "`result_uri`/`event_ids` go with `ref`/`refs`",
                }
            ]
        return None, []
    if kind == "ref" and uri is None:
        return None, [
            {
                "loc": [*loc, "result_uri"],
                "msg": "`result_kind: ref` names its result by `result_uri`",
            }
        ]
    if kind == "refs" and ids is None and uri is None:
        return None, [
            {
                "loc": [*loc, "event_ids"],
                "msg": "`result_kind: refs` names its results by `event_ids` (or a `result_uri`)",
            }
        ]
    ref: dict[str, Any] = {"kind": kind}
    if uri is not None:
        ref["uri"] = uri
    if ids is not None:
        ref["event_ids"] = [str(i) for i in ids]
    return ref, []


def with_reference(
    context: dict[str, Any], ref: dict[str, Any] | None, loc: Loc
) -> tuple[dict[str, Any], list[Problem]]:
    """`context` with the reference as its `result`; 422 when it has a result already (one
    result, given once: the reference is never dropped, nor is the result)."""
    if ref is None:
        return context, []
    if context.get("result") is not None:
        return context, [
            {
                "loc": [*loc, "result_kind"],
                "msg": "the payload carries a `result` already: give the result "
                "once, inline or by reference",
            }
        ]
    return {**context, "result": ref}, []
