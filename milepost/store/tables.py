"""The plain tables of a SQL store, written once: snapshots, catalog, result blobs,
credentials, tokens, machine-id leases and driver leases (`SQLStore` inherits them)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from milepost.errors import ConcurrencyConflict, MilepostError
from milepost.store import port

CMD_COLS = (
    "command_id, execution_id, step, run, idx, attempt, idempotency_key, status,"
    " worker_id, epoch, lease_expires_at, created_at, pool"
)
"""The `command` columns of a `port.CommandRow`, in its order."""
OPEN = f"status IN ('{port.COMMAND_QUEUED}', '{port.COMMAND_CLAIMED}')"
"""Open commands, as the partial indexes `command_open` and `command_queue` (migration 6)
are written: statuses as literals, which a planner can match with an index's condition
(SQLite's only when the query repeats the condition itself)."""

NS_CATALOG = 0x6D70_0003
NS_MACHINE = 0x6D70_0005
"""Namespaces of the keys writers are serialized on (`lock_key`)."""

_ACQUIRE_DRIVER = (
    "INSERT INTO execution_driver (execution_id, holder, expires_at) VALUES (?, ?, ?)"
    " ON CONFLICT (execution_id) DO UPDATE SET holder=excluded.holder,"
    " expires_at=excluded.expires_at WHERE execution_driver.holder=excluded.holder"
    " OR execution_driver.expires_at<=? OR execution_driver.holder=? RETURNING expires_at"
)


class Tables:
    """The hooks every SQL dialect supplies (`store.sql.SQLStore` adds the rest), and the
    tables written with them alone."""

    def read(self) -> contextlib.AbstractContextManager[Any]:
        """A connection for reads (driver errors classified); `execute(sql, params)`
        returns a cursor (`fetchone`, `fetchall`, `rowcount`, `description`)."""
        raise NotImplementedError

    def txn(self) -> contextlib.AbstractContextManager[Any]:
        """A write transaction, committed at the end of the block (errors classified)."""
        raise NotImplementedError

    def sql(self, text: str) -> str:
        """A shared statement (`?` placeholders) in the dialect's form."""
        return text

    def lock_key(self, conn: Any, namespace: int, key: int) -> None:
        """Hold off other writers of (namespace, key) until the transaction ends (nothing
        where a write transaction holds the whole database)."""
        self.lock_keys(conn, namespace, [key])

    def lock_keys(self, conn: Any, namespace: int, keys: Sequence[int]) -> None:
        """`lock_key` for each of `keys`, sorted (writers that lock in one order cannot
        deadlock), in one statement where the dialect has locks."""

    def many(self, conn: Any, text: str, rows: Sequence[Sequence[Any]]) -> int:
        """A shared statement once per row of parameters, in one call; the rows changed."""
        if len(rows) == 1:  # most batches of a step: executemany's iteration costs more
            return int(conn.execute(self.sql(text), rows[0]).rowcount)
        return int(conn.executemany(self.sql(text), rows).rowcount)

    def rows(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.read() as conn:
            return list(conn.execute(self.sql(text), params).fetchall())

    def _write(self, text: str, params: Sequence[Any]) -> Any:
        """One statement in its own transaction; the cursor's first row or rowcount."""
        with self.txn() as conn:
            cur = conn.execute(self.sql(text), params)
            if cur.description is None:
                return cur.rowcount
            rows = cur.fetchall()  # all of them: no statement left running at the commit
            return rows[0] if rows else None

    # -- snapshots -------------------------------------------------------------------------

    def save_snapshot(self, execution_id: int, seq: int, data: bytes) -> None:
        self._write(
            "INSERT INTO snapshot (execution_id, seq, data) VALUES (?,?,?)"
            " ON CONFLICT (execution_id) DO UPDATE SET seq=excluded.seq,"
            " data=excluded.data WHERE excluded.seq > snapshot.seq",
            (execution_id, seq, data),
        )

    def load_snapshot(self, execution_id: int) -> tuple[int, bytes] | None:
        rows = self.rows("SELECT seq, data FROM snapshot WHERE execution_id=?", (execution_id,))
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else None

    # -- catalog ---------------------------------------------------------------------------

    def register_playbook(self, path: str, content: str, now: float) -> port.CatalogEntry:
        with self.txn() as conn:
            # two writers registering one path would both pick the same next version
            self.lock_key(conn, NS_CATALOG, _text_key(path))
            row = conn.execute(
                self.sql(
                    "SELECT version, content, created_at FROM catalog"
                    " WHERE path=? ORDER BY version DESC LIMIT 1"
                ),
                (path,),
            ).fetchone()
            if row is not None and row[1] == content:
                return port.CatalogEntry(path, int(row[0]), content, float(row[2]))
            version = (int(row[0]) if row else 0) + 1
            conn.execute(
                self.sql(
                    "INSERT INTO catalog (path, version, content, created_at) VALUES (?,?,?,?)"
                ),
                (path, version, content, now),
            )
        return port.CatalogEntry(path, version, content, now)

    def get_playbook(self, path: str, version: int | None = None) -> port.CatalogEntry | None:
        if version is None:
            rows = self.rows(
                "SELECT path, version, content, created_at FROM catalog"
                " WHERE path=? ORDER BY version DESC LIMIT 1",
                (path,),
            )
        else:
            rows = self.rows(
                "SELECT path, version, content, created_at FROM catalog WHERE path=? AND version=?",
                (path, version),
            )
        return port.CatalogEntry(*rows[0]) if rows else None

    def list_playbooks(self) -> list[port.CatalogEntry]:
        rows = self.rows(
            "SELECT path, version, content, created_at FROM catalog ORDER BY path, version"
        )
        return [port.CatalogEntry(*r) for r in rows]

    # -- result store ----------------------------------------------------------------------

    def put_blob(self, execution_id: int, data: bytes, now: float) -> str:
        row = self._write(
            "INSERT INTO result_blob (execution_id, data, created_at)"
            " VALUES (?,?,?) RETURNING blob_id",
            (execution_id, data, now),
        )
        return f"{port.BLOB_PREFIX}{execution_id}/{row[0]}"

    def get_blob(self, uri: str) -> bytes:
        # `<execution_id>/<blob_id>`, and the execution must match; `<blob_id>` alone is
        # what SQLite wrote before the execution was named, still read
        xid, blob_id = port.parse_blob_uri(uri)
        rows = self.rows("SELECT data, execution_id FROM result_blob WHERE blob_id=?", (blob_id,))
        if not rows or (xid is not None and rows[0][1] != xid):
            raise MilepostError(f"unknown result reference {uri!r}", uri=uri)
        return bytes(rows[0][0])

    # -- credentials and tokens ------------------------------------------------------------

    def put_credential(
        self, name: str, type: str, ciphertext: bytes, now: float
    ) -> port.CredentialRow:
        row = self._write(
            "INSERT INTO credential (name, type, ciphertext, created_at, updated_at)"
            " VALUES (?,?,?,?,?) ON CONFLICT (name) DO UPDATE SET type=excluded.type,"
            " ciphertext=excluded.ciphertext, updated_at=excluded.updated_at"
            " RETURNING created_at",
            (name, type, ciphertext, now, now),
        )
        return port.CredentialRow(name, type, bytes(ciphertext), float(row[0]), now)

    def get_credential(self, name: str) -> port.CredentialRow | None:
        rows = self.rows(
            "SELECT name, type, ciphertext, created_at, updated_at FROM credential WHERE name=?",
            (name,),
        )
        if not rows:
            return None
        name_, type_, data, created, updated = rows[0]
        return port.CredentialRow(name_, type_, bytes(data), created, updated)

    def list_credentials(self) -> list[port.CredentialRow]:
        rows = self.rows(
            "SELECT name, type, NULL, created_at, updated_at FROM credential ORDER BY name"
        )
        return [port.CredentialRow(*r) for r in rows]

    def delete_credential(self, name: str) -> bool:
        return bool(self._write("DELETE FROM credential WHERE name=?", (name,)))

    def create_token(
        self,
        token_hash: str,
        role: str,
        name: str | None,
        now: float,
        *,
        user: str | None = None,
        approver_roles: Sequence[str] = (),
    ) -> port.TokenRow:
        roles = tuple(approver_roles)
        row = self._write(
            "INSERT INTO token (token_hash, role, name, created_at, user_name,"
            " approver_roles) VALUES (?,?,?,?,?,?) ON CONFLICT (token_hash)"
            " DO NOTHING RETURNING token_hash",
            (token_hash, role, name, now, user, json.dumps(roles)),
        )
        if row is None:
            raise ConcurrencyConflict("a token with that hash exists", constraint="token")
        return port.TokenRow(token_hash, role, name, now, user, roles)

    def get_token(self, token_hash: str) -> port.TokenRow | None:
        rows = self._tokens(" WHERE token_hash=?", (token_hash,))
        return rows[0] if rows else None

    def list_tokens(self) -> list[port.TokenRow]:
        return self._tokens(" ORDER BY created_at, token_hash", ())

    def _tokens(self, where: str, params: tuple[Any, ...]) -> list[port.TokenRow]:
        rows = self.rows(
            "SELECT token_hash, role, name, created_at, user_name, approver_roles"
            f" FROM token{where}",
            params,
        )
        return [
            port.TokenRow(hash_, role, name, float(created), user, tuple(json.loads(roles or "[]")))
            for hash_, role, name, created, user, roles in rows
        ]

    def delete_token(self, token_hash: str) -> bool:
        return bool(self._write("DELETE FROM token WHERE token_hash=?", (token_hash,)))

    # -- machine ids -----------------------------------------------------------------------

    def lease_machine_id(
        self,
        holder: str,
        now: float,
        ttl: float,
        *,
        owner: str | None = None,
        want: int | None = None,
    ) -> int:
        with self.txn() as conn:
            self.lock_key(conn, NS_MACHINE, 0)
            rows = conn.execute(self.sql(f"SELECT {_LEASE_COLS} FROM machine_lease")).fetchall()
            machine_id = port.pick_machine_id(_leases(rows), holder, owner, now, want)
            conn.execute(
                self.sql(
                    "INSERT INTO machine_lease (machine_id, holder, owner, leased_at, expires_at)"
                    " VALUES (?,?,?,?,?) ON CONFLICT (machine_id) DO UPDATE SET"
                    " holder=excluded.holder, owner=excluded.owner,"
                    " leased_at=excluded.leased_at, expires_at=excluded.expires_at"
                ),
                (machine_id, holder, owner, now, now + ttl),
            )
        return machine_id

    def renew_machine_id(
        self, machine_id: int, holder: str, now: float, ttl: float, *, owner: str | None = None
    ) -> bool:
        return bool(
            self._write(
                "UPDATE machine_lease SET expires_at=? WHERE machine_id=? AND holder=?"
                " AND COALESCE(owner, '')=?",
                (now + ttl, machine_id, holder, owner or ""),
            )
        )

    def release_machine_id(
        self, machine_id: int, holder: str, now: float, *, owner: str | None = None
    ) -> bool:
        # the row stays: its ids are its holder's until another may take it (RETAKE_AFTER_S)
        return bool(
            self._write(
                "UPDATE machine_lease SET expires_at=? WHERE machine_id=? AND holder=?"
                " AND COALESCE(owner, '')=? AND expires_at>?",
                (now, machine_id, holder, owner or "", now),
            )
        )

    def machine_leases(self) -> list[port.MachineLease]:
        return _leases(
            self.rows(f"SELECT {_LEASE_COLS} FROM machine_lease ORDER BY machine_id", ())
        )

    # -- the driver of an embedded execution -----------------------------------------------

    def acquire_driver(
        self, execution_id: int, holder: str, now: float, ttl: float, *, replace: str | None = None
    ) -> port.DriverLease:
        with self.txn() as conn:
            row = conn.execute(
                self.sql(_ACQUIRE_DRIVER), (execution_id, holder, now + ttl, now, replace)
            ).fetchone()
            if row is None:  # the upsert's condition held nothing: someone else's live lease
                held = conn.execute(
                    self.sql(
                        "SELECT holder, expires_at FROM execution_driver WHERE execution_id=?"
                    ),
                    (execution_id,),
                ).fetchone()
                raise port.DriverBusy(port.DriverLease(execution_id, held[0], float(held[1])))
        return port.DriverLease(execution_id, holder, float(row[0]))

    def renew_driver(self, execution_id: int, holder: str, now: float, ttl: float) -> bool:
        return bool(
            self._write(
                "UPDATE execution_driver SET expires_at=? WHERE execution_id=? AND holder=?",
                (now + ttl, execution_id, holder),
            )
        )

    def release_driver(self, execution_id: int, holder: str, now: float) -> bool:
        return bool(
            self._write(
                "UPDATE execution_driver SET expires_at=CASE WHEN expires_at < ? THEN expires_at"
                " ELSE ? END WHERE execution_id=? AND holder=?",
                (now, now, execution_id, holder),
            )
        )

    def get_driver(self, execution_id: int) -> port.DriverLease | None:
        rows = self.rows(
            "SELECT holder, expires_at FROM execution_driver WHERE execution_id=?", (execution_id,)
        )
        return port.DriverLease(execution_id, rows[0][0], float(rows[0][1])) if rows else None


def _text_key(text: str) -> int:
    """A stable signed 32-bit key of a text (FNV-1a): the same in every process."""
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


_LEASE_COLS = "machine_id, holder, owner, leased_at, expires_at"


def _leases(rows: Iterable[Sequence[Any]]) -> list[port.MachineLease]:
    return [
        port.MachineLease(
            int(m),
            str(h),
            None if o is None else str(o),
            None if at is None else float(at),
            float(e),
        )
        for m, h, o, at, e in rows
    ]
