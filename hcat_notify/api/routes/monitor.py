"""``/healthz``, ``/readyz`` and ``/metrics``: for load balancers and Prometheus.

They need no credentials: probes and scrapers usually have none, and none of them
shows a table's data. Put the API behind a proxy that hides them if that matters.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from hcat_notify.api.datamodels import Health, Readiness
from hcat_notify.api.routing import ApiRoute
from hcat_notify.api.state import ApiState, in_thread, state_of

__all__ = ["router"]

State = Annotated[ApiState, Depends(state_of)]
router = APIRouter(tags=["monitoring"], route_class=ApiRoute)


@router.get("/healthz")
async def healthz() -> Health:
    """200 while the process lives."""
    return Health()


@router.get(
    "/readyz",
    responses={503: {"model": Readiness, "description": "Not ready: the checks say why."}},
)
async def readyz(state: State) -> JSONResponse:
    """200 when the catalog answers at this version's migration and the broker accepts a
    connection; 503 with the reasons otherwise."""
    # Not in_thread: a broker that does not answer holds its thread for seconds, and
    # must not take a turn from the catalog calls.
    checks = await run_in_threadpool(state.readiness)
    ready = all(value == "ok" for value in checks.values())
    body = Readiness(status="ready" if ready else "not ready", checks=checks)
    return JSONResponse(body.model_dump(mode="json"), status_code=200 if ready else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}},
)
async def metrics(state: State) -> Response:
    """Backlog, relays, subscribers' lag, and this server's requests (Prometheus)."""
    payload, content_type = await in_thread(state.metrics.render)
    return Response(payload, media_type=content_type)
