"""Which events of a run an operator asked for (`milepost events --step --type --tail`,
`GET /api/executions/{id}/events`): one selection for the local database and the server."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from milepost.core import events as ev
from milepost.core.actions import StepNotFound
from milepost.engine.lifecycle import Lifecycle


@dataclass(frozen=True, slots=True)
class EventQuery:
    step: str | None = None
    """Only this step's events."""
    types: tuple[str, ...] = ()
    """Only these event types; a name without a dot is a family (`command`: `command.*`)."""

    def matches(self, event: ev.Event) -> bool:
        return self.admits(event.step, event.event_type)

    def admits(self, step: str | None, event_type: str) -> bool:
        """`matches` on an event's step and type (a follower's event as the API shows it)."""
        if self.step is not None and step != self.step:
            return False
        return not self.types or any(_is(event_type, t) for t in self.types)


def _is(event_type: str, wanted: str) -> bool:
    return event_type == wanted or ("." not in wanted and event_type.startswith(wanted + "."))


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[ev.Event]
    next_after: int | None
    """The seq to continue after (None: the log held no more when it was read)."""
    last_seq: int
    """The last seq of the log read, matched or not: a follower continues after it."""
    status: str = ""
    """The run's status read before its events: when it is terminal and `next_after` is
    None, a follower has seen the whole log."""


def page(
    engine: Lifecycle,
    execution_id: int,
    query: EventQuery,
    *,
    after: int = 0,
    limit: int = 1000,
    tail: int | None = None,
) -> EventPage:
    """The events past seq `after` that match, at most `limit` of them; with `tail`, only
    the last `tail` of those. ExecutionNotFound when there is no such run, StepNotFound
    when its playbook has no step `query.step`."""
    row = engine.execution(execution_id)  # before the events: an end read here is in them
    if query.step is not None and row.version is not None:
        steps = engine.playbook(row.path, row.version).steps
        if query.step not in steps:  # a typo would show an empty log, as if nothing ran
            raise StepNotFound(
                f"execution {execution_id} has no step {query.step!r} (its "
                f"playbook's steps: {', '.join(steps)})",
                execution_id=str(execution_id),
                step=query.step,
            )
    found = _scan(engine, row.execution_id, query, after=after, limit=limit, tail=tail)
    return dataclasses.replace(found, status=row.status)


CHUNK = 1000
"""Events read per query while a filter or `tail` looks through a log: a long log is read
in pages of the store, never whole (a 200,000-event run holds at most this many)."""


def _scan(
    engine: Lifecycle,
    execution_id: int,
    query: EventQuery,
    *,
    after: int,
    limit: int,
    tail: int | None,
) -> EventPage:
    if tail is None and query == EventQuery():
        # every event matches: the page is the query's own LIMIT (one more says "more")
        return select(
            engine.events(execution_id, after_seq=after, limit=limit + 1),
            query,
            limit=limit,
            after=after,
        )
    kept: collections.deque[ev.Event] = collections.deque(maxlen=tail)
    cursor = after
    while True:
        chunk = engine.events(execution_id, after_seq=cursor, limit=CHUNK)
        kept.extend(e for e in chunk if query.matches(e))
        if chunk:
            cursor = chunk[-1].seq
        if len(chunk) < CHUNK or (tail is None and len(kept) > limit):
            break
    if tail is not None:
        return EventPage(list(kept) if tail else [], None, cursor)
    shown = list(kept)[:limit]
    if len(kept) > limit:  # more matched than shown: continue after the last one shown
        return EventPage(shown, shown[-1].seq, shown[-1].seq)
    return EventPage(shown, None, cursor)  # the log read to its end: continue after it


def select(
    log: Sequence[ev.Event],
    query: EventQuery,
    *,
    limit: int,
    tail: int | None = None,
    after: int = 0,
) -> EventPage:
    matched = [e for e in log if query.matches(e)]
    last_seq = log[-1].seq if log else after
    if tail is not None:
        return EventPage(matched[-tail:] if tail else [], None, last_seq)
    shown = matched[:limit]
    more = len(matched) > limit
    return EventPage(shown, shown[-1].seq if more else None, shown[-1].seq if more else last_seq)


def types_of(values: Iterable[str]) -> tuple[str, ...]:
    """`--type a,b --type c` as a tuple of names, blanks dropped."""
    return tuple(t.strip() for v in values for t in v.split(",") if t.strip())
