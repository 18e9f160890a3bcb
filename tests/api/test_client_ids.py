"""Event ids a client chooses (issue 33, item 6): whatever ids a client posts, through any
server of a database, no engine event, run start or other worker's report is refused. A
client's id is taken on a machine id its own token leased, or from before the lease of its
machine id began (`engine.id_spaces`); the rest is 422, on every server alike."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from milepost.engine.id_spaces import CLIENT_ID_AGE_S
from milepost.ids import Snowflake, machine_of
from tests.api.support import HELLO, Api, error, ok, start_server


def beat(xid: str, event_id: int) -> dict[str, Any]:
    """A client's event with its own id (a heartbeat: any role that works may post it)."""
    return {
        "event_id": str(event_id),
        "execution_id": xid,
        "event_type": "command.heartbeat",
        "step": "start",
    }


def lease(api: Api, worker: str, role: str = "worker") -> int:
    body = {"worker_id": worker}
    return int(ok(api.post("/api/workers/machine-id", body, role=role))["machine_id"])


def used(api: Api, run: str) -> set[int]:
    """The ids a run start used: its execution id and its events'."""
    return {int(run)} | {e.event_id for e in api.store.load(int(run))}


class Minted:
    """Wraps a server's id generator: replays `next_ids` first (ids it minted already, as
    if about to append them), and records every id it hands out."""

    def __init__(self, api: Api) -> None:
        self.orchestrator = api.services.engine.orchestrator
        self.mint: Callable[[], int] = self.orchestrator.new_id
        self.next_ids: list[int] = []
        self.handed: set[int] = set()
        self.orchestrator.new_id = self

    def __call__(self) -> int:
        made = self.next_ids.pop(0) if self.next_ids else self.mint()
        self.handed.add(made)
        return made

    def fresh(self) -> int:
        """An id the server's generator makes now and will hand out next."""
        made = self.mint()
        self.next_ids.append(made)
        return made


@pytest.fixture
def two(db_url: str) -> Iterator[tuple[Api, Api]]:
    """Two servers on one database, each client with one token for both."""
    with start_server(db_url) as a, start_server(db_url) as b:
        b.tokens = a.tokens
        yield a, b


def test_a_client_id_in_a_workers_id_space_is_422_and_the_workers_report_goes_through(
    api: Api,
) -> None:
    """One server: squatting a worker's id space held its reports (409 until its lease
    lapsed); the squatter is refused and the worker's report is stored."""
    xid = api.execute(HELLO)
    worker = lease(api, "w1")
    minted = Snowflake(worker, time.time)()  # the worker's next report, not posted yet
    refused = error(
        api.post("/api/events", beat(xid, minted), role="admin"), 422, "validation_error"
    )
    assert refused["errors"][0]["loc"] == ["body", "event_id"]
    assert f"machine id {worker}, not one your token leased" in refused["errors"][0]["msg"]
    assert "leased by another process" in refused["errors"][0]["msg"]
    stored = ok(api.post("/api/events", beat(xid, minted), role="worker"))
    assert stored["stored_ids"] == [str(minted)]


def test_a_client_id_in_another_servers_id_space_is_422_there_too(two: tuple[Api, Api]) -> None:
    """Posting ids of server A's space through server B made A's run starts fail (409): B
    refuses them as A does, and A's start keeps the ids it chose."""
    a, b = two
    xid = b.execute(HELLO)
    minted = Minted(a)
    assert machine_of(a.services.engine.new_id()) != machine_of(b.services.engine.new_id())
    squatted = [minted.fresh() for _ in range(3)]  # the ids of A's next run start
    for event_id in squatted:
        body = error(
            b.post("/api/events", beat(xid, event_id), role="worker"), 422, "validation_error"
        )
        assert f"machine id {machine_of(event_id)}" in body["errors"][0]["msg"]
    run = a.execute(HELLO)
    assert set(squatted) <= used(a, run)


def test_an_old_id_nobody_mints_any_more_is_taken_from_any_client(two: tuple[Api, Api]) -> None:
    """A NoETL worker's ids (another epoch: weeks in the past here), or a script's minted
    long ago: no process mints there again."""
    a, b = two
    xid = a.execute(HELLO)
    server = machine_of(a.services.engine.new_id())
    for machine in (server, 1000):
        old = Snowflake(machine, lambda: time.time() - 7 * 86400)()
        assert ok(b.post("/api/events", beat(xid, old), role="admin"))["stored"] == 1
    fresh = Snowflake(1000, lambda: time.time() - CLIENT_ID_AGE_S / 2)()  # nobody's yet
    body = error(b.post("/api/events", beat(xid, fresh), role="admin"), 422, "validation_error")
    assert "nobody leases it now" in body["errors"][0]["msg"]


SPACES = hs.one_of(hs.sampled_from(["A", "B", "worker", "own"]), hs.integers(0, 1023))
WHEN = hs.one_of(hs.just(0.0), hs.floats(0, 30 * 86400))
"""0: an id its space's generator mints just now (a server's or the worker's next one);
else minted that many seconds ago."""
POSTS = hs.lists(hs.tuples(hs.integers(0, 1), SPACES, WHEN), min_size=1, max_size=6)


def test_no_client_id_through_any_server_makes_an_engine_append_or_a_report_fail(
    two: tuple[Api, Api],
) -> None:
    """The class: hypothesis-chosen ids (any machine id, any time up to now, among them
    ids a server or a worker has just minted and not appended yet) posted by a client
    through either server never make a run start, an engine append or a worker's report
    fail, and no id taken from the client is ever minted by a server."""
    servers = two
    minted = [Minted(api) for api in servers]
    worker = lease(servers[0], "w1")  # through A; it reports through B too
    worker_ids = Snowflake(worker, time.time)
    own = lease(servers[1], "squatter", role="admin")  # the client's own lease
    target = servers[0].execute(HELLO)
    taken: set[int] = set()

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(POSTS)
    def posts(chosen: list[tuple[int, str | int, float]]) -> None:
        pending: list[int] = []  # the worker's ids, minted, not reported yet
        for via, space, ago in chosen:
            if space in ("A", "B") and ago == 0:
                event_id = minted["AB".index(str(space))].fresh()
            elif space == "worker" and ago == 0:
                event_id = worker_ids()
                pending.append(event_id)
            else:
                machine = {
                    "A": machine_of(servers[0].services.engine.new_id()),
                    "B": machine_of(servers[1].services.engine.new_id()),
                    "worker": worker,
                    "own": own,
                }.get(str(space), space)
                event_id = Snowflake(int(machine), lambda ago=ago: time.time() - ago)()
            reply = servers[via].post("/api/events", beat(target, event_id), role="admin")
            assert reply.status_code in (200, 409, 422), reply.text
            if reply.status_code == 200:
                taken.add(event_id)
        for i, api in enumerate(servers):  # a run start with the ids its server chose
            before = set(minted[i].next_ids)
            run = api.execute(HELLO)
            assert before <= used(api, run)
        for i, event_id in enumerate(pending):  # the worker's reports, through either server
            stored = ok(servers[i % 2].post("/api/events", beat(target, event_id), role="worker"))
            assert stored["stored_ids"] == [str(event_id)]
        assert not taken & (minted[0].handed | minted[1].handed)

    posts()
