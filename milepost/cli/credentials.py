"""Credentials of the local database: `credential set`, `credential list`,
`credential delete` (encrypted with MILEPOST_SECRET_KEY)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from milepost.cli.inputs import DbOption, JsonOption, OutputOption, json_object, local_store
from milepost.cli.output import Format, chosen, emit, fail, out
from milepost.credentials import Vault
from milepost.credentials import check_name as check_credential_name
from milepost.errors import MilepostError
from milepost.store.port import Store

app = typer.Typer()
credential_app = typer.Typer(no_args_is_help=True,
                             help="Credentials of the local database, encrypted with MILEPOST_SECRET_KEY.")
app.add_typer(credential_app, name="credential")


def _vault(db: str | None) -> tuple[Store, Vault]:
    store = local_store(db)
    try:
        return store, Vault.from_env(store)
    except MilepostError:
        store.close()
        raise


@credential_app.command("set")
def credential_set(
    name: str,
    type_: Annotated[str, typer.Option("--type", help="postgres, generic, ...")],
    data: Annotated[str, typer.Option(help="The fields as a JSON object.")],
    db: DbOption = None,
) -> None:
    """Register or replace a credential for `auth:` and keychain entries."""
    try:
        check_credential_name(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="NAME") from None
    fields = json_object(data, "--data")
    store, vault = _vault(db)
    try:
        vault.put(name, type_, fields)
    finally:
        store.close()
    out.print(f"credential {name} ({type_}) stored, encrypted", highlight=False)


@credential_app.command("list")
def credential_list(db: DbOption = None, output: OutputOption = None,
                    json_out: JsonOption = False) -> None:  # fmt: skip
    """Names and types of the stored credentials (never their values)."""
    store, vault = _vault(db)
    try:
        items = vault.list()
    finally:
        store.close()
    if (fmt := chosen(output, json_out)) is not Format.table:
        emit(items, fmt)
        return
    table = Table("name", "type")
    for item in items:
        table.add_row(item["name"], item["type"])
    out.print(table)


@credential_app.command("delete")
def credential_delete(name: str, db: DbOption = None) -> None:
    """Remove a credential."""
    store, vault = _vault(db)
    try:
        deleted = vault.delete(name)
    finally:
        store.close()
    if not deleted:
        raise fail(f"no credential {name!r}")
    out.print(f"credential {name} deleted", highlight=False)
