"""Errors as RFC 9457 problem documents, mapped at one place.

Routes raise the domain's exceptions (:mod:`hcat_notify.errors`); the handlers here,
installed once on the app, turn each into ``application/problem+json`` with the status
of :data:`STATUS` (the most specific class wins), a ``detail`` that is the exception's
message, and an ``error`` member naming the class, so that a client raises the same type
(:mod:`hcat_notify.api.client`). Request validation errors, unknown routes and
unexpected failures become problem documents too; an unexpected failure's detail is an
id to find it in the server's log, never its traceback. Errors the HTTP layer itself
answers (an unknown route or method, a body it cannot take, a request too slow or too
large for the server) name a class as well (:func:`http_problem`): every error a client
gets has the same members.
"""

from __future__ import annotations

import logging
import secrets
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from hcat_notify.api.contract import NOT_DONE, PROBLEM_JSON, PROBLEM_PREFIX, problem_type
from hcat_notify.errors import (
    ApiAuthError,
    ApiUnavailableError,
    BrokerError,
    ConfigError,
    ConflictError,
    HcatNotifyError,
    HistoryGoneError,
    InvalidIdentifierError,
    InvalidInputError,
    InvalidSpecError,
    LocationNotFoundError,
    PartitionExistsError,
    PartitionNotFoundError,
    StoreError,
    StoreUnavailableError,
    TableExistsError,
    TableNotFoundError,
    UnknownPartitionKeyError,
)
from hcat_notify.store.webhooks import WebhookNotFoundError

__all__ = [
    "NOT_DONE",
    "PROBLEM_JSON",
    "PROBLEM_RESPONSES",
    "RETRY_AFTER_SECONDS",
    "STATUS",
    "allowed_methods",
    "error_response",
    "http_problem",
    "install_handlers",
    "problem_body",
    "problem_doc",
    "problem_response",
    "problem_type",
    "status_of",
]

logger = logging.getLogger(__name__)

STATUS: dict[type[HcatNotifyError], int] = {
    UnknownPartitionKeyError: 422,
    HistoryGoneError: 410,
    LocationNotFoundError: 422,
    PartitionNotFoundError: 404,
    InvalidIdentifierError: 400,
    InvalidSpecError: 400,
    InvalidInputError: 400,
    TableNotFoundError: 404,
    WebhookNotFoundError: 404,
    TableExistsError: 409,
    PartitionExistsError: 409,
    ConflictError: 409,
    ApiAuthError: 403,
    StoreUnavailableError: 503,
    BrokerError: 503,
    ApiUnavailableError: 503,
    StoreError: 500,
    ConfigError: 500,
    HcatNotifyError: 500,
}
"""Status of each error class; an exception takes the entry of its nearest class."""


def status_of(exc: HcatNotifyError) -> int:
    """The HTTP status for ``exc``: :data:`STATUS` of the first class in its MRO listed."""
    for klass in type(exc).__mro__:
        if klass in STATUS:
            return STATUS[klass]
    return 500  # pragma: no cover - HcatNotifyError is listed


RETRY_AFTER_SECONDS = 1
"""``Retry-After`` of every 503: the cause (a stopping instance, a database or broker
that is failing over) is usually gone by then, or another instance answers."""


_HTTP_KINDS = {
    404: "not-found",
    405: "method-not-allowed",
    408: "request-timeout",
    413: "content-too-large",
    414: "uri-too-long",
    415: "unsupported-media-type",
    431: "request-header-fields-too-large",
}
"""Problem types of the HTTP layer's own 4xx, fixed here (Python renames status phrases)."""


def http_problem(status: int) -> tuple[str, str]:
    """The problem ``type`` and ``error`` class of an error the HTTP layer answers
    itself (no domain exception behind it): a malformed request is an
    :class:`InvalidInputError` (nothing was changed) whose type names the status, a 503
    an :class:`ApiUnavailableError` (ask again, or another instance)."""
    if status in (401, 403):
        error = ApiAuthError.__name__
    elif status == 503:
        error = ApiUnavailableError.__name__
    elif status >= 500:
        return PROBLEM_PREFIX + "internal-server-error", HcatNotifyError.__name__
    elif status in _HTTP_KINDS:
        return PROBLEM_PREFIX + _HTTP_KINDS[status], InvalidInputError.__name__
    else:
        error = InvalidInputError.__name__
    return problem_type(error), error


def problem_body(
    status: int,
    detail: str,
    *,
    instance: str | None,
    type_: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """A problem document; ``type_`` and ``error`` default to the status's
    (:func:`http_problem`), ``error`` also under a type of its own (``not-done``,
    ``no-rule``): every document carries one. ``instance`` is left out when None (the
    server could not read the request's path)."""
    default_type, default_error = http_problem(status)
    type_ = default_type if type_ is None else type_
    error = default_error if error is None else error
    body: dict[str, Any] = {
        "type": type_,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    body["error"] = error
    return body


def problem_response(
    status: int,
    detail: str,
    *,
    request: Request | None = None,
    instance: str | None = None,
    type_: str | None = None,
    error: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A problem document response; ``type_`` and ``error`` default to the status's
    (:func:`http_problem`), ``instance`` to the request's path."""
    if instance is None and request is not None:
        instance = request.url.path
    body = problem_body(status, detail, instance=instance, type_=type_, error=error)
    if status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS), **(headers or {})}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _one_line(message: str) -> str:
    return "; ".join(line.strip() for line in message.splitlines() if line.strip()) or "failed"


def error_response(exc: Exception, *, method: str, path: str) -> JSONResponse:
    """The problem document a request of ``method`` on ``path`` is answered with when it
    fails with ``exc`` (what the handlers :func:`install_handlers` installs answer): a
    domain error with its status and class; anything else 500, logged with an incident
    id the detail names."""
    if not isinstance(exc, HcatNotifyError):
        incident = secrets.token_hex(6)
        logger.error("api %s %s failed, incident %s", method, path, incident, exc_info=exc)
        return problem_response(
            500, f"the server failed; its log has incident {incident}", instance=path
        )
    status = status_of(exc)
    name = type(exc).__name__
    if status == 500:
        # Our own failure: the log has the traceback under an id the caller can quote.
        incident = secrets.token_hex(6)
        logger.error("api %s %s failed, incident %s", method, path, incident, exc_info=exc)
        detail = f"the server failed ({name}); its log has incident {incident}"
    else:
        detail = _one_line(str(exc))
    return problem_response(status, detail, instance=path, type_=problem_type(name), error=name)


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HcatNotifyError)
    return error_response(exc, method=request.method, path=request.url.path)


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(part) for part in loc if part not in ("body", "query", "path")]
    return ".".join(parts) or "request"


def _validation_problem(item: dict[str, Any]) -> str:
    if item.get("type") == "json_invalid":
        # The parser's own words say what is wrong and where; pydantic's msg does not.
        where = item["loc"][-1]
        reason = item.get("ctx", {}).get("error", "invalid")
        return f"the body is not JSON: {reason} at character {where}"
    return f"{_location(tuple(item['loc']))}: {item['msg']}"


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [_validation_problem(item) for item in exc.errors()]
    return problem_response(
        400,
        "malformed request: " + "; ".join(problems[:10]),
        request=request,
        type_=problem_type("InvalidInputError"),
        error="InvalidInputError",
    )


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app answers at the request's path (HEAD wherever
    GET is), for the ``Allow`` of a 405: the router itself names only the first route
    that matched the path."""
    allowed: set[str] = set()
    for route in request.app.router.routes:
        methods = getattr(route, "methods", None)
        if methods and route.matches(request.scope)[0] is not Match.NONE:
            allowed |= methods
    if "GET" in allowed:
        allowed.add("HEAD")
    return sorted(allowed)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if isinstance(exc.__cause__, HcatNotifyError):
        # A body the parser refused (hcat_notify.api.routing), wrapped by FastAPI.
        return await _domain_error(request, exc.__cause__)
    status = exc.status_code
    headers = dict(exc.headers) if exc.headers else {}
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(status).phrase
    if status == 404 and detail == HTTPStatus(404).phrase:
        detail = f"Not Found: {request.url.path} is no route of this API"
    elif status == 405:
        allowed = allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.url.path} answers {', '.join(allowed)}, not {request.method}"
    return problem_response(status, detail, request=request, headers=headers or None)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc, method=request.method, path=request.url.path)


async def _client_gone(request: Request, exc: Exception) -> JSONResponse:
    # The client left (or the server cut off its stalled body) while the body was read:
    # nobody reads this answer, and nothing failed on our side.
    logger.info("api %s %s: the client went away mid-request", request.method, request.url.path)
    return problem_response(408, "the client went away before its body arrived", request=request)


def install_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` a problem document."""
    app.add_exception_handler(ClientDisconnect, _client_gone)
    app.add_exception_handler(HcatNotifyError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


def problem_doc(description: str) -> dict[str, Any]:
    """An OpenAPI response that is a problem document."""
    return {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: problem_doc(
        "Malformed input: a table name, spec, cursor or body, or a body sent to a route "
        "that takes none."
    ),
    401: problem_doc("No or wrong credentials."),
    503: problem_doc("The catalog database cannot be reached."),
}
"""Responses every authenticated route may give, for the OpenAPI document."""
