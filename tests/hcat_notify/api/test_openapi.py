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
