"""Errors as RFC 9457 problem documents, mapped at one place.

Routes raise the domain's exceptions (:mod:`hcat_notify.errors`); the handlers here,
installed once on the app, turn each into ``application/problem+json`` with the status
of :data:`STATUS` (the most specific class wins), a ``detail`` that is the exception's
message, and an ``error`` member naming the class, so that a client raises the same type
(:mod:`hcat_notify.api.client`). Request validation errors, unknown routes and
unexpected failures become problem documents too; an unexpected failure's detail is an
id to find it in the server's log, never its traceback.
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

from hcat_notify.api.contract import NOT_DONE, PROBLEM_JSON, problem_type
from hcat_notify.errors import (
    ApiAuthError,
    BrokerError,
    ConfigError,
    ConflictError,
    HcatNotifyError,
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

__all__ = [
    "NOT_DONE",
    "PROBLEM_JSON",
    "PROBLEM_RESPONSES",
    "STATUS",
    "install_handlers",
    "problem_doc",
    "problem_response",
    "problem_type",
    "status_of",
]

logger = logging.getLogger(__name__)

STATUS: dict[type[HcatNotifyError], int] = {
    UnknownPartitionKeyError: 422,
    LocationNotFoundError: 422,
    PartitionNotFoundError: 404,
    InvalidIdentifierError: 400,
    InvalidSpecError: 400,
    InvalidInputError: 400,
    TableNotFoundError: 404,
    TableExistsError: 409,
    PartitionExistsError: 409,
    ConflictError: 409,
    ApiAuthError: 403,
    StoreUnavailableError: 503,
    BrokerError: 503,
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


def problem_response(
    status: int,
    detail: str,
    *,
    request: Request | None = None,
    type_: str = "about:blank",
    error: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A problem document response."""
    body: dict[str, Any] = {
        "type": type_,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "instance": request.url.path if request is not None else None,
    }
    if error is not None:
        body["error"] = error
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _one_line(message: str) -> str:
    return "; ".join(line.strip() for line in message.splitlines() if line.strip()) or "failed"


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HcatNotifyError)
    status = status_of(exc)
    name = type(exc).__name__
    if status == 500:
        # Our own failure: the log has the traceback under an id the caller can quote.
        incident = secrets.token_hex(6)
        logger.error(
            "api %s %s failed, incident %s",
            request.method,
            request.url.path,
            incident,
            exc_info=exc,
        )
        detail = f"the server failed ({name}); its log has incident {incident}"
    else:
        detail = _one_line(str(exc))
    return problem_response(status, detail, request=request, type_=problem_type(name), error=name)


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(part) for part in loc if part not in ("body", "query", "path")]
    return ".".join(parts) or "request"


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [f"{_location(tuple(item['loc']))}: {item['msg']}" for item in exc.errors()]
    return problem_response(
        400,
        "malformed request: " + "; ".join(problems[:10]),
        request=request,
        type_=problem_type("InvalidInputError"),
        error="InvalidInputError",
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    error = "ApiAuthError" if exc.status_code in (401, 403) else None
    return problem_response(
        exc.status_code,
        detail,
        request=request,
        type_=problem_type(error) if error else "about:blank",
        error=error,
        headers=dict(exc.headers) if exc.headers else None,
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    incident = secrets.token_hex(6)
    logger.error(
        "api %s %s failed, incident %s", request.method, request.url.path, incident, exc_info=exc
    )
    return problem_response(
        500, f"the server failed; its log has incident {incident}", request=request
    )


def install_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` a problem document."""
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
    400: problem_doc("Malformed input: a table name, spec, cursor or body."),
    401: problem_doc("No or wrong credentials."),
    503: problem_doc("The catalog database cannot be reached."),
}
"""Responses every authenticated route may give, for the OpenAPI document."""
