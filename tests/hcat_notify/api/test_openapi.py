"""The committed OpenAPI document is the app's."""

from __future__ import annotations

import json
from pathlib import Path

from hcat_notify.api.openapi import render

COMMITTED = Path(__file__).resolve().parents[3] / "schemas" / "openapi.json"


def test_committed_openapi_matches_the_code():
    assert COMMITTED.read_text(encoding="utf-8") == render(), (
        "schemas/openapi.json is out of date: "
        "python -m hcat_notify.api.openapi schemas/openapi.json"
    )


def test_every_route_documents_its_problems():
    document = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert "Problem" in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for operation in operations.values():
            assert {"400", "401"} <= set(operation["responses"]), (path, operation["responses"])
            assert operation["security"] == [{"HTTPBasic": []}]


def test_no_route_declares_a_response_the_server_never_sends():
    """FastAPI declares a 422 ``HTTPValidationError`` on every route with parameters;
    the server answers a request that does not validate with a 400 problem document
    instead (``InvalidInputError``), which every route declares."""
    text = COMMITTED.read_text(encoding="utf-8")
    assert "ValidationError" not in text
    document = json.loads(text)
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            unprocessable = operation["responses"].get("422")
            if unprocessable is not None:  # a key the table does not have: a problem
                assert list(unprocessable["content"]) == ["application/problem+json"], (
                    method,
                    path,
                )
