"""`milepost ui`: the web UI over a local database, with a token for the session only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx
import pytest

from milepost.api.routers import ui
from tests.acceptance.harness import MILEPOST, Proc, free_port
from tests.shared import clean_env, wait_for

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
    port = free_port()
    log = tmp_path / "ui.log"
    proc = Proc("ui", [MILEPOST, "ui", "--db", db, "--port", str(port)], env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        token = wait_for(
            lambda: (m := re.search(r"mp_[\w-]+", log.read_text())) and m[0],
            f"the token to be printed ({log})",
            timeout=30,
        )

        def up() -> bool:
            try:
                return httpx.get(base + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, f"`milepost ui` to answer ({log})", timeout=30)
        assert f"{base}/ui/" in log.read_text()
        who = httpx.get(base + "/api/whoami", headers={"Authorization": f"Bearer {token}"})
        assert who.json()["role"] == "admin"
        page = httpx.get(base + "/ui/runs/1")
        assert page.status_code == (200 if (ui.DIST / "index.html").is_file() else 404)
    finally:
        assert proc.stop() == 0, log.read_text()
    listed = subprocess.run(
        [MILEPOST, "token", "list", "--db", db, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.strip() in ("[]", ""), listed.stdout
