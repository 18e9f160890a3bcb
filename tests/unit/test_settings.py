"""Settings that guard ids (milepost.settings), and the environment a local cluster gets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from milepost.conformance.cluster import LocalCluster
from milepost.core.ids import MAX_MACHINE
from milepost.settings import Settings
from milepost.worker import http as worker_http


@pytest.mark.parametrize("value", ["-1", str(MAX_MACHINE + 1), "70000"])
def test_a_machine_id_outside_the_snowflake_range_is_refused(
        value: str, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("MILEPOST_MACHINE_ID", value)
    with pytest.raises(ValidationError, match="machine_id"):
        Settings()
    with pytest.raises(ValidationError, match="machine_id"):  # the worker reads the same
        worker_http.machine_id()


def test_the_edges_of_the_machine_id_range_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in (0, MAX_MACHINE):
        monkeypatch.setenv("MILEPOST_MACHINE_ID", str(value))
        assert Settings().machine_id == worker_http.machine_id() == value


def test_a_local_cluster_leases_its_machine_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    # one fixed id handed to the server and every worker would mint colliding event ids
    monkeypatch.setenv("MILEPOST_MACHINE_ID", "5")
    cluster = LocalCluster("postgresql://postgres@127.0.0.1:5432/postgres")
    assert "MILEPOST_MACHINE_ID" not in cluster.env
