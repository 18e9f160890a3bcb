"""The server-side commands: `server`, `token create`, `db upgrade`, `secret-key`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from cryptography.fernet import Fernet

from milepost.api import auth
from milepost.store import factory
from tests.shared import wait_for

MILEPOST = str(Path(sys.executable).with_name("milepost"))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_")}
    return subprocess.run(
        [MILEPOST, *args], capture_output=True, text=True, timeout=120, env={**base, **(env or {})}
    )


def test_secret_key_prints_a_new_fernet_key() -> None:
    first, second = cli("secret-key"), cli("secret-key")
    assert first.returncode == 0 and first.stdout.strip() != second.stdout.strip()
    Fernet(first.stdout.strip().encode())  # a valid key


def test_token_create_prints_a_token_whose_hash_is_stored(db_url: str) -> None:
    made = cli("token", "create", "--role", "worker", "--name", "w-1", "--db", db_url)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    store = factory.open_store(db_url)
    try:
        row = store.get_token(auth.token_hash(token))
        assert row is not None and (row.role, row.name) == ("worker", "w-1")
    finally:
        store.close()
    bad = cli("token", "create", "--role", "root", "--db", db_url)
    assert bad.returncode == 2 and "unknown role" in bad.stderr


def test_token_create_names_the_user_and_approver_roles_of_a_token(db_url: str) -> None:
    made = cli(
        "token",
        "create",
        "--role",
        "approver",
        "--user",
        "alice",
        "--approver-role",
        "finance",
        "--approver-role",
        "ops",
        "--db",
        db_url,
    )
    assert made.returncode == 0, made.stderr
    store = factory.open_store(db_url)
    try:
        row = store.get_token(auth.token_hash(made.stdout.strip()))
        assert row is not None
        assert (row.role, row.user, row.approver_roles) == ("approver", "alice", ("finance", "ops"))
    finally:
        store.close()
    bad = cli("token", "create", "--role", "approver", "--user", "al ice", "--db", db_url)
    assert bad.returncode == 2 and "--user 'al ice'" in bad.stderr


def test_token_create_reads_the_database_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    made = cli("token", "create", "--role", "viewer", env={"MILEPOST_DATABASE_URL": url})
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "env.db").exists()


def test_db_upgrade_migrates_and_says_the_version(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'up.db'}"
    done = cli("db", "upgrade", "--db", url)
    assert done.returncode == 0, done.stderr
    assert "schema version" in done.stdout and str(tmp_path / "up.db") in done.stdout
    again = cli("db", "upgrade", "--db", url)
    assert again.returncode == 0 and again.stdout == done.stdout


def test_server_without_a_secret_key_refuses_to_start(tmp_path: Path) -> None:
    proc = cli("server", "--db", f"sqlite:///{tmp_path / 's.db'}")
    assert proc.returncode == 2 and "MILEPOST_SECRET_KEY" in proc.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_server_serves_the_api_with_a_token_made_by_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'srv.db'}"
    token = cli("token", "create", "--role", "viewer", "--db", url).stdout.strip()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_")}
    env["MILEPOST_SECRET_KEY"] = Fernet.generate_key().decode()
    proc = subprocess.Popen(
        [MILEPOST, "server", "--port", str(port), "--db", url, "--log-level", "warning"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            assert proc.poll() is None, proc.communicate()[1].decode()
            try:
                return httpx2.get(f"{base}/health", timeout=1).status_code == 200
            except httpx2.TransportError:
                return False

        wait_for(healthy, "the server to answer /health", timeout=30)
        headers = {"Authorization": f"Bearer {token}"}
        listing = httpx2.get(f"{base}/api/executions", headers=headers, timeout=5)
        assert listing.status_code == 200 and listing.json()["items"] == []
        assert httpx2.get(f"{base}/api/executions", timeout=5).status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
