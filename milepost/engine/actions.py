"""An operator's actions on runs, for every transport (issue 12): retry a step, skip it
with a result, restart a FAILED or CANCELLED run from a step, re-run a run.

Retry and skip are checked against the run's folded state under its lock
(`core.actions`) and processed like a report: what they lead to (the new attempt, the
step's exit and the steps after it) is decided and appended in the same transaction. A
process that does not drive the run (`milepost retry` on a local database while `milepost
run` drives it) appends the action behind the log it read (`append_behind`, through
`engine.behind`) and the driver decides on its next look, as for an approval vote.

Restart and re-run start a new execution of the same playbook version and workload (the
sealed workload opened, then sealed again for the new run), linked to the old one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from milepost.core import actions as acts
from milepost.core import events as ev
from milepost.core import state as st
from milepost.engine import behind
from milepost.engine.orchestrator import Orchestrator
from milepost.playbook import model
from milepost.store import port

if TYPE_CHECKING:
    from milepost.engine.lifecycle import Lifecycle

Build = Callable[[st.ExecutionState, model.Playbook, Mapping[int, int]], list[ev.Event]]
"""(state, playbook, the epochs of its live commands' claims) -> the action's events."""


@dataclass(frozen=True, slots=True)
class Acted:
    """What an action on a run did: its event, and the run and step as it left them."""

    execution_id: int
    step: str
    action: str
    actor: str
    event_id: int
    status: str
    step_status: str | None
    stopped: list[int] = field(default_factory=list)
    """The live attempts (command ids) it stopped."""
    issued: list[dict[str, int]] = field(default_factory=list)
    """The commands of the step its decision issued: `{command_id, index, attempt}`."""

    def wire(self) -> dict[str, Any]:
        """As the API answers it (ids as strings), and the CLI prints it both ways."""
        return {
            "execution_id": str(self.execution_id),
            "step": self.step,
            "action": self.action,
            "actor": self.actor,
            "event_id": str(self.event_id),
            "status": self.status,
            "step_status": self.step_status,
            "stopped": [str(c) for c in self.stopped],
            "issued": [{**i, "command_id": str(i["command_id"])} for i in self.issued],
        }


@dataclass(frozen=True, slots=True)
class Started:
    """The new execution of a restart or a re-run."""

    execution_id: int
    source: int
    origin: acts.Origin

    def wire(self) -> dict[str, Any]:
        fields = self.origin.started
        restart = fields.get("restart") or {}
        return {
            "execution_id": str(self.execution_id),
            "restarted_from": fields.get("restarted_from"),
            "rerun_of": fields.get("rerun_of"),
            "from_step": restart.get("from_step"),
            "reused": restart.get("reused", []),
        }


def epochs(store: port.Store, state: st.ExecutionState) -> dict[int, int]:
    """The epoch of each live command's claim (0 for one nobody claimed)."""
    rows = store.get_commands(sorted(state.commands)) if state.commands else {}
    return {cid: row.epoch for cid, row in rows.items()}


def retry_step(
    step: str, actor: str, now: float, new_id: Callable[[], int], reason: str | None = None
) -> Build:
    return lambda state, pb, held: acts.retry(state, pb, step, actor, now, new_id, held, reason)


def skip_step(
    step: str,
    result: Any,
    actor: str,
    now: float,
    new_id: Callable[[], int],
    reason: str | None = None,
) -> Build:
    return lambda state, pb, held: acts.skip(
        state, pb, step, result, actor, now, new_id, held, reason
    )


def retry(
    service: Lifecycle, execution_id: int, step: str, actor: str, reason: str | None = None
) -> Acted:
    """A new attempt now of the step's failed-and-waiting or live attempts."""
    return _act(
        service,
        execution_id,
        step,
        "retry",
        retry_step(step, actor, service.clock(), service.new_id, reason),
    )


def skip(
    service: Lifecycle,
    execution_id: int,
    step: str,
    result: Any,
    actor: str,
    reason: str | None = None,
) -> Acted:
    """The step completes with `result`; the run goes on from it."""
    return _act(
        service,
        execution_id,
        step,
        "skip",
        skip_step(step, result, actor, service.clock(), service.new_id, reason),
    )


def _act(service: Lifecycle, execution_id: int, step: str, action: str, build: Build) -> Acted:
    service.execution(execution_id)  # ExecutionNotFound before anything else

    def fresh_build() -> list[ev.Event]:
        state = service.fresh(execution_id)
        return build(state, service.orchestrator.playbook_for(state), epochs(service.store, state))

    with service.locks.hold([execution_id]):
        events, outcome = service.settle([execution_id], fresh_build, refresh=False)
        assert outcome is not None  # an action always has its own event
        state = service.orchestrator.state(execution_id, workload=False)
        return _acted(state, step, action, events, outcome.events)


def _acted(
    state: st.ExecutionState,
    step: str,
    action: str,
    events: list[ev.Event],
    committed: list[ev.Event],
) -> Acted:
    *stopped, event = events
    issued = [
        {
            "command_id": int(e.payload["command_id"]),
            "index": int(e.payload["index"]),
            "attempt": int(e.payload["attempt"]),
        }
        for e in committed
        if e.event_type == ev.COMMAND_ISSUED and e.step == step
    ]
    return Acted(
        state.execution_id,
        step,
        action,
        str(event.payload["actor"]),
        event.event_id,
        state.status,
        state.step_status.get(step),
        [int(e.payload["command_id"]) for e in stopped],
        issued,
    )


def append_behind(
    store: port.Store,
    orchestrator: Orchestrator,
    execution_id: int,
    step: str,
    action: str,
    build: Build,
) -> Acted:
    """Append one checked action behind the log as it was read, for the process that drives
    the run to decide on (`engine.behind`); nothing is decided here."""

    def made(state: st.ExecutionState) -> list[ev.Event]:
        return build(state, orchestrator.playbook_for(state), epochs(store, state))

    events = behind.append(store, orchestrator, execution_id, made).events
    return _acted(orchestrator.state(execution_id, workload=False), step, action, events, [])


@dataclass(frozen=True, slots=True)
class Plan:
    """A restart or a re-run before it starts: what the new execution runs, and how it
    comes from the old one. The embedded engine starts it as a run it drives."""

    source: int
    playbook: model.Playbook
    version: int
    workload: dict[str, Any]
    origin: acts.Origin
    actor: str

    def started(self, execution_id: int) -> Started:
        return Started(execution_id, self.source, self.origin)


def plan_restart(service: Lifecycle, execution_id: int, from_step: str | None, actor: str) -> Plan:
    """A new execution of a FAILED or CANCELLED run from `from_step` (`core.actions.restart`),
    the results of the steps before it reused."""
    return _plan(
        service,
        execution_id,
        actor,
        lambda state, log, pb: acts.restart(state, log, pb, from_step, actor),
    )


def plan_rerun(service: Lifecycle, execution_id: int, actor: str) -> Plan:
    """A new execution of the same playbook version and inputs, whatever the old one's status."""
    return _plan(service, execution_id, actor, lambda state, _log, _pb: acts.rerun(state, actor))


def _plan(
    service: Lifecycle,
    execution_id: int,
    actor: str,
    origin: Callable[[st.ExecutionState, list[ev.Event], model.Playbook], acts.Origin],
) -> Plan:
    service.execution(execution_id)  # ExecutionNotFound before anything else
    with service.locks.hold([execution_id]):
        service.fresh(execution_id)  # what other writers appended
        state = service.orchestrator.state(execution_id)  # with the real workload opened
        playbook = service.orchestrator.playbook_for(state)
        made = origin(state, service.events(execution_id), playbook)
        assert state.version is not None  # every run of the catalog has one
        return Plan(execution_id, playbook, state.version, dict(state.workload), made, actor)


def start(service: Lifecycle, plan: Plan) -> Started:
    xid, _ = service.start(
        plan.playbook, plan.version, plan.workload, started_by=plan.actor, origin=plan.origin
    )
    return plan.started(xid)


def restart(service: Lifecycle, execution_id: int, from_step: str | None, actor: str) -> Started:
    return start(service, plan_restart(service, execution_id, from_step, actor))


def rerun(service: Lifecycle, execution_id: int, actor: str) -> Started:
    return start(service, plan_rerun(service, execution_id, actor))


def links(service: Lifecycle, execution_id: int) -> dict[str, Any]:
    """Both ways of a run's restarts: the run it restarts and the runs that restart it."""
    source = service.read(execution_id, lambda state, _: state.restarted_from)
    return {
        "execution_id": str(execution_id),
        "restarted_from": None if source is None else str(source),
        "restarts": [str(x) for x in service.store.restarts_of(execution_id)],
    }
