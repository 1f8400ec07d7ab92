"""The writer's W3C trace context rides along with its events: a header of the outbox
row (a STOMP header on the broker), the ``traceparent`` CloudEvents extension; none
without a span. SQLite and PostgreSQL."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider

from hcat_notify.model.cloudevents import to_cloudevent
from hcat_notify.model.trace import TRACEPARENT, current_traceparent, valid_traceparent
from hcat_notify.model.wire import Message
from hcat_notify.store import Catalog


def test_the_writers_traceparent_goes_with_its_events(catalog: Catalog):
    tracer = TracerProvider().get_tracer(__name__)
    before = catalog.outbox.last_event_id()
    with tracer.start_as_current_span("write") as span:
        catalog.create_table("web.clicks", location="/c", partition_keys=["ds"])
        catalog.mark_set_done("web.clicks", {"ds": "1"})
        context = span.get_span_context()
        flags = int(context.trace_flags)  # sampled (and random, W3C level 2)
        expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
        assert current_traceparent() == expected
    assert valid_traceparent(expected)
    untraced = catalog.mark_set_done("web.clicks", {"ds": "2"})
    events = catalog.outbox.events(after_event_id=before, limit=10)
    found = {event.event_id: event.headers.get(TRACEPARENT) for event in events}
    assert list(found.values()) == [expected, expected, None]
    assert found[untraced] is None
    traced = events[1]
    message = Message(traced.event_id, traced.event_type, traced.topic, traced.headers, traced.body)
    assert to_cloudevent(message, source="urn:hcat:test")[TRACEPARENT] == expected


def test_what_a_traceparent_is():
    assert valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert not valid_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
    assert not valid_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert current_traceparent() is None  # no span here
