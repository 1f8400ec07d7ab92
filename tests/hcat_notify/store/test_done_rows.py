"""One way to write a done: the fast path (one driver round trip) and the session path
(the journal's and registration's) write the same rows, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, select

from hcat_notify.config import Settings
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store import Catalog, group, retention
from hcat_notify.store import engine as engines
from hcat_notify.store import tables as table_ops
from hcat_notify.store.models import OutboxRow, RetentionRow
from hcat_notify.store.tx import transaction

NOW = datetime(2026, 11, 26, 12, 30, 15, 250000, tzinfo=UTC)


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    Catalog.open(settings).close()  # the schema
    opened = engines.open_engine(settings.database_url)
    yield opened
    opened.dispose()


def _rows(engine: Engine, event_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    with engine.connect() as connection:
        kept = connection.execute(
            select(RetentionRow.__table__).where(RetentionRow.event_id == event_id)
        ).one()
        sent = connection.execute(
            select(OutboxRow.__table__).where(OutboxRow.event_id == event_id)
        ).one()
    return dict(kept._mapping), dict(sent._mapping)


def _without_the_id(retained: dict[str, Any], sent: dict[str, Any]) -> tuple[Any, ...]:
    """The rows with the event id taken out (the one thing two dones must not share)."""
    body = json.loads(sent["body"])
    assert body.pop("eventId") == sent["event_id"] == retained["event_id"]
    headers = dict(sent["headers"])
    assert headers.pop("HCAT_EVENT_ID") == str(sent["event_id"])
    return (
        {key: value for key, value in retained.items() if key != "event_id"},
        {
            **{key: value for key, value in sent.items() if key not in ("event_id", "body")},
            "headers": headers,
            "body": body,
        },
    )


def test_the_fast_path_and_the_session_path_write_the_same_rows(
    engine: Engine, settings: Settings
) -> None:
    catalog = Catalog(engine, settings, clock=lambda: NOW)
    catalog.create_table(
        "web.clicks", location="/data/clicks", partition_keys=["ds", "region", "hour"]
    )
    # The fast path: Catalog.mark_set_done with a spec it can look up in one statement.
    fast = catalog.mark_set_done("web.clicks", {"region": "us", "ds": "20261126"})

    with transaction(engine, settings, lambda: NOW, catalog.url, group.bucket_count) as tx:
        row = tx.table_row(catalog.get_table("web.clicks").name)
        slow, spec = retention.add_mark_set_done(
            tx, row, table_ops.info_of(row), {"ds": "20261126", "region": "us"}
        )
    assert spec == PartitionSpec.from_mapping({"ds": "20261126", "region": "us"})
    assert slow != fast

    fast_rows = _rows(engine, fast)
    slow_rows = _rows(engine, slow)
    assert _without_the_id(*fast_rows) == _without_the_id(*slow_rows)
    retained, sent = fast_rows
    assert retained["spec"] == "ds=20261126/region=us"
    assert sent["event_type"] == "MARK_SET_DONE"
    assert sent["created_at"] == NOW == retained["created_at"]
    assert sent["attempts"] == 0
    assert sent["parked_at"] is None
    catalog.close()
