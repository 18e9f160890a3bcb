"""The routes the web UI's Approvals, Playbooks and Workers pages read: the decided
approvals (`?decided=`), `POST /api/catalog/validate` (the problems of a text with their
line, step and field, as `milepost validate` prints them; nothing stored) and the pools
`GET /api/workers` reports as having queued commands but no live worker."""

from __future__ import annotations

import pytest

from milepost.errors import PlaybookInvalid
from milepost.playbook import load
from tests.api.support import GPU, HELLO, Api, error, ok
from tests.api.test_approvals import People, gated, pending

BROKEN = HELLO.replace("next: shout", "next: shuot")
"""`next` names no step: one problem, on the line of the start step's `next`."""


@pytest.fixture
def people(api: Api) -> People:
    found = People(api)
    found.add("bob")  # one of `gated`'s approvers
    found.add("dora", "admin")  # starts the runs
    return found


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_decided_lists_the_history_and_false_what_still_waits(api: Api, people: People) -> None:
    denied_run = people.execute(gated("one"), "dora")
    waiting_run = people.execute(gated("two"), "dora")
    denied = pending(api, denied_run)["approval_id"]
    ok(people.decide(denied, "bob", "deny", "over budget"))
    waiting = pending(api, waiting_run)["approval_id"]

    history = ok(api.get("/api/approvals?decided=true", role="viewer"))["items"]
    assert [(a["approval_id"], a["status"]) for a in history] == [(denied, "denied")]
    still = ok(api.get("/api/approvals?decided=false"))["items"]
    assert [(a["approval_id"], a["status"]) for a in still] == [(waiting, "pending")]
    both = ok(api.get("/api/approvals"))["items"]
    assert {a["approval_id"] for a in both} == {denied, waiting}
    body = error(api.get("/api/approvals?decided=maybe"), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["query", "decided"]


def test_validate_answers_each_problem_with_its_line_step_and_field(api: Api) -> None:
    body = error(
        api.post("/api/catalog/validate", {"content": BROKEN}, role="viewer"),
        422,
        "playbook_invalid",
    )
    [problem] = body["problems"]
    assert (problem["line"], problem["step"], problem["field"]) == (
        line_of(BROKEN, "next: shuot"),
        "start",
        "next",
    )
    assert problem["scope"] == "step 'start'"
    with pytest.raises(PlaybookInvalid) as printed:  # what `milepost validate` prints
        load.load_text(BROKEN)
    assert [p["message"] for p in body["problems"]] == printed.value.problems
    assert api.store.list_playbooks() == []  # a check stores nothing


def test_validate_of_a_good_text_is_200_with_its_warnings(api: Api) -> None:
    good = ok(api.post("/api/catalog/validate", {"content": HELLO}))
    assert good == {"valid": True, "steps": 2, "warnings": []}
    odd = HELLO.replace("code: \"result = {'loud'", "bogus: 1, code: \"result = {'loud'")
    warned = ok(api.post("/api/catalog/validate", {"content": odd}))
    [warning] = warned["warnings"]
    assert "bogus" in warning["message"]
    assert (warning["line"], warning["step"]) == (line_of(odd, "bogus"), "shout")
    # --strict: the warning is a problem
    strict = error(
        api.post("/api/catalog/validate", {"content": odd, "strict": True}), 422, "playbook_invalid"
    )
    assert [p["message"] for p in strict["problems"]] == [warning["message"]]
    assert api.store.list_playbooks() == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a: [",
        "- just\n- a list\n",
        "\x00\x01binary",
        "{" * 5000,
        "x: &a [*a]",
        "workflow: 5\n",
        "a: " + "b" * 3_000_000,
    ],
)
def test_validate_of_bad_text_is_4xx_never_5xx(api: Api, text: str) -> None:
    reply = api.post("/api/catalog/validate", {"content": text})
    assert 400 <= reply.status_code < 500, reply.text
    body = reply.json()
    assert body["code"] in ("playbook_invalid", "validation_error", "too_large"), body
    if body["code"] == "playbook_invalid":
        assert body["problems"] and all(p["message"] for p in body["problems"])


def test_validate_wants_a_string_and_a_reader(api: Api) -> None:
    body = error(api.post("/api/catalog/validate", {"content": 5}), 422, "validation_error")
    assert body["errors"][0]["loc"] == ["body", "content"]
    body = error(api.post("/api/catalog/validate", {"text": HELLO}), 422, "validation_error")
    assert {tuple(e["loc"]) for e in body["errors"]} >= {("body", "content")}
    error(api.post("/api/catalog/validate", {"content": HELLO}, role=None), 401, "unauthorized")


def test_workers_names_the_pools_with_queued_commands_and_no_live_worker(api: Api) -> None:
    assert ok(api.get("/api/workers"))["without_worker"] == []
    api.execute(GPU)
    missing = [
        {"pool": "gpu", "commands": 1, "steps": ["train"], "message": "no live worker of pool gpu"}
    ]
    assert ok(api.get("/api/workers", role="viewer"))["without_worker"] == missing
    assert ok(api.get("/api/workers?pool=gpu"))["without_worker"] == missing
    assert ok(api.get("/api/workers?pool=default"))["without_worker"] == []
    ok(api.post("/api/workers/machine-id", {"worker_id": "g1", "pool": "gpu"}, role="worker"))
    listed = ok(api.get("/api/workers"))
    assert listed["without_worker"] == []
    assert [w["name"] for w in listed["items"]] == ["g1"]
