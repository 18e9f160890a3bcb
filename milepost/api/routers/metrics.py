"""`GET /metrics`: Prometheus text exposition (any reading role)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from milepost.api import errors
from milepost.api.auth import ReadAuth
from milepost.api.deps import MetricsDep
from milepost.api.errors import AUTH

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, responses=errors.responses(*AUTH))
def metrics(metrics: MetricsDep, _: ReadAuth) -> Response:
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
