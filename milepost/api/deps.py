"""What routes receive: the app's services, as `Annotated` dependency aliases.

Routes get the engine service (`Lifecycle`), never the store: they translate between the
wire and the engine. They are `async` on purpose: FastAPI runs a sync dependency in its
thread pool, one hop per dependency per request, for what is an attribute read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from milepost.api.metrics import Metrics
from milepost.credentials import Vault
from milepost.engine.lifecycle import Lifecycle
from milepost.engine.machine import LeasedIds
from milepost.engine.reconciler import Reconciler
from milepost.engine.webhooks import WebhookNotifier
from milepost.settings import Settings
from milepost.store import port


@dataclass(slots=True)
class Services:
    """Everything the lifespan opened; `app.state.services`."""

    settings: Settings
    store: port.Store
    """For the app's own plumbing (auth tokens, closing): routes go through `engine`."""
    engine: Lifecycle
    vault: Vault
    metrics: Metrics
    shared: bool
    """Several servers may share this database (PostgreSQL)."""
    machine_ids: LeasedIds | None = None
    """The server's leased machine id (with `MILEPOST_MACHINE_ID`, that one when it was
    free: the ids are minted on it whatever the lease)."""
    webhook: WebhookNotifier | None = None
    """The approval webhook's notifier (None: no `MILEPOST_APPROVAL_WEBHOOK_URL`)."""

    @property
    def reconciler(self) -> Reconciler:
        return self.engine.reconciler


def services_of(request: HTTPConnection) -> Services:
    services: Services = request.app.state.services
    return services


async def get_services(request: Request) -> Services:
    return services_of(request)


async def get_engine(request: Request) -> Lifecycle:
    return services_of(request).engine


async def get_vault(request: Request) -> Vault:
    return services_of(request).vault


async def get_metrics(request: Request) -> Metrics:
    return services_of(request).metrics


ServicesDep = Annotated[Services, Depends(get_services)]
EngineDep = Annotated[Lifecycle, Depends(get_engine)]
VaultDep = Annotated[Vault, Depends(get_vault)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
