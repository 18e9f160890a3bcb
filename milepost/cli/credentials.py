"""Credentials: `credential set`, `credential list`, `credential delete`, of the local
database (encrypted with MILEPOST_SECRET_KEY) or of a server (`--server`, through
`/api/credentials`: the server encrypts them with its key)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated

import typer
from rich.table import Table

from milepost.cli.inputs import (
    DbOption,
    JsonOption,
    OutputOption,
    ServerOption,
    json_object,
    opened,
    server_client,
)
from milepost.cli.output import Format, chosen, emit, fail, out, remote
from milepost.credentials import Vault
from milepost.credentials import check_name as check_credential_name

app = typer.Typer()
credential_app = typer.Typer(
    no_args_is_help=True,
    help="Credentials of the local database (encrypted with "
    "MILEPOST_SECRET_KEY) or of a server (--server).",
)
app.add_typer(credential_app, name="credential")


@contextlib.contextmanager
def _vault(db: str | None) -> Iterator[Vault]:
    """The local database's credentials (MILEPOST_SECRET_KEY), its store closed after."""
    with opened(db) as store:
        yield Vault.from_env(store)


@credential_app.command("set")
def credential_set(
    name: str,
    type_: Annotated[str, typer.Option("--type", help="postgres, generic, ...")],
    data: Annotated[str, typer.Option(help="The fields as a JSON object.")],
    db: DbOption = None,
    server: ServerOption = None,
) -> None:
    """Register or replace a credential for `auth:` and keychain entries."""
    try:
        check_credential_name(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="NAME") from None
    fields = json_object(data, "--data")
    client = server_client(server, db)
    if client is not None:
        with client:
            remote(lambda: client.put_credential(name, type_, fields))
        out.print(f"credential {name} ({type_}) stored on the server, encrypted", highlight=False)
        return
    with _vault(db) as vault:
        vault.put(name, type_, fields)
    out.print(f"credential {name} ({type_}) stored, encrypted", highlight=False)


@credential_app.command("list")
def credential_list(
    db: DbOption = None,
    server: ServerOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Names and types of the stored credentials (never their values)."""
    client = server_client(server, db)
    if client is not None:
        with client:
            items = remote(client.credentials)
    else:
        with _vault(db) as vault:
            items = vault.list()
    if (fmt := chosen(output, json_out)) is not Format.table:
        emit(items, fmt)
        return
    table = Table("name", "type")
    for item in items:
        table.add_row(item["name"], item["type"])
    out.print(table)


@credential_app.command("delete")
def credential_delete(name: str, db: DbOption = None, server: ServerOption = None) -> None:
    """Remove a credential."""
    client = server_client(server, db)
    if client is not None:
        with client:
            deleted = remote(lambda: client.delete_credential(name))
    else:
        with _vault(db) as vault:
            deleted = vault.delete(name)
    if not deleted:
        raise fail(f"no credential {name!r}")
    out.print(f"credential {name} deleted", highlight=False)
