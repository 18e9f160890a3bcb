"""The server side: `server`, `worker`, `token create`, `db upgrade`, `secret-key`."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from milepost.cli.inputs import ServerDbOption, ServerOption, opened, server_settings
from milepost.cli.output import JsonOption, OutputOption, fail

app = typer.Typer()


@app.command()
def server(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8082,
    db: ServerDbOption = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    access_log: Annotated[
        bool,
        typer.Option(
            help="Log every request (workers make several per step: off by default; the "
            "server logs what it does, and /metrics counts requests)."
        ),
    ] = False,
) -> None:
    """Run the HTTP server (docs/server-contract.md); needs MILEPOST_SECRET_KEY.

    Other settings: MILEPOST_NATS_URL (worker wake-ups), MILEPOST_LEASE_SECONDS,
    MILEPOST_MACHINE_ID (distinct per server on one database; unset, the server leases
    one from the database).
    """
    import uvicorn

    from milepost.api.app import create_app
    from milepost.credentials import SecretKeyMissing, parse_keys

    settings = server_settings(db)
    if not (settings.secret_key or "").strip():
        raise fail(SecretKeyMissing().message)
    parse_keys(settings.secret_key or "")  # a malformed key fails here, before the port opens
    # a worker-channel message between the two limits gets its 413 reply (the worker then
    # sends the batch's reports one by one); uvicorn closes the socket on a larger frame
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        ws_max_size=2 * settings.max_body_bytes,
    )


token_app = typer.Typer(no_args_is_help=True, help="API tokens.")
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option(help="admin, operator, approver, worker or viewer.")],
    name: Annotated[str | None, typer.Option(help="A label for the token.")] = None,
    user: Annotated[
        str | None,
        typer.Option(
            help="Who holds it: approval votes are cast as user:<USER> (a token without a user "
            "cannot decide approvals)."
        ),
    ] = None,
    approver_role: Annotated[
        list[str] | None,
        typer.Option(
            "--approver-role",
            help="A business role for approvals (matches role:<NAME> approvers); repeatable.",
        ),
    ] = None,
    db: ServerDbOption = None,
) -> None:
    """Create an API token and print it (once: only its SHA-256 is stored)."""
    from milepost.api import auth

    if role not in auth.ROLES:
        raise fail(f"unknown role {role!r}: use one of {', '.join(auth.ROLES)}")
    roles = approver_role or []
    for what, value in (("--user", user), *(("--approver-role", r) for r in roles)):
        if value is not None and not auth.NAME.fullmatch(value):
            raise fail(f"{what} {value!r}: use letters, digits and . _ @ - (1 to 100)")
    with opened(db) as store:  # migrated as it opens
        token = auth.create_token(store, role, name, time.time(), user=user, approver_roles=roles)
    typer.echo(token)


TOKEN_ID = 12
"""Hex digits of a token's SHA-256 that `token list` shows as its id."""
MIN_TOKEN_ID = 8


@token_app.command("list")
def token_list(
    db: ServerDbOption = None, output: OutputOption = None, json_out: JsonOption = False
) -> None:
    """List the API tokens: id (the start of the token's SHA-256), role, name, user."""
    from rich.table import Table

    from milepost.cli.output import Format, chosen, emit, iso, out

    with opened(db) as store:
        rows = store.list_tokens()
    items = [
        {
            "id": r.token_hash[:TOKEN_ID],
            "role": r.role,
            "name": r.name,
            "user": r.user,
            "approver_roles": list(r.approver_roles),
            "created_at": iso(r.created_at),
        }
        for r in rows
    ]
    if (fmt := chosen(output, json_out)) is not Format.table:
        emit(items, fmt)
        return
    table = Table("id", "role", "name", "user", "approver roles", "created")
    for row in rows:
        table.add_row(
            row.token_hash[:TOKEN_ID],
            row.role,
            row.name or "",
            row.user or "",
            ", ".join(row.approver_roles),
            iso(row.created_at),
        )
    out.print(table)


@token_app.command("revoke")
def token_revoke(
    token: Annotated[
        str,
        typer.Argument(
            help="The id `token list` shows (or a longer start of "
            "the SHA-256), or the token itself."
        ),
    ],
    db: ServerDbOption = None,
) -> None:
    """Revoke an API token: it is refused (401) from then on, within the servers' token
    cache time (5 s)."""
    from milepost.api import auth

    with opened(db) as store:
        if token.startswith(auth.TOKEN_PREFIX):
            key = auth.token_hash(token)
        elif len(token) < MIN_TOKEN_ID:
            raise fail(
                f"token id {token!r} is too short: give at least {MIN_TOKEN_ID} hex "
                "digits (`milepost token list`)"
            )
        else:
            found = [
                r.token_hash for r in store.list_tokens() if r.token_hash.startswith(token.lower())
            ]
            if len(found) > 1:
                raise fail(f"token id {token!r} names {len(found)} tokens: give more digits")
            key = found[0] if found else token
        if not store.delete_token(key):
            raise fail(f"no token {token!r} (`milepost token list` shows them)")
    typer.echo(f"token {key[:TOKEN_ID]} revoked")


db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(db: ServerDbOption = None) -> None:
    """Migrate the database (every shard) to the latest schema."""
    from milepost.store import factory

    typer.echo(factory.upgrade(settings=server_settings(db)))


@app.command("secret-key")
def secret_key() -> None:
    """Print a new key for MILEPOST_SECRET_KEY (encrypts credentials at rest)."""
    from milepost.credentials import new_key

    typer.echo(new_key())


@app.command()
def worker(
    server: ServerOption = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Commands at once \\[env: MILEPOST_CONCURRENCY; 16].")
    ] = None,
    pool: Annotated[
        str | None,
        typer.Option(
            help="Pool to serve: only the commands of steps with this `spec.pool` \\[env: MILEPOST_POOL; default]."
        ),
    ] = None,
) -> None:
    """Claim and run commands from a server until SIGTERM (then finish, release, exit)."""
    from milepost.playbook import pools
    from milepost.settings import Settings
    from milepost.worker.main import worker_main

    serves = pool if pool is not None else Settings().worker_pool()
    if not pools.valid(serves):
        raise fail(
            f"invalid pool {serves!r} (--pool or MILEPOST_POOL): use letters, digits "
            "and - _ . (1 to 100)"
        )

    raise typer.Exit(worker_main(server, concurrency=concurrency, pool=pool))
