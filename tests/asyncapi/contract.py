"""The AsyncAPI document (schemas/asyncapi.yaml) as a Python check of real messages: which
channel a topic is, which message of it a kind is, and that message's headers and
payload schemas, ``$ref``s to the JSON Schemas in schemas/ resolved (pyyaml and
jsonschema; the official parser's check is tests/asyncapi/test_document.py)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

HERE = Path(__file__).resolve().parent
SCHEMA_DIR = HERE.parent.parent / "schemas"
DOCUMENT = SCHEMA_DIR / "asyncapi.yaml"
PARSER = HERE / "parse.mjs"
INSTALL_HINT = (
    "the AsyncAPI parser is not installed: run deploy/local/test.sh, or "
    "`source deploy/local/bootstrap.sh && ensure_asyncapi_parser`"
)


def parse_with_node(path: Path) -> dict[str, Any]:
    """What tests/asyncapi/parse.mjs (the official parser) says of the document at
    ``path``: ``{"diagnostics": [...], "document": {...} | None}``."""
    if not (HERE / "node_modules" / "@asyncapi" / "parser").is_dir():
        raise AssertionError(INSTALL_HINT)
    done = subprocess.run(
        ["node", str(PARSER), str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


@cache
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(DOCUMENT.read_text(encoding="utf-8"))
    return loaded


@cache
def _registry() -> Registry:
    resources = [(DOCUMENT.as_uri(), DRAFT202012.create_resource(document()))]
    for path in SCHEMA_DIR.glob("*.schema.json"):
        resource = Resource.from_contents(json.loads(path.read_text(encoding="utf-8")))
        resources.append((path.as_uri(), resource))  # as the document's relative $refs name it
        resources.append((resource.id() or path.as_uri(), resource))  # as its siblings do
    return Registry().with_resources(resources)


def _resolved(node: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """An internal ``$ref`` of the document followed: (its JSON pointer, what it names)."""
    pointer = str(node["$ref"]).removeprefix("#")
    found: Any = document()
    for part in pointer.strip("/").split("/"):
        found = found[part]
    return pointer, found


def _validator(pointer: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"{DOCUMENT.as_uri()}#{pointer}"}, registry=_registry())


def channel_of(topic: str) -> str:
    """The id of the channel whose address ``topic`` is (``{param}`` matches a name).

    Raises:
        AssertionError: no channel's address matches.
    """
    for name, channel in document()["channels"].items():
        address = channel.get("address")
        if address is None:
            continue
        pattern = re.sub(r"\\\{[a-z]+\\\}", "[a-z0-9_]+", re.escape(address))
        if re.fullmatch(pattern, topic):
            return str(name)
    raise AssertionError(f"no channel of the AsyncAPI document is topic {topic!r}")


def message_pointer(channel: str, name: str) -> str:
    """The pointer to the component message named ``name`` (``ADD_PARTITION``) that the
    channel lists.

    Raises:
        AssertionError: the channel lists no such message.
    """
    for ref in document()["channels"][channel]["messages"].values():
        pointer, message = _resolved(ref)
        if message["name"] == name:
            return pointer
    raise AssertionError(f"channel {channel} of the AsyncAPI document has no message {name}")


def validate_against(pointer: str, headers: Mapping[str, str], body: str) -> dict[str, Any]:
    """Validate a message's ``HCAT_*`` headers and its body against the document's message
    at ``pointer``; the parsed body."""
    hcat = {key: value for key, value in headers.items() if key.startswith("HCAT_")}
    _validator(f"{pointer}/headers").validate(hcat)
    parsed: dict[str, Any] = json.loads(body)
    _validator(f"{pointer}/payload").validate(parsed)
    return parsed


def validate_on_topic(topic: str, headers: Mapping[str, str], body: str) -> dict[str, Any]:
    """A message received on ``topic`` is one its channel lists, for its ``HCAT_EVENT``,
    with headers and body as that message says; the parsed body."""
    pointer = message_pointer(channel_of(topic), headers["HCAT_EVENT"])
    return validate_against(pointer, headers, body)
