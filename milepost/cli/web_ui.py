"""`milepost ui`: the web UI over a local database, for a look at what `milepost run` did.

It is `milepost server` on 127.0.0.1 with a token made for this session (an admin token,
printed to sign in with, deleted when the command stops). Without MILEPOST_SECRET_KEY it
uses a key of its own for the session: the UI never reads credentials, and the runs are
only read or cancelled. Its reconciler is off, so it never takes over the commands of a
`milepost run` going on the same database.
"""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import Annotated

import typer

from milepost.cli.inputs import ServerDbOption, existing_store, server_settings

app = typer.Typer()

TOKEN_NAME = "milepost ui (this session)"


@app.command("ui")
def web_ui(
    db: ServerDbOption = None,
    port: Annotated[int, typer.Option(help="Port to listen on (127.0.0.1).")] = 8082,
) -> None:
    """Serve the web UI over a local database at http://127.0.0.1:PORT/ui/."""
    import uvicorn

    from milepost.api import auth
    from milepost.api.app import create_app
    from milepost.credentials import new_key
    from milepost.store import factory

    settings = server_settings(db)
    settings = settings.model_copy(
        update={"secret_key": settings.secret_key or new_key(), "reconcile_interval": 0.0}
    )
    store = existing_store(db)  # a look at what ran: never a new database
    try:
        token = auth.create_token(store, "admin", TOKEN_NAME, time.time())
    finally:
        store.close()
    typer.echo(f"milepost web UI: http://127.0.0.1:{port}/ui/")
    typer.echo(f"sign in with this token (valid until this command stops): {token}")
    # uvicorn re-raises the signal that stopped it once it has shut down: as an exception
    # here, so the `finally` below still deletes the session's token
    signal.signal(signal.SIGTERM, _exit)
    try:
        uvicorn.run(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    finally:
        store = factory.open_store(settings=settings)
        try:
            store.delete_token(auth.token_hash(token))
        finally:
            store.close()


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)
