"""A dropped table is remembered by its DROP_TABLE: named as dropped, caught up through
its drop, and not replayed to the table re-created under its name. SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from hcat_notify.config import Settings, TopicStrategy
from hcat_notify.errors import TableDroppedError, TableNotFoundError
from hcat_notify.model.events import EventType
from hcat_notify.notification import Source, from_outbox
from hcat_notify.store import Catalog, NewPartition, TableInfo

pytestmark = pytest.mark.integration


def _table(catalog: Catalog, **kwargs) -> TableInfo:
    return catalog.create_table(
        "web.clicks", location="/w/clicks", partition_keys=["datestamp", "region"], **kwargs
    )


def _add(catalog: Catalog, datestamp: str, *regions: str) -> list[int]:
    added = catalog.add_partitions(
        "web.clicks", [NewPartition({"datestamp": datestamp, "region": r}, "/w") for r in regions]
    )
    return [p.event_id for p in added if p.event_id is not None]


def _kinds(events) -> list[tuple[EventType, int]]:
    return [(e.event_type, e.event_id) for e in events]


@pytest.fixture
def single(settings: Settings) -> Iterator[Catalog]:
    """A catalog whose tables all share the prefix topic (the ``single`` strategy)."""
    with Catalog.open(dataclasses.replace(settings, topic_strategy=TopicStrategy.SINGLE)) as c:
        yield c


def test_a_dropped_table_is_named_as_dropped(catalog: Catalog):
    _table(catalog)
    dropped = catalog.tables.drop("web.clicks")
    on_table_topic = dropped.event_ids[-1]
    for ask in (
        lambda: catalog.get_table("web.clicks"),
        lambda: catalog.find_covering_done("web.clicks", {"datestamp": "1"}),
        lambda: catalog.tables.drop("web.clicks"),
    ):
        with pytest.raises(
            TableDroppedError, match=f"^table web.clicks was dropped \\(event {on_table_topic}\\)$"
        ) as caught:
            ask()
        assert (caught.value.event_id, caught.value.topic) == (on_table_topic, "hcat.web.clicks")
    with pytest.raises(TableNotFoundError) as never:
        catalog.get_table("web.other")
    assert not isinstance(never.value, TableDroppedError)


def test_a_dropped_table_is_caught_up_through_its_drop(catalog: Catalog):
    info = _table(catalog)
    (first,) = _add(catalog, "1", "a")
    (second,) = _add(catalog, "2", "a")
    drop = catalog.tables.drop("web.clicks").event_ids[-1]

    def caught(cursor):
        return _kinds(catalog.catch_up(["web.clicks"], cursor=cursor))

    assert caught(f"{info.topic}:{first}") == [
        (EventType.ADD_PARTITION, second),
        (EventType.DROP_TABLE, drop),
    ]
    assert caught(f"*:{second}") == [(EventType.DROP_TABLE, drop)]
    assert caught(f"*:{drop}") == []  # it saw the drop already
    assert caught(None) == []  # no past: nothing retained of a dropped table


def test_a_recreated_table_is_not_caught_up_with_the_old_ones_life(catalog: Catalog):
    info = _table(catalog)
    (old,) = _add(catalog, "1", "a")
    catalog.mark_set_done("web.clicks", {"datestamp": "1"})
    catalog.tables.drop("web.clicks")
    again = _table(catalog)
    assert again.topic == info.topic
    (new,) = _add(catalog, "2", "a")
    done = catalog.mark_set_done("web.clicks", {"datestamp": "2"})

    # From before the old table's drop, or from nothing: the new table's events only.
    for cursor in ("*:0", f"{info.topic}:{old}"):
        assert _kinds(catalog.catch_up(["web.clicks"], cursor=cursor)) == [
            (EventType.ADD_PARTITION, new),
            (EventType.MARK_SET_DONE, done),
        ]
    assert _kinds(catalog.catch_up(["web.clicks"])) == [(EventType.MARK_SET_DONE, done)]

    # Dropped again: caught up through the second drop, never the first.
    second_drop = catalog.tables.drop("web.clicks").event_ids[-1]
    assert _kinds(catalog.catch_up(["web.clicks"], cursor="*:0")) == [
        (EventType.ADD_PARTITION, new),
        (EventType.MARK_SET_DONE, done),
        (EventType.DROP_TABLE, second_drop),
    ]


def test_table_events_and_unprefixed_batches_have_no_spec(single: Catalog):
    # With one topic for everything, a table's catch-up holds its CREATE_TABLE too.
    created = _table(single, properties={"hcat.notify.announce": "write"})
    assert created.topic == "hcat"
    single.add_partitions(
        "web.clicks",
        [NewPartition({"datestamp": d, "region": "a"}, "/w") for d in ("1", "2")]
        + [NewPartition({"datestamp": "3", "region": r}, "/w") for r in ("a", "b")],
    )
    single.add_partitions("web.clicks", [NewPartition({"datestamp": "4", "region": "a"}, "/w")])
    caught = [
        from_outbox(e, Source.REGISTRY) for e in single.catch_up(["web.clicks"], cursor="*:0")
    ]
    create, batch, one = caught
    assert (create.event_type, create.spec, create.partitions) == (EventType.CREATE_TABLE, None, ())
    assert create.about_table
    assert create.describe() == "-"
    assert batch.spec is None  # 1/a, 2/a, 3/a, 3/b share no leading key
    assert [p.to_path() for p in batch.partitions] == [
        "datestamp=1/region=a",
        "datestamp=2/region=a",
        "datestamp=3/region=a",
        "datestamp=3/region=b",
    ]
    assert batch.describe() == "4 partitions"
    assert batch.as_dict()["spec"] is None
    assert one.spec is not None
    assert one.spec.to_path() == "datestamp=4/region=a"
    assert one.partitions == (one.spec,)
    assert one.describe() == "datestamp=4/region=a"

    single.tables.drop("web.clicks")
    (drop,) = [
        from_outbox(e, Source.REGISTRY)
        for e in single.catch_up(["web.clicks"], cursor=f"*:{one.event_id}")
    ]
    assert (drop.event_type, drop.spec, drop.partitions) == (EventType.DROP_TABLE, None, ())
