"""Validation of messages against the JSON Schemas in schemas/ (shared by tests)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
BODY_SCHEMAS = {
    "ADD_PARTITION": "add_partition.schema.json",
    "MARK_SET_DONE": "mark_set_done.schema.json",
    "DROP_PARTITION": "drop_partition.schema.json",
    "INSERT": "insert.schema.json",
    "CREATE_TABLE": "create_table.schema.json",
    "DROP_TABLE": "drop_table.schema.json",
    "SET_LATE": "set_late.schema.json",
    "SET_REOPENED": "set_reopened.schema.json",
    "SET_RULE": "set_rule.schema.json",
}


@cache
def _registry() -> tuple[Registry, dict[str, dict[str, Any]]]:
    schemas = {path.name: json.loads(path.read_text()) for path in SCHEMA_DIR.glob("*.schema.json")}
    for schema in schemas.values():
        Draft202012Validator.check_schema(schema)
    registry = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in schemas.values()
    )
    return registry, schemas


def validator(name: str) -> Draft202012Validator:
    registry, schemas = _registry()
    return Draft202012Validator(schemas[name], registry=registry)


def validate_message(headers: Mapping[str, str], body: str) -> dict[str, Any]:
    """Validate headers and body of one wire message; return the parsed body."""
    hcat_headers = {key: value for key, value in headers.items() if key.startswith("HCAT_")}
    validator("headers.schema.json").validate(hcat_headers)
    parsed: dict[str, Any] = json.loads(body)
    validator(BODY_SCHEMAS[headers["HCAT_EVENT"]]).validate(parsed)
    return parsed


def validate_cloudevent(event: Mapping[str, Any]) -> None:
    """Validate one structured-mode CloudEvent (a JSON object) against
    cloudevent.schema.json, and its ``data`` against its kind's body schema."""
    validator("cloudevent.schema.json").validate(event)
    validator(BODY_SCHEMAS[event["hcatevent"]]).validate(event["data"])


def parse_cloudevent(body: bytes, headers: Mapping[str, str] | None = None) -> Any:
    """One structured-mode CloudEvent, parsed and validated by the ``cloudevents`` SDK
    (its v1.0 event checks every attribute and extension name). ``headers``: those of
    the HTTP request that carried it, from which the SDK tells the mode (structured by
    its ``content-type``); default the structured mode's."""
    from cloudevents.core.bindings.http import HTTPMessage, from_http
    from cloudevents.core.formats.json import JSONFormat
    from cloudevents.core.v1.event import CloudEvent

    given = {"content-type": "application/cloudevents+json"} if headers is None else headers
    message = HTTPMessage(headers=dict(given), body=body)
    return from_http(message, JSONFormat(), CloudEvent)


def parse_cloudevent_batch(body: bytes) -> list[Any]:
    """A batch-mode JSON array, each event parsed by the SDK (which reads one at a time)."""
    items = json.loads(body)
    assert isinstance(items, list)
    return [parse_cloudevent(json.dumps(item).encode()) for item in items]
