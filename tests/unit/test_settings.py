"""Settings (milepost.settings): those that guard ids, the worker's, and the environment a
local cluster gets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from milepost.conformance.cluster import LocalCluster
from milepost.ids import MAX_MACHINE
from milepost.settings import Settings
from milepost.worker import machine_ids
from milepost.worker.loop import Worker
from milepost.worker.main import worker_settings
from tests.worker.fakes import FakeClient, FakeTools


@pytest.mark.parametrize("value", ["-1", str(MAX_MACHINE + 1), "70000"])
def test_a_machine_id_outside_the_snowflake_range_is_refused(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MILEPOST_MACHINE_ID", value)
    with pytest.raises(ValidationError, match="machine_id"):
        Settings()
    with pytest.raises(ValidationError, match="machine_id"):  # the worker reads the same
        machine_ids.machine_id()


def test_the_edges_of_the_machine_id_range_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in (0, MAX_MACHINE):
        monkeypatch.setenv("MILEPOST_MACHINE_ID", str(value))
        assert Settings().machine_id == machine_ids.machine_id() == value


def test_a_local_cluster_leases_its_machine_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    # one fixed id handed to the server and every worker would mint colliding event ids
    monkeypatch.setenv("MILEPOST_MACHINE_ID", "5")
    cluster = LocalCluster("postgresql://postgres@127.0.0.1:5432/postgres")
    assert "MILEPOST_MACHINE_ID" not in cluster.env


_WORKER_ENV = (
    "MILEPOST_CONCURRENCY",
    "MILEPOST_POOL",
    "MILEPOST_NATS_POOL",
    "MILEPOST_WORKER_ID",
    "MILEPOST_LEASE_SECONDS",
    "MILEPOST_GRACE_SECONDS",
)


def test_one_concurrency_default_for_the_embedded_engine_and_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in _WORKER_ENV:
        monkeypatch.delenv(name, raising=False)
    worker = Worker(FakeClient(), FakeTools())
    assert Settings().concurrency == worker.concurrency == 16
    assert (worker.pool, worker.lease_seconds, worker.grace_seconds) == ("default", 30.0, 30.0)


def test_the_worker_reads_its_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in [
        ("MILEPOST_CONCURRENCY", "3"),
        ("MILEPOST_NATS_POOL", "etl"),
        ("MILEPOST_WORKER_ID", "w-env"),
        ("MILEPOST_LEASE_SECONDS", "12"),
        ("MILEPOST_GRACE_SECONDS", "0"),
    ]:
        monkeypatch.setenv(name, value)
    worker = Worker(FakeClient(), FakeTools())
    assert (worker.concurrency, worker.pool, worker.worker_id) == (3, "etl", "w-env")
    assert (worker.lease_seconds, worker.grace_seconds) == (12.0, 0.0)
    monkeypatch.setenv("MILEPOST_POOL", "fast")  # the worker's own pool beats the NATS one
    assert Worker(FakeClient(), FakeTools()).pool == "fast"
    # the command line's options beat the environment, the ones not given leave it be
    settings = worker_settings(concurrency=5, pool=None, grace_seconds=None)
    assert (settings.concurrency, settings.worker_pool(), settings.grace_seconds) == (
        5,
        "fast",
        0.0,
    )
    assert Worker(FakeClient(), FakeTools(), settings=settings).concurrency == 5


def test_the_engine_bounds_an_attempt_without_spec_timeout_to_a_day_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from milepost.engine.embedded import DEFAULT_TIMEOUT

    monkeypatch.delenv("MILEPOST_DEFAULT_TIMEOUT", raising=False)
    assert Settings().default_timeout == DEFAULT_TIMEOUT == 86400.0
    monkeypatch.setenv("MILEPOST_DEFAULT_TIMEOUT", "0")
    assert Settings().default_timeout is None  # 0: no bound
    monkeypatch.setenv("MILEPOST_DEFAULT_TIMEOUT", "90")
    assert Settings().default_timeout == 90.0


def test_the_python_processes_idle_time_has_one_default() -> None:
    from milepost.engine import embedded
    from milepost.tools import python

    assert Settings().python_idle_seconds == python.IDLE_SECONDS == embedded.PYTHON_IDLE_S
