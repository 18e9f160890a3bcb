"""HTTP client of the milepost server (docs/server-contract.md), sync and async.

Each route is described once, as a `routes.Call` (method, path, body, how to read the
reply); `MilepostClient` sends it with `httpx.Client`, `AsyncMilepostClient` with
`httpx.AsyncClient`. Every error reply becomes a `ServerRefused` carrying the status and the
stable `code` of the body; a server that cannot be reached raises `ServerUnavailable`.

`milepost.client` is the path users import from: the names below are its public API,
whatever module of the package defines them.
"""

from milepost.client.async_client import AsyncMilepostClient
from milepost.client.errors import (
    NoServer,
    ServerRefused,
    ServerUnavailable,
    WaitTimeout,
    error_of_body,
)
from milepost.client.routes import ParentClaim, batch_body
from milepost.client.sync_client import MilepostClient

__all__ = [
    "ServerRefused",
    "AsyncMilepostClient",
    "MilepostClient",
    "NoServer",
    "ParentClaim",
    "ServerUnavailable",
    "WaitTimeout",
    "batch_body",
    "error_of_body",
]
