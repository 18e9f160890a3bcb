"""One connection tried before a PostgreSQL store opens its pool: a database that does not
exist is said at once, with what to do, instead of the pool retrying it for its whole
connect timeout (`milepost db upgrade`, every command on a `postgresql://` URL)."""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pg_errors

from milepost.errors import MilepostError

PROBE_TIMEOUT = 5
"""Seconds the probe waits for the server: a slower one is left to the pool's retries."""


class DatabaseMissing(MilepostError):
    """The PostgreSQL server answers, but the database the URL names does not exist."""

    code = "database_missing"


def probe(url: str, masked: str) -> None:
    """DatabaseMissing when the server says the database does not exist; anything else
    (down, slow, refusing this user) is left to the pool, which retries and says why."""
    try:
        psycopg.connect(url, connect_timeout=PROBE_TIMEOUT).close()
    except pg_errors.InvalidCatalogName:
        raise _missing(url, masked) from None
    except psycopg.OperationalError as exc:
        if "does not exist" in str(exc) and "database" in str(exc):
            raise _missing(url, masked) from None


def _missing(url: str, masked: str) -> DatabaseMissing:
    name = urlsplit(url).path.lstrip("/") or "?"
    return DatabaseMissing(
        f"database {name!r} does not exist on the server of {masked}: create it (createdb "
        f"{name}, or CREATE DATABASE {name}), then run milepost db upgrade",
        url=masked,
    )
