"""The route class of every API router: ``HEAD`` wherever ``GET`` is, JSON bodies
taken only as UTF-8 ``application/json`` and parsed strictly, and a body refused (400,
``InvalidInputError``) by a route that takes none (``POST .../pause``).

FastAPI's routes answer ``HEAD`` with 405 (Starlette's add it, FastAPI's do not) and
parse a body with :func:`json.loads` as it comes: a form-encoded or typeless body is
then "not a valid dictionary", a repeated key keeps its last value, and a body the
parser chokes on (not UTF-8, nested thousands deep, a number of thousands of digits)
is "There was an error parsing the body". :class:`ApiRoute` answers 415 naming
``application/json`` for a body of another type or charset, and parses with
:func:`parse_json`, whose :class:`~hcat_notify.errors.InvalidInputError` says what is
wrong; FastAPI hands it on wrapped in a 400, and the one error handler
(:mod:`hcat_notify.api.problems`) answers it as the domain error it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import Receive, Scope, Send

from hcat_notify.errors import InvalidInputError

__all__ = ["JSON_MEDIA_TYPE", "MAX_NUMBER_CHARS", "ApiRoute", "check_media_type", "parse_json"]

JSON_MEDIA_TYPE = "application/json"
MAX_NUMBER_CHARS = 40
"""The longest number a body may hold, in characters: far beyond any count, size or id
the API takes, far below what makes ``int()`` slow or refuse."""
_UTF8 = frozenset({"utf-8", "utf8"})


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidInputError(
                    f"malformed request: key {key!r} appears more than once in one object "
                    "of the body"
                )
            seen.add(key)
    return found


def _number(text: str) -> None:
    if len(text) > MAX_NUMBER_CHARS:
        raise InvalidInputError(
            f"malformed request: a number in the body has {len(text):,} characters "
            f"(at most {MAX_NUMBER_CHARS}): {text[:20]}..."
        )


def _int(text: str) -> int:
    _number(text)
    return int(text)


def _float(text: str) -> float:
    _number(text)
    value = float(text)
    if not math.isfinite(value):
        raise InvalidInputError(f"malformed request: the number {text} in the body is out of range")
    return value


def _constant(text: str) -> float:
    raise InvalidInputError(f"malformed request: {text} is not JSON (the body holds {text})")


def parse_json(body: bytes) -> Any:
    """A request body's JSON value, refusing what :func:`json.loads` would take or
    choke on.

    Raises:
        InvalidInputError: the body is not UTF-8, an object repeats a key (the CLI
            refuses a repeated key too), a number is over :data:`MAX_NUMBER_CHARS`
            characters or out of range, ``NaN``/``Infinity``, or nesting deeper than
            the parser goes.
        json.JSONDecodeError: not JSON (FastAPI reports where).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"malformed request: the body is not UTF-8 (byte 0x{body[exc.start]:02x} at "
            f"offset {exc.start}); send JSON as UTF-8"
        ) from None
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique,
            parse_int=_int,
            parse_float=_float,
            parse_constant=_constant,
        )
    except RecursionError:
        raise InvalidInputError("malformed request: the body's JSON nests too deeply") from None


def check_media_type(content_type: str | None) -> None:
    """Refuse a body that is not UTF-8 ``application/json`` (or ``application/*+json``).

    Raises:
        HTTPException: 415, naming ``application/json``.
    """
    media, _, parameters = (content_type or "").partition(";")
    media = media.strip().lower()
    if media != JSON_MEDIA_TYPE and not (
        media.startswith("application/") and media.endswith("+json")
    ):
        given = f"not {content_type}" if content_type else "and the request names no Content-Type"
        raise HTTPException(415, f"the body must be JSON sent as {JSON_MEDIA_TYPE}, {given}")
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in _UTF8:
            raise HTTPException(
                415,
                f"the body must be JSON in UTF-8 ({JSON_MEDIA_TYPE}; charset=utf-8), "
                f"not charset {value.strip()}",
            )


async def _has_body(request: Request) -> bool:
    """Whether the request carries a body: a ``Content-Length`` above 0, or a chunked
    body that is not empty (read, within the app's body limit)."""
    length = request.headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    if "transfer-encoding" in request.headers:
        return bool(await request.body())
    return False


class _JsonRequest(Request):
    async def json(self) -> Any:
        return parse_json(await self.body())


class ApiRoute(APIRoute):
    """An API route that answers ``HEAD`` as ``GET`` (the server sends no body), takes
    its JSON body through :func:`check_media_type` and :func:`parse_json`, and refuses
    a body if it takes none (nothing is done)."""

    def _heads_as_get(self, scope: Scope) -> bool:
        return scope["method"] == "HEAD" and "GET" in self.methods

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope.get("type") == "http" and self._heads_as_get(scope):
            scope = {**scope, "method": "GET"}
        return super().matches(scope)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._heads_as_get(scope):
            await self.app(scope, receive, send)
            return
        await super().handle(scope, receive, send)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            takes_none = f"{self.path} takes no body"

            async def refuse_a_body(request: Request) -> Response:
                if await _has_body(request):
                    raise InvalidInputError(f"malformed request: {request.method} {takes_none}")
                return await handler(request)

            return refuse_a_body

        async def take_json(request: Request) -> Response:
            strict = _JsonRequest(request.scope, request.receive)
            if await strict.body():
                check_media_type(strict.headers.get("content-type"))
            return await handler(strict)

        return take_json
