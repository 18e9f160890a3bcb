"""Errors as the API speaks them, and the one table that maps exceptions to responses.

Every error body is `{"code", "message", ...fields}` (docs/server-contract.md, Errors).
Routes raise `ApiError` (or a `MilepostError` from below); `install` registers the
handlers once for the whole app.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from milepost import errors
from milepost.api import checks
from milepost.api.schemas import ErrorOut, ValidationErrorOut
from milepost.core import actions, approvals
from milepost.engine import errors as engine_errors
from milepost.engine.seal import WorkloadUnreadable
from milepost.store.port import (
    EventIdConflict,
    MachineIdsExhausted,
    StoreUnavailable,
    WorkerNameTaken,
)

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answered with `status` and `{code, message, **fields}`."""

    def __init__(self, status: int, code: str, message: str, /, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.fields}


def not_found(code: str, message: str, /, **fields: Any) -> ApiError:
    return ApiError(404, code, message, **fields)


def execution_not_found(execution_id: int, what: str = "execution") -> ApiError:
    """404 `execution_not_found` naming the id (`what`: e.g. "parent execution")."""
    return not_found(
        "execution_not_found", f"no {what} {execution_id}", execution_id=str(execution_id)
    )


def conflict(code: str, message: str, /, **fields: Any) -> ApiError:
    return ApiError(409, code, message, **fields)


def invalid(errs: Sequence[dict[str, Any]], message: str | None = None) -> ApiError:
    """422 `validation_error` with `errors: [{loc, msg}]`; the message names the first field."""
    first = errs[0] if errs else {"loc": [], "msg": "invalid"}
    where = ".".join(str(p) for p in first["loc"])
    return ApiError(
        422,
        "validation_error",
        message or f"{where}: {first['msg']}",
        errors=[{"loc": list(e["loc"]), "msg": e["msg"]} for e in errs],
    )


_WHEN: dict[int, str] = {
    400: "The body is not JSON text (`http_error`).",
    401: "No bearer token, or one the server does not know (`unauthorized`).",
    403: "The token's role may not do this (`forbidden`); a decision the caller may not make "
    "(`not_an_approver`, `self_approval`, `no_user`).",
    404: "What the request names does not exist.",
    409: "The request conflicts with the state it acts on (e.g. `stale_epoch`, "
    "`approval_closed`, `already_voted`, `execution_terminal`, `nothing_to_retry`).",
    413: "The body is over the size limit.",
    422: "The input is invalid: `validation_error` with `errors: [{loc, msg}]`, or "
    "`playbook_invalid` with `problems`.",
    503: "The server cannot serve this now (e.g. `machine_ids_exhausted`; "
    "`workload_unreadable`: it lacks the key that sealed the run's workload; "
    "`store_unavailable`: the database is locked or unreachable, retry after "
    "`Retry-After` seconds).",
}

AUTH = (401, 403)
"""What every route behind a token can answer."""
BODY = (400, 413, 422)
"""What every route that reads a JSON body can answer."""


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route: the error statuses it can answer, with their body, so
    the OpenAPI document lists them (and describes our 422, not FastAPI's default one)."""
    return {
        status: {
            "model": ValidationErrorOut if status == 422 else ErrorOut,
            "description": _WHEN[status],
        }
        for status in sorted(set(statuses))
    }


# MilepostError codes that come up from the engine or the store -> HTTP status
_STATUS_OF_CODE: dict[str, int] = {
    errors.ExecutionNotFound.code: 404,
    errors.PlaybookNotFound.code: 404,
    errors.PlaybookInvalid.code: 422,
    errors.ConcurrencyConflict.code: 409,
    engine_errors.CommandNotFound.code: 404,
    engine_errors.ExecutionTerminal.code: 409,
    engine_errors.AlreadyTerminal.code: 409,
    EventIdConflict.code: 409,
    WorkerNameTaken.code: 409,  # a live worker of another token has the name (`holder`)
    MachineIdsExhausted.code: 503,
    WorkloadUnreadable.code: 503,  # this server lacks the key that sealed a run's workload
    "credential_unreadable": 500,
    # the refusals of a decision
    approvals.ApprovalNotFound.code: 404,
    approvals.ApprovalClosed.code: 409,  # no longer pending (field `status`)
    approvals.AlreadyVoted.code: 409,
    approvals.NotAnApprover.code: 403,
    approvals.SelfApproval.code: 403,
    approvals.InvalidDecision.code: 422,
    # the refusals of an operator's action (`core.actions`; `execution_terminal`: above)
    actions.StepNotFound.code: 404,
    actions.RunStopping.code: 409,
    actions.NothingToRetry.code: 409,
    actions.StepNotActive.code: 409,
    actions.NotRestartable.code: 409,
    actions.InvalidResult.code: 422,
}


def as_response(exc: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return as_response(exc)


def internal(exc: BaseException, what: str) -> dict[str, Any]:
    """The body of a 500: a request id and nothing of the exception, whose text may carry a
    database URL or a secret; the details go to the server's log under that id."""
    request_id = uuid.uuid4().hex
    log.error(
        "unhandled error on %s (request %s)",
        what,
        request_id,
        exc_info=exc,
        extra={"action": "api_internal_error", "request_id": request_id},
    )
    return {
        "code": "internal",
        "message": f"internal error (request {request_id})",
        "request_id": request_id,
    }


RETRY_AFTER_S = 1
"""What a 503 `store_unavailable` asks the client to wait before it tries again."""


def milepost_reply(exc: errors.MilepostError) -> tuple[int, dict[str, Any]]:
    """The status and JSON body that answer a MilepostError (HTTP and the worker channel)."""
    if isinstance(exc, StoreUnavailable):
        # the driver's text names the database (a path, a masked URL): the log has it
        log.warning("the database is unavailable: %s", exc, extra={"action": "store_unavailable"})
        return 503, {
            "code": exc.code,
            "message": "the database is unavailable (locked or unreachable): try again later",
            "retry_after": RETRY_AFTER_S,
        }
    if isinstance(exc, errors.ClaimRefused):
        body = {**exc.to_dict(), "code": exc.fields.get("reason") or exc.code}
        body.pop("reason", None)
        if isinstance(body.get("lease_expires_at"), int | float):  # the holder's lease end
            body["lease_expires_at"] = checks.iso(body["lease_expires_at"])
        return 409, body
    if isinstance(exc, engine_errors.EventsInvalid):  # placed in the request by `ingest`
        return 422, invalid(exc.problems).body()
    status = _STATUS_OF_CODE.get(exc.code)
    if status is None:  # known codes carry only safe fields (credential_unreadable: a name)
        return 500, internal(exc, f"a milepost error {exc.code!r}")
    return status, exc.to_dict()


def _milepost_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.MilepostError)
    status, body = milepost_reply(exc)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if isinstance(exc, StoreUnavailable) else None
    return JSONResponse(body, status_code=status, headers=headers)


def _count_unparsed(request: Request) -> None:
    services = getattr(request.app.state, "services", None)
    if services is not None and request.url.path.startswith("/api/events"):
        services.metrics.events_ingested.labels("unparsed", "rejected").inc()


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    _count_unparsed(request)
    errs = [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "invalid"))} for e in exc.errors()
    ]
    return _api_error(request, invalid(errs))


_HTTP_CODES = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    refused = getattr(exc, "error", None)  # edge.Refused: the request was refused at the edge
    if isinstance(refused, ApiError):
        _count_unparsed(request)
        return as_response(refused)
    if exc.status_code == 413:
        return as_response(too_large(request.app.state.settings.max_body_bytes))
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return JSONResponse(
        {"code": code, "message": str(exc.detail)},
        status_code=exc.status_code,
        headers=getattr(exc, "headers", None),
    )


def too_large(limit: int) -> ApiError:
    """413: a request body (or a worker-channel message) over `MILEPOST_MAX_BODY_BYTES`."""
    return ApiError(
        413,
        "too_large",
        f"the request body is over the limit of {limit} bytes (MILEPOST_MAX_BODY_BYTES)",
        limit=limit,
    )


def _internal(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(internal(exc, f"{request.method} {request.url.path}"), status_code=500)


Handler = Callable[[Request, Exception], JSONResponse | Awaitable[JSONResponse]]

HANDLERS: dict[type[Exception], Handler] = {
    ApiError: _api_error,
    errors.MilepostError: _milepost_error,
    RequestValidationError: _validation_error,
    StarletteHTTPException: _http_error,
    Exception: _internal,
}
"""The exception-handler table: one place for every error the API answers."""


def install(app: FastAPI) -> None:
    for exc_type, handler in HANDLERS.items():
        app.add_exception_handler(exc_type, handler)
