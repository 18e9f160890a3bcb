"""Stored histories fold to the meaning they were recorded with.

`tests/histories/*.json` hold event logs of real runs (recorded by
`tests/histories/record.py` on the embedded engine) and the meaning of their fold at
a few cut points. A run stored by an older milepost is folded again by every newer
one, so a change to `fold` that makes an old log mean something else (another status,
a lost result, a command no longer live) must fail here, not in a user's database.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from milepost.core import events as ev
from milepost.core import fold as fl
from milepost.core import state as st
from tests.histories.meaning import event_from_json, meaning
from tests.histories.record import SCENARIOS

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
FILES = sorted(HISTORIES.glob("*.json"))


def _executions(path: Path) -> list[tuple[list[ev.Event], dict[int, Any]]]:
    history = json.loads(path.read_text())
    return [
        ([event_from_json(e) for e in x["events"]], {int(k): m for k, m in x["meanings"].items()})
        for x in history["executions"]
    ]


CASES = [
    pytest.param(events, meanings, id=f"{path.stem}-{i}")
    for path in FILES
    for i, (events, meanings) in enumerate(_executions(path))
]


def test_every_scenario_of_the_recorder_is_stored() -> None:
    """Older recordings may stay beside them, under other names."""
    assert set(SCENARIOS) <= {p.stem for p in FILES}


@pytest.mark.parametrize(("events", "meanings"), CASES)
def test_a_stored_history_folds_to_its_recorded_meaning(
    events: list[ev.Event], meanings: dict[int, Any]
) -> None:
    for cut, recorded in sorted(meanings.items()):
        assert meaning(fl.fold(None, events[:cut])) == recorded, f"after {cut} events"


@pytest.mark.parametrize(("events", "meanings"), CASES)
def test_a_stored_history_folded_in_increments_means_the_same(
    events: list[ev.Event], meanings: dict[int, Any]
) -> None:
    """As the orchestrator folds: one state, each batch of new events into it."""
    state, done = None, 0
    for cut, recorded in sorted(meanings.items()):
        state = fl.fold(state, events[done:cut])
        done = cut
        assert meaning(state) == recorded, f"after {cut} events"


def _loop_retry() -> tuple[list[ev.Event], dict[int, Any]]:
    [(events, meanings)] = _executions(HISTORIES / "loop_retry.json")
    return events, meanings


def test_a_history_whose_result_changed_no_longer_matches() -> None:
    """The comparison sees results: the replay tests above could fail."""
    events, meanings = _loop_retry()
    at = next(i for i, e in enumerate(events) if e.event_type == ev.COMMAND_COMPLETED)
    changed = dataclasses.replace(events[at], payload={**events[at].payload, "result": {"sq": -1}})
    assert meaning(fl.fold(None, [*events[:at], changed])) != meanings[at + 1]
    assert meaning(fl.fold(None, events[: at + 1])) == meanings[at + 1]


def test_a_history_cut_before_its_end_is_still_running_with_its_commands_live() -> None:
    events, meanings = _loop_retry()
    first_issued = next(i for i, e in enumerate(events) if e.event_type == ev.COMMAND_ISSUED)
    live = meanings[first_issued + 1]
    assert live["status"] == st.RUNNING and [c["step"] for c in live["commands"]] == ["start"]
    assert meanings[len(events)]["status"] == st.COMPLETED
