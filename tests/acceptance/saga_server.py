"""The saga of `tests/compensation_saga.py` through a server: a cluster (`milepost server`
and a `milepost worker` process) on SQLite and PostgreSQL, and a run of the saga on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.harness import Cluster, database
from tests.compensation_saga import saga


@pytest.fixture(params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    with (
        database(request.param, tmp_path) as url,
        Cluster.running(url, tmp_path, lease_seconds=5) as made,
    ):
        yield made


def start(
    cluster: Cluster, tmp_path: Path, workload: dict[str, Any], *, teardown: bool = False
) -> str:
    """A run of the saga (`teardown`: with its teardown steps) started on `cluster`."""
    _, text = saga(tmp_path, teardown=teardown)
    return cluster.run(text, workload)
