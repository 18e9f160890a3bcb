"""The routes of the server (docs/server-contract.md), each described once as a `Call`:
method, path, body and how to read the reply, for both clients to send."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote


def _identity(body: Any) -> Any:
    return body


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    parse: Callable[[Any], Any] = _identity
    none_on_404: bool = False
    hold: float = 0.0
    """Seconds the server may hold the reply (a long-poll): added to the read timeout."""


def key(value: int | str) -> str:
    return str(value)


@dataclass(frozen=True, slots=True)
class ParentClaim:
    """The live claim of the command that starts a child (`playbook` tool): a `worker` token
    may start, watch and cancel executions only with it (docs/server-contract.md, Auth)."""

    command_id: int | str
    epoch: int

    def fields(self) -> dict[str, Any]:
        return {"parent_command_id": key(self.command_id), "parent_epoch": self.epoch}


def proof(claim: ParentClaim | None) -> dict[str, Any]:
    return {} if claim is None else claim.fields()


def register(content: str) -> Call:
    return Call("POST", "/api/catalog/register", {"content": content})


def catalog_list(path: str | None) -> Call:
    body = {"path": path} if path else {}
    return Call("POST", "/api/catalog/list", body, parse=lambda b: b["entries"])


def resource(path: str, version: int | None) -> Call:
    body: dict[str, Any] = {"path": path}
    if version is not None:
        body["version"] = version
    return Call("POST", "/api/catalog/resource", body)


def execute(
    path: str,
    workload: dict[str, Any] | None,
    version: int | None,
    parent_execution_id: int | str | None,
    claim: ParentClaim | None = None,
) -> Call:
    body: dict[str, Any] = {"path": path, "workload": workload or {}, **proof(claim)}
    if version is not None:
        body["version"] = version
    if parent_execution_id is not None:
        body["parent_execution_id"] = key(parent_execution_id)
    return Call("POST", "/api/execute", body, parse=lambda b: str(b["execution_id"]))


def executions(
    status: str | None, path: str | None, limit: int, offset: int, since: float | None = None
) -> Call:
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if status:
        params["status"] = status
    if path:
        params["path"] = path
    if since is not None:
        params["since"] = since
    return Call("GET", "/api/executions", params=params, parse=lambda b: b["items"])


def describe(execution_id: int | str) -> Call:
    return Call("GET", f"/api/executions/{key(execution_id)}/describe")


def event_page(
    execution_id: int | str,
    *,
    step: str | None,
    types: str | None,
    after: int,
    limit: int,
    tail: int | None,
) -> Call:
    params: dict[str, Any] = {"after": after, "limit": limit}
    for name, value in (("step", step), ("type", types), ("tail", tail)):
        if value is not None:
            params[name] = value
    return Call("GET", f"/api/executions/{key(execution_id)}/events", params=params)


def status(
    execution_id: int | str, wait: float | None = None, claim: ParentClaim | None = None
) -> Call:
    path = f"/api/executions/{key(execution_id)}/status"
    if not wait or wait <= 0:
        return Call("GET", path, params=proof(claim))
    wait = round(wait, 3)
    return Call("GET", path, params={"wait": wait, **proof(claim)}, hold=wait)


def diagnosis(execution_id: int | str) -> Call:
    return Call("GET", f"/api/executions/{key(execution_id)}/diagnosis")


def execution(execution_id: int | str, events_limit: int | None, events_after: int | None) -> Call:
    params: dict[str, Any] = {}
    if events_limit is not None:
        params["events_limit"] = events_limit
    if events_after is not None:
        params["events_after"] = events_after
    return Call("GET", f"/api/executions/{key(execution_id)}", params=params)


def logs(execution_id: int | str, step: str | None, after: int, limit: int) -> Call:
    params: dict[str, Any] = {"after": after, "limit": limit}
    if step is not None:
        params["step"] = step
    return Call("GET", f"/api/executions/{key(execution_id)}/logs", params=params)


def cancel(execution_id: int | str, claim: ParentClaim | None = None) -> Call:
    return Call("POST", f"/api/executions/{key(execution_id)}/cancel", {}, params=proof(claim))


def usage(path: str | None) -> Call:
    return Call(
        "GET", "/api/usage", params={"path": path} if path else {}, parse=lambda b: b["items"]
    )


def retry(execution_id: int | str, step: str, reason: str | None) -> Call:
    return Call(
        "POST",
        f"/api/executions/{key(execution_id)}/steps/{quote(step, safe='')}/retry",
        {"reason": reason},
    )


def skip(execution_id: int | str, step: str, result: Any, reason: str | None) -> Call:
    return Call(
        "POST",
        f"/api/executions/{key(execution_id)}/steps/{quote(step, safe='')}/skip",
        {"result": result, "reason": reason},
    )


def restart(execution_id: int | str, from_step: str | None) -> Call:
    return Call("POST", f"/api/executions/{key(execution_id)}/restart", {"from_step": from_step})


def rerun(execution_id: int | str) -> Call:
    return Call("POST", f"/api/executions/{key(execution_id)}/rerun")


def restarts(execution_id: int | str) -> Call:
    return Call("GET", f"/api/executions/{key(execution_id)}/restarts")


def credentials() -> Call:
    return Call("GET", "/api/credentials", parse=lambda b: b["items"])


def delete_credential(name: str) -> Call:
    return Call("DELETE", f"/api/credentials/{quote(name, safe='')}", none_on_404=True)


def approvals(
    status: str | None,
    execution_id: int | str | None,
    approver: str | None,
    risk: str | None,
    limit: int,
    after: int | str | None,
) -> Call:
    params: dict[str, Any] = {"limit": limit}
    for name, value in (
        ("status", status),
        ("execution_id", execution_id),
        ("approver", approver),
        ("risk", risk),
        ("after", after),
    ):
        if value is not None:
            params[name] = key(value) if name in ("execution_id", "after") else value
    return Call("GET", "/api/approvals", params=params)


def approval(approval_id: int | str) -> Call:
    return Call("GET", f"/api/approvals/{key(approval_id)}")


def decide_approval(approval_id: int | str, decision: str, reason: str | None) -> Call:
    return Call(
        "POST",
        f"/api/approvals/{key(approval_id)}/decision",
        {"decision": decision, "reason": reason},
    )


def command(event_id: int | str) -> Call:
    return Call("GET", f"/api/commands/{key(event_id)}")


def claim(event_id: int | str, worker_id: str, lease_seconds: float | None) -> Call:
    body: dict[str, Any] = {"worker_id": worker_id}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    return Call("POST", f"/api/commands/{key(event_id)}/claim", body)


def claim_next(worker_id: str, limit: int, lease_seconds: float | None, pool: str | None) -> Call:
    body: dict[str, Any] = {"worker_id": worker_id, "limit": limit}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    if pool is not None:
        body["pool"] = pool
    return Call("POST", "/api/commands/claim", body, parse=lambda b: list(b["commands"]))


def heartbeat(event_id: int | str, worker_id: str, epoch: int, lease_seconds: float | None) -> Call:
    body: dict[str, Any] = {"worker_id": worker_id, "epoch": epoch}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    return Call("POST", f"/api/commands/{key(event_id)}/heartbeat", body)


def machine_id(
    worker_id: str,
    machine_id: int | None,
    pool: str | None = None,
    worker: dict[str, Any] | None = None,
    release: bool = False,
) -> Call:
    body: dict[str, Any] = {"worker_id": worker_id}
    if release:
        body["release"] = True
    if machine_id is not None:
        body["machine_id"] = machine_id
    if pool is not None and pool != "default":  # a server older than pools takes the rest
        body["pool"] = pool
    if worker is not None:
        body["worker"] = worker
    return Call("POST", "/api/workers/machine-id", body)


def workers(pool: str | None, status: str | None) -> Call:
    params = {k: v for k, v in (("pool", pool), ("status", status)) if v is not None}
    return Call("GET", "/api/workers", params=params)


def release(event_id: int | str, worker_id: str, epoch: int) -> Call:
    body = {"worker_id": worker_id, "epoch": epoch}
    return Call("POST", f"/api/commands/{key(event_id)}/release", body)


def batch_body(events: list[dict[str, Any]], claim: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body of `POST /api/events/batch` (and of a worker channel message)."""
    body: dict[str, Any] = {"events": events}
    if claim is not None:
        body["claim"] = claim  # milepost extension: the reply carries `commands`
    return body


def post_events(events: list[dict[str, Any]], claim: dict[str, Any] | None = None) -> Call:
    return Call("POST", "/api/events/batch", batch_body(events, claim))


def credential(name: str) -> Call:
    return Call(
        "GET",
        f"/api/credentials/{quote(name, safe='')}",
        params={"include_data": "true"},
        parse=credential_data,
        none_on_404=True,
    )


def credential_data(body: Any) -> dict[str, Any] | None:
    """The credential's data with its `type` (the shape the tools' lookups take)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        return None
    data: dict[str, Any] = dict(body["data"])
    if body.get("type") is not None:
        data.setdefault("type", body["type"])
    return data


def put_credential(name: str, type_: str, data: dict[str, Any]) -> Call:
    return Call("POST", "/api/credentials", {"name": name, "type": type_, "data": data})
