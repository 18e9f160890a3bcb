"""`milepost ui`: the web UI over a local database, with a token for the session only."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from milepost.api.routers import ui
from tests.acceptance.harness import MILEPOST, milepost_ui
from tests.shared import clean_env

pytestmark = pytest.mark.slow


def test_milepost_ui_serves_a_local_database_and_drops_its_token_when_it_stops(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "local.db")
    env = clean_env()
    env.pop("MILEPOST_SECRET_KEY", None)  # it needs none: a key of its own for the session
    # a look at what ran: `ui` opens a database that is there, never a new one
    made = subprocess.run(
        [MILEPOST, "db", "upgrade", "--db", db], env=env, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    with milepost_ui(db, tmp_path, timeout=30) as (base, token, proc):
        log = proc.log
        assert f"{base}/ui/" in log.read_text()
        who = httpx.get(base + "/api/whoami", headers={"Authorization": f"Bearer {token}"})
        assert who.json()["role"] == "admin"
        page = httpx.get(base + "/ui/runs/1")
        assert page.status_code == (200 if (ui.DIST / "index.html").is_file() else 404)
        assert proc.stop() == 0, log.read_text()
    listed = subprocess.run(
        [MILEPOST, "token", "list", "--db", db, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.strip() in ("[]", ""), listed.stdout
