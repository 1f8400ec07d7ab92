"""``announce`` has one type on every public signature (``AnnounceMode | None``), and no
public caller can register partitions without announcing them (invariant 9)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import hcat_notify
import spark_output
from hcat_notify import AnnounceMode, InvalidInputError
from hcat_notify.api.client import ApiClient
from hcat_notify.store import Catalog
from hcat_notify.store.partitions_view import Partitions
from hcat_notify.store.records import NewPartition

PUBLIC: list[Callable[..., Any]] = [
    Catalog.add_partitions,
    hcat_notify.register_partitions,
    Partitions.add,
    Partitions.register,
    Partitions.drop,
    hcat_notify.discover_partitions,
    spark_output.write_partitions,
    spark_output.register_partitions,
    ApiClient.create_table,
    ApiClient.register_partitions,
    ApiClient.discover_partitions,
]


@pytest.mark.parametrize("function", PUBLIC, ids=lambda f: f.__qualname__)
def test_announce_is_an_announce_mode_or_none(function: Callable[..., Any]) -> None:
    parameter = inspect.signature(function).parameters["announce"]
    assert parameter.annotation == "AnnounceMode | None"
    assert parameter.default is None


def _clicks(catalog: Catalog) -> None:
    catalog.create_table("web.clicks", location="/data/clicks", partition_keys=["ds", "region"])


def _added(ds: str) -> list[NewPartition]:
    return [
        NewPartition({"ds": ds, "region": region}, f"/data/clicks/{region}") for region in "abc"
    ]


def test_partitions_are_announced_per_partition_or_per_write(catalog: Catalog) -> None:
    _clicks(catalog)
    before = catalog.last_event_id()
    each = catalog.add_partitions("web.clicks", _added("1"))
    assert len({p.event_id for p in each}) == 3
    once = catalog.add_partitions("web.clicks", _added("2"), announce=AnnounceMode.WRITE)
    assert len({p.event_id for p in once}) == 1
    events = catalog.outbox.events(after_event_id=before)
    assert [e.event_type.value for e in events] == ["ADD_PARTITION"] * 4


def test_a_caller_cannot_register_partitions_without_events(catalog: Catalog) -> None:
    _clicks(catalog)
    before = catalog.last_event_id()
    with pytest.raises(InvalidInputError, match="unknown announce mode"):
        catalog.add_partitions("web.clicks", _added("1"), announce=False)  # type: ignore[arg-type]
    assert catalog.list_partitions("web.clicks") == []
    assert catalog.outbox.events(after_event_id=before) == []
