"""Read commands never create a database (issue 33, item 10): `list`, `status`,
`describe`, `events`, `logs`, `doctor`, `workers`, `approvals`, `usage` and `ui` on a
database that is not there exit 2 with `no milepost database at PATH` (for the default
path, how to start one) and leave no folder, file or table behind."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from milepost.cli import app
from milepost.cli.output import exit_code
from milepost.store.factory import START_HINT
from milepost.store.port import NoDatabase
from tests.pg import PgDatabases, session_databases
from tests.shared import clean_env

MILEPOST = str(Path(sys.executable).with_name("milepost"))
DEFAULT = ".milepost/milepost.db"

READS: list[list[str]] = [
    ["list"],
    ["status", "1"],
    ["describe", "1"],
    ["events", "1"],
    ["logs", "1"],
    ["doctor", "1"],
    ["workers"],
    ["approvals"],
    ["usage"],
    ["ui"],
]
ACTS: list[list[str]] = [
    # commands that act on a run (or an approval) the database already holds: a missing
    # database is the same refusal, never a new empty one
    ["cancel", "1"],
    ["resume", "1"],
    ["retry", "1", "s"],
    ["skip", "1", "s", "--result", "{}"],
    ["restart", "1"],
    ["rerun", "1"],
    ["approve", "1"],
    ["deny", "1", "--reason", "no"],
]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MILEPOST, *args], capture_output=True, text=True, timeout=120, env=clean_env(), cwd=cwd
    )


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_issues_three_reads_exit_2_and_leave_nothing(tmp_path: Path) -> None:
    # before: `status --db` made the folder and the file, `list` on a typo answered "no
    # executions" with exit 0, and `list` in any folder left .milepost/milepost.db behind
    missing = tmp_path / "nonexistent" / "dir" / "x.db"
    status = cli("status", "1", "--db", str(missing), cwd=tmp_path)
    assert status.returncode == 2, status.stderr
    assert status.stderr.strip() == f"error: no milepost database at {missing}"
    typo = cli("list", "--db", ".milepost/milepots.db", cwd=tmp_path)
    assert typo.returncode == 2 and "no executions" not in typo.stdout
    assert typo.stderr.strip() == "error: no milepost database at .milepost/milepots.db"
    listed = cli("list", cwd=tmp_path)
    assert listed.returncode == 2
    assert listed.stderr.strip() == f"error: no milepost database at {DEFAULT}{START_HINT}"
    assert "milepost run FILE" in listed.stderr
    assert tree(tmp_path) == []


@contextlib.contextmanager
def _in(folder: str) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


_SEGMENT = st.text(alphabet="abcxyz._- ", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    command=st.sampled_from(READS + ACTS),
    where=st.one_of(
        st.none(),  # the default, .milepost/milepost.db
        st.lists(_SEGMENT, min_size=1, max_size=4),  # a relative path, its folders missing
    ),
    absolute=st.booleans(),
    scheme=st.booleans(),
)
def test_every_read_or_act_on_a_missing_database_creates_nothing(
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    where: list[str] | None,
    absolute: bool,
    scheme: bool,
) -> None:
    for name in ("MILEPOST_DATABASE_URL", "MILEPOST_DATABASE_URLS", "MILEPOST_SERVER_URL"):
        monkeypatch.delenv(name, raising=False)
    with tempfile.TemporaryDirectory() as folder, _in(folder):
        path = None if where is None else str(Path(folder if absolute else ".", *where))
        url = None if path is None else (f"sqlite:///{path}" if scheme else path)
        args = [*command, *([] if url is None else ["--db", url])]
        result = CliRunner().invoke(app, args)
        shown = DEFAULT if path is None else str(Path(path))
        expected = f"no milepost database at {shown}" + (START_HINT if path is None else "")
        if isinstance(result.exception, NoDatabase):  # a read: raised through typer
            assert exit_code(result.exception) == 2
            assert result.exception.message == expected
        else:  # an act: said by the command itself, as `fail` says every refusal
            assert result.exit_code == 2, (args, result.output, result.exception)
            said, meant = (" ".join(t.split()) for t in (result.output, f"error: {expected}"))
            assert said == meant, args  # spaces aside: rich wraps a long line
        assert tree(Path(folder)) == [], args


def test_a_file_that_is_not_milepost_s_is_left_as_it_was(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.commit()
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, but long enough to be read as a header\n" * 4)
    before = {p: p.read_bytes() for p in (other, text)}
    for file in (other, text):
        done = cli("list", "--db", str(file), cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"error: no milepost database at {file}: ")
    assert {p: p.read_bytes() for p in (other, text)} == before
    assert tree(tmp_path) == ["notes.txt", "other.db"]  # no -wal, no -shm


@pytest.fixture(scope="module")
def pg() -> Iterator[PgDatabases]:
    yield from session_databases("milepost_reads")


def test_a_postgresql_database_without_milepost_tables_gets_none(pg: PgDatabases) -> None:
    url = pg.create(empty=True)
    try:
        done = subprocess.run(
            [MILEPOST, "status", "1", "--db", url],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env(),
        )
        assert done.returncode == 2, done.stderr
        assert f"error: no milepost database at {url}: the database holds no milepost" in (
            done.stderr
        )
        with psycopg.connect(url, connect_timeout=5) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchone()
        assert tables == (0,)
        # a database that does not exist is said as before (store/pg_probe.py)
        gone = url.rpartition("/")[0] + "/milepost_reads_no_such_database"
        done = subprocess.run(
            [MILEPOST, "list", "--db", gone],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env(),
        )
        assert done.returncode == 2, done.stderr
        assert "database 'milepost_reads_no_such_database' does not exist" in done.stderr
    finally:
        pg.drop(url)
