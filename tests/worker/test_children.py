"""The HTTP worker's child runner shows the parent command's claim on every request, so a
`worker` token may start, wait for and cancel the child (issue 8, item 8)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from milepost.client import AsyncMilepostClient, ServerRefused
from milepost.core import cancellation
from milepost.tools.base import ToolCall
from milepost.tools.playbook import ChildRun, Parent, PlaybookTool
from milepost.worker.children import ServerChildren
from tests.worker.test_client import URL, Recorder

PARENT = Parent(execution_id="100", command_id=200, epoch=3)
PROOF = {"parent_command_id": "200", "parent_epoch": "3"}


def run(rec: Recorder, timeout: float) -> None:
    async def scenario() -> None:
        async with AsyncMilepostClient(URL, "t", transport=httpx.MockTransport(rec)) as api:
            await ServerChildren(api).run_child(
                "tests/child", {"x": 1}, parent=PARENT, timeout=timeout
            )

    asyncio.run(scenario())


def test_the_child_is_started_and_awaited_with_the_parent_claim() -> None:
    rec = Recorder(
        {
            ("POST", "/api/execute"): {"execution_id": "7", "status": "RUNNING"},
            ("GET", "/api/executions/7/status"): {
                "execution_id": "7",
                "status": "COMPLETED",
                "steps": {},
            },
        }
    )
    run(rec, timeout=5)
    started = json.loads(rec.requests[0].content)
    assert started == {
        "path": "tests/child",
        "workload": {"x": 1},
        "parent_execution_id": "100",
        "parent_command_id": "200",
        "parent_epoch": 3,
    }
    status = rec.requests[1].url.params
    assert {key: status[key] for key in PROOF} == PROOF


def test_a_child_past_its_timeout_is_cancelled_with_the_parent_claim() -> None:
    rec = Recorder(
        {
            ("POST", "/api/execute"): {"execution_id": "7", "status": "RUNNING"},
            ("GET", "/api/executions/7/status"): {"execution_id": "7", "status": "RUNNING"},
            ("POST", "/api/executions/7/cancel"): {"execution_id": "7", "status": "RUNNING"},
        }
    )
    with pytest.raises(TimeoutError):
        run(rec, timeout=0.2)
    cancel = rec.requests[-1]
    assert cancel.url.path == "/api/executions/7/cancel"
    assert dict(cancel.url.params) == PROOF


def test_a_child_whose_wait_is_refused_is_cancelled_and_the_error_raised() -> None:
    refused = httpx.Response(409, json={"code": "claim_refused", "message": "lease lost"})
    rec = Recorder(
        {
            ("POST", "/api/execute"): {"execution_id": "7", "status": "RUNNING"},
            ("GET", "/api/executions/7/status"): refused,
            ("POST", "/api/executions/7/cancel"): {"execution_id": "7", "status": "RUNNING"},
        }
    )
    with pytest.raises(ServerRefused) as raised:
        run(rec, timeout=5)
    assert raised.value.code == "claim_refused"
    cancel = rec.requests[-1]
    assert cancel.url.path == "/api/executions/7/cancel"
    assert dict(cancel.url.params) == PROOF


def test_a_server_that_drops_the_wait_for_a_while_is_waited_out() -> None:
    calls = {"n": 0}

    def status(request: httpx.Request) -> dict[str, object]:
        calls["n"] += 1
        if calls["n"] <= 2:  # killed and restarted meanwhile: the child runs on
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return {"execution_id": "7", "status": "COMPLETED", "steps": {}}

    rec = Recorder(
        {
            ("POST", "/api/execute"): {"execution_id": "7", "status": "RUNNING"},
            ("GET", "/api/executions/7/status"): status,
        }
    )
    run(rec, timeout=30)  # the parent's step was failed for a lost connection
    assert calls["n"] == 3
    assert all(r.url.path != "/api/executions/7/cancel" for r in rec.requests)


def test_a_child_the_server_could_not_be_reached_to_start_is_a_connection_error() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    with pytest.raises(ConnectionError):
        run(Recorder({("POST", "/api/execute"): down}), timeout=5)


def test_the_playbook_tool_fails_a_start_that_could_not_reach_the_server_retryably() -> None:
    class Unreachable:
        async def run_child(
            self, path: str, workload: dict[str, object], *, parent: Parent, timeout: float
        ) -> ChildRun:
            raise ConnectionError("the server could not be reached")

    call = ToolCall("playbook", {"path": "tests/child"}, {}, {}, "key")
    result = asyncio.run(PlaybookTool(Unreachable()).run(call))
    assert result.error is not None
    assert (result.error.kind, result.error.retryable) == ("connection", True)


@pytest.mark.parametrize(
    ("status", "code"), [("CANCELLED", cancellation.CHILD_CANCELLED), ("FAILED", None)]
)
def test_a_child_that_did_not_complete_is_a_playbook_error_coded_by_how_it_ended(
    status: str, code: str | None
) -> None:
    """The code tells the parent's decision a cancelled child (the step exits CANCELLED
    when its own run's cancel was asked) from one that failed on its own."""

    class Ended:
        async def run_child(
            self, path: str, workload: dict[str, object], *, parent: Parent, timeout: float
        ) -> ChildRun:
            return ChildRun("9", status, {"reason": "why"})

    call = ToolCall("playbook", {"path": "tests/child"}, {}, {}, "key")
    result = asyncio.run(PlaybookTool(Ended()).run(call))
    assert result.error is not None
    assert (result.error.kind, result.error.code) == ("playbook", code)
    assert result.error.message == f"child playbook 'tests/child' (9) {status}: why"
    assert result.data == {"execution_id": "9", "status": status}
