"""Query parameters the routes share: partition specs given as ``KEY=VALUE`` parameters,
and bounded waits."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import Query, Request

from hcat_notify.api.contract import MAX_WAIT_SECONDS
from hcat_notify.errors import InvalidInputError, InvalidSpecError
from hcat_notify.model.specs import PartitionSpec

__all__ = [
    "MAX_WAIT_SECONDS",
    "SPEC_QUERY_DOC",
    "min_generation_openapi",
    "query_min_generation",
    "query_not_utf8",
    "query_spec",
    "query_wait",
    "spec_openapi",
    "wait_openapi",
    "wait_query",
]


SPEC_QUERY_DOC = (
    "Partition values as KEY=VALUE query parameters (raw values, as the command line takes "
    "them: region=us/east is the value us/east; an empty value is the default partition), "
    "or the whole spec in path form as spec=k1=v1/k2=v2 (escaped) when a key is named like "
    "one of this route's own parameters."
)


def query_spec(request: Request, reserved: frozenset[str]) -> PartitionSpec | None:
    """The spec of a request's ``KEY=VALUE`` parameters (or its ``spec=`` path), None
    when it gives none.

    Raises:
        InvalidSpecError: a key is repeated, or both forms are given.
        InvalidIdentifierError: a key is not a valid partition key name.
    """
    params = request.query_params
    items = [(key, value) for key, value in params.multi_items() if key not in reserved]
    paths = params.getlist("spec")
    if paths:
        if items or len(paths) > 1:
            raise InvalidSpecError(
                "give the spec once, as spec=k1=v1/k2=v2 or as KEY=VALUE parameters, not both"
            )
        return PartitionSpec.parse(paths[0])
    return PartitionSpec(tuple(items)) if items else None


def query_not_utf8(query: bytes) -> str | None:
    """What of ``query`` is not UTF-8 once percent-decoded (a parameter's name or its
    value, as sent); None when all is."""
    for field in query.split(b"&"):
        name, _, value = field.partition(b"=")
        for part, what in ((name, "name"), (value, "value")):
            try:
                unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                sent = name.decode("latin-1")
                if what == "name":
                    return f"the query parameter name {sent!r} is not UTF-8"
                given = value.decode("latin-1")
                return f"the value {given!r} of query parameter {sent!r} is not UTF-8"
    return None


def spec_openapi(description: str = SPEC_QUERY_DOC) -> dict[str, Any]:
    """``openapi_extra`` declaring the free-form ``KEY=VALUE`` parameters."""
    return {
        "parameters": [
            {
                "name": "partition",
                "in": "query",
                "required": False,
                "style": "form",
                "explode": True,
                "description": description,
                "schema": {"type": "object", "additionalProperties": {"type": "string"}},
            }
        ]
    }


def wait_query(what: str) -> Any:
    """The ``wait`` parameter of a long poll: finite seconds, 0 to the longest poll."""
    return Query(
        ge=0,
        le=MAX_WAIT_SECONDS,
        allow_inf_nan=False,
        description=_wait_description(what),
    )


def _wait_description(what: str) -> str:
    return f"Seconds to wait for {what} (a long poll); 0 answers at once."


def query_wait(request: Request) -> float:
    """The ``wait`` parameter read by a route itself (what :func:`wait_query` declares).

    Raises:
        InvalidInputError: not a finite number of seconds from 0 to the longest poll.
    """
    raw = request.query_params.get("wait")
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        wait = math.nan
    if not 0 <= wait <= MAX_WAIT_SECONDS:  # also refuses nan
        raise InvalidInputError(
            f"malformed request: wait: {raw!r} is not a number of seconds from 0 to "
            f"{MAX_WAIT_SECONDS:g}"
        )
    return wait


def wait_openapi(what: str) -> dict[str, Any]:
    """The OpenAPI parameter of :func:`query_wait` (as :func:`wait_query` declares it)."""
    return {
        "name": "wait",
        "in": "query",
        "required": False,
        "schema": {
            "type": "number",
            "maximum": MAX_WAIT_SECONDS,
            "minimum": 0,
            "description": _wait_description(what),
            "default": 0,
            "title": "Wait",
        },
        "description": _wait_description(what),
    }


_MIN_GENERATION_DOC = (
    "Only a done of this set generation or a later one counts (1: a set's first done; "
    "a set that changed after its done is done again at the next generation)."
)


def query_min_generation(request: Request) -> int | None:
    """The ``min_generation`` parameter read by a route itself (None: not given).

    Raises:
        InvalidInputError: not a whole number of at least 1.
    """
    raw = request.query_params.get("min_generation")
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 9 or int(raw) < 1:
        raise InvalidInputError(
            f"malformed request: min_generation: {raw!r} is not a whole number of at least 1"
        )
    return int(raw)


def min_generation_openapi() -> dict[str, Any]:
    """The OpenAPI parameter of :func:`query_min_generation`."""
    return {
        "name": "min_generation",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "title": "Min Generation"},
        "description": _MIN_GENERATION_DOC,
    }
