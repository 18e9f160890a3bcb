"""Approval gates through a real `milepost server` and worker processes (DSL 10.3), on
SQLite and PostgreSQL: runs started and decided over HTTP with tokens that name users
(`milepost token create --role approver --user alice`), the gated step POSTing to a local
HTTP API (`tests.approval_world.Upstream`) that counts what it was asked, per path and per
`Idempotency-Key`.

One cluster per database serves the module (a cluster costs seconds); the tests that stop
every process start them again (`Site.up`), and each test has its own playbook path and
upstream path.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from milepost import ids
from milepost.api import auth
from milepost.client import MilepostClient
from milepost.core import approval_state as ap
from milepost.core import events as ev
from milepost.core.approval_state import Voter
from milepost.engine.approvals import append_decision
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.machine import LeasedIds, holder_name
from milepost.engine.orchestrator import Orchestrator
from milepost.store.factory import open_store
from tests import approval_world as world
from tests.acceptance.harness import Cluster, _token_of, database
from tests.approval_world import Upstream
from tests.shared import wait_for

pytestmark = pytest.mark.slow

LEASE_SECONDS = 4.0
"""Short, for the lost worker's lease to lapse soon; long enough that a loaded machine's
heartbeats (every third of it) keep the others."""
PEOPLE = {
    # who: (API role, user)
    "dora": ("admin", "dora"),  # starts the runs (and, as an admin, may vote)
    "alice": ("approver", "alice"),
    "bob": ("approver", "bob"),
    "olga": ("operator", "olga"),
    "vera": ("viewer", "vera"),
    "anon": ("approver", None),  # an approver token without a user
}


class Site:
    """The module's cluster, its people's tokens and the upstream its playbooks call."""

    def __init__(self, kind: str, cluster: Cluster, tokens: dict[str, str], api: Upstream) -> None:
        self.kind = kind
        """The database: the upstream, the module's, is shared by both sites."""
        self.cluster = cluster
        self.tokens = tokens
        self.api = api
        self.admin = cluster.client
        self._n = 0

    def up(self) -> None:
        """A server and one live worker (a test before may have stopped them)."""
        c = self.cluster
        if c.server is None or not c.server.alive():
            c.start_server()
        if not any(w.alive() for w in c.workers):
            c.start_worker()

    def down(self, *, kill: bool = False) -> None:
        """Every process of the cluster stopped (SIGTERM, or kill -9)."""
        c = self.cluster
        for proc in [*c.workers, *([c.server] if c.server else [])]:
            if proc.alive():
                proc.kill9() if kill else proc.stop()

    def name(self, what: str) -> tuple[str, str]:
        """A playbook path and an upstream URL path of this test's own."""
        self._n += 1
        return f"approvals/{what}-{self._n}", f"/{self.kind}/{what}/{self._n}"

    def execute(self, text: str, who: str = "dora", workload: dict[str, Any] | None = None) -> str:
        entry = self.admin.register(text)
        with MilepostClient(self.cluster.url, self.tokens[who], timeout=30) as client:
            return client.execute(entry["path"], workload, version=entry["version"])

    def pending(self, xid: str) -> dict[str, Any]:
        def listed() -> list[dict[str, Any]]:
            return list(self.admin.approvals(execution_id=xid)["items"])

        [item] = wait_for(listed, f"the approval request of execution {xid}", timeout=20)
        assert item["status"] == "pending", item
        return item

    def decide(
        self, approval_id: str, who: str, decision: str = "approve", reason: str | None = None
    ) -> httpx.Response:
        return httpx.post(
            f"{self.cluster.url}/api/approvals/{approval_id}/decision",
            json={"decision": decision, "reason": reason},
            timeout=30,
            headers={"Authorization": f"Bearer {self.tokens[who]}"},
        )

    def events(self, xid: str) -> list[dict[str, Any]]:
        return self.admin.events(xid)

    def issued(self, xid: str, step: str = "pay") -> int:
        return sum(
            1
            for e in self.events(xid)
            if e["event_type"] == ev.COMMAND_ISSUED and e["step"] == step
        )

    def wait(self, xid: str) -> dict[str, Any]:
        return self.cluster.wait(xid, timeout=45)


def ok(reply: httpx.Response) -> dict[str, Any]:
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def refused(reply: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    body: dict[str, Any] = reply.json()
    assert body["code"] == code, body
    return body


@pytest.fixture(scope="module")
def api() -> Iterator[Upstream]:
    with world.upstream() as server:
        yield server


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, api: Upstream
) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp(f"approvals-{request.param}")
    with database(request.param, tmp) as url:
        cluster = Cluster(url, tmp, lease_seconds=LEASE_SECONDS)
        try:
            # alice's token as people make one; the others straight into the store (each
            # CLI process costs a second of a CPU the whole suite shares)
            tokens = {
                "alice": _token_of(
                    cluster._finish_cli(
                        cluster._start_cli(
                            "token", "create", "--role", "approver", "--user", "alice", "--db", url
                        )
                    )
                )
            }
            store = open_store(url)
            try:
                for who, (role, user) in PEOPLE.items():
                    tokens.setdefault(
                        who, auth.create_token(store, role, who, time.time(), user=user)
                    )
            finally:
                store.close()
            found = Site(request.param, cluster, tokens, api)
            found.up()
            yield found
        finally:
            cluster.close()


@pytest.fixture
def s(site: Site) -> Site:
    site.up()
    return site


# -- approve, deny, quorum -------------------------------------------------------------------


def test_an_approved_step_runs_once(s: Site) -> None:
    path, route = s.name("approve")
    xid = s.execute(world.gated(path, s.api.url + route))
    item = s.pending(xid)
    assert (item["started_by"], item["risk"], item["quorum"]) == ("user:dora", "high", 1)
    decided = ok(s.decide(item["approval_id"], "alice", reason="invoice checked"))
    assert decided["status"] == "granted" and decided["outcome"]["approvers"] == ["user:alice"]
    status = s.wait(xid)
    assert status["status"] == "COMPLETED", status
    assert s.api.count(route) == 1 and s.issued(xid) == 1


def test_a_denied_step_fails_naming_the_denier_and_never_runs(s: Site) -> None:
    path, route = s.name("deny")
    xid = s.execute(world.gated(path, s.api.url + route))
    item = s.pending(xid)
    denied = ok(s.decide(item["approval_id"], "bob", "deny", "over budget"))
    assert denied["status"] == "denied"
    status = s.wait(xid)
    assert status["status"] == "FAILED"
    assert status["error"]["kind"] == "approval"
    assert status["error"]["message"] == "approval rejected by user:bob: over budget"
    assert s.api.count(route) == 0 and s.issued(xid) == 0


def test_a_quorum_of_two_waits_for_the_second_vote(s: Site) -> None:
    path, route = s.name("quorum")
    xid = s.execute(world.gated(path, s.api.url + route, quorum=2))
    item = s.pending(xid)
    first = ok(s.decide(item["approval_id"], "alice"))
    assert (first["status"], first["approved"]) == ("pending", 1)
    status = s.admin.status(xid)
    assert status["status"] == "RUNNING"
    assert status["steps"]["pay"]["status"] == ap.AWAITING_APPROVAL
    assert s.issued(xid) == 0
    assert ok(s.decide(item["approval_id"], "bob"))["status"] == "granted"
    assert s.wait(xid)["status"] == "COMPLETED"
    assert s.api.count(route) == 1 and s.issued(xid) == 1


# -- who may vote ----------------------------------------------------------------------------


def test_the_starter_may_not_approve_unless_the_playbook_allows_it(s: Site) -> None:
    path, route = s.name("self")
    xid = s.execute(world.gated(path, s.api.url + route, approvers="[user:dora, user:alice]"))
    item = s.pending(xid)
    before = s.events(xid)
    body = refused(s.decide(item["approval_id"], "dora"), 403, "self_approval")
    assert "user:dora" in body["message"]
    assert s.events(xid) == before
    path, allowed = s.name("self-ok")
    xid = s.execute(
        world.gated(path, s.api.url + allowed, approvers="[user:dora, user:alice]", self_ok=True)
    )
    assert ok(s.decide(s.pending(xid)["approval_id"], "dora"))["status"] == "granted"
    assert s.wait(xid)["status"] == "COMPLETED"
    assert s.api.count(allowed) == 1 and s.api.count(route) == 0


def test_the_refusals_of_a_decision(s: Site) -> None:
    path, route = s.name("refusals")
    xid = s.execute(world.gated(path, s.api.url + route, quorum=2))
    aid = s.pending(xid)["approval_id"]
    ok(s.decide(aid, "alice"))
    before = s.events(xid)
    refused(s.decide(aid, "alice", "deny", "changed my mind"), 409, "already_voted")
    refused(s.decide(aid, "olga"), 403, "forbidden")  # an operator token
    refused(s.decide(aid, "vera"), 403, "forbidden")  # a viewer token
    body = refused(s.decide(aid, "anon"), 403, "no_user")
    assert "--user" in body["message"]
    refused(s.decide("424242", "alice"), 404, "approval_not_found")
    assert s.events(xid) == before, "no refusal appended anything"
    item = s.admin.approval(aid)
    assert (item["status"], item["approved"]) == ("pending", 1)
    assert s.api.count(route) == 0 and s.issued(xid) == 0


# -- expiry ----------------------------------------------------------------------------------


def test_an_approval_expires_before_the_decision(s: Site) -> None:
    path, route = s.name("expiry")
    xid = s.execute(world.gated(path, s.api.url + route, expires_in="1s"))
    aid = s.pending(xid)["approval_id"]
    status = s.wait(xid)  # the server's own timer, at expires_at
    assert status["status"] == "FAILED"
    assert status["error"]["kind"] == "approval"
    assert status["error"]["message"] == "approval expired after 1s"
    assert refused(s.decide(aid, "alice"), 409, "approval_closed")["status"] == "expired"
    assert s.api.count(route) == 0 and s.issued(xid) == 0


def test_an_approval_expires_while_every_process_is_down(s: Site) -> None:
    path, route = s.name("expiry-down")
    xid = s.execute(world.gated(path, s.api.url + route, expires_in="2s"))
    aid = s.pending(xid)["approval_id"]
    s.down(kill=True)
    logged = load(s, int(xid))
    assert ev.APPROVAL_EXPIRED not in [e.event_type for e in logged], "stopped before the expiry"
    requested = next(e for e in logged if e.event_type == ev.APPROVAL_REQUESTED)
    expires_at = float(requested.payload["expires_at"])
    wait_for(lambda: time.time() > expires_at, "the approval's expires_at to pass", timeout=10)
    s.up()  # the server's recovery finds the approval expired
    status = s.wait(xid)
    assert status["status"] == "FAILED", status
    assert status["error"]["message"] == "approval expired after 2s"
    assert s.admin.approval(aid)["status"] == "expired"
    assert s.api.count(route) == 0 and s.issued(xid) == 0


# -- granted, but not what was approved ------------------------------------------------------


@pytest.mark.parametrize("what", ["policy", "input"])
def test_a_grant_is_invalidated_when_the_context_changed_after_the_request(
    s: Site,
    what: str,
) -> None:
    path, route = s.name(f"raced-{what}")
    xid = s.execute(world.raced(path, s.api.url + route, what=what))
    aid = s.pending(xid)["approval_id"]
    # the parallel branch sets ctx.amount after the request was made
    wait_for(
        lambda: s.admin.status(xid)["steps"].get("raise_amount", {}).get("status") == "COMPLETED",
        "raise_amount to set ctx.amount",
        timeout=20,
    )
    decided = ok(s.decide(aid, "alice"))
    assert decided["status"] == "invalidated"
    status = s.wait(xid)
    assert status["status"] == "FAILED" and status["error"]["kind"] == "approval"
    outcome = decided["outcome"]
    if what == "policy":
        assert (outcome["cause"], outcome["changed"]) == ("policy", None)
        assert status["error"]["message"] == (
            "approval invalidated: amount 9000 exceeds the 5,000 limit"
        )
    else:
        assert (outcome["cause"], outcome["changed"]) == ("changed", "config.json.amount")
        assert "(config.json.amount)" in status["error"]["message"]
    assert s.api.count(route) == 0 and s.issued(xid) == 0


def test_a_later_iteration_whose_call_changed_after_the_grant_is_never_issued(s: Site) -> None:
    path, route = s.name("loop")
    xid = s.execute(world.loop_writing_ctx(path, s.api.url + route))
    aid = s.pending(xid)["approval_id"]
    ok(s.decide(aid, "alice"))
    status = s.wait(xid)
    assert status["status"] == "FAILED" and status["error"]["kind"] == "approval"
    assert status["error"]["message"] == (
        "iteration 1: approval invalidated before attempt 1: the call changed since it was "
        "approved (config.json.seen)"
    )
    assert [r.body for r in s.api.requests(route)] == [{"i": 0, "seen": "none"}]
    assert s.issued(xid) == 1
    outcome = invalidated(s, aid)
    assert (outcome["index"], outcome["cause"]) == (1, "changed")


# -- every attempt is checked again, not only the first (issue 33) -------------------------


def invalidated(s: Site, approval_id: str) -> dict[str, Any]:
    """The approval as the API shows it: invalidated, its outcome the invalidation."""
    item = s.admin.approval(approval_id)
    assert item["status"] == "invalidated", item
    outcome: dict[str, Any] = item["outcome"]
    return outcome


def failed_before_attempt_2(status: dict[str, Any], why: str) -> None:
    assert status["status"] == "FAILED", status
    assert status["error"]["kind"] == "approval"
    assert status["error"]["message"].startswith(f"approval invalidated before attempt 2: {why}")


def expiry_of(s: Site, xid: str) -> float:
    requested = next(e for e in load(s, int(xid)) if e.event_type == ev.APPROVAL_REQUESTED)
    return float(requested.payload["expires_at"])


def test_a_retry_after_the_approval_expired_never_runs(s: Site) -> None:
    """The issue's case: attempt 1 failed after `expires_at`; its retry was issued and ran."""
    path, base = s.name("retry-expired")
    pay = base + "/pay"
    s.api.hold(pay)
    try:
        xid = s.execute(world.retried(path, s.api.url + base, what="expiry", expires_in="5s"))
        aid = s.pending(xid)["approval_id"]
        ok(s.decide(aid, "alice"))
        wait_for(lambda: s.api.count(pay) == 1, "attempt 1's request", timeout=20)
        expires_at = expiry_of(s, xid)
        wait_for(lambda: time.time() > expires_at, "the expiry", timeout=10)
        s.api.answer(pay, 503)
    finally:
        s.api.release(pay)
    failed_before_attempt_2(s.wait(xid), "the approval expired ")
    assert s.api.count(pay) == 1 and s.issued(xid) == 1
    outcome = invalidated(s, aid)
    assert (outcome["cause"], outcome["attempt"]) == ("expired", 2)


def test_a_retry_after_the_policy_turned_false_never_runs(s: Site) -> None:
    path, base = s.name("retry-policy")
    pay, change = base + "/pay", base + "/change"
    s.api.hold(pay)
    s.api.hold(change)
    try:
        xid = s.execute(world.retried(path, s.api.url + base, what="policy"))
        aid = s.pending(xid)["approval_id"]
        ok(s.decide(aid, "alice"))
        wait_for(lambda: s.api.count(pay) == 1, "attempt 1's request", timeout=20)
        s.api.release(change)  # granted on a policy that held; now ctx.frozen is set
        wait_for(lambda: step_done(s, xid, "change"), "the freeze", timeout=20)
        s.api.answer(pay, 503)
    finally:
        s.api.release(pay)
        s.api.release(change)
    failed_before_attempt_2(s.wait(xid), "payments are frozen")
    assert s.api.count(pay) == 1 and s.issued(xid) == 1
    outcome = invalidated(s, aid)
    assert (outcome["cause"], outcome["attempt"]) == ("policy", 2)


def step_done(s: Site, xid: str, step: str) -> bool:
    return bool(s.admin.status(xid)["steps"].get(step, {}).get("status") == "COMPLETED")


def test_a_call_changed_before_the_reissue_after_a_lost_worker_never_runs(s: Site) -> None:
    path, base = s.name("lost-changed")
    pay, change = base + "/pay", base + "/change"
    s.api.hold(pay)
    s.api.hold(change)
    try:
        xid = s.execute(world.retried(path, s.api.url + base, what="input"))
        aid = s.pending(xid)["approval_id"]
        ok(s.decide(aid, "alice"))
        wait_for(lambda: s.api.count(pay) == 1, "attempt 1's request", timeout=20)
        s.api.release(change)
        wait_for(lambda: step_done(s, xid, "change"), "ctx.amount to change", timeout=20)
        for worker in s.cluster.workers:  # attempt 1 is out; its report never comes
            if worker.alive():
                worker.kill9()
    finally:
        s.api.release(pay)
        s.api.release(change)
    s.up()
    failed_before_attempt_2(
        s.wait(xid), "the call changed since it was approved (config.json.amount)"
    )
    assert s.api.count(pay) == 1 and s.issued(xid) == 1
    assert ev.COMMAND_LEASE_EXPIRED in [e["event_type"] for e in s.events(xid)]
    outcome = invalidated(s, aid)
    assert (outcome["cause"], outcome["changed"]) == ("changed", "config.json.amount")


def test_an_attempt_claimed_after_the_expiry_refuses_to_run_its_tool(s: Site) -> None:
    """Granted and issued in time, claimed too late (no worker until after `expires_at`):
    the worker refuses before the tool runs (fail closed)."""
    path, base = s.name("claimed-late")
    pay = base + "/pay"
    xid = s.execute(world.retried(path, s.api.url + base, what="expiry", expires_in="5s"))
    aid = s.pending(xid)["approval_id"]
    wait_for(lambda: step_done(s, xid, "change"), "the other branch", timeout=20)
    for worker in s.cluster.workers:
        if worker.alive():
            worker.stop()
    assert ok(s.decide(aid, "alice"))["status"] == "granted"
    assert s.issued(xid) == 1
    expires_at = expiry_of(s, xid)
    wait_for(lambda: time.time() > expires_at, "the expiry", timeout=10)
    s.up()
    status = s.wait(xid)
    assert status["status"] == "FAILED", status
    assert status["error"]["message"].startswith(
        "approval invalidated before attempt 1: the approval expired "
    )
    assert s.api.count(pay) == 0 and s.issued(xid) == 1
    [failed] = [e for e in load(s, int(xid)) if e.event_type == ev.COMMAND_FAILED]
    assert failed.payload["error"]["invalidated"]["cause"] == "expired"
    assert (failed.worker_id or "").startswith("worker-"), "refused by the worker itself"
    assert (invalidated(s, aid)["cause"], invalidated(s, aid)["attempt"]) == ("expired", 1)


# -- a cancelled run, a crash after the vote, a lost worker ----------------------------------


def test_a_decision_on_a_cancelled_run_is_refused(s: Site) -> None:
    path, route = s.name("cancel")
    xid = s.execute(world.gated(path, s.api.url + route))
    aid = s.pending(xid)["approval_id"]
    s.admin.cancel(xid)
    assert s.wait(xid)["status"] == "CANCELLED"
    assert refused(s.decide(aid, "alice"), 409, "approval_closed")["status"] == "cancelled"
    assert s.admin.approval(aid)["status"] == "cancelled"
    assert s.api.count(route) == 0 and s.issued(xid) == 0


def load(s: Site, xid: int) -> list[Any]:
    store = open_store(s.cluster.db_url)
    try:
        return store.load(xid)
    finally:
        store.close()


def test_a_vote_appended_while_no_process_runs_is_acted_on_once(s: Site) -> None:
    path, route = s.name("crash")
    xid = s.execute(world.gated(path, s.api.url + route, quorum=2))
    aid = s.pending(xid)["approval_id"]
    ok(s.decide(aid, "alice"))
    s.down()
    store = open_store(s.cluster.db_url)
    try:
        # the last vote, appended alone (no process drives the run to grant it)
        leased = LeasedIds(store, time.time, holder=holder_name("approve"), ttl=30.0)
        try:
            voted = append_decision(
                store,
                Orchestrator(store, new_id=leased),
                int(aid),
                Voter("user:bob", frozenset({"approver"})),
                "approve",
                None,
            )
        finally:
            leased.release()
        assert voted.status == ap.PENDING and len(voted.approvals) == 2
        s.cluster.start_server()  # its recovery grants and issues the command; no worker yet
        wait_for(lambda: s.issued(xid) == 1, "the recovery to issue the command", timeout=20)
        s.down()
        # a second recovery, of the run with its command queued: nothing more is issued
        leased = LeasedIds(store, time.time, holder=holder_name("recover"), ttl=30.0)
        try:
            assert Lifecycle(store, Orchestrator(store, new_id=leased)).recover() >= 1
        finally:
            leased.release()
        assert [(e.event_type, e.step) for e in store.load(int(xid))].count(
            (ev.COMMAND_ISSUED, "pay")
        ) == 1
    finally:
        store.close()
    s.up()
    assert s.wait(xid)["status"] == "COMPLETED"
    types = [e["event_type"] for e in s.events(xid)]
    assert types.count(ev.APPROVAL_GRANTED) == 1 and s.issued(xid) == 1
    assert s.api.count(route) == 1


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_lost_worker_s_command_is_reissued_with_the_same_operation_key(s: Site) -> None:
    path, route = s.name("lost")
    s.api.hold(route)
    try:
        xid = s.execute(world.gated(path, s.api.url + route))
        ok(s.decide(s.pending(xid)["approval_id"], "alice"))
        wait_for(lambda: s.api.count(route) == 1, "the first attempt's request", timeout=20)
        for worker in s.cluster.workers:  # after the request, before its report
            if worker.alive():
                worker.kill9()
    finally:
        s.api.release(route)
    s.up()
    status = s.wait(xid)
    assert status["status"] == "COMPLETED", status
    first, second = s.api.requests(route)
    x = int(xid)
    # DSL 10.4: a lost lease is a new attempt (a new idempotency key), the same operation
    assert (
        first.headers["x-operation-key"]
        == second.headers["x-operation-key"]
        == ids.operation_key(x, "pay", 1, None)
        == sha(f"{x}:pay:1:-")
    )
    assert first.headers["idempotency-key"] == ids.idempotency_key(x, "pay", 1, None, 1)
    assert second.headers["idempotency-key"] == ids.idempotency_key(x, "pay", 1, None, 2)
    assert first.headers["idempotency-key"] != second.headers["idempotency-key"]
    types = [e["event_type"] for e in s.events(xid)]
    assert types.count(ev.COMMAND_LEASE_EXPIRED) == 1
    assert types.count(ev.APPROVAL_REQUESTED) == 1, "the new attempt is not asked again"
