"""The approval webhook of a server (SQLite and PostgreSQL): the request, each vote cast
through the decision route and the outcome reach the receiver in commit order, signed;
approval metrics count the outcome with its time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from milepost.core import events as ev
from milepost.engine import webhooks
from tests.api.support import Api, ok, start_server
from tests.api.test_approvals import People, gated, pending
from tests.receiver import Receiver, serve
from tests.shared import metric_sample, wait_for

SECRET = "server-hook-secret"


@pytest.fixture
def hooks() -> Iterator[Receiver]:
    with serve() as receiver:
        yield receiver


@pytest.fixture
def api(db_url: str, hooks: Receiver) -> Iterator[Api]:
    with start_server(
        db_url, approval_webhook_url=hooks.url + "/milepost", approval_webhook_secret=SECRET
    ) as server:
        yield server


@pytest.fixture
def people(api: Api) -> People:
    found = People(api)
    found.add("alice", "approver", "finance")
    found.add("bob")
    found.add("dora", "admin")
    return found


def kinds(hooks: Receiver) -> list[str]:
    return [r.json["type"] for r in hooks.received]


def test_the_server_sends_the_request_the_votes_and_the_grant_in_order(
    api: Api, people: People, hooks: Receiver
) -> None:
    xid = people.execute(gated(), "dora")
    item = pending(api, xid)
    wait_for(lambda: kinds(hooks) == [ev.APPROVAL_REQUESTED], "the request")
    ok(people.decide(item["approval_id"], "alice", reason="invoice checked"))
    wait_for(lambda: len(hooks.received) == 2, "alice's vote")
    assert api.claim_next() == []  # one vote of two: nothing runs yet
    ok(people.decide(item["approval_id"], "bob"))
    wait_for(lambda: len(hooks.received) == 4, "bob's vote and the grant")
    assert kinds(hooks) == [
        ev.APPROVAL_REQUESTED,
        ev.APPROVAL_DECIDED,
        ev.APPROVAL_DECIDED,
        ev.APPROVAL_GRANTED,
    ]
    logged = [e for e in api.store.load(int(xid)) if e.event_type in ev.APPROVAL_EVENTS]
    assert [r.headers["x-milepost-event-id"] for r in hooks.received] == [
        str(e.event_id) for e in logged
    ]
    for got in hooks.received:
        assert webhooks.verify(SECRET, got.body, got.headers["x-milepost-signature"])
        assert got.json["payload"]["approval_id"] == item["approval_id"]
    assert [r.json["payload"].get("identity") for r in hooks.received[1:3]] == [
        "user:alice",
        "user:bob",
    ]
    text = api.get("/metrics", role="viewer").text
    assert metric_sample(text, "milepost_approval_decisions_total", outcome="granted") == 1
    assert metric_sample(text, "milepost_approval_time_to_decision_seconds_count") == 1


def test_a_denial_is_sent_and_a_refused_vote_sends_nothing(
    api: Api, people: People, hooks: Receiver
) -> None:
    xid = people.execute(gated(), "dora")
    item = pending(api, xid)
    ok(people.decide(item["approval_id"], "bob", "deny", "duplicate refund"))
    wait_for(lambda: len(hooks.received) == 3, "the request, the vote and the denial")
    refused = people.decide(item["approval_id"], "alice")  # closed: 409, nothing written
    assert refused.status_code == 409
    # deliveries keep commit order: had the refusal sent anything, it would come before
    # the next run's request
    people.execute(gated("other"), "dora")
    wait_for(lambda: len(hooks.received) == 4, "the next run's request")
    assert kinds(hooks) == [
        ev.APPROVAL_REQUESTED,
        ev.APPROVAL_DECIDED,
        ev.APPROVAL_DENIED,
        ev.APPROVAL_REQUESTED,
    ]
    denied = hooks.received[2].json["payload"]
    assert (denied["by"], denied["reason"]) == ("user:bob", "duplicate refund")
    text = api.get("/metrics", role="viewer").text
    assert metric_sample(text, "milepost_approval_decisions_total", outcome="denied") == 1
    assert metric_sample(text, "milepost_approval_decisions_total", outcome="granted") == 0
