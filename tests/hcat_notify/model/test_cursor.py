"""The per-topic cursor: its string form, its watermarks, its bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.cursor import MAX_EVENT_ID, Cursor

topics = st.from_regex(r"[a-z0-9_-]{1,6}(\.[a-z0-9_-]{1,6}){0,3}", fullmatch=True)


@given(
    st.dictionaries(topics, st.integers(0, MAX_EVENT_ID), max_size=6),
    st.none() | st.integers(0, MAX_EVENT_ID),
)
def test_string_form_round_trips(marks, default):
    cursor = Cursor(marks, default)
    assert Cursor.parse(str(cursor)) == cursor


def test_watermarks_per_topic_and_the_old_integer_cursor():
    cursor = Cursor.parse("hcat.web.clicks:120,hcat.web.views:98")
    assert str(cursor) == "hcat.web.clicks:120,hcat.web.views:98"
    assert cursor.handled("hcat.web.clicks", 120)
    assert not cursor.handled("hcat.web.clicks", 121)
    assert not cursor.handled("hcat.other", 1)
    assert cursor.advanced("hcat.web.views", 97) is cursor  # never lowered
    assert cursor.advanced("hcat.other", 5).get("hcat.other") == 5
    legacy = Cursor.parse("42")
    assert legacy == Cursor.parse(42) == Cursor(default=42)
    assert legacy.handled("any.topic", 42)
    assert str(Cursor.parse("*:7,a.b:9")) == "*:7,a.b:9"
    assert not Cursor.parse("")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hcat.web.clicks", "expected TOPIC:EVENT_ID"),
        ("hcat.web.clicks:x", "is not an event id"),
        ("hcat.web.clicks:-1", "is not an event id"),
        ("a:1,a:2", "topic a is given twice"),
        ("Bad Topic:1", "is no topic"),
        (f"a:{MAX_EVENT_ID + 1}", "too large"),
        ("99999999999999999999999", "too large"),
        (":5", "expected TOPIC:EVENT_ID"),
    ],
)
def test_bad_cursors_are_clear_errors(text, message):
    with pytest.raises(InvalidInputError, match=message):
        Cursor.parse(text)
