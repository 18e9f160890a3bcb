"""What a `worker` token may do with child executions (docs/server-contract.md, Auth).

A worker runs the `playbook` tool of a command it claimed: it has to start the child, wait
for it and, when its attempt is abandoned, cancel it. Its role may not execute or cancel
anything else, so each of those requests carries a proof: the parent command's id and the
epoch of the claim (`parent_command_id`, `parent_epoch`). The server admits the request
only while that command is claimed with that epoch and its lease has not run out, and only
for the children that command started (`execution.started` records `parent_command_id`).
A start is admitted only when that command's step runs the `playbook` tool, and for the
path the tool names unless that path is a template (rendered on the worker, from data
the server does not check again).
Everything else a worker asks there is 403 `forbidden`, with a `reason`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request
from starlette.concurrency import run_in_threadpool

from milepost import ids
from milepost.api import errors
from milepost.api.auth import OPERATE, READ, Principal, authenticate, authorize
from milepost.api.deps import services_of
from milepost.api.errors import ApiError
from milepost.engine.errors import CommandNotFound
from milepost.engine.lifecycle import CommandRow, Lifecycle
from milepost.playbook import model
from milepost.playbook.coercion import is_template
from milepost.store.port import COMMAND_CLAIMED

CHILD_ROLE = "worker"
"""The role admitted with a proof where it is otherwise refused."""


def refused(principal: Principal, what: str, reason: str, detail: str, **fields: Any) -> ApiError:
    return ApiError(
        403,
        "forbidden",
        f"role {principal.role!r} may {what} only for the "
        f"children of a command it holds the live claim of: {detail}",
        role=principal.role,
        reason=reason,
        **fields,
    )


def parent_claim(
    engine: Lifecycle,
    principal: Principal,
    what: str,
    *,
    parent_execution_id: int | None,
    command_id: int | None,
    epoch: int | None,
) -> CommandRow | None:
    """The parent command the proof names, checked; None when there is no proof and the
    role needs none. 403 when the role needs one and it is missing or does not hold."""
    if command_id is None or epoch is None:
        if principal.role in OPERATE:
            return None
        raise refused(
            principal,
            what,
            "no_claim_proof",
            "give parent_command_id and "
            "parent_epoch (the claim of the command that runs the playbook tool)",
        )
    now = engine.clock()
    ids = {"parent_command_id": str(command_id)}
    try:
        row = engine.command(command_id)
    except CommandNotFound:
        raise refused(
            principal, what, "command_not_found", f"no command {command_id}", **ids
        ) from None
    if row.status != COMMAND_CLAIMED:
        raise refused(
            principal,
            what,
            "not_claimed",
            f"command {command_id} is {row.status}, not claimed",
            **ids,
        )
    if row.epoch != epoch:
        raise refused(
            principal,
            what,
            "stale_epoch",
            f"command {command_id} is claimed with another epoch than {epoch}",
            **ids,
        )
    if (row.lease_expires_at or 0.0) <= now:
        raise refused(
            principal,
            what,
            "lease_expired",
            f"the claim of command {command_id} has expired",
            **ids,
        )
    if parent_execution_id is not None and parent_execution_id != row.execution_id:
        raise refused(
            principal,
            what,
            "other_execution",
            f"command {command_id} belongs to "
            f"execution {row.execution_id}, not {parent_execution_id}",
            **ids,
            parent_execution_id=str(parent_execution_id),
        )
    return row


def check_start(
    engine: Lifecycle, principal: Principal, what: str, parent: CommandRow, path: str | None
) -> None:
    """403 unless the step of `parent` runs the `playbook` tool, for `path` when the tool's
    path is static (`path` None: the request names no path, the catalog lookup refuses it)."""
    paths = engine.read(
        parent.execution_id, lambda _state, pb: _child_paths(pb, parent.step), refresh=False
    )
    ids = {"parent_command_id": str(parent.command_id), "step": parent.step}
    if not paths:
        raise refused(
            principal,
            what,
            "not_a_playbook_step",
            f"step {parent.step!r} of command {parent.command_id} does not run the playbook tool",
            **ids,
        )
    if None in paths or path is None or path in paths:
        return
    named = ", ".join(sorted(repr(p) for p in paths if p is not None))
    raise refused(
        principal,
        what,
        "other_playbook",
        f"step {parent.step!r} starts {named}, not {path!r}",
        **ids,
        path=path,
    )


def _child_paths(playbook: model.Playbook, step: str) -> set[str | None]:
    """The paths the `playbook` tools of `step` start; None stands for a templated one."""
    found = playbook.steps.get(step)
    tasks = (
        []
        if found is None
        else [
            playbook.workbook[str(t.config.get("name"))].task
            if t.kind == "workbook" and str(t.config.get("name")) in playbook.workbook
            else t
            for t in found.tasks
        ]
    )
    paths: set[str | None] = set()
    for task in tasks:
        if task.kind == "playbook":
            path = task.config.get("path")
            paths.add(path if isinstance(path, str) and not is_template(path) else None)
    return paths


def check_child(
    engine: Lifecycle, principal: Principal, what: str, execution_id: int, parent: CommandRow
) -> None:
    """403 unless `execution_id` is a child that the command `parent` started."""
    row = engine.execution(execution_id)  # ExecutionNotFound: 404
    started_by = None
    if row.parent_execution_id == parent.execution_id:
        # the parent never changes once a run started: the cached state will do
        started_by = engine.read(
            execution_id, lambda state, _pb: state.parent_command_id, refresh=False
        )
    if started_by != parent.command_id:
        raise refused(
            principal,
            what,
            "not_a_child",
            f"execution {execution_id} was not started by command {parent.command_id}",
            parent_command_id=str(parent.command_id),
            execution_id=str(execution_id),
        )


def _child_route(allowed: frozenset[str], what: str) -> Any:
    """A dependency for a route on one execution: the roles in `allowed`, or a worker with
    the proof (query parameters) for a child of the command it holds."""

    async def check(
        request: Request,
        execution_id: Annotated[str, Path(description="Execution id (digits).")],
        parent_command_id: Annotated[
            str | None,
            Query(
                description=(
                    "[milepost extension] For a worker token: the command whose child this is."
                )
            ),
        ] = None,
        parent_epoch: Annotated[
            int | None,
            Query(
                ge=1,
                description=("[milepost extension] For a worker token: the epoch of its claim."),
            ),
        ] = None,
    ) -> Principal:
        principal = await authenticate(request)
        if principal.role in allowed:
            return principal
        if principal.role != CHILD_ROLE:
            return authorize(principal, allowed, what)  # raises: 403
        xid = _id(execution_id, ["path", "execution_id"])
        cid = (
            None
            if parent_command_id is None
            else _id(parent_command_id, ["query", "parent_command_id"])
        )
        engine = services_of(request).engine
        await run_in_threadpool(
            _check_child_request, engine, principal, what, xid, cid, parent_epoch
        )
        return principal

    return Depends(check)


def _id(value: str, loc: list[str]) -> int:
    try:
        return ids.parse_id(value)
    except ValueError as exc:
        raise errors.invalid([{"loc": loc, "msg": str(exc)}]) from None


def _check_child_request(
    engine: Lifecycle,
    principal: Principal,
    what: str,
    execution_id: int,
    command_id: int | None,
    epoch: int | None,
) -> None:
    parent = parent_claim(
        engine, principal, what, parent_execution_id=None, command_id=command_id, epoch=epoch
    )
    assert parent is not None  # a worker is never in OPERATE: no proof was refused above
    check_child(engine, principal, what, execution_id, parent)


def _start_check() -> Any:
    async def check(request: Request) -> Principal:
        principal = await authenticate(request)
        if principal.role == CHILD_ROLE:
            return principal  # the route checks its proof (in the body)
        return authorize(principal, OPERATE, "register, execute or cancel")

    return Depends(check)


ExecuteAuth = Annotated[Principal, _start_check()]
"""`POST /api/execute`: admin, operator; a worker with a proof, checked by the route."""
ChildStatusAuth = Annotated[Principal, _child_route(READ, "read executions")]
ChildCancelAuth = Annotated[Principal, _child_route(OPERATE, "register, execute or cancel")]
