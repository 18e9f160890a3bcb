"""What the commands read: their shared options, the workload of `--payload` and `--set`,
and where the runs are (the local SQLite database, a server's database, or a server)."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from milepost.cli.output import JsonOption as JsonOption
from milepost.cli.output import OutputOption as OutputOption
from milepost.cli.output import fail
from milepost.client import MilepostClient
from milepost.core import fold as fl
from milepost.core import state as st
from milepost.engine.orchestrator import deep_merge
from milepost.playbook import yamllines
from milepost.settings import Settings
from milepost.store.port import Store

if TYPE_CHECKING:
    from milepost.engine.lifecycle import Lifecycle

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database: a SQLite path, sqlite:///path or postgresql://user@host/db "
        "\\[env: MILEPOST_DATABASE_URL; default .milepost/milepost.db]",
        show_default=False,
    ),
]
ServerDbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL: a SQLite path, sqlite:///path or postgresql://user@host/db "
        "\\[env: MILEPOST_DATABASE_URL, or MILEPOST_DATABASE_URLS for shards; default "
        ".milepost/milepost.db]",
        show_default=False,
    ),
]
ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="A milepost server URL, or several of one database, comma-separated (one that "
        "does not answer: the next) \\[env: MILEPOST_SERVER_URL]; token from MILEPOST_TOKEN.",
    ),
]


@contextlib.contextmanager
def one_shot_engine(
    store: Store, holder: str, machine_id: int | None = None
) -> Iterator[Lifecycle]:
    """The engine of a command that writes a few events to a local database and exits
    (`cancel`, `approve`, an operator's action): the ids it makes must not be ones a running
    `milepost run` makes too, so it leases a machine id for its few seconds (the one set,
    when free; minted on, whether its lease was had or not)."""
    from milepost.engine.factory import Lease, build_engine, given

    engine = build_engine(
        store, given(machine_id=machine_id, default_timeout=None), lease=Lease(holder, ttl=30.0)
    )
    try:
        yield engine
    finally:
        assert engine.machine_ids is not None  # a lease was asked for
        engine.machine_ids.release()


def reading_engine(store: Store) -> Lifecycle:
    """The engine of a command that reads a local database (or registers a playbook in its
    catalog): it makes no event id, so it leases no machine id (it mints on 0)."""
    from milepost.engine.factory import build_engine, given

    return build_engine(store, given(default_timeout=None))


def local_store(db: str | None) -> Store:
    """The database a command without a server works on: `--db`, else the environment's
    (a SQLite file, or PostgreSQL: the embedded engine runs on either)."""
    from milepost.store import factory

    return factory.open_store(settings=server_settings(db))


def existing_store(db: str | None) -> Store:
    """The database a command that only reads works on (`list`, `status`, `describe`,
    `events`, `logs`, `doctor`, `workers`, `approvals`, `usage`, `ui`): opened only when it
    is there, creating nothing; else `no milepost database at PATH` (NoDatabase: exit 2)."""
    from milepost.store import factory

    return factory.open_store(settings=server_settings(db), existing=True)


@contextlib.contextmanager
def opened(db: str | None, *, existing: bool = False) -> Iterator[Store]:
    """The local database, closed after use. `existing`: a command that acts on a run
    already there (cancel, approve, resume, an operator's action) creates nothing either."""
    store = existing_store(db) if existing else local_store(db)
    try:
        yield store
    finally:
        store.close()


def load_state(db: str | None, execution_id: int) -> st.ExecutionState:
    with opened(db, existing=True) as store:
        events = store.load(execution_id)
    if not events:
        raise fail(f"no execution {execution_id}")
    return fl.fold(None, events)


def local_identity(user: str | None = None) -> str:
    """Who acts on the local database: `user:<user, else $MILEPOST_USER, else the OS
    login>` (no auth there: whoever can write the file can do anything anyway)."""
    return f"user:{user or os.environ.get('MILEPOST_USER') or getpass.getuser()}"


def server_client(server: str | None, db: str | None) -> MilepostClient | None:
    """A client when the command should talk to a server: `--server`, or
    MILEPOST_SERVER_URL when no `--db` was given; None means the local database."""
    url = server or (None if db else os.environ.get("MILEPOST_SERVER_URL"))
    return MilepostClient(url) if url else None


def server_settings(db: str | None) -> Settings:
    """Settings from the environment, with `--db` (when given) replacing both URL variables."""
    if db:
        return Settings(database_url=db, database_urls=None)
    return Settings()


def read_playbook(file: Path) -> str:
    """A playbook file's text, or the error (exit 2) naming the file and what is wrong with
    it: it cannot be read, it is not UTF-8, it is empty."""
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(
            f"{file}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}); a "
            "playbook is YAML saved as UTF-8"
        ) from None
    if not text.strip():
        raise fail(f"{file}: the file is empty; a playbook starts with apiVersion: noetl.io/v2")
    return text


def parse_sets(sets: list[str], limits: yamllines.Limits) -> dict[str, Any]:
    """`--set a.b=5` -> {"a": {"b": 5}}; values are read as YAML (5 is an int), within
    `limits`: an alias bomb in a value is refused before it expands."""
    result: dict[str, Any] = {}
    for item in sets:
        if "=" not in item:
            raise typer.BadParameter(f"--set {item!r}: expected KEY=VALUE", param_hint="--set")
        key, _, raw = item.partition("=")
        try:
            value = yamllines.load(raw, limits) if raw else ""
        except yamllines.Refused as exc:
            raise typer.BadParameter(f"{key}: {exc}", param_hint="--set") from None
        except yaml.YAMLError:
            value = raw
        target = result
        parts = key.strip().split(".")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return result


def json_object(text: str, option: str) -> dict[str, Any]:
    """The JSON object an option holds, or the usage error (exit 2) that names the option."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint=option) from None
    if not isinstance(value, dict):
        raise typer.BadParameter("must be a JSON object", param_hint=option)
    return value


def read_workload(payload: str | None, sets: list[str]) -> dict[str, Any]:
    """The workload of `--payload` and `--set`, or the usage error (exit 2) of one over
    `max_expanded_bytes`, as a server refuses it in `/api/execute`."""
    limits = yamllines.Limits.of()
    base = json_object(payload, "--payload") if payload else {}
    workload = deep_merge(base, parse_sets(sets, limits))
    refused = yamllines.over_expanded(workload, limits.max_expanded_bytes, "the workload")
    if refused is not None:
        raise typer.BadParameter(refused, param_hint="--payload/--set")
    return workload
