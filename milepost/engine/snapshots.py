"""Snapshots of a run's fold: when one is due, and its bytes.

A snapshot is a pickle of the whole `ExecutionState` with the fold's version, so that a
rebuild folds only the events after it and a changed fold never reads an old one. Spaced
evenly, a run's snapshots cost the square of its length (a 16,000-iteration loop pickled
its state 16 times, 51 ms each by the end, under the run's lock); spaced by the run's
size, they cost a few times its last one, and a rebuild replays at most a third of the log.
"""

from __future__ import annotations

import logging
import pickle

from milepost.core import state as st

log = logging.getLogger(__name__)

EVERY = 2000
"""Events between snapshots at least; past 4,000, half the events at the last one."""
VERSION = 13
"""2: `ExecutionState.parent_command_id`; 3: `sealed_workload`; 4: `workload_secrets`;
5: `causes`; 6: `run_results`, `compensation`; 7: `Command.pool`; 8: `usage`, `step_usage`;
9: `cancel_requested_at`, `cancel_actor`; 10: `StepRun.retry_errors`, `run_results` of
compensated steps, `traceparent`; 11: `restarted_from`; 12: `teardown`, a compensation's
item a `final_step_state.Work`, `Command.retrying`; 13: `Compensation`, its item and
`Teardown` pickled from `final_step_state` (a pickle names a record's module)."""


def due(events: int, at_last: int, every: int) -> bool:
    """Whether a run of `events` folded events, `at_last` of them at its last snapshot,
    takes another one."""
    return events - at_last >= max(every, at_last // 2)


def dump(state: st.ExecutionState) -> bytes:
    return pickle.dumps((VERSION, state), protocol=pickle.HIGHEST_PROTOCOL)


def load(data: bytes, execution_id: int) -> st.ExecutionState | None:
    """The state a snapshot holds; None for one of another version or unreadable (it is
    only a lost shortcut: the log is folded from its start)."""
    try:
        version, state = pickle.loads(data)
    except Exception:
        log.warning("ignoring unreadable snapshot", extra={"execution_id": execution_id})
        return None
    return state if version == VERSION else None
