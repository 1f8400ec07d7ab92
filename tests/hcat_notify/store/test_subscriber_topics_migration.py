"""Migration 0022 stores the topics a durable subscriber follows: an upgrade keeps every
subscriber and watermark, marks them as claimed before it (they hold every topic until
they next start), and the next claim stores their topics."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from sqlalchemy import inspect, text

from hcat_notify.config import load_settings
from hcat_notify.store import Catalog
from hcat_notify.store.engine import alembic_config, open_engine, upgrade
from hcat_notify.store.revision import SCHEMA_REVISION
from tests.revisions import catalog_at

CLICKS = "hcat.web.clicks"
_ROWS = (
    "INSERT INTO hcat_subscribers (name, owner, heartbeat_at, created_at, version)"
    " VALUES ('etl', NULL, 0, 0, 3), ('idle', NULL, 0, 0, 1)",
    "INSERT INTO hcat_subscriber_watermarks (subscriber, topic, last_event_id, updated_at,"
    f" version) VALUES ('etl', '{CLICKS}', 5, 0, 2), ('etl', '*', 4, 0, 1)",
    f"INSERT INTO hcat_outbox_pruned (topic, pruned_through) VALUES ('{CLICKS}', 3)",
    "UPDATE hcat_outbox_pruned SET pruned_through = 3 WHERE topic = '*'",
)


def _rows(url: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    engine = open_engine(url)
    try:
        with engine.connect() as connection:
            return (
                [
                    tuple(row)
                    for row in connection.execute(
                        text("SELECT name, owner, version FROM hcat_subscribers ORDER BY name")
                    )
                ],
                [
                    tuple(row)
                    for row in connection.execute(
                        text(
                            "SELECT subscriber, topic, last_event_id, version"
                            " FROM hcat_subscriber_watermarks ORDER BY subscriber, topic"
                        )
                    )
                ],
            )
    finally:
        engine.dispose()


def test_an_upgrade_keeps_subscribers_and_watermarks_claimed_before_it(
    empty_db_url: str, tmp_path: Path
) -> None:
    catalog_at(empty_db_url, "0021", *_ROWS)
    before = _rows(empty_db_url)
    engine = open_engine(empty_db_url)
    try:
        assert upgrade(engine) == ("0021", SCHEMA_REVISION)
        with engine.connect() as connection:
            indexes = inspect(connection).get_indexes("hcat_subscriber_topics")
            indexes += inspect(connection).get_indexes("hcat_subscriber_tables")
            columns = {c["name"] for c in inspect(connection).get_columns("hcat_subscribers")}
        assert [(i["name"], i["column_names"]) for i in indexes] == [
            ("ix_hcat_subscriber_topics_topic", ["topic", "subscriber"]),
            ("ix_hcat_subscriber_tables_table_name", ["table_name", "subscriber"]),
        ]
        assert {"followed", "followed_version"} <= columns
    finally:
        engine.dispose()
    assert _rows(empty_db_url) == before
    engine = open_engine(empty_db_url)
    try:
        with engine.connect() as connection:
            marks = connection.execute(
                text("SELECT topic, pruned_through, claims FROM hcat_outbox_pruned ORDER BY 1")
            )
            assert [tuple(row) for row in marks] == [("*", 3, 0), (CLICKS, 3, 0)]
    finally:
        engine.dispose()
    with Catalog.open(load_settings(home=tmp_path / "home", db_url=empty_db_url)) as catalog:
        etl, idle = catalog.subscriptions.every()
        assert (etl.followed, idle.followed) == (None, None)
        assert dict(etl.watermarks) == {CLICKS: 5, "*": 4}
        # its first claim since: every topic is followed anew, none was deleted past it
        claimed = catalog.subscriptions.claim(
            "etl", "new:1", tables={"web.clicks": CLICKS, "web.views": "hcat.web.views"}
        )
        assert dict(claimed.watermarks) == {CLICKS: 5, "*": 4}
        assert claimed.followed == 2
        assert [item.followed for item in catalog.subscriptions.every()] == [2, None]
        assert catalog.subscriptions.followed("etl", limit=1) == [CLICKS]
        assert catalog.subscriptions.remove(["etl"]) == ["etl"]
        assert catalog.subscriptions.followed("etl") == []
    engine = open_engine(empty_db_url)
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection, None), "0021")
            names = inspect(connection).get_table_names()
            assert {"hcat_subscriber_topics", "hcat_subscriber_tables"}.isdisjoint(names)
            columns = {c["name"] for c in inspect(connection).get_columns("hcat_subscribers")}
            assert {"followed", "followed_version"}.isdisjoint(columns)
    finally:
        engine.dispose()
    assert _rows(empty_db_url) == ([("idle", None, 1)], [])
