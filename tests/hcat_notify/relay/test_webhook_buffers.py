"""What a webhook lane's buffer lets a delivery claim: never an event it does not hold."""

from __future__ import annotations

from datetime import UTC, datetime

from hcat_notify.model.events import EventType
from hcat_notify.relay.webhook_buffers import LaneBuffers
from hcat_notify.store.records import OutboxEvent

KEY = (1, "hcat.web.clicks")
OTHER = (1, "hcat.web.views")


def _event(event_id: int, topic: str = KEY[1]) -> OutboxEvent:
    return OutboxEvent(
        event_id=event_id,
        topic=topic,
        event_type=EventType.MARK_SET_DONE,
        table="web.clicks",
        headers={},
        body="{}",
        created_at=datetime(2026, 11, 27, tzinfo=UTC),
    )


def _read(buffers: LaneBuffers, start: int, ids: range, key: tuple[int, str] = KEY) -> None:
    """A page the pass read after ``start``: each event offered, then the position."""
    for event_id in ids:
        buffers.keep(key, start, _event(event_id, key[1]))
    buffers.read_through = ids[-1]


def test_a_batch_reaches_the_lanes_head_when_the_buffer_holds_all_before_it():
    buffers = LaneBuffers()
    _read(buffers, 0, range(1, 31))
    events, through = buffers.batch_of(KEY, cursor=0, head=30, limit=100) or ([], -1)
    assert [e.event_id for e in events] == list(range(1, 31))
    assert through == 30


def test_a_full_batch_reaches_its_last_event():
    buffers = LaneBuffers()
    _read(buffers, 0, range(1, 31))
    events, through = buffers.batch_of(KEY, cursor=5, head=30, limit=10) or ([], -1)
    assert [e.event_id for e in events] == list(range(6, 16))
    assert through == 15


def test_after_the_buffers_are_cleared_a_batch_reaches_only_what_was_read_again():
    """The lane keeps its head (60) when another bucket's change clears the buffers;
    the pass reads again from the start, a few pages per pass. A batch taken before it
    has read as far as the head reaches only what it has read: claiming the head
    skipped the events between (seen: a kill/zombie run with 10 and 54 events never
    delivered to the CloudEvents webhooks)."""
    buffers = LaneBuffers()
    _read(buffers, 0, range(1, 61))
    buffers.clear()
    _read(buffers, 0, range(1, 26))
    events, through = buffers.batch_of(KEY, cursor=0, head=60, limit=100) or ([], -1)
    assert [e.event_id for e in events] == list(range(1, 26))
    assert through == 25
    _read(buffers, 25, range(26, 61))
    events, through = buffers.batch_of(KEY, cursor=25, head=60, limit=100) or ([], -1)
    assert [e.event_id for e in events] == list(range(26, 61))
    assert through == 60


def test_the_read_position_counts_for_a_lane_that_had_no_event_in_the_page():
    """A page with only another lane's events still says this lane has none up there."""
    buffers = LaneBuffers()
    _read(buffers, 0, range(1, 11))
    _read(buffers, 10, range(11, 21), key=OTHER)
    events, through = buffers.batch_of(KEY, cursor=0, head=20, limit=100) or ([], -1)
    assert [e.event_id for e in events] == list(range(1, 11))
    assert through == 20


def test_nothing_is_held_when_the_buffer_starts_after_the_cursor_or_holds_nothing_new():
    buffers = LaneBuffers()
    _read(buffers, 10, range(11, 21))
    assert buffers.batch_of(KEY, cursor=5, head=20, limit=100) is None  # read it yourself
    buffers.clear()
    _read(buffers, 0, range(1, 11))
    buffers.clear()  # cleared, nothing read again yet
    assert buffers.batch_of(KEY, cursor=0, head=10, limit=100) is None


def test_a_lane_dropped_for_room_is_not_held_again_from_the_same_page():
    """The buffers are full: the lane's buffer is dropped (its earlier events of the page
    with it), and the lane reads its own events; a buffer opened again in that page
    would lack them."""
    buffers = LaneBuffers(cap=5)
    for event_id in range(1, 5):
        buffers.keep(KEY, 0, _event(event_id))
    buffers.keep(OTHER, 0, _event(5, OTHER[1]))  # the fifth: full now
    buffers.keep(KEY, 0, _event(6))  # dropped: 1-4 gone, room again
    buffers.keep(KEY, 0, _event(7))
    buffers.read_through = 7
    assert buffers.batch_of(KEY, cursor=0, head=7, limit=100) is None
    # from a later page it is held again, from that page's start
    for event_id in (9, 10):
        buffers.keep(KEY, 8, _event(event_id))
    buffers.read_through = 10
    events, through = buffers.batch_of(KEY, cursor=8, head=10, limit=100) or ([], -1)
    assert ([e.event_id for e in events], through) == ([9, 10], 10)
