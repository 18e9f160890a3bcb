"""The approval routes: list (filters, pages), one approval with its votes, a decision cast
as the token's user, and every refusal with its status and code."""

from __future__ import annotations

import time
from typing import Any

import pytest

from milepost.api import auth
from milepost.core import events as ev
from tests.api.support import Api, error, ok, playbook


def gated(
    name: str = "refund",
    *,
    approvers: str = "[role:finance, user:bob]",
    quorum: int = 2,
    risk: str = "high",
    self_ok: bool = False,
) -> str:
    return playbook(
        f"tests/{name}",
        f"""
workload: {{amount: 7200}}
workflow:
  - step: pay
    spec:
      approval: {{approvers: {approvers}, quorum: {quorum}, expires_in: 1h, risk: {risk},
                  allow_self_approval: {str(self_ok).lower()}}}
    tool: {{kind: python, input: {{amount: "{{{{ workload.amount }}}}"}}, code: "result = amount"}}
""",
    )


class People:
    """Tokens that name a user: `people.post(api, path, body, "alice")`."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.tokens: dict[str, str] = {}

    def add(self, user: str, role: str = "approver", *roles: str) -> None:
        self.tokens[user] = auth.create_token(
            self.api.store, role, f"{user}'s", time.time(), user=user, approver_roles=roles
        )

    def headers(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"}

    def decide(
        self, approval_id: str, user: str, decision: str = "approve", reason: str | None = None
    ) -> Any:
        return self.api.client.post(
            f"/api/approvals/{approval_id}/decision",
            json={"decision": decision, "reason": reason},
            headers=self.headers(user),
        )

    def execute(self, text: str, user: str) -> str:
        entry = self.api.register(text)
        reply = self.api.client.post(
            "/api/execute", json={"path": entry["path"]}, headers=self.headers(user)
        )
        return str(ok(reply)["execution_id"])


@pytest.fixture
def people(api: Api) -> People:
    found = People(api)
    found.add("alice", "approver", "finance")
    found.add("bob")
    found.add("carol")  # an approver, but not one of these approvals'
    found.add("dora", "admin")  # starts runs
    found.add("olga", "operator", "finance")  # in the business role, but no API right to decide
    return found


def pending(api: Api, xid: str) -> dict[str, Any]:
    [item] = ok(api.get(f"/api/approvals?execution_id={xid}"))["items"]
    return dict(item)


def test_a_run_waits_and_two_approvals_release_it(api: Api, people: People) -> None:
    xid = people.execute(gated(), "dora")
    started = next(e for e in api.store.load(int(xid)) if e.event_type == ev.EXECUTION_STARTED)
    assert started.payload["started_by"] == "user:dora"
    item = pending(api, xid)
    assert (item["status"], item["step"], item["risk"], item["quorum"], item["approved"]) == (
        "pending",
        "pay",
        "high",
        2,
        0,
    )
    assert item["approvers"] == ["role:finance", "user:bob"] and item["path"] == "tests/refund"
    assert item["started_by"] == "user:dora" and item["expires_at"] is not None
    assert api.claim_next() == []  # nothing runs before the quorum
    first = ok(people.decide(item["approval_id"], "alice", reason="checked the invoice"))
    assert (first["status"], first["approved"]) == ("pending", 1)
    assert [(v["identity"], v["decision"], v["reason"]) for v in first["votes"]] == [
        ("user:alice", "approve", "checked the invoice")
    ]
    assert first["calls"][0]["input"] and first["digest"] == item["digest"]
    assert api.claim_next() == []
    done = ok(people.decide(item["approval_id"], "bob"))
    assert done["status"] == "granted" and done["decided_at"] is not None
    assert set(done["outcome"]["approvers"]) == {"user:alice", "user:bob"}
    assert ok(api.get(f"/api/approvals/{item['approval_id']}", role="viewer")) == done
    [command] = api.claim_next()
    assert command["step"] == "pay"


def test_a_deny_fails_the_step_with_who_and_why(api: Api, people: People) -> None:
    xid = people.execute(gated(), "dora")
    aid = pending(api, xid)["approval_id"]
    denied = ok(people.decide(aid, "bob", "deny", "over budget"))
    assert denied["status"] == "denied"
    assert (denied["outcome"]["by"], denied["outcome"]["reason"]) == ("user:bob", "over budget")
    assert api.status(xid)["status"] == "FAILED"
    closed = error(people.decide(aid, "alice"), 409, "approval_closed")
    assert closed["status"] == "denied"


def test_the_refusals_of_a_decision(api: Api, people: People) -> None:
    xid = people.execute(gated(approvers="[role:finance, user:bob, user:dora]"), "dora")
    aid = pending(api, xid)["approval_id"]
    before = api.store.load(int(xid))
    refused = {
        "carol": (403, "not_an_approver"),  # neither user:bob nor in finance
        "dora": (403, "self_approval"),  # started the run
    }
    for user, (status, code) in refused.items():
        body = error(people.decide(aid, user), status, code)
        assert aid in body["message"] or user in body["message"], body
    for role in ("operator", "viewer", "worker"):  # roles that may not decide at all
        error(
            api.post(f"/api/approvals/{aid}/decision", {"decision": "approve"}, role=role),
            403,
            "forbidden",
        )
    error(people.decide(aid, "olga"), 403, "forbidden")  # finance, but an operator token
    no_user = error(
        api.post(f"/api/approvals/{aid}/decision", {"decision": "approve"}, role="approver"),
        403,
        "no_user",
    )
    assert "--user" in no_user["message"]
    error(people.decide("424242", "alice"), 404, "approval_not_found")
    assert api.store.load(int(xid)) == before  # nothing of the refusals was written
    ok(people.decide(aid, "alice"))
    error(people.decide(aid, "alice", "deny"), 409, "already_voted")
    assert pending(api, xid)["approved"] == 1


def test_a_decision_on_a_cancelled_run_changes_nothing(api: Api, people: People) -> None:
    xid = people.execute(gated(), "dora")
    aid = pending(api, xid)["approval_id"]
    ok(api.post(f"/api/executions/{xid}/cancel"))
    assert ok(api.get(f"/api/approvals/{aid}"))["status"] == "cancelled"
    closed = error(people.decide(aid, "alice"), 409, "approval_closed")
    assert closed["status"] == "cancelled"


@pytest.mark.parametrize(
    "body, loc",
    [
        ({"decision": "maybe"}, ["body", "decision"]),
        ({}, ["body", "decision"]),
        ({"decision": "approve", "reason": 5}, ["body", "reason"]),
        ({"decision": "approve", "extra": 1}, ["body", "extra"]),
    ],
)
def test_a_bad_decision_body_is_422_naming_the_field(
    api: Api, people: People, body: dict[str, Any], loc: list[Any]
) -> None:
    xid = people.execute(gated(), "dora")
    aid = pending(api, xid)["approval_id"]
    reply = api.client.post(
        f"/api/approvals/{aid}/decision", json=body, headers=people.headers("alice")
    )
    assert error(reply, 422, "validation_error")["errors"][0]["loc"] == loc
    assert pending(api, xid)["approved"] == 0


def test_the_list_filters_and_pages(api: Api, people: People) -> None:
    a = people.execute(gated("r1"), "dora")
    b = people.execute(gated("r2", approvers="[user:alice]", quorum=1, risk="low"), "dora")
    c = people.execute(gated("r3"), "dora")
    ids = [pending(api, x)["approval_id"] for x in (a, b, c)]
    ok(people.decide(ids[1], "alice"))  # quorum 1: granted

    def listed(query: str, role: str = "viewer") -> list[str]:
        return [i["approval_id"] for i in ok(api.get(f"/api/approvals{query}", role=role))["items"]]

    assert listed("") == ids
    assert listed("?status=pending") == [ids[0], ids[2]]
    assert listed("?status=granted") == [ids[1]]
    assert listed("?approver=role:finance") == [ids[0], ids[2]]
    assert listed("?approver=user:alice") == [ids[1]]
    assert listed("?risk=low") == [ids[1]]
    assert listed(f"?execution_id={c}") == [ids[2]]
    first = ok(api.get("/api/approvals?limit=2"))
    assert [i["approval_id"] for i in first["items"]] == ids[:2] and first["next"] == ids[1]
    last = ok(api.get(f"/api/approvals?limit=2&after={first['next']}"))
    assert [i["approval_id"] for i in last["items"]] == ids[2:] and last["next"] is None
    assert ok(api.get("/api/approvals?limit=3"))["next"] is None  # exactly full: no next page
    for role in ("admin", "operator", "approver"):
        assert listed("?status=pending", role) == [ids[0], ids[2]]
    error(api.get("/api/approvals", role="worker"), 403, "forbidden")


@pytest.mark.parametrize(
    "query, loc",
    [
        ("?status=open", ["query", "status"]),
        ("?risk=extreme", ["query", "risk"]),
        ("?execution_id=x1", ["query", "execution_id"]),
        ("?after=-1", ["query", "after"]),
        ("?limit=0", ["query", "limit"]),
        ("?limt=5", ["query", "limt"]),
    ],
)
def test_a_bad_list_query_is_422_naming_the_parameter(api: Api, query: str, loc: list[str]) -> None:
    assert (
        error(api.get(f"/api/approvals{query}"), 422, "validation_error")["errors"][0]["loc"] == loc
    )


def test_a_bad_approval_id_is_422_and_an_unknown_one_404(api: Api) -> None:
    assert error(api.get("/api/approvals/abc"), 422, "validation_error")
    body = error(api.get("/api/approvals/777"), 404, "approval_not_found")
    assert body["approval_id"] == "777"


def test_a_run_started_by_a_token_without_a_user_names_the_token(api: Api) -> None:
    entry = api.register(gated("anon"))
    xid = ok(api.post("/api/execute", {"path": entry["path"]}, role="operator"))["execution_id"]
    started = next(e for e in api.store.load(int(xid)) if e.event_type == ev.EXECUTION_STARTED)
    assert started.payload["started_by"] == "token:test-operator"
    assert pending(api, xid)["started_by"] == "token:test-operator"
