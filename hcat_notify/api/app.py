"""The ASGI application of ``hcat-notify serve``.

:func:`create_app` builds a FastAPI app from the settings: the routers (one module per
resource under :mod:`hcat_notify.api.routes`), the problem-document handlers
(:mod:`hcat_notify.api.problems`), a 1 MiB request body limit, a check that the query
is UTF-8, the request metrics, and in front of all of them the long polls of the
scheduler's check (:mod:`hcat_notify.api.long_polls`).
The app keeps nothing between requests that another instance would not have, so any
number run behind any load balancer. The design is in docs/api.md.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hcat_notify.api.datamodels import Problem
from hcat_notify.api.long_polls import LongPolls
from hcat_notify.api.metrics import RequestMetrics
from hcat_notify.api.params import query_not_utf8
from hcat_notify.api.problems import install_handlers, problem_response
from hcat_notify.api.routes import dones, events, monitor, sets, status_page, tables, webhooks
from hcat_notify.api.state import DRAIN_STATE_KEY, ApiState
from hcat_notify.config import Settings, load_settings

__all__ = ["MAX_BODY_BYTES", "BodyLimit", "Utf8Query", "create_app"]

MAX_BODY_BYTES = 1 << 20
"""The largest request body taken (1 MiB); a larger one gets 413 and changes nothing."""

API_VERSION = "1"


class BodyLimit:
    """ASGI middleware: refuses request bodies over ``limit`` bytes with 413, whether
    announced by ``Content-Length`` or sent chunked."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"the request body is over {self.limit:,} bytes"
        path: str = scope["path"]
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit():
                    await problem_response(400, "malformed Content-Length", instance=path)(
                        scope, receive, send
                    )
                    return
                if int(value) > self.limit:
                    await problem_response(413, too_large, instance=path)(scope, receive, send)
                    return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise HTTPException(413, too_large)
            return message

        await self.app(scope, limited, send)


class Utf8Query:
    """ASGI middleware: refuses a query string that is not UTF-8 with 400, as a bad key
    name is refused. Starlette would decode it with U+FFFD in place of each bad byte,
    and a spec of such a value would be looked up."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query: bytes = scope.get("query_string", b"")
        if scope["type"] == "http" and (b"%" in query or not query.isascii()):
            bad = query_not_utf8(query)
            if bad is not None:
                detail = f"malformed request: {bad}"
                await problem_response(400, detail, instance=scope["path"])(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
            tags=app.openapi_tags,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["Problem"] = Problem.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
        _without_validation_errors(schema)
        app.openapi_schema = schema
    return app.openapi_schema


_VALIDATION_ERROR = "#/components/schemas/HTTPValidationError"


def _without_validation_errors(schema: dict[str, Any]) -> None:
    """Drop the 422 ``HTTPValidationError`` FastAPI declares on every route with
    parameters: the server never sends it (a request that does not validate is a 400
    problem document, ``InvalidInputError``, which each route declares)."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            declared = responses.get("422", {}).get("content", {}).get("application/json", {})
            if declared.get("schema", {}).get("$ref") == _VALIDATION_ERROR:
                del responses["422"]
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)


class _Api(FastAPI):
    """The application, with the scheduler's long polls taken before its middleware
    and routing (:mod:`hcat_notify.api.long_polls`)."""

    def build_middleware_stack(self) -> ASGIApp:
        return LongPolls(super().build_middleware_stack(), self.state.hcat)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API application for ``settings`` (default: :func:`load_settings`).

    Call without arguments as uvicorn's ``--factory``: each worker process loads the
    settings from the environment and the settings file.
    """
    state = ApiState.build(settings if settings is not None else load_settings())

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        # What start-up made (modules, models, the app) lives as long as the process:
        # out of the cyclic collector's sight, a full collection with ten thousand long
        # polls waiting scans their objects only.
        gc.collect()
        gc.freeze()
        try:
            # The server calls it as it begins to stop, before it waits for requests.
            yield {DRAIN_STATE_KEY: state.drain}
        finally:
            state.close()

    app = _Api(
        title="hcat-notify",
        version=API_VERSION,
        description=(
            "Partition notifications for Hive-style partitioned tables: tables, partitions, "
            "mark-set-done checks and writes, events after a cursor. Errors are RFC 9457 "
            "problem documents. HTTP Basic with a configured principal: readers read, "
            "writers also write."
        ),
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.hcat = state
    install_handlers(app)
    app.add_middleware(BodyLimit)
    app.add_middleware(Utf8Query)
    app.add_middleware(RequestMetrics, metrics=state.metrics)
    for module in (monitor, dones, tables, sets, events, webhooks, status_page):
        app.include_router(module.router)
    app.router.routes.insert(0, dones.check_route())
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app
