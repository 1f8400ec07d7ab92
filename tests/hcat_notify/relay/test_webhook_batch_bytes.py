"""The CloudEvents a relay sends, built as text from the outbox rows it read (no message
or attribute dict per event), against the ``cloudevents`` SDK: each event of a batch,
parsed by the SDK, is the event the SDK builds from the attributes the dict path gives
(:func:`to_cloudevent`), for every kind, and the bytes are those the dict path encodes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from cloudevents.core.v1.event import CloudEvent

from hcat_notify.model.cloudevents import dump_batch, dump_cloudevent, to_cloudevent
from hcat_notify.model.cursor import MAX_EVENT_ID
from hcat_notify.model.events import EventType
from hcat_notify.model.webhooks import TablePatterns, WebhookFormat, WebhookState
from hcat_notify.model.wire import Message
from hcat_notify.relay.webhook_http import requests_for
from hcat_notify.store.records import OutboxEvent, outbox_events
from hcat_notify.store.webhooks import WebhookInfo, WebhookTarget
from tests.hcat_notify.model.test_cloudevents import MESSAGES
from tests.wire import parse_cloudevent, parse_cloudevent_batch

SOURCE = "urn:hcat-notify:test"
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _read(messages: list[Message], extra: dict[str, str] | None = None) -> list[OutboxEvent]:
    """The messages as the relay reads them: outbox rows (headers stored as JSON text)."""
    rows = [
        (
            m.event_id,
            m.topic,
            m.event_type.value,
            "web.clicks",
            json.dumps({**m.headers, **(extra or {})}),
            m.body,
            "2011-02-28 00:00:00",
            3,
        )
        for m in messages
    ]
    return outbox_events(rows)


def _sdk_event(event: OutboxEvent, source: str) -> Any:
    """The SDK's own event from the attributes the dict path gives."""
    message = Message(event.event_id, event.event_type, event.topic, event.headers, event.body)
    attributes = to_cloudevent(message, source=source)
    data = attributes.pop("data")
    attributes["time"] = datetime.fromisoformat(attributes["time"].replace("Z", "+00:00"))
    return CloudEvent(attributes, data)


def _same(parsed: Any, expected: Any) -> None:
    assert parsed.get_attributes() == expected.get_attributes()
    assert parsed.get_data() == expected.get_data()


def _dict_text(event: OutboxEvent, source: str) -> str:
    message = Message(event.event_id, event.event_type, event.topic, event.headers, event.body)
    attributes = to_cloudevent(message, source=source)
    del attributes["data"]
    head = json.dumps(attributes, ensure_ascii=True, separators=(",", ":"))
    return f'{head[:-1]},"data":{event.body}}}'


@pytest.mark.parametrize("trace", [None, TRACE], ids=["plain", "traceparent"])
@pytest.mark.parametrize("source", [SOURCE, 'urn:a%sb%d"\\c'], ids=["urn", "odd-source"])
def test_a_batch_of_every_kind_is_the_sdks_event_for_event(trace, source):
    events = _read(list(MESSAGES.values()), None if trace is None else {"traceparent": trace})
    body = dump_batch(events, source=source)
    parsed = parse_cloudevent_batch(body)
    assert len(parsed) == len(EventType)
    for event, got in zip(events, parsed, strict=True):
        _same(got, _sdk_event(event, source))
        assert got.get_time() == datetime(2011, 2, 28, tzinfo=UTC)
        assert got.get_extension("traceparent") == trace
    # byte for byte what encoding the attributes gives, the body verbatim as data
    assert body.decode() == "[" + ",".join(_dict_text(e, source) for e in events) + "]"


def test_headers_an_event_has_not_usually_take_the_general_path_with_the_same_result():
    done = MESSAGES[EventType.MARK_SET_DONE]
    odd = [
        {"HCAT_SPEC": ""},  # an empty value stays out
        {"HCAT_SPEC": 'q"uo\\te/zürich'},  # escaped, non-ASCII as \u escapes
        {"HCAT_SET_GENERATION": "7", "HCATSETGENERATION": "8"},  # two make one name
        {"HCAT_TABLE": ""},  # no table: the subject is "/spec"
    ]
    for extra in odd:
        (event,) = _read([done], extra)
        text = dump_cloudevent(event, source=SOURCE)
        assert text.decode() == _dict_text(event, SOURCE)
        assert dump_cloudevent(event, source=SOURCE) == text  # the plan as kept, again
        _same(parse_cloudevent(text), _sdk_event(event, SOURCE))


@pytest.mark.parametrize("event_id", [0, 1, 10**18, MAX_EVENT_ID])
def test_the_sequence_is_the_id_zero_padded_at_the_ends_of_the_range(event_id):
    done = MESSAGES[EventType.MARK_SET_DONE]
    message = Message(event_id, done.event_type, done.topic, done.headers, done.body)
    (event,) = _read([message])
    parsed = parse_cloudevent(dump_cloudevent(event, source=SOURCE))
    assert parsed.get_extension("sequence") == str(event_id).zfill(19)
    assert parsed.get_id() == str(event_id)


def test_the_relays_request_carries_the_batch_the_sdk_reads():
    events = _read(list(MESSAGES.values()))
    info = WebhookInfo(
        id=1,
        name="h",
        url="http://127.0.0.1:1/hook",
        tables=TablePatterns(("web.*",)),
        events=None,
        format=WebhookFormat.CLOUDEVENTS_BATCH,
        state=WebhookState.ACTIVE,
        start_after=0,
        created_at=0.0,
        version=1,
        disabled_reason=None,
        rotating_until=None,
    )
    (request,) = requests_for(WebhookTarget(info, ("whsec_" + "A" * 32,)), events, source=SOURCE)
    parsed = parse_cloudevent_batch(request.body)
    for event, got in zip(events, parsed, strict=True):
        _same(got, _sdk_event(event, SOURCE))
    assert request.headers["content-type"] == "application/cloudevents-batch+json"
