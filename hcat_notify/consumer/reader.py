"""Where a consumer reads the catalog: the database, or the HTTP API when one is named.

:func:`open_reader` is the one place that chooses between them, for the consumer, the
Airflow waits and the command line. A reader never migrates the catalog and never
creates one: a missing catalog is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self, cast

from hcat_notify.config import Settings
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.records import OutboxEvent, PartitionInfo, RetainedDone, TableInfo
from hcat_notify.store.set_records import RuleRecord, SetReport

__all__ = ["CatalogReader", "SetsReader", "open_reader", "sets_of"]


class CatalogReader(Protocol):
    """What a consumer (or a wait) reads of the catalog: :class:`~hcat_notify.store.
    Catalog` (the database) or :class:`~hcat_notify.api.client.ApiClient` (the HTTP API).
    Durable subscribers need the database."""

    def get_table(self, table: TableName | str) -> TableInfo: ...

    def list_tables(self, db: str | None = None) -> list[TableInfo]: ...

    def list_partitions(
        self, table: TableName | str, spec: PartitionSpec | Mapping[str, str | None] | None = None
    ) -> list[PartitionInfo]: ...

    def catch_up(
        self,
        tables: Sequence[TableName | str],
        *,
        cursor: Cursor | str | int | None = None,
        page_after: int = 0,
        limit: int | None = None,
    ) -> Sequence[OutboxEvent]: ...

    def find_covering_done(
        self,
        table: TableName | str,
        spec: PartitionSpec | Mapping[str, str | None],
        *,
        min_generation: int | None = None,
    ) -> RetainedDone | None: ...

    def last_event_id(self) -> int: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class SetsReader(Protocol):
    """What a reader tells of completeness rules and sets: ``catalog.sets`` or the API
    client's ``sets`` (docs/completeness.md)."""

    def rule(self, table: TableName | str) -> RuleRecord | None: ...

    def state(
        self, table: TableName | str, spec: PartitionSpec | Mapping[str, str | None]
    ) -> SetReport: ...

    def list(
        self,
        table: TableName | str,
        spec: PartitionSpec | Mapping[str, str | None] | None = None,
        *,
        limit: int = 100,
    ) -> list[SetReport]: ...


def sets_of(reader: CatalogReader) -> SetsReader | None:
    """The reader's view of rules and sets (:class:`Catalog` and the API client have
    one; None for another reader)."""
    return cast("SetsReader | None", getattr(reader, "sets", None))


def open_reader(
    settings: Settings,
    *,
    api_url: str | Sequence[str] | None = None,
    durable: bool = False,
) -> CatalogReader:
    """The HTTP API's client when ``api_url`` or the settings' ``api_url`` names it
    (unless ``durable``: a durable subscriber's watermarks live in the database), else
    the catalog database, opened without migrating or creating it.

    Raises:
        ConfigError: the database URL is malformed.
        StoreUnavailableError: no catalog at the configured URL, or it cannot be reached.
        InvalidInputError: a malformed API URL.
    """
    urls = api_url or (() if durable else settings.api_urls)
    if urls:
        # httpx comes with the [api] extra: imported only when the API is used.
        from hcat_notify.api.client import ApiClient

        return ApiClient.from_settings(settings, urls)
    return Catalog.open(settings, upgrade=False, create=False)
