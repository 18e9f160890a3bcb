"""Secrets on a real server and worker: the worker's log, the stored log, what a step gets."""

from __future__ import annotations

from collections.abc import Callable

from tests.acceptance.harness import Cluster
from tests.acceptance.test_cluster import db_url, make_cluster, playbook
from tests.shared import wait_for

__all__ = ["db_url", "make_cluster"]  # the fixtures this module uses

PASSWORD = "acc-Pa55-word-4417"
TOKEN = "ghp_" + "Zq8Lm2Nx4Vb6Cd1Ef3Gh5Jk7" + "Pr9St0Uw2Yz4"


def test_a_worker_logs_step_output_redacted_and_a_viewer_never_sees_a_secret(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster()
    cluster.start_server()
    worker = cluster.start_worker()
    cluster.client.put_credential(
        "acc_db",
        "postgres",
        {"host": "db.acc.internal", "user": "acc_etl", "password": PASSWORD, "database": "w"},
    )
    xid = cluster.run(
        playbook(
            "acceptance/secrets",
            """\
    keychain:
      - {name: db, kind: credential, credential: acc_db}
    workflow:
      - step: connect
        tool:
          kind: python
          input: {host: "{{ keychain.db.host }}", user: "{{ keychain.db.user }}",
                  pw: "{{ keychain.db.password }}", token: "{{ workload.api_token }}"}
          code: |
            print(f"connecting to {host} as {user} with {pw}, token {token}")
            result = {"said": f"connected to {host} as {user}", "token_ok": token.startswith("ghp_Zq")}
    """,
        ),
        {"api_token": TOKEN},
    )
    status = cluster.wait(xid)
    assert status["status"] == "COMPLETED", status
    result = status["steps"]["connect"]["result"]
    assert result == {"said": "connected to db.acc.internal as acc_etl", "token_ok": True}
    line = wait_for(
        lambda: next(
            (ln for ln in worker.log.read_text().splitlines() if "connecting to" in ln), None
        ),
        "the step's output in the worker's log",
        timeout=15,
    )
    # the workload's token is masked as a sensitive value, before its pattern could
    assert "connecting to db.acc.internal as acc_etl with ***, token ***" in line
    assert f"execution {xid}" in line and "step connect" in line
    log_text = worker.log.read_text()
    assert PASSWORD not in log_text and TOKEN not in log_text
    stored = str(cluster.client.events(xid))
    assert PASSWORD not in stored and TOKEN not in stored
    assert "'api_token': '***'" in stored
