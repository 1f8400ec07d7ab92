"""``/v1/events``: what happened to some tables after a cursor, as the consumer's
catch-up reads it (Hive's ``get_next_notification``, with a per-topic cursor)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from hcat_notify.api.auth import require_reader
from hcat_notify.api.contract import MAX_PAGE
from hcat_notify.api.datamodels import Event, EventPage, LastEvent
from hcat_notify.api.params import wait_query
from hcat_notify.api.problems import PROBLEM_RESPONSES, problem_doc
from hcat_notify.api.routing import ApiRoute
from hcat_notify.api.state import ApiState, in_thread, state_of
from hcat_notify.model.cursor import MAX_EVENT_ID, Cursor
from hcat_notify.model.names import TableName
from hcat_notify.store.catalog import Catalog

__all__ = ["MAX_TABLES", "read_events", "router"]

MAX_TABLES = 100
State = Annotated[ApiState, Depends(state_of)]

router = APIRouter(
    prefix="/v1/events", tags=["events"], responses=PROBLEM_RESPONSES, route_class=ApiRoute
)


def read_events(
    catalog: Catalog, tables: list[TableName], cursor: Cursor, after: int, limit: int
) -> EventPage:
    """One page of events and the cursor after it.

    With a cursor: every event of the tables after its topic's watermark, and the
    cursor moved past each. Without one: the unexpired retained dones, and a cursor at
    the last event id read before them (``*:N``), so that following it misses nothing
    committed since; when the page is full, a cursor at its last event instead.
    """
    if cursor:
        events = catalog.catch_up(tables, cursor=cursor, page_after=after, limit=limit)
        moved = cursor
        for event in events:
            moved = moved.advanced(event.topic, event.event_id)
        return EventPage(
            events=[Event.of_event(e) for e in events], cursor=str(moved), more=len(events) >= limit
        )
    floor = catalog.last_event_id()
    events = catalog.catch_up(tables, cursor=None, page_after=after, limit=limit)
    if len(events) >= limit:
        return EventPage(
            events=[Event.of_event(e) for e in events],
            cursor=str(Cursor(default=events[-1].event_id)),
            more=True,
        )
    # A done committed after the floor was read comes again after the cursor, in order
    # with the other events of its topic.
    older = [event for event in events if event.event_id <= floor]
    return EventPage(
        events=[Event.of_event(e) for e in older],
        cursor=str(Cursor(default=max(floor, after))),
        more=False,
    )


@router.get(
    "", dependencies=[Depends(require_reader)], responses={404: problem_doc("No such table.")}
)
async def events(
    state: State,
    table: Annotated[
        list[str], Query(min_length=1, max_length=MAX_TABLES, description="db.table, repeatable.")
    ],
    cursor: Annotated[
        str | None,
        Query(
            max_length=100_000,
            description="Where you stand: TOPIC:EVENT_ID,... (or *:N, or an event id), as the "
            "previous page's cursor. Without one: the retained mark-set-dones.",
        ),
    ] = None,
    after: Annotated[
        int,
        Query(ge=0, le=MAX_EVENT_ID, description="Only events after this id (paging)."),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
    wait: Annotated[float, wait_query("an event when there is none yet")] = 0,
) -> EventPage:
    """Events of the tables after the cursor, in event-id order, with the cursor after
    them; the same events, in the same order, as a consumer's catch-up."""
    position = Cursor.parse(cursor)
    names = [TableName.parse(name) for name in table]

    def read() -> EventPage:
        return read_events(state.catalog(), names, position, after, limit)

    async def check() -> EventPage | None:
        page = await in_thread(read)
        return page if page.events else None

    found = await state.feed.poll(check, wait)
    return found if found is not None else await in_thread(read)


@router.get("/last", dependencies=[Depends(require_reader)])
async def last_event(state: State) -> LastEvent:
    """The highest event id handed out so far: a cursor ``*:N`` starts after it."""
    return LastEvent(event_id=await in_thread(lambda: state.catalog().last_event_id()))
