"""The engine's pure work per event does not grow with the size of the run: a walk over
what a run or a decision holds, done once an event, makes a run quadratic (naming causes
was: `test_causality`). Counted in lines of milepost's own code run per event, at one size
and at four times it, so a slow machine cannot make it pass or fail."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from milepost.core import events as ev
from tests.shared import MILEPOST_CODE, LinesRun
from tests.unit.sim import Sim, playbook


def _lines(work: Callable[[], Sim]) -> tuple[int, Sim]:
    """Lines of milepost's modules that `work` runs (the test's driver is not counted)."""
    with LinesRun(MILEPOST_CODE) as counted:
        sim = work()
    return counted.lines, sim


def _wide(n: int) -> Sim:
    """One decision issues every iteration of an n-wide loop."""
    return Sim(
        playbook(f"""
        workflow:
          - step: fan
            loop: {{in: "{{{{ range({n}) | list }}}}", iterator: i,
                   spec: {{mode: parallel, max_in_flight: {n}}}}}
            tool: {{kind: noop}}
        """)
    )


def _loop(n: int) -> Sim:
    """An n-iteration loop, 20 in flight, each reported in turn, then the step after it."""
    sim = Sim(
        playbook(f"""
        workflow:
          - step: fan
            loop: {{in: "{{{{ range({n}) | list }}}}", iterator: i,
                   spec: {{mode: parallel, max_in_flight: 20}}}}
            tool: {{kind: noop}}
            next: end
          - step: end
            tool: {{kind: noop}}
        """)
    )
    live = [e for e in sim.log if e.event_type == ev.COMMAND_ISSUED]
    while live:
        issued = live.pop(0)
        cmd = sim.state.commands[int(issued.payload["command_id"])]
        live += [e for e in sim.report(cmd, 1) if e.event_type == ev.COMMAND_ISSUED]
    return sim


def _chain(n: int) -> Sim:
    """n steps one after the other, each reported in turn."""
    steps = "".join(
        f"  - step: s{i}\n    tool: {{kind: noop}}\n"
        + (f"    next: s{i + 1}\n" if i + 1 < n else "")
        for i in range(n)
    )
    sim = Sim(playbook("workflow:\n" + steps))
    for i in range(n):
        sim.complete(f"s{i}", i)
    return sim


@pytest.mark.parametrize(
    ("shape", "n"),
    [(_wide, 500), (_loop, 200), (_chain, 100)],
    ids=["one decision issuing a wide loop", "a loop run to its end", "a chain run to its end"],
)
def test_the_work_an_event_costs_does_not_grow_with_the_run(
    shape: Callable[[int], Sim], n: int
) -> None:
    small_lines, small = _lines(lambda: shape(n))
    large_lines, large = _lines(lambda: shape(4 * n))
    assert large.state.status == small.state.status
    assert len(large.log) > 3.5 * len(small.log)
    per_small, per_large = small_lines / len(small.log), large_lines / len(large.log)
    # linear work keeps the lines an event costs; a walk over the run's events, commands
    # or iterations would make them about four times as many
    assert per_large < 1.3 * per_small, f"{per_small:.0f} -> {per_large:.0f} lines an event"
