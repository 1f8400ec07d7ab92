"""``/v1/events``: what happened to some tables after a cursor, as the consumer's
catch-up reads it (Hive's ``get_next_notification``, with a per-topic cursor)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Response

from hcat_notify.api.auth import require_reader
from hcat_notify.api.contract import CURSOR_HEADER, MAX_PAGE, MORE_HEADER, NEXT_HEADER
from hcat_notify.api.datamodels import Event, EventPage, LastEvent
from hcat_notify.api.params import wait_query
from hcat_notify.api.problems import PROBLEM_RESPONSES, problem_doc
from hcat_notify.api.routing import JSON_MEDIA_TYPE, ApiRoute
from hcat_notify.api.state import ApiState, in_thread, state_of
from hcat_notify.model.cloudevents import CLOUDEVENTS_BATCH_JSON, dump_batch
from hcat_notify.model.cursor import MAX_EVENT_ID, Cursor
from hcat_notify.model.names import TableName
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.records import OutboxEvent

__all__ = ["MAX_TABLES", "EventsRead", "prefers_cloudevents", "read_events", "router"]

MAX_TABLES = 100
State = Annotated[ApiState, Depends(state_of)]

router = APIRouter(
    prefix="/v1/events", tags=["events"], responses=PROBLEM_RESPONSES, route_class=ApiRoute
)


@dataclass(frozen=True)
class EventsRead:
    """One page of events and the cursor after it, before it is put in either form."""

    events: Sequence[OutboxEvent]
    cursor: str
    more: bool
    next: int | None = None  # the after= of the next page read without a cursor

    def page(self) -> EventPage:
        """The page as the JSON body (the default)."""
        return EventPage(
            events=[Event.of_event(e) for e in self.events],
            cursor=self.cursor,
            more=self.more,
            next=self.next,
        )

    def cloudevents(self, source: str) -> Response:
        """The page as a CloudEvents batch, the cursor and ``more`` in headers."""
        headers = {CURSOR_HEADER: self.cursor, MORE_HEADER: str(self.more).lower()}
        if self.next is not None:
            headers[NEXT_HEADER] = str(self.next)
        return Response(
            dump_batch([event.message() for event in self.events], source=source),
            media_type=CLOUDEVENTS_BATCH_JSON,
            headers=headers,
        )


def read_events(
    catalog: Catalog, tables: list[TableName], cursor: Cursor, after: int, limit: int
) -> EventsRead:
    """One page of events and the cursor after it.

    With a cursor: every event of the tables after its topic's watermark, and the
    cursor moved past each. Without one: the unexpired retained dones at or below the
    last event id read before them, and a cursor there (``*:N``), so that following it
    misses nothing committed since; when the page is full, ``next``, the ``after`` of the
    next page read without a cursor, which reads the rest of the retained dones, and (as
    before ``next``) a cursor at the page's last event, which reads every event after it,
    not only the dones (410 where the outbox's retention deleted some of them).
    """
    if cursor:
        events = catalog.catch_up(tables, cursor=cursor, page_after=after, limit=limit)
        moved = cursor
        for event in events:
            moved = moved.advanced(event.topic, event.event_id)
        return EventsRead(events, str(moved), len(events) >= limit)
    floor = catalog.last_event_id()
    events = catalog.catch_up(tables, cursor=None, page_after=after, limit=limit)
    # A done committed after the floor was read comes again after the cursor, in order
    # with the other events of its topic.
    older = [event for event in events if event.event_id <= floor]
    if len(events) >= limit and len(older) == len(events):
        last = older[-1].event_id
        return EventsRead(older, str(Cursor(default=last)), True, next=last)
    return EventsRead(older, str(Cursor(default=max(floor, after))), False)


def _quality(accept: str, wanted: str) -> float:
    """The q-value ``accept`` gives ``wanted`` (an exact type, its ``type/*``, ``*/*``);
    the most specific range that matches decides, as RFC 9110 says."""
    major = wanted.split("/", 1)[0]
    ranks = {wanted: 3, f"{major}/*": 2, "*/*": 1}
    best_rank, best_q = 0, 0.0
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        rank = ranks.get(media.lower(), 0)
        if rank <= best_rank:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        best_rank, best_q = rank, q
    return best_q


def prefers_cloudevents(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for a CloudEvents batch rather than the JSON page:
    it names ``application/cloudevents-batch+json`` itself (a wildcard gets the default),
    at a q-value above zero and no lower than ``application/json``'s."""
    if not accept or CLOUDEVENTS_BATCH_JSON not in accept.lower():
        return False
    batch = _quality(accept, CLOUDEVENTS_BATCH_JSON)
    return batch > 0 and batch >= _quality(accept, JSON_MEDIA_TYPE)


_CLOUDEVENTS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The events as the JSON page (the default), or, on Accept: "
        f"{CLOUDEVENTS_BATCH_JSON}, as a CloudEvents batch (docs/architecture.md, "
        "CloudEvents) with the cursor and more in headers.",
        "content": {
            CLOUDEVENTS_BATCH_JSON: {
                "schema": {
                    "type": "array",
                    "items": {"type": "object", "description": "A CloudEvent 1.0."},
                }
            }
        },
        "headers": {
            CURSOR_HEADER: {
                "description": "CloudEvents batch only: the page's cursor.",
                "schema": {"type": "string"},
            },
            MORE_HEADER: {
                "description": "CloudEvents batch only: true when the page is full.",
                "schema": {"type": "string", "enum": ["true", "false"]},
            },
        },
    },
}


@router.get(
    "",
    dependencies=[Depends(require_reader)],
    response_model=EventPage,
    responses={
        404: problem_doc("No such table."),
        410: problem_doc(
            "The outbox's retention deleted events after the cursor's position of a topic "
            "(HistoryGoneError); the detail names the oldest complete cursor."
        ),
        **_CLOUDEVENTS_RESPONSE,
    },
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
            "previous page's cursor. Without one (or empty): the retained mark-set-dones, "
            "after the previous page's next.",
        ),
    ] = None,
    after: Annotated[
        int,
        Query(
            ge=0,
            le=MAX_EVENT_ID,
            description="Only events after this id (paging): the previous page's next.",
        ),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1000,
    wait: Annotated[float, wait_query("an event when there is none yet")] = 0,
    accept: Annotated[
        str | None,
        Header(
            description=f"{CLOUDEVENTS_BATCH_JSON} for a CloudEvents batch; otherwise the "
            "JSON page."
        ),
    ] = None,
) -> EventPage | Response:
    """Events of the tables after the cursor, in event-id order, with the cursor after
    them; the same events, in the same order, as a consumer's catch-up."""
    position = Cursor.parse(cursor)
    names = [TableName.parse(name) for name in table]

    def read() -> EventsRead:
        return read_events(state.catalog(), names, position, after, limit)

    async def check() -> EventsRead | None:
        page = await in_thread(read)
        return page if page.events else None

    found = await state.feed.poll(check, wait)
    result = found if found is not None else await in_thread(read)
    if prefers_cloudevents(accept):
        return result.cloudevents(state.settings.event_source)
    return result.page()


@router.get("/last", dependencies=[Depends(require_reader)])
async def last_event(state: State) -> LastEvent:
    """The highest event id handed out so far: a cursor ``*:N`` starts after it."""
    return LastEvent(event_id=await in_thread(lambda: state.catalog().last_event_id()))
