"""`milepost approvals`, `approve` and `deny` (typer's CliRunner): on the local database, as
`--user`/`$MILEPOST_USER` with `--role`s, and on a server, as the token's user."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from milepost.api import auth
from milepost.cli import app, output
from milepost.engine.orchestrator import Orchestrator
from milepost.playbook import load
from milepost.store.sqlite import SQLiteStore
from tests.api.support import live_server
from tests.api.test_approvals import gated

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal wide enough for the table: a wrapped cell would split the ids."""
    monkeypatch.setattr(output.out, "width", 200)


def milepost(*args: str, **env: str) -> Any:
    clean = {
        "MILEPOST_SERVER_URL": "",
        "MILEPOST_TOKEN": "",
        "MILEPOST_USER": "",
        "MILEPOST_DATABASE_URL": "",
    }
    return runner.invoke(app, list(args), env={**clean, **env})


def start_gated(db: Path, text: str, started_by: str = "user:dora") -> int:
    """A gated run on a local database, left waiting for its approval (nobody drives it)."""
    store = SQLiteStore(db)
    try:
        orchestrator = Orchestrator(store, machine_id=7)
        pb = load.load_text(text)
        _, version = orchestrator.register(text, pb)
        xid, _ = orchestrator.start(pb, version, {}, started_by=started_by)
        return xid
    finally:
        store.close()


def listed(db: Path, *args: str) -> list[dict[str, Any]]:
    done = milepost("approvals", "--db", str(db), "--json", *args)
    assert done.exit_code == 0, done.output
    items: list[dict[str, Any]] = json.loads(done.stdout)
    return items


def test_approvals_shows_what_waits_for_whom_and_how_long(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    xid = start_gated(db, gated())
    other = start_gated(db, gated("r2", approvers="[user:alice]", quorum=1, risk="low"))
    [item] = listed(db, "--execution", str(xid))
    assert (item["execution_id"], item["status"], item["risk"], item["quorum"]) == (
        str(xid),
        "pending",
        "high",
        2,
    )
    assert [i["execution_id"] for i in listed(db)] == [str(xid), str(other)]
    shown = milepost("approvals", "--db", str(db))
    assert shown.exit_code == 0, shown.output
    for text in (item["approval_id"], "role:finance, user:bob", "0/2", "high", "59m", "pending"):
        assert text in shown.stdout, text
    bad = milepost("approvals", "--db", str(db), "--status", "open")
    assert bad.exit_code == 2 and "--status 'open'" in bad.output


def test_approve_and_deny_on_the_local_database(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    xid = start_gated(db, gated(approvers="[role:finance, user:bob, user:dora]"))
    [item] = listed(db)
    aid = item["approval_id"]
    first = milepost(
        "approve",
        aid,
        "--db",
        str(db),
        "--user",
        "alice",
        "--role",
        "finance",
        "--reason",
        "invoice checked",
    )
    assert first.exit_code == 0, first.output
    assert f"approval {aid}: approve recorded; pending (1/2 approvals)" in first.stdout
    again = milepost("approve", aid, "--db", str(db), "--user", "alice", "--role", "finance")
    assert again.exit_code == 2 and "already" in again.output
    stranger = milepost("approve", aid, "--db", str(db), "--user", "carol")
    assert stranger.exit_code == 2 and "may not decide" in stranger.output
    starter = milepost("approve", aid, "--db", str(db), MILEPOST_USER="dora")
    assert starter.exit_code == 2 and "may not approve" in starter.output  # started the run
    no_reason = milepost("deny", aid, "--db", str(db), "--user", "bob")
    assert no_reason.exit_code == 2 and "--reason" in no_reason.output
    denied = milepost("deny", aid, "--db", str(db), "--reason", "over budget", MILEPOST_USER="bob")
    assert denied.exit_code == 0, denied.output
    assert f"milepost resume {xid}" in denied.stdout  # the vote waits for the run's driver
    [row] = listed(db, "--status", "all")
    assert row["approved"] == 1
    missing = milepost("approve", "424242", "--db", str(db), "--user", "alice")
    assert missing.exit_code == 2 and "no approval 424242" in missing.output


def test_approvals_and_approve_through_a_server(tmp_path: Path) -> None:
    with live_server(f"sqlite:///{tmp_path / 's.db'}") as server:
        store = server.services.store
        alice = auth.create_token(
            store, "approver", "a", time.time(), user="alice", approver_roles=["finance"]
        )
        bob = auth.create_token(store, "approver", "b", time.time(), user="bob")
        engine = server.services.engine
        pb = load.load_text(gated())
        _, version = engine.register(gated(), pb)
        xid, _ = engine.start(pb, version, {}, started_by="user:dora")
        as_alice = {"MILEPOST_SERVER_URL": server.url, "MILEPOST_TOKEN": alice}
        shown = milepost("approvals", "--json", **as_alice)
        assert shown.exit_code == 0, shown.output
        [item] = json.loads(shown.stdout)
        assert item["execution_id"] == str(xid)
        voted = milepost("approve", item["approval_id"], "--json", **as_alice)
        assert voted.exit_code == 0, voted.output
        assert json.loads(voted.stdout)["votes"][0]["identity"] == "user:alice"
        twice = milepost("approve", item["approval_id"], **as_alice)
        assert twice.exit_code == 2 and "already" in twice.output
        done = milepost("approve", item["approval_id"], "--server", server.url, MILEPOST_TOKEN=bob)
        assert done.exit_code == 0, done.output
        assert "granted (2/2 approvals)" in done.stdout
        left = milepost("approvals", "--server", server.url, MILEPOST_TOKEN=bob)
        assert left.exit_code == 0 and "no pending approvals" in left.stdout
