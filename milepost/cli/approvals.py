"""Approvals from the command line: `approvals` (what waits, for whom, how long), `approve`
and `deny`, on a server (`--server`, the token's user decides) or on the local database
(the identity from `--user`, `$MILEPOST_USER` or the OS login, roles from `--role`).

On the local database there is no auth: whoever can write the file can do anything
anyway. A vote there is appended behind the log as it was read
(`engine.approvals.append_decision`); the process that drives the run (`milepost run`, or
`milepost resume`) grants, denies or waits on its next look.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from milepost.cli.inputs import (
    DbOption,
    JsonOption,
    OutputOption,
    ServerOption,
    local_identity,
    one_shot_engine,
    opened,
    server_client,
)
from milepost.cli.output import Format, chosen, emit, fail, out, remote, time_left
from milepost.cli.reads import runs

if TYPE_CHECKING:
    from milepost.engine.webhooks import WebhookNotifier
    from milepost.store import port

app = typer.Typer()

STATUSES = ("pending", "granted", "denied", "expired", "invalidated", "cancelled")

UserOption = Annotated[
    str | None,
    typer.Option(
        "--user",
        help="Who decides, on the local database: user:<USER> \\[env: MILEPOST_USER; "
        "default the OS login]. On a server the token's user decides.",
    ),
]
RoleOption = Annotated[
    list[str] | None,
    typer.Option(
        "--role",
        help="A role you hold, on the local database (matches role:<NAME> approvers); repeatable.",
    ),
]
ReasonOption = Annotated[str | None, typer.Option(help="Why (recorded with the vote).")]


@app.command("approvals")
def approvals(
    db: DbOption = None,
    server: ServerOption = None,
    status: Annotated[str, typer.Option(help=f"{', '.join(STATUSES)} or all.")] = "pending",
    execution: Annotated[int | None, typer.Option(help="Only this execution's.")] = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """List approvals: what waits, its risk, the votes against the quorum, who may decide
    and the time left."""
    if status != "all" and status not in STATUSES:
        raise fail(f"--status {status!r}: use one of {', '.join(STATUSES)} or all")
    wanted = None if status == "all" else status
    with runs(server, db) as where:
        items = remote(lambda: where.approvals(status=wanted, execution_id=execution))
    if (fmt := chosen(output, json_out)) is not Format.table:
        emit(items, fmt)
        return
    if not items:
        out.print(f"no {wanted or ''} approvals".replace("  ", " "))
        return
    out.print(table(items, time.time()))


def table(items: list[dict[str, Any]], now: float) -> Table:
    shown = Table(
        "approval", "execution", "step", "risk", "votes", "who may decide", "time left", "status"
    )
    for item in items:
        shown.add_row(
            item["approval_id"],
            f"{item['execution_id']} {item['path']}".strip(),
            item["step"],
            item["risk"],
            f"{item['approved']}/{item['quorum']}",
            ", ".join(item["approvers"]),
            time_left(item.get("expires_at"), now),
            item["status"],
        )
    return shown


@app.command()
def approve(
    approval_id: int,
    reason: ReasonOption = None,
    db: DbOption = None,
    server: ServerOption = None,
    user: UserOption = None,
    role: RoleOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Approve a pending approval (the step runs once the quorum approves)."""
    _decide(approval_id, "approve", reason, db, server, user, role or [], chosen(output, json_out))


@app.command()
def deny(
    approval_id: int,
    reason: Annotated[str, typer.Option(help="Why (required: the step fails with it).")],
    db: DbOption = None,
    server: ServerOption = None,
    user: UserOption = None,
    role: RoleOption = None,
    output: OutputOption = None,
    json_out: JsonOption = False,
) -> None:
    """Deny a pending approval: the step fails, naming you and the reason."""
    if not reason.strip():
        raise fail("--reason must say why the approval is denied")
    _decide(approval_id, "deny", reason, db, server, user, role or [], chosen(output, json_out))


def _decide(
    approval_id: int,
    decision: str,
    reason: str | None,
    db: str | None,
    server: str | None,
    user: str | None,
    roles: list[str],
    fmt: Format,
) -> None:
    client = server_client(server, db)
    if client is not None:
        with client:
            item = remote(lambda: client.decide_approval(approval_id, decision, reason))
    else:
        # a refusal (not an approver, voted already, closed) as one line, exit 2
        item = remote(
            lambda: _decide_locally(approval_id, decision, reason, db, local_identity(user), roles)
        )
    if fmt is not Format.table:
        emit(item, fmt)
        return
    votes = f"{item['approved']}/{item['quorum']} approvals"
    out.print(
        f"approval {approval_id}: {decision} recorded; {item['status']} ({votes})", highlight=False
    )
    if (
        client is None
        and item["status"] == "pending"
        and (decision == "deny" or item["approved"] >= item["quorum"])
    ):
        out.print(
            f"the process running execution {item['execution_id']} acts on it (or "
            f"`milepost resume {item['execution_id']}`)",
            highlight=False,
        )


def _decide_locally(
    approval_id: int,
    decision: str,
    reason: str | None,
    db: str | None,
    voter_identity: str,
    roles: list[str],
) -> dict[str, Any]:
    from milepost.api import views
    from milepost.engine.webhooks import Webhook, WebhookNotifier
    from milepost.settings import Settings

    settings = Settings()
    webhook = Webhook.from_settings(settings)  # refused (no secret) before anything is written
    # the vote is this process's to announce: the driver of the run sends what it decides
    notifier = None if webhook is None else WebhookNotifier(webhook).start()
    try:
        row = _append_vote(
            approval_id, decision, reason, db, voter_identity, roles, settings.machine_id, notifier
        )
    finally:
        if notifier is not None:
            notifier.close()  # a few seconds for the vote to leave, then this process exits
    return views.approval_out(row).model_dump()


def _append_vote(
    approval_id: int,
    decision: str,
    reason: str | None,
    db: str | None,
    voter_identity: str,
    roles: list[str],
    machine_id: int | None,
    notifier: WebhookNotifier | None,
) -> port.ApprovalRow:
    from milepost.core.approval_state import Voter
    from milepost.engine.approvals import append_decision

    with opened(db, existing=True) as store:
        with one_shot_engine(store, "approve", machine_id) as engine:
            append_decision(
                store,
                engine.orchestrator,
                approval_id,
                Voter(identity=voter_identity, roles=frozenset(roles)),
                decision,
                reason,
                on_appended=None if notifier is None else (lambda event: notifier.notify([event])),
            )
        row = store.get_approval(approval_id)
    assert row is not None  # append_decision found it
    return row
