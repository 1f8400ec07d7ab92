"""``GET /``: a small page for operators, rendered on the server (no script).

Tables with their last partition and newest retained done, the completeness grids of
the tables with a rule, the outbox backlog, the relay members and their buckets, the
last events. It refreshes itself every 10 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from hcat_notify.api.auth import require_reader
from hcat_notify.api.routing import ApiRoute
from hcat_notify.api.set_grid import GRID_STYLE, Grid, read_grids, render_grids
from hcat_notify.api.state import ApiState, in_thread, state_of
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.group import GroupStatus
from hcat_notify.store.records import OutboxEvent, TableActivity

__all__ = ["LAST_EVENTS", "MAX_TABLES", "router"]

MAX_TABLES = 200
LAST_EVENTS = 20
State = Annotated[ApiState, Depends(state_of)]
router = APIRouter(tags=["status page"], route_class=ApiRoute)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; } td, th { padding: 0.2em 0.8em; text-align: left; }
th { border-bottom: 1px solid #999; } tr:nth-child(even) { background: #f4f4f4; }
.muted { color: #777; } .bad { color: #a00; }
"""


@dataclass(frozen=True)
class _Overview:
    tables: list[TableActivity]
    backlog: int
    oldest: datetime | None
    group: GroupStatus
    events: list[OutboxEvent]
    grids: list[Grid]


def _read(catalog: Catalog) -> _Overview:
    backlog, oldest = catalog.outbox.backlog()
    last = catalog.last_event_id()
    tables = catalog.tables.activity(limit=MAX_TABLES)
    return _Overview(
        tables=tables,
        backlog=backlog,
        oldest=oldest,
        group=catalog.group.status(),
        events=catalog.outbox.events(after_event_id=max(0, last - LAST_EVENTS), limit=LAST_EVENTS),
        grids=read_grids(catalog, [item.table for item in tables]),
    )


def _when(value: datetime | None) -> str:
    return "-" if value is None else escape(value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"))


def _table(headers: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(cell)}</th>" for cell in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _render(view: _Overview, now: datetime) -> str:
    owned = view.group.owners()
    members = [
        [
            escape(m.member_id),
            "alive" if m.alive else '<span class="bad">silent</span>',
            str(len(owned.get(m.member_id, ()))),
            f"{m.events_per_second:.1f}",
            f"{m.heartbeat_age:.1f} s",
        ]
        for m in view.group.members
    ]
    unassigned = len(view.group.unassigned)
    tables = [
        [
            escape(str(item.table.name)),
            escape(item.table.topic),
            escape(item.last_partition or "-"),
            _when(item.last_partition_at),
            escape(item.last_done or "-"),
            _when(item.last_done_at),
        ]
        for item in view.tables
    ]
    events = [
        [
            str(event.event_id),
            escape(event.event_type.value),
            escape(event.table),
            escape(event.headers.get("HCAT_SPEC", "")),
            _when(event.created_at),
        ]
        for event in reversed(view.events)
    ]
    age = "" if view.oldest is None else f", oldest {(now - view.oldest).total_seconds():.1f} s"
    more = (
        f'<p class="muted">the first {MAX_TABLES} tables by name</p>'
        if len(view.tables) >= MAX_TABLES
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="10">
<link rel="icon" href="data:,">
<title>hcat-notify</title><style>{_STYLE}{GRID_STYLE}</style></head>
<body>
<h1>hcat-notify</h1>
<p class="muted">as of {_when(now)} UTC</p>
<h2>Outbox</h2>
<p id="backlog">{view.backlog} event(s) not yet published{age}</p>
<h2>Relays</h2>
<p>{len(view.group.buckets)} buckets, {unassigned} unassigned</p>
{_table(["member", "state", "buckets", "events/s", "heartbeat"], members, "no relay running")}
<h2>Tables</h2>
{more}
{_table(["table", "topic", "last partition", "at", "last done", "at"], tables, "no tables")}
{render_grids(view.grids)}
<h2>Last events</h2>
{_table(["event", "type", "table", "spec", "at"], events, "no events yet")}
</body></html>
"""


@router.get(
    "/",
    response_class=HTMLResponse,
    dependencies=[Depends(require_reader)],
    responses={200: {"content": {"text/html": {}}, "description": "The status page."}},
)
async def status_page(state: State) -> HTMLResponse:
    """The operators' status page (HTML)."""
    view = await in_thread(lambda: _read(state.catalog()))
    return HTMLResponse(_render(view, datetime.now(UTC)))
