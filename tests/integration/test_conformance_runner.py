"""conformance.runner against a tiny suite built in a temporary directory.

The real NoETL suite runs in `make test` (`milepost conformance`); here the runner itself is
under test: one entry that passes, one whose expectation is deliberately wrong, one that
needs postgres (skipped), plus a rejected playbook and a timeout.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from milepost.conformance import services
from milepost.conformance.results import EntryResult, SuiteError, format_line
from milepost.conformance.runner import main, run_suite

PG_URL = "postgresql://alice:s3cret@127.0.0.1:1/testdb"
"""Port 1: nothing listens, so postgres stays unavailable even once the tool exists."""

HEADER = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: {name}
  path: tests/conformance/{name}
"""

PLAYBOOKS = {
    "greet.yaml": """\
workload:
  who: nobody
workflow:
  - step: start
    tool:
      kind: python
      input: {who: "{{ who }}"}
      code: |
        result = {"greeting": "hello " + who, "n": 3, "flag": True}
    next:
      arcs:
        - step: end
  - step: end
    tool: {kind: python, input: {}, code: 'result = {"status": "done"}'}
""",
    "wrong/compute.yaml": """\
workflow:
  - step: start
    tool: {kind: python, input: {}, code: 'result = {"total": 3}'}
    next:
      arcs:
        - step: compute
  - step: compute
    tool: {kind: python, input: {}, code: 'result = {"total": 1 + 2, "items": [1, 2, 3]}'}
""",
    "pg/needs_pg.yaml": """\
workflow:
  - step: start
    tool: {kind: python, input: {}, code: 'result = {}'}
""",
    "broken.yaml": """\
workflow:
  - step: start
    tool: {kind: python, input: {}}
""",
    "slow.yaml": """\
workflow:
  - step: start
    tool:
      kind: python
      input: {}
      code: |
        import time
        time.sleep(5)
        result = {}
""",
}

ENTRIES: list[dict[str, Any]] = [
    {
        "playbook": "greet.yaml",
        "needs": [],
        "workload": {"who": "${PG_USER}"},
        "expect": {
            "status": "COMPLETED",
            "steps_run": ["start", "end"],
            "run_counts": {"start": 1, "end": 1},
            "results": {
                "start": {"greeting": "hello alice", "n": {"$gte": 1, "$lte": 5}, "flag": True},
                "end": {"status": "done"},
            },
        },
    },
    {
        "playbook": "wrong/compute.yaml",
        "expect": {
            "status": ["COMPLETED", "FAILED"],
            "steps_run": ["start", "compute"],
            "results": {"compute": {"total": 4, "items": {"$len": 3}}},
        },
    },
    {
        "playbook": "pg/needs_pg.yaml",
        "needs": ["postgres"],
        "workload": {"pg_auth": "${PG_AUTH}"},
        "expect": {"status": "COMPLETED"},
    },
]

EXTRA_ENTRIES: list[dict[str, Any]] = [
    {
        "playbook": "broken.yaml",
        "expect": {"status": "FAILED", "steps_run": [], "error_matches": "(?is)code.*required"},
    },
    {"playbook": "slow.yaml", "timeout_s": 0.5, "expect": {"status": "COMPLETED"}},
]


def build_suite(root: Path, entries: list[dict[str, Any]]) -> Path:
    for rel, body in PLAYBOOKS.items():
        path = root / "playbooks" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        name = Path(rel).stem
        path.write_text(HEADER.format(name=name) + textwrap.dedent(body), encoding="utf-8")
    (root / "expectations.yaml").write_text(yaml.safe_dump(entries, sort_keys=False))
    return root


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    return build_suite(tmp_path, ENTRIES)


def by_playbook(entries: list[EntryResult]) -> dict[str, EntryResult]:
    return {e.playbook: e for e in entries}


def test_run_suite_passes_fails_and_skips(suite: Path) -> None:
    seen: list[str] = []
    result = run_suite(suite, pg_url=PG_URL, progress=lambda r: seen.append(r.playbook))

    assert seen == [e["playbook"] for e in ENTRIES]  # reported as each finished, in order
    assert (result.passed, result.failed, result.skipped) == (1, 1, 1)
    got = by_playbook(result.entries)

    ok = got["greet.yaml"]
    assert ok.outcome == "passed", ok.reasons
    assert ok.reasons == []
    assert ok.execution_id and ok.execution_id.isdigit()
    assert ok.seconds > 0

    bad = got["wrong/compute.yaml"]
    assert bad.outcome == "failed"
    assert len(bad.reasons) == 1, bad.reasons  # only `total` is wrong; `$len` holds
    assert "compute.total" in bad.reasons[0]
    assert "expected 4, got 3" in bad.reasons[0]

    skipped = got["pg/needs_pg.yaml"]
    assert skipped.outcome == "skipped"
    assert skipped.execution_id is None
    assert len(skipped.reasons) == 1 and skipped.reasons[0].startswith("needs postgres (")
    if importlib.util.find_spec("milepost.tools.postgres") is None:
        assert skipped.reasons == ["needs postgres (the postgres tool is not available yet)"]


def test_rejected_playbook_and_timeout(tmp_path: Path) -> None:
    suite = build_suite(tmp_path, [*EXTRA_ENTRIES, ENTRIES[0]])
    result = run_suite(suite, pg_url=PG_URL)
    got = by_playbook(result.entries)

    rejected = got["broken.yaml"]
    assert rejected.outcome == "passed", rejected.reasons  # FAILED at load, message matches
    assert rejected.execution_id is None

    slow = got["slow.yaml"]
    assert slow.outcome == "failed"
    assert slow.reasons and "timed out after 0.5s" in slow.reasons[0]
    assert "start" in slow.reasons[0]
    assert slow.seconds < 4.5

    # the timed-out run did not disturb the next entry
    assert got["greet.yaml"].outcome == "passed", got["greet.yaml"].reasons


def test_expectation_mistakes_fail_the_entry(tmp_path: Path) -> None:
    entries = [
        {"playbook": "greet.yaml", "expect": {"status": "COMPLETED", "stpes_run": []}},
        {"playbook": "missing.yaml", "expect": {"status": "COMPLETED"}},
        {"playbook": "broken.yaml", "expect": {"status": "COMPLETED", "steps_run": ["start"]}},
    ]
    result = run_suite(build_suite(tmp_path, entries), pg_url=PG_URL)
    greet, missing, broken = result.entries
    assert greet.outcome == "failed" and greet.reasons == ["unknown expectation 'stpes_run'"]
    assert missing.outcome == "failed" and "no playbook" in missing.reasons[0]
    assert broken.outcome == "failed"
    assert any(r.startswith("status: expected COMPLETED, got FAILED") for r in broken.reasons)
    assert any("steps_run: start did not complete" in r for r in broken.reasons)


def test_only_selects_entries(suite: Path) -> None:
    result = run_suite(suite, pg_url=PG_URL, only=["greet", "pg/*.yaml"])
    assert [e.playbook for e in result.entries] == ["greet.yaml", "pg/needs_pg.yaml"]
    with pytest.raises(SuiteError, match="nothing"):
        run_suite(suite, pg_url=PG_URL, only=["nothing"])


def test_main_prints_lines_and_closing_line(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(suite, pg_url=PG_URL, json_out=False, only=None)
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    assert lines[0].startswith("PASS  greet.yaml  (")
    assert lines[1].startswith("FAIL  wrong/compute.yaml: results: compute.total")
    assert lines[2].startswith("SKIP  pg/needs_pg.yaml: needs postgres (")
    assert lines[3] == "1 passed, 1 failed, 1 skipped"
    assert len(lines) == 4


def test_main_json(
    suite: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)  # outside CI a skipped entry fails nothing
    code = main(suite, pg_url=PG_URL, json_out=True, only=["greet.yaml", "needs_pg"])
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert code == 0
    assert (data["passed"], data["failed"], data["skipped"]) == (1, 0, 1)
    assert [e["outcome"] for e in data["entries"]] == ["passed", "skipped"]
    assert set(data["entries"][0]) == {"playbook", "outcome", "reasons", "seconds", "execution_id"}
    assert out.err.strip().splitlines()[-1] == "1 passed, 0 failed, 1 skipped"


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_skipped_entry_fails_the_suite(
    suite: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    monkeypatch.setenv("CI", ci)  # CI has every service: a skip there is one that is down
    assert main(suite, pg_url=PG_URL, json_out=False, only=["greet.yaml", "needs_pg"]) == 1
    said = capsys.readouterr()
    assert said.out.splitlines()[-1] == "1 passed, 0 failed, 1 skipped"
    assert "under CI every entry must run" in said.err


def test_main_reports_a_missing_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(tmp_path / "nope", pg_url=PG_URL) == 2
    assert "expectations.yaml" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("result", "line"),
    [
        (EntryResult("a/b.yaml", "passed", [], 0.31), "PASS  a/b.yaml  (0.3s)"),
        (
            EntryResult("x.yaml", "failed", ["r1", "r2\n  - more"], 1.0),
            "FAIL  x.yaml: r1; r2 - more  (1.0s)",
        ),
        (
            EntryResult("x.yaml", "skipped", ["needs postgres (why)"]),
            "SKIP  x.yaml: needs postgres (why)",
        ),
    ],
)
def test_format_line(result: EntryResult, line: str) -> None:
    assert format_line(result) == line


def test_substitute_walks_keys_and_values() -> None:
    values = {
        "PG_AUTH": "pg_local",
        "PG_PORT": "5432",
        "EXECUTION_ID": "7",
    }
    data = {
        "${PG_AUTH}": {"port": "${PG_PORT}", "n": 5, "list": ["id = '${EXECUTION_ID}'", None]},
        "keep": "${UNKNOWN} $PG_PORT",
    }
    assert services.substitute(data, values) == {
        "pg_local": {"port": "5432", "n": 5, "list": ["id = '7'", None]},
        "keep": "${UNKNOWN} $PG_PORT",
    }


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://postgres@127.0.0.1:5432/test",
            {
                "PG_HOST": "127.0.0.1",
                "PG_PORT": "5432",
                "PG_USER": "postgres",
                "PG_PASSWORD": "",
                "PG_DATABASE": "test",
            },
        ),
        (
            "postgresql://al%40ice:p%2Fw@db.example/warehouse",
            {
                "PG_HOST": "db.example",
                "PG_PORT": "5432",
                "PG_USER": "al@ice",
                "PG_PASSWORD": "p/w",
                "PG_DATABASE": "warehouse",
            },
        ),
    ],
)
def test_pg_placeholders(url: str, expected: dict[str, str]) -> None:
    assert services.pg_placeholders(url) == expected


def test_postgres_gate_checks_driver_and_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once `milepost.tools.postgres` exists, the gate moves on to psycopg and a connection."""
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        if name == "milepost.tools.postgres":
            return object()
        return real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    reason = services.postgres_unavailable(PG_URL)
    assert reason is not None  # nothing listens on port 1
    assert reason == "psycopg is not installed" or reason.startswith(
        "cannot connect to postgresql://alice:***@127.0.0.1:1/testdb"
    )
    assert "s3cret" not in reason
