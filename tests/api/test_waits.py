"""What a run waits on, named by every operator view (issue 33, item 12): whatever the run
waits on (the retry timer of a task policy's retry or of `spec.retry`, an approval, a
queued command no worker serves, a claimed command, a cancel's grace), the status, the
diagnosis (`milepost doctor`), the describe, the runs list and the graph (the run page)
name it, and the local reads of the same database (`milepost ... --db`) say the same as
the server's, on SQLite and PostgreSQL. The wait's logic: `core/waiting.py`
(tests/unit/test_waiting.py); a real worker's policy retry: tests/acceptance."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as hs

from milepost.cli.reads import LocalRuns
from milepost.core import logs
from milepost.core.work import TaskRetry, retry_note_events
from tests.api.support import Api, ok, playbook, wire, work_item

_ids = iter(range(2 * 10**15, 3 * 10**15))


@dataclass(frozen=True)
class Scenario:
    kind: str
    """The `core.waiting` kind the run ends up waiting on."""
    step: str
    attempts: int
    delay: int
    message: str


NAMES = hs.from_regex(r"s_[a-z0-9_]{0,11}", fullmatch=True)
MESSAGES = hs.from_regex(r"[A-Za-z][A-Za-z0-9 :.']{0,40}", fullmatch=True)
SCENARIOS = hs.builds(
    Scenario,
    hs.sampled_from(["retry", "policy_retry", "approval", "no_worker", "claimed", "cancel_grace"]),
    NAMES,
    hs.integers(2, 6),
    hs.integers(60, 86_400),
    MESSAGES,
)


def _playbook(s: Scenario, n: int) -> str:
    spec = {
        "retry": f"{{retry: {{max_attempts: {s.attempts}, delay: {s.delay}, "
        f"max_delay: {s.delay}, retry_on: [exception]}}}}",
        "approval": "{approval: {approvers: [role:finance], expires_in: 1h}}",
        "no_worker": f"{{pool: nobody{n}}}",
    }.get(s.kind, "{}")
    return playbook(
        f"tests/waits{n}",
        f"""
executor: {{spec: {{cancel_grace: 1h}}}}
workflow:
  - step: {s.step}
    spec: {spec}
    tool: {{kind: python, code: "result = 1"}}
""",
    )


def _drive(api: Api, s: Scenario, n: int) -> str:
    """A run of a one-step playbook brought to wait as `s` says."""
    xid = api.execute(_playbook(s, n))
    if s.kind in ("approval", "no_worker"):
        return xid
    command = api.claim_one("w1", pool="default")
    if s.kind == "retry":
        api.complete(command, ok_=False, error={"kind": "exception", "message": s.message})
    elif s.kind == "policy_retry":  # what a worker reports as its policy retries the task
        note = TaskRetry(
            task=None,
            error={"kind": "exception", "message": s.message},
            attempt=2,
            attempts=s.attempts,
            delay=float(s.delay),
            logs=(logs.Captured(logs.TRACEBACK, f"Traceback ...\n{s.message}\n"),),
        )
        (event,) = retry_note_events(work_item(command), note, next(_ids), time.time(), "w1")
        body = {**wire(event), "logs": logs.to_wire(note.logs)}
        ok(api.post("/api/events/batch", {"events": [body]}, role="worker"))
    elif s.kind == "cancel_grace":
        ok(api.post(f"/api/executions/{xid}/cancel", {}))
    return xid


def _named(s: Scenario, wait: dict[str, Any]) -> None:
    assert wait["kind"] == s.kind and wait["step"] == (None if s.kind == "cancel_grace" else s.step)
    if s.kind in ("retry", "policy_retry"):
        assert (wait["attempt"], wait["attempts"]) == (2, s.attempts)
        assert wait["error"]["message"] == s.message
        due = wait["due_at"]
        assert due is not None and due.endswith("+00:00")


def _views(api: Api, local: LocalRuns, xid: str) -> dict[str, Any]:
    """Each view's answer about the run, from the server and from the database itself."""
    listed = ok(api.get("/api/executions?limit=1000", role="viewer"))["items"]
    graph = ok(api.get(f"/api/executions/{xid}/graph", role="viewer"))
    return {
        "status": api.status(xid),
        "execution": ok(api.get(f"/api/executions/{xid}?events_limit=0", role="viewer")),
        "describe": ok(api.get(f"/api/executions/{xid}/describe", role="viewer")),
        "diagnosis": ok(api.get(f"/api/executions/{xid}/diagnosis", role="viewer")),
        "row": next(r for r in listed if r["execution_id"] == xid),
        "nodes": {n["id"]: n for n in graph["nodes"]},
        "local_status": local.status(int(xid)),
        "local_describe": local.describe(int(xid)),
        "local_row": next(
            r
            for r in local.executions(status=None, path=None, since=None, limit=1000)
            if r["execution_id"] == xid
        ),
    }


FINDING = {
    "retry": "retry_pending",
    "policy_retry": "retry_pending",
    "approval": "awaiting_approval",
    "no_worker": "no_live_worker",
    "claimed": "claimed",
    "cancel_grace": "cancel_pending",
}


def test_every_operator_view_names_what_a_run_waits_on(api: Api, db_url: str) -> None:
    ok(api.post("/api/workers/machine-id", {"worker_id": "w1"}, role="worker"))  # default pool
    local = LocalRuns(db_url)
    runs = iter(range(10**6))
    try:
        check = _checker(api, local, runs)
        check()
    finally:
        local.close()


def _checker(api: Api, local: LocalRuns, runs: Any) -> Callable[[], None]:
    @settings(
        max_examples=12,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # a run per example: shrinking takes minutes
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(SCENARIOS)
    def check(s: Scenario) -> None:
        xid = _drive(api, s, next(runs))
        seen = _views(api, local, xid)
        waits = seen["status"]["waits"]
        (wait,) = [w for w in waits if w["kind"] == s.kind]
        _named(s, wait)
        # the same facts in every read of the server, and in the local reads
        for name in ("execution", "describe", "local_status", "local_describe"):
            assert seen[name]["waits"] == waits, name
        assert seen["row"]["waiting"] == waits[0] == seen["local_row"]["waiting"]
        assert seen["row"]["waiting"]["kind"] == s.kind or s.kind == "cancel_grace"
        if wait["step"] is not None:
            assert seen["nodes"][s.step]["wait"] == wait
        kinds = [f["kind"] for f in seen["diagnosis"]["findings"]]
        assert FINDING[s.kind] in kinds, kinds
        if s.kind in ("retry", "policy_retry"):
            (finding,) = [f for f in seen["diagnosis"]["findings"] if f["kind"] == "retry_pending"]
            assert "retrying in " in finding["message"]
            assert f"attempt 2 of {s.attempts}, after: {s.message}" in finding["message"]
            assert finding["fields"]["not_before_at"] == wait["due_at"]
            assert "claimed" not in kinds  # the worker waits on its timer, not on its tool
        if s.kind == "policy_retry":  # the failed execution's traceback is readable at once
            entries = ok(api.get(f"/api/executions/{xid}/logs", role="viewer"))["entries"]
            assert [(e["stream"], e["text"]) for e in entries] == [
                (logs.TRACEBACK, f"Traceback ...\n{s.message}\n")
            ]
        if s.kind == "cancel_grace":
            ok(api.post(f"/api/executions/{xid}/cancel", {}))  # a repeat changes nothing

    return check
