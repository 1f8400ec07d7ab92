"""Outbox rows become events the same way whether their headers are decoded one by one
or a page at once (the relay's reads)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hcat_notify.store.records import outbox_event, outbox_events


def _row(event_id: int, headers: object) -> tuple[Any, ...]:
    return (
        event_id,
        "hcat.web.clicks",
        "MARK_SET_DONE",
        "web.clicks",
        headers,
        '{"spec":"ds=1"}',
        "2026-11-26 03:00:00.000000",
        7,
    )


def _headers(event_id: int) -> str:
    return json.dumps({"HCAT_EVENT": "MARK_SET_DONE", "HCAT_EVENT_ID": str(event_id)})


def test_a_page_decoded_at_once_equals_rows_decoded_one_by_one():
    rows = [_row(n, _headers(n)) for n in range(1, 300)]
    events = outbox_events(rows)
    assert events == [outbox_event(*row) for row in rows]
    assert [e.headers["HCAT_EVENT_ID"] for e in events] == [str(n) for n in range(1, 300)]
    assert events[0].created_at.year == 2026


def test_headers_a_driver_decoded_already_are_taken_as_they_are():
    rows = [_row(1, _headers(1)), _row(2, {"HCAT_EVENT_ID": "2"})]
    assert [e.headers["HCAT_EVENT_ID"] for e in outbox_events(rows)] == ["1", "2"]


@pytest.mark.parametrize(
    ("bad", "error"),
    [('{"HCAT_EVENT_ID": "2"},{"X": "y"}', "Extra data"), ('{"HCAT_EVENT_ID": ', "Expecting")],
    ids=["two", "cut"],
)
def test_a_header_text_that_is_not_one_document_is_an_error_not_a_shift(bad, error):
    # joined into one array, two documents would shift every later row's headers
    rows = [_row(1, _headers(1)), _row(2, bad), _row(3, _headers(3))]
    with pytest.raises(json.JSONDecodeError, match=error):
        outbox_events(rows)
    assert outbox_events([]) == []
