"""`GET /health`: open, for load balancers and probes."""

from __future__ import annotations

from fastapi import APIRouter

from milepost.api import schemas

router = APIRouter(tags=["health"])


@router.get("/health")
def health() -> schemas.HealthOut:
    return schemas.HealthOut(status="ok")
