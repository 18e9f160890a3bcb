"""The NoETL conformance runner: run every entry of `expectations.yaml` and check it.

The format is in the suite's README (`shared/conformance/noetl/README.md`). `run_suite`
returns a `SuiteResult`; `main` prints one line per playbook as it finishes (or one JSON
object) and the closing `N passed, M failed, K skipped` line.

One SQLite store (a fresh file in a temporary directory) serves the whole suite; each entry
runs in its own `EmbeddedEngine` (own workers and tool runtime, so a hung or crashed entry
cannot leak work into the next one), in which every playbook of the suite is registered
first so sub-playbooks resolve by `metadata.path`. Entries run one at a time: the mock API
keeps global counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import importlib
import importlib.util
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import yaml

from milepost.client import MilepostClient, WaitTimeout
from milepost.conformance.matching import match
from milepost.core import state as st
from milepost.credentials import Vault, new_key
from milepost.engine import summaries
from milepost.engine.embedded import EmbeddedEngine
from milepost.errors import PlaybookInvalid
from milepost.playbook import load, model
from milepost.store.sqlite import SQLiteStore

__all__ = [
    "DEFAULT_PG_URL",
    "EntryResult",
    "SuiteResult",
    "format_line",
    "main",
    "run_suite",
]

log = logging.getLogger(__name__)

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_TIMEOUT_S = 60.0
PG_AUTH = "pg_local"
"""Name under which the test Postgres credential is registered (`${PG_AUTH}`)."""

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
KNOWN_NEEDS = ("mock_api", "postgres", "duckdb", "engine_http")
_ENTRY_KEYS = frozenset(
    {"playbook", "needs", "workload", "credentials", "requires_playbooks", "timeout_s", "note",
     "expect"}
)  # fmt: skip
_EXPECT_KEYS = frozenset(
    {"status", "steps_run", "steps_include", "steps_not_run", "steps_failed", "one_of",
     "run_counts", "results", "error_matches", "child_executions", "db_checks"}
)  # fmt: skip
_PLACEHOLDER_RE = re.compile(r"\$\{([A-Z_]+)\}")


# --------------------------------------------------------------------------- results


@dataclass
class EntryResult:
    playbook: str
    outcome: str
    """`passed`, `failed` or `skipped`."""
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0
    execution_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SuiteResult:
    entries: list[EntryResult] = field(default_factory=list)

    def _count(self, outcome: str) -> int:
        return sum(1 for e in self.entries if e.outcome == outcome)

    @property
    def passed(self) -> int:
        return self._count(PASSED)

    @property
    def failed(self) -> int:
        return self._count(FAILED)

    @property
    def skipped(self) -> int:
        return self._count(SKIPPED)

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": [e.to_dict() for e in self.entries],
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
        }

    def closing_line(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"


class SuiteError(Exception):
    """The suite itself cannot run (missing directory, unreadable expectations, bad `only`)."""


# --------------------------------------------------------------------------- public API


def run_suite(
    directory: str | Path,
    *,
    pg_url: str = DEFAULT_PG_URL,
    only: list[str] | None = None,
    progress: Callable[[EntryResult], None] | None = None,
    server: str | None = None,
    token: str | None = None,
) -> SuiteResult:
    """Run the entries of `directory/expectations.yaml` one at a time and check each.

    Args:
        directory: the suite folder (`expectations.yaml` and `playbooks/`).
        pg_url: the test database, for `postgres` entries, `${PG_*}` and `db_checks`.
        only: run only entries whose playbook path equals, glob-matches or has the stem
            of one of these; the others are left out of the result.
        progress: called with each entry's result as soon as it is known.
        server: run through this milepost server (its workers run the tools) instead of
            an embedded engine; `token` (else MILEPOST_TOKEN) authenticates.

    Raises:
        SuiteError: the suite cannot be read, or an `only` pattern selects nothing.
    """
    root = Path(directory)
    entries = _select(_read_expectations(root), only)
    catalog = _Catalog.load(root / "playbooks")
    needed = {n for e in entries for n in _needs(e)}
    with (
        _services(needed, pg_url, engine_url=server) as services,
        tempfile.TemporaryDirectory(prefix="milepost-conformance-") as tmp,
    ):
        if server is not None:
            with MilepostClient(server, token) as client:
                target: _Target = _ServerTarget(catalog, client)
                return asyncio.run(_run_all(entries, root, catalog, services, target, progress))
        store = SQLiteStore(Path(tmp) / "conformance.db")
        try:
            target = _EmbeddedTarget(catalog, store)
            return asyncio.run(_run_all(entries, root, catalog, services, target, progress))
        finally:
            store.close()


def format_line(r: EntryResult) -> str:
    """`PASS  path  (0.3s)`, `FAIL  path: reason; reason  (1.2s)` or `SKIP  path: reason`."""
    reasons = "; ".join(_one_line(x) for x in r.reasons)
    if r.outcome == PASSED:
        return f"PASS  {r.playbook}  ({r.seconds:.1f}s)"
    if r.outcome == SKIPPED:
        return f"SKIP  {r.playbook}: {reasons}"
    return f"FAIL  {r.playbook}: {reasons}  ({r.seconds:.1f}s)"


def main(
    directory: str | Path,
    *,
    pg_url: str = DEFAULT_PG_URL,
    json_out: bool = False,
    only: list[str] | None = None,
    server: str | None = None,
    token: str | None = None,
) -> int:
    """Run the suite and print it; 0 when nothing failed, 1 when an entry failed, 2 on error.

    Text mode prints one line per playbook as it finishes, then the closing line
    `N passed, M failed, K skipped`. With `json_out` stdout holds exactly one JSON object
    `{entries, passed, failed, skipped}` and the closing line goes to stderr.
    """

    def show(r: EntryResult) -> None:
        print(format_line(r), flush=True)

    try:
        result = run_suite(directory, pg_url=pg_url, only=only, server=server, token=token,
                           progress=None if json_out else show)  # fmt: skip
    except SuiteError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    if json_out:
        print(json.dumps(result.to_dict(), indent=2, default=str), flush=True)
        print(result.closing_line(), file=sys.stderr, flush=True)
    else:
        print(result.closing_line(), flush=True)
    return 1 if result.failed else 0


# --------------------------------------------------------------------------- expectations


def _read_expectations(root: Path) -> list[dict[str, Any]]:
    path = root / "expectations.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SuiteError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, list) or not all(
        isinstance(e, dict) and isinstance(e.get("playbook"), str) for e in data
    ):
        raise SuiteError(f"{path}: expected a list of entries, each with a `playbook` path")
    return data


def _select(entries: list[dict[str, Any]], only: list[str] | None) -> list[dict[str, Any]]:
    if not only:
        return entries

    def hit(pattern: str, playbook: str) -> bool:
        return (pattern == playbook or fnmatch.fnmatchcase(playbook, pattern)
                or Path(playbook).stem == pattern)  # fmt: skip

    unused = [p for p in only if not any(hit(p, e["playbook"]) for e in entries)]
    if unused:
        raise SuiteError(f"no entry matches {', '.join(unused)}")
    return [e for e in entries if any(hit(p, e["playbook"]) for p in only)]


def _needs(entry: dict[str, Any]) -> list[str]:
    needs = entry.get("needs") or []
    return [str(n) for n in needs] if isinstance(needs, list) else [str(needs)]


# --------------------------------------------------------------------------- services


@dataclass
class _Services:
    """What the run can offer: placeholder values and, for each unmet need, why."""

    placeholders: dict[str, str]
    unavailable: dict[str, str]
    pg_url: str
    postgres: bool = False

    def missing(self, needs: list[str]) -> list[str]:
        return [f"needs {n} ({self.unavailable[n]})" for n in needs if n in self.unavailable]


@contextlib.contextmanager
def _services(needed: set[str], pg_url: str, engine_url: str | None = None) -> Iterator[_Services]:
    """Start what the selected entries need (the mock API) and probe the rest."""
    placeholders = {"PG_AUTH": PG_AUTH, **_pg_placeholders(pg_url)}
    unavailable: dict[str, str] = {}
    for need in sorted(needed - set(KNOWN_NEEDS)):
        unavailable[need] = "unknown service"
    server = None
    if needed & {"mock_api", "engine_http"}:
        try:
            from milepost.conformance.mock_api import MockServer

            server = MockServer().start()
        except Exception as exc:  # no mock: its entries are skipped, the rest still run
            why = f"the mock API did not start: {type(exc).__name__}: {exc}"
            unavailable.update({"mock_api": why, "engine_http": why})
        else:
            placeholders["MOCK_API_URL"] = server.url
            # the engine's own HTTP front end when running through a server; embedded
            # there is none, and README says any server whose /health answers 200 JSON
            # will do: the mock's does
            placeholders["ENGINE_URL"] = (engine_url or server.url).rstrip("/")
    if "duckdb" in needed and importlib.util.find_spec("duckdb") is None:
        unavailable["duckdb"] = "the duckdb package is not installed"
    postgres = False
    if "postgres" in needed:
        why_not = _postgres_unavailable(pg_url)
        if why_not is None:
            postgres = True
        else:
            unavailable["postgres"] = why_not
    try:
        yield _Services(placeholders, unavailable, pg_url, postgres)
    finally:
        if server is not None:
            server.stop()


def _postgres_unavailable(pg_url: str) -> str | None:
    """Why `postgres` entries cannot run, or None: the tool, the driver, a connection."""
    if importlib.util.find_spec("milepost.tools.postgres") is None:
        return "the postgres tool is not available yet"
    try:
        psycopg = importlib.import_module("psycopg")
    except ImportError:
        return "psycopg is not installed"
    try:
        psycopg.connect(pg_url, connect_timeout=5).close()
    except Exception as exc:
        return f"cannot connect to {_redact(pg_url)}: {_one_line(str(exc))}"
    return None


def _pg_placeholders(pg_url: str) -> dict[str, str]:
    parts = urlsplit(pg_url)
    user = unquote(parts.username or "postgres")
    return {
        "PG_HOST": parts.hostname or "127.0.0.1",
        "PG_PORT": str(parts.port or 5432),
        "PG_USER": user,
        "PG_PASSWORD": unquote(parts.password or ""),
        "PG_DATABASE": unquote(parts.path.lstrip("/")) or user,
    }


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def substitute(value: Any, placeholders: dict[str, str]) -> Any:
    """`value` with every known `${NAME}` replaced inside strings (keys included)."""
    if isinstance(value, str):
        return _PLACEHOLDER_RE.sub(lambda m: placeholders.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {substitute(k, placeholders): substitute(v, placeholders) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, placeholders) for v in value]
    return value


# --------------------------------------------------------------------------- catalog


@dataclass
class _Catalog:
    """Every playbook of the suite, loaded once: relative path -> (text, playbook) or error."""

    root: Path
    loaded: dict[str, tuple[str, model.Playbook]]
    rejected: dict[str, PlaybookInvalid]

    @classmethod
    def load(cls, root: Path) -> _Catalog:
        loaded: dict[str, tuple[str, model.Playbook]] = {}
        rejected: dict[str, PlaybookInvalid] = {}
        for path in sorted([*root.rglob("*.yaml"), *root.rglob("*.yml")]):
            rel = path.relative_to(root).as_posix()
            try:
                loaded[rel] = (path.read_text(encoding="utf-8"), load.load_file(path))
            except PlaybookInvalid as exc:
                rejected[rel] = exc
            except OSError as exc:
                rejected[rel] = PlaybookInvalid([f"cannot read {path}: {exc}"], str(path))
        return cls(root, loaded, rejected)

    def register_all(self, engine: EmbeddedEngine) -> None:
        for text, playbook in self.loaded.values():
            engine.orchestrator.register(text, playbook)


# --------------------------------------------------------------------------- running


@dataclass
class _Run:
    """What one entry produced: a final (or timed-out) state, or a rejection message."""

    summary: dict[str, Any] | None = None
    reason: str | None = None
    rejected: str | None = None
    timed_out: bool = False
    children: int | None = None


async def _run_all(
    entries: list[dict[str, Any]],
    root: Path,
    catalog: _Catalog,
    services: _Services,
    target: _Target,
    progress: Callable[[EntryResult], None] | None,
) -> SuiteResult:
    suite = SuiteResult()
    for entry in entries:
        started = time.perf_counter()
        try:
            result = await _run_entry(entry, root, catalog, services, target)
        except Exception as exc:  # a runner or engine bug fails this entry, not the suite
            log.exception("conformance entry crashed", extra={"playbook": entry["playbook"]})
            result = EntryResult(entry["playbook"], FAILED,
                                 [f"runner error: {type(exc).__name__}: {exc}"])  # fmt: skip
        result.seconds = time.perf_counter() - started
        suite.entries.append(result)
        if progress is not None:
            progress(result)
    return suite


async def _run_entry(
    entry: dict[str, Any], root: Path, catalog: _Catalog, services: _Services, target: _Target
) -> EntryResult:
    name = entry["playbook"]
    problems = _entry_problems(entry, root, catalog)
    if problems:
        return EntryResult(name, FAILED, problems)
    missing = services.missing(_needs(entry))
    if missing:
        return EntryResult(name, SKIPPED, missing)
    expect: dict[str, Any] = entry["expect"]
    workload = substitute(entry.get("workload") or {}, services.placeholders)
    credentials = substitute(entry.get("credentials") or {}, services.placeholders)
    timeout = float(entry.get("timeout_s") or DEFAULT_TIMEOUT_S)

    if name in catalog.rejected:
        run = _Run(rejected=catalog.rejected[name].message)
        xid = None
    else:
        text, playbook = catalog.loaded[name]
        try:
            run, xid = await target.execute(text, playbook, workload, credentials, timeout)
        except Exception as exc:  # the engine failing on one entry fails that entry only
            log.exception("conformance run crashed", extra={"playbook": name})
            return EntryResult(name, FAILED, [f"engine error: {type(exc).__name__}: {exc}"])

    if run.timed_out:
        reasons = [f"timed out after {timeout:g}s; {_progress_text(run.summary)}"]
    else:
        reasons = _check(expect, run, services, xid)
    return EntryResult(name, FAILED if reasons else PASSED, reasons,
                       execution_id=None if xid is None else str(xid))  # fmt: skip


def _entry_problems(entry: dict[str, Any], root: Path, catalog: _Catalog) -> list[str]:
    """Mistakes in the entry itself; reported as failures so that a typo cannot pass."""
    problems = [f"unknown entry field {k!r}" for k in entry if k not in _ENTRY_KEYS]
    expect = entry.get("expect")
    if not isinstance(expect, dict) or "status" not in expect:
        problems.append("entry has no expect.status")
    else:
        problems += [f"unknown expectation {k!r}" for k in expect if k not in _EXPECT_KEYS]
    name = entry["playbook"]
    if name not in catalog.loaded and name not in catalog.rejected:
        problems.append(f"no playbook {root / 'playbooks' / name}")
    for required in entry.get("requires_playbooks") or []:
        if required in catalog.rejected:
            problems.append(f"required playbook {required} is rejected: "
                            f"{catalog.rejected[required].message}")  # fmt: skip
        elif required not in catalog.loaded:
            problems.append(f"required playbook {required} not found")
    return problems


class _Target(Protocol):
    async def execute(self, text: str, playbook: model.Playbook, workload: dict[str, Any],
                      credentials: dict[str, Any], timeout: float) -> tuple[_Run, int | None]: ...


@dataclass
class _EmbeddedTarget:
    """Each entry in its own embedded engine on the suite's SQLite file."""

    catalog: _Catalog
    store: SQLiteStore

    async def execute(self, text: str, playbook: model.Playbook, workload: dict[str, Any],
                      credentials: dict[str, Any], timeout: float) -> tuple[_Run, int | None]:
        # the suite's credentials live only as long as the suite: an ephemeral key unless
        # the environment provides one
        vault = Vault(self.store, os.environ.get("MILEPOST_SECRET_KEY") or new_key())
        async with EmbeddedEngine(self.store, vault=vault) as engine:
            self.catalog.register_all(engine)
            _register_credentials(engine, credentials)
            xid = engine.start(playbook, text, workload)
            try:
                state = await engine.wait(xid, timeout=timeout)
            except TimeoutError:
                state = engine.state(xid)
                with contextlib.suppress(Exception):  # best effort: leave a terminal record
                    engine.cancel(xid)
                return _Run(summary=summaries.execution_summary(state), timed_out=True), xid
            return _Run(summary=summaries.execution_summary(state), reason=summaries.failure_reason(state),
                        children=_count_children(self.store.list_executions, xid)), xid  # fmt: skip


class _ServerTarget:
    """Through a milepost server: register, execute, wait, read the status over HTTP."""

    def __init__(self, catalog: _Catalog, client: MilepostClient) -> None:
        self.client = client
        self.registered = False
        self.catalog = catalog

    async def execute(self, text: str, playbook: model.Playbook, workload: dict[str, Any],
                      credentials: dict[str, Any], timeout: float) -> tuple[_Run, int | None]:
        return await asyncio.to_thread(self._execute, playbook, workload, credentials, timeout)

    def _execute(self, playbook: model.Playbook, workload: dict[str, Any],
                 credentials: dict[str, Any], timeout: float) -> tuple[_Run, int | None]:
        if not self.registered:
            for text, _ in self.catalog.loaded.values():
                self.client.register(text)
            self.registered = True
        for name, spec in credentials.items():
            self.client.put_credential(name, spec.get("type"), spec.get("data") or {})
        xid = int(self.client.execute(playbook.path, workload))
        try:
            status = self.client.wait(xid, timeout=timeout)  # the final status reply
        except WaitTimeout:
            status = self.client.status(xid)
            with contextlib.suppress(Exception):
                self.client.cancel(xid)
            return _Run(summary=status, timed_out=True), xid
        error = status.get("error") or {}
        reason = error.get("reason") or error.get("message") if status["status"] == "FAILED" else None
        return _Run(summary=status, reason=reason,
                    children=_count_children(self._executions, xid)), xid  # fmt: skip

    def _executions(self, *, limit: int, offset: int) -> list[Any]:
        return [_Row(int(i["parent_execution_id"]) if i.get("parent_execution_id") else None)
                for i in self.client.executions(limit=limit, offset=offset)]  # fmt: skip


@dataclass
class _Row:
    parent_execution_id: int | None


def _register_credentials(engine: EmbeddedEngine, credentials: dict[str, Any]) -> None:
    """Register `name -> {type, data}` credentials before the run.

    They are encrypted in the engine's vault and resolved only when a step needs them.
    """
    for cred_name, spec in credentials.items():
        engine.register_credential(cred_name, spec.get("type"), spec.get("data") or {})


def _count_children(list_executions: Callable[..., list[Any]], xid: int) -> int:
    """Executions whose parent is `xid` (the listing has every execution; filter here)."""
    count, offset, page = 0, 0, 500
    while True:
        rows = list_executions(limit=page, offset=offset)
        count += sum(1 for r in rows if r.parent_execution_id == xid)
        if len(rows) < page:
            return count
        offset += page


def _progress_text(summary: dict[str, Any] | None) -> str:
    if not summary:
        return "no state"
    steps = summary["steps"]
    running = [n for n, s in steps.items() if s["status"] == st.RUNNING]
    done = [n for n, s in steps.items() if s["status"] == st.COMPLETED]
    return (f"status {summary['status']}, running: {', '.join(running) or 'none'}, "
            f"completed: {', '.join(done) or 'none'}")  # fmt: skip


# --------------------------------------------------------------------------- checks


def _check(expect: dict[str, Any], run: _Run, services: _Services, xid: int | None) -> list[str]:
    """Every failing check of `expect` against `run`, in README order."""
    status: str
    reason: str | None
    steps: dict[str, Any]
    if run.rejected is not None:
        status, reason, steps = st.FAILED, run.rejected, {}
    else:
        assert run.summary is not None
        status, reason, steps = run.summary["status"], run.reason, run.summary["steps"]
    reasons: list[str] = []

    wanted = expect["status"]
    allowed = [str(s).upper() for s in (wanted if isinstance(wanted, list) else [wanted])]
    if status not in allowed:
        why = f" ({_one_line(reason)})" if reason else ""
        reasons.append(f"status: expected {' or '.join(allowed)}, got {status}{why}")

    def with_status(*statuses: str) -> set[str]:
        return {n for n, s in steps.items() if s["status"] in statuses}

    completed = with_status(st.COMPLETED)
    reasons += _check_steps(expect, steps, completed, with_status(st.FAILED))
    for step, want in (expect.get("run_counts") or {}).items():
        got = steps.get(step, {}).get("runs", 0)
        if got != want:
            reasons.append(f"run_counts: step {step} ran {got} time(s), expected {want}")
    for step, want in (expect.get("results") or {}).items():
        if step not in steps or steps[step]["status"] not in (st.COMPLETED, st.FAILED):
            state_text = steps[step]["status"] if step in steps else "did not run"
            reasons.append(f"results: step {step} has no result ({state_text})")
            continue
        reasons += [f"results: {m}" for m in match(want, steps[step]["result"], step)]
    if "error_matches" in expect and status == st.FAILED:
        pattern = str(expect["error_matches"])
        if reason is None or re.search(pattern, reason) is None:
            reasons.append(f"error_matches: /{pattern}/ not found in failure reason "
                           f"{_one_line(reason) if reason else '(none)'}")  # fmt: skip
    if "child_executions" in expect:
        if run.children is None:
            reasons.append("child_executions check not supported yet")
        elif run.children != expect["child_executions"]:
            reasons.append(f"child_executions: expected {expect['child_executions']}, "
                           f"got {run.children}")  # fmt: skip
    if expect.get("db_checks"):
        reasons += _db_checks(expect["db_checks"], services, xid)
    return reasons


def _check_steps(
    expect: dict[str, Any], steps: dict[str, Any], completed: set[str], failed: set[str]
) -> list[str]:
    reasons: list[str] = []

    def status_of(step: str) -> str:
        return str(steps[step]["status"]) if step in steps else "not run"

    if "steps_run" in expect:
        want = set(expect["steps_run"] or [])
        missing, extra = sorted(want - completed), sorted(completed - want)
        if missing or extra:
            parts = [f"{s} did not complete ({status_of(s)})" for s in missing]
            parts += [f"{s} completed but was not expected" for s in extra]
            reasons.append(f"steps_run: {', '.join(parts)}")
    for step in expect.get("steps_include") or []:
        if step not in completed:
            reasons.append(f"steps_include: {step} did not complete ({status_of(step)})")
    for step in expect.get("steps_not_run") or []:
        if step in completed or step in failed:
            reasons.append(f"steps_not_run: {step} ran ({status_of(step)})")
    for step in expect.get("steps_failed") or []:
        if step not in failed:
            reasons.append(f"steps_failed: {step} did not fail ({status_of(step)})")
    for group in expect.get("one_of") or []:
        ran = [s for s in group if s in completed]
        if len(ran) != 1:
            reasons.append(f"one_of: expected exactly one of {', '.join(group)} to complete, "
                           f"got {len(ran)}{': ' + ', '.join(ran) if ran else ''}")  # fmt: skip
    return reasons


def _db_checks(checks: list[dict[str, Any]], services: _Services, xid: int | None) -> list[str]:
    """Run each `sql` on the test database and subset-match its rows (a list of objects)."""
    if not services.postgres:
        return ["db_checks: no test database (postgres is not available)"]
    placeholders = {**services.placeholders, "EXECUTION_ID": "" if xid is None else str(xid)}
    try:
        psycopg = importlib.import_module("psycopg")
        rows_mod = importlib.import_module("psycopg.rows")
    except ImportError:
        return ["db_checks: psycopg is not installed"]
    reasons: list[str] = []
    try:
        with psycopg.connect(services.pg_url, connect_timeout=5, autocommit=True,
                             row_factory=rows_mod.dict_row) as conn:  # fmt: skip
            for i, check in enumerate(substitute(checks, placeholders)):
                try:
                    rows = [_plain(r) for r in conn.execute(check["sql"]).fetchall()]
                except Exception as exc:
                    reasons.append(f"db_checks[{i}]: query failed: {_one_line(str(exc))}")
                    continue
                reasons += [f"db_checks: {m}"
                            for m in match(check.get("rows", []), rows, f"db_checks[{i}]")]  # fmt: skip
    except Exception as exc:
        reasons.append(f"db_checks: cannot connect to {_redact(services.pg_url)}: "
                       f"{_one_line(str(exc))}")  # fmt: skip
    return reasons


def _plain(value: Any) -> Any:
    """Database values as JSON would carry them (Decimal -> int/float, dates -> ISO text)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal):
        whole = value.is_finite() and value == value.to_integral_value()
        return int(value) if whole else float(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())
