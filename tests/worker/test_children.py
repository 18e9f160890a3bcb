"""The HTTP worker's child runner shows the parent command's claim on every request, so a
`worker` token may start, wait for and cancel the child (issue 8, item 8)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from milepost.client import AsyncMilepostClient, ServerRefused
from milepost.tools.playbook import Parent
from milepost.worker.children import ServerChildren
from tests.worker.test_client import URL, Recorder

PARENT = Parent(execution_id="100", command_id=200, epoch=3)
PROOF = {"parent_command_id": "200", "parent_epoch": "3"}


def run(rec: Recorder, timeout: float) -> None:
    async def scenario() -> None:
        async with AsyncMilepostClient(URL, "t", transport=httpx.MockTransport(rec)) as api:
            await ServerChildren(api).run_child("tests/child", {"x": 1}, parent=PARENT,
                                                timeout=timeout)  # fmt: skip

    asyncio.run(scenario())


def test_the_child_is_started_and_awaited_with_the_parent_claim() -> None:
    rec = Recorder({
        ("POST", "/api/execute"): {"execution_id": "7", "status": "RUNNING"},
        ("GET", "/api/executions/7/status"): {"execution_id": "7", "status": "COMPLETED",
                                              "steps": {}},
    })  # fmt: skip
    run(rec, timeout=5)
    started = json.loads(rec.requests[0].content)
    assert started == {"path": "tests/child", "workload": {"x": 1}, "parent_execution_id": "100",
                       "parent_command_id": "200", "parent_epoch": 3}  # fmt: skip
    status = rec.requests[1].url.params
    assert {key: status[key] for key in PROOF} == PROOF


def test_a_child_past_its_timeout_is_cancelled_with_the_parent_claim() -> None:
    rec = Recorder({
        ("POST", "/api/execute"): {"execution_id": "7", "status": "RUNNING"},
        ("GET", "/api/executions/7/status"): {"execution_id": "7", "status": "RUNNING"},
        ("POST", "/api/executions/7/cancel"): {"execution_id": "7", "status": "RUNNING"},
    })  # fmt: skip
    with pytest.raises(TimeoutError):
        run(rec, timeout=0.2)
    cancel = rec.requests[-1]
    assert cancel.url.path == "/api/executions/7/cancel"
    assert dict(cancel.url.params) == PROOF


def test_a_child_whose_wait_is_refused_is_cancelled_and_the_error_raised() -> None:
    refused = httpx.Response(409, json={"code": "claim_refused", "message": "lease lost"})
    rec = Recorder({
        ("POST", "/api/execute"): {"execution_id": "7", "status": "RUNNING"},
        ("GET", "/api/executions/7/status"): refused,
        ("POST", "/api/executions/7/cancel"): {"execution_id": "7", "status": "RUNNING"},
    })  # fmt: skip
    with pytest.raises(ServerRefused) as raised:
        run(rec, timeout=5)
    assert raised.value.code == "claim_refused"
    cancel = rec.requests[-1]
    assert cancel.url.path == "/api/executions/7/cancel"
    assert dict(cancel.url.params) == PROOF
