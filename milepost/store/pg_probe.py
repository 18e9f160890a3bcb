"""One connection tried before a PostgreSQL store opens its pool, so that what keeps it
from opening is said at once, in one line: a database that does not exist (with what to
do), or a server that cannot be reached. Left to the pool, an unreachable server cost its
whole connect timeout (10 s and more) and a warning line for each of its retries
(`milepost db upgrade`, every command on a `postgresql://` URL, the server's start).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pg_errors

from milepost.errors import MilepostError
from milepost.store import port

PROBE_TIMEOUT = 5
"""Seconds the probe waits for the server to answer before it says it cannot connect."""


class DatabaseMissing(MilepostError):
    """The PostgreSQL server answers, but the database the URL names does not exist."""

    code = "database_missing"


def probe(url: str, masked: str) -> None:
    """DatabaseMissing when the server says the database does not exist; StoreUnavailable
    (worth a retry: exit 3 in the CLI) when it cannot be reached or refuses the connection
    (down, no answer within PROBE_TIMEOUT, refusing this user)."""
    try:
        psycopg.connect(url, connect_timeout=PROBE_TIMEOUT).close()
    except pg_errors.InvalidCatalogName:
        raise _missing(url, masked) from None
    except psycopg.OperationalError as exc:
        if "does not exist" in str(exc) and "database" in str(exc):
            raise _missing(url, masked) from None
        # libpq's text has a line per host tried, and hints on lines of their own
        reason = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise port.StoreUnavailable(f"cannot connect to {masked}: {reason}", url=masked) from None


def _missing(url: str, masked: str) -> DatabaseMissing:
    name = urlsplit(url).path.lstrip("/") or "?"
    return DatabaseMissing(
        f"database {name!r} does not exist on the server of {masked}: create it (createdb "
        f"{name}, or CREATE DATABASE {name}), then run milepost db upgrade",
        url=masked,
    )
