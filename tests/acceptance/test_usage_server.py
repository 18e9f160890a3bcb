"""Usage and budgets through `milepost server` and a real worker process (DSL 10.6), on
SQLite and PostgreSQL: a python step assigning `usage` and an http step against a local
server reporting it; totals in the status, `GET /api/executions/{id}`, `GET /api/usage`
and `/metrics`; a budget stopping a run at the next step boundary."""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.acceptance.harness import MILEPOST, Cluster, database
from tests.e2e.test_usage import AGENT, REVIEW
from tests.receiver import serve
from tests.shared import metric_sample

pytestmark = pytest.mark.slow


def playbook(path: str, budget: str) -> str:
    return (
        f"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {{name: agent, path: {path}}}\n"
        + textwrap.dedent(AGENT.replace("BUDGET", budget))
    )


@pytest.fixture(params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    with database(request.param, tmp_path) as url, Cluster.running(url, tmp_path) as made:
        yield made


def test_usage_totals_and_a_budget_on_a_server_with_a_worker(cluster: Cluster) -> None:
    with serve() as api:
        api.reply = REVIEW
        xid = cluster.run(playbook("agents/writer", "timeout: 60"), {"url": api.url})
        status = cluster.wait(xid)
        assert status["status"] == "COMPLETED", status
        assert len(api.received) == 1
        over = cluster.run(
            playbook("agents/capped", "budget: {cost: 0.004, tokens: 5000}"), {"url": api.url}
        )
        capped = cluster.wait(over)
        assert len(api.received) == 1  # the capped run's review never ran
    assert status["usage"]["tokens"] == 1096 and status["usage"]["cost"] == 0.0061
    assert status["steps"]["review"]["result"]["data"] == {"verdict": "fine"}
    # the execution's totals, read from the store's projection
    detail = cluster.client.execution(xid)
    assert detail["usage"] == status["usage"]
    assert detail["usage"]["by"] == [
        {
            "provider": "anthropic",
            "model": "claude",
            "input_tokens": 100,
            "output_tokens": 20,
            "tokens": 120,
            "cost": 0.002,
        },
        {
            "provider": "openai",
            "model": "gpt-x",
            "input_tokens": 812,
            "output_tokens": 164,
            "tokens": 976,
            "cost": 0.0041,
        },
    ]
    assert capped["status"] == "FAILED"
    assert capped["error"]["kind"] == "budget"
    assert capped["error"]["message"] == "budget exceeded: cost 0.0041 > 0.004 after step 'start'"
    assert "review" not in capped["steps"]
    headers = {"Authorization": f"Bearer {cluster.admin_token}"}
    per_playbook = httpx.get(
        cluster.url + "/api/usage", params={"path": "agents/writer"}, headers=headers, timeout=10
    ).json()
    assert [(r["provider"], r["tokens"], r["cost"]) for r in per_playbook["items"]] == [
        ("anthropic", 120, 0.002),
        ("openai", 976, 0.0041),
    ]
    shown = subprocess.run(
        [MILEPOST, "usage", "--server", cluster.url, "--playbook", "agents/writer", "--json"],
        env={**cluster.env, "MILEPOST_TOKEN": cluster.admin_token},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == per_playbook["items"], (
        "milepost usage says what the API does"
    )
    text = httpx.get(cluster.url + "/metrics", headers=headers, timeout=10).text
    labels = {"playbook": "agents/writer", "provider": "openai", "model": "gpt-x"}
    assert metric_sample(text, "milepost_usage_tokens_total", **labels) == 976
    assert metric_sample(text, "milepost_usage_cost_total", **labels) == pytest.approx(0.0041)
    capped_labels = {**labels, "playbook": "agents/capped"}
    assert metric_sample(text, "milepost_usage_cost_total", **capped_labels) == pytest.approx(
        0.0041
    )
