"""schemas/asyncapi.yaml, read by the official AsyncAPI parser (npm's @asyncapi/parser,
pinned in tests/asyncapi/package-lock.json, run on Node.js by parse.mjs): valid, and
describing every channel, message kind, header set, payload and security scheme the
service has; its examples hold against its own schemas."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from hcat_notify.model.cloudevents import CLOUDEVENTS_BATCH_JSON, CLOUDEVENTS_JSON
from hcat_notify.model.events import EventType
from hcat_notify.model.webhooks import WebhookFormat
from tests.asyncapi.contract import (
    DOCUMENT,
    SCHEMA_DIR,
    channel_of,
    document,
    message_pointer,
    parse_with_node,
    validate_against,
)

TABLE_KINDS = {kind.value for kind in EventType} - {EventType.CREATE_TABLE.value}
BODY_TITLES = {kind.value: f"{kind.value} message body" for kind in EventType}


@pytest.fixture(scope="module")
def parsed() -> dict[str, Any]:
    return parse_with_node(DOCUMENT)


def test_the_parser_finds_no_error_or_warning(parsed):
    severe = [d for d in parsed["diagnostics"] if d["severity"] in ("error", "warning")]
    assert severe == []
    assert parsed["document"]["version"] == "3.0.0"


def test_the_broker_channels_carry_every_kind(parsed):
    channels = parsed["document"]["channels"]
    table, database, prefix = (channels[n] for n in ("tableTopic", "databaseTopic", "prefixTopic"))
    assert (table["address"], table["parameters"]) == ("hcat.{db}.{table}", ["db", "table"])
    assert (database["address"], database["parameters"]) == ("hcat.{db}", ["db"])
    assert prefix["address"] == "hcat"
    assert set(table["messages"]) == set(database["messages"]) == TABLE_KINDS
    assert set(prefix["messages"]) == {kind.value for kind in EventType}  # strategy single
    for channel in (table, database, prefix):
        assert channel["servers"] == ["stomp", "openwire"]
    servers = parsed["document"]["servers"]
    assert {name: s["protocol"] for name, s in servers.items()} == {
        "stomp": "stomp",
        "openwire": "jms",
        "webhookEndpoint": "https",
    }
    # Readers read, the service principal writes: the broker's servers name both schemes,
    # every publishing operation the writer's.
    assert servers["stomp"]["security"] == [["writer"], ["reader"]]
    schemes = parsed["document"]["securitySchemes"]
    assert {s["type"] for s in schemes.values()} == {"userPassword"}
    operations = parsed["document"]["operations"]
    for name in ("publishTableEvents", "publishDatabaseEvents", "publishPrefixEvents"):
        assert operations[name]["action"] == "send"
        assert operations[name]["security"] == [["writer"]]


def test_every_message_has_its_headers_and_the_payload_schema_from_schemas(parsed):
    messages = {m["name"]: m for m in parsed["document"]["messages"].values()}
    for kind in EventType:
        message = messages[kind.value]
        assert message["contentType"] == "application/json"
        # The parser resolved the $ref to the file in schemas/.
        assert message["payload"]["title"] == BODY_TITLES[kind.value]
        headers = json.dumps(message["headers"])
        for header in ("HCAT_EVENT", "HCAT_EVENT_ID", "HCAT_TABLE", "HCAT_SPEC"):
            assert header in headers
        assert f'"const": "{kind.value}"' in headers


def test_the_webhook_side_offers_cloudevents_and_the_hive_body(parsed):
    webhook = parsed["document"]["channels"]["webhook"]
    assert webhook["address"] is None  # the subscription's URL
    assert webhook["servers"] == ["webhookEndpoint"]
    messages = {m["name"]: m for m in parsed["document"]["messages"].values()}
    assert messages["CloudEvent"]["contentType"] == CLOUDEVENTS_JSON
    assert messages["CloudEventBatch"]["contentType"] == CLOUDEVENTS_BATCH_JSON
    assert messages["CloudEvent"]["payload"]["properties"]["type"]["enum"] == [
        f"org.apache.hive.hcatalog.{kind.value.lower()}" for kind in EventType
    ]
    for name in ("CloudEvent", "CloudEventBatch", "HiveBody"):
        headers = json.dumps(messages[name]["headers"])
        for header in ("webhook-id", "webhook-timestamp", "webhook-signature"):
            assert header in headers, (name, header)
    assert "HCAT_EVENT" in json.dumps(messages["HiveBody"]["headers"])
    # each format a webhook can have is one of the channel's messages, with its content type
    assert {m["format"]: m["contentType"] for m in messages.values() if m["format"]} == {
        form.value: form.content_type for form in WebhookFormat
    }
    assert parsed["document"]["operations"]["deliverWebhook"]["messages"] == [
        "CloudEvent",
        "CloudEventBatch",
        "HiveBody",
    ]


def test_the_parser_reports_a_broken_document_as_errors(tmp_path: Path):
    for schema in SCHEMA_DIR.glob("*.schema.json"):
        shutil.copy(schema, tmp_path)
    broken = DOCUMENT.read_text(encoding="utf-8")
    broken = broken.replace("./set_rule.schema.json", "./no_such.schema.json")
    broken = broken.replace("action: send", "action: shout", 1)
    (tmp_path / "asyncapi.yaml").write_text(broken, encoding="utf-8")
    found = parse_with_node(tmp_path / "asyncapi.yaml")
    errors = {(d["code"], d["path"]) for d in found["diagnostics"] if d["severity"] == "error"}
    assert ("invalid-ref", "components/messages/setRule/payload/$ref") in errors
    assert any(path.endswith("/action") for _, path in errors)
    assert found["document"] is None


def test_the_examples_hold_against_the_schemas_pyyaml_and_jsonschema_resolve():
    checked = 0
    for name, message in document()["components"]["messages"].items():
        for example in message.get("examples", []):
            pointer = f"/components/messages/{name}"
            validate_against(pointer, example["headers"], json.dumps(example["payload"]))
            checked += 1
    assert checked >= 2
    assert channel_of("hcat.web.clicks") == "tableTopic"
    assert channel_of("hcat.web") == "databaseTopic"
    assert channel_of("hcat") == "prefixTopic"
    assert message_pointer("prefixTopic", "CREATE_TABLE") == "/components/messages/createTable"
    with pytest.raises(AssertionError, match="no message CREATE_TABLE"):
        message_pointer("tableTopic", "CREATE_TABLE")
