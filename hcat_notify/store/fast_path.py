"""The fast path: the two calls that schedulers and writers make per task, each one
driver round trip.

"Is this spec done?" (the covering-done lookup) is one ``SELECT`` of the table row
joined with the candidate retention rows, and ``send_mark_set_done`` is one driver
transaction (the table row, the event id, then the rows that
:func:`hcat_notify.store.event_rows.done_rows` builds, as the session path writes them).
Both are SQLAlchemy Core statements compiled once per dialect (and number of covering
specs) and run on the pool's driver connections; why, and what each costs, is in
docs/architecture.md ("Hot paths"). Driver errors are mapped as
:func:`hcat_notify.store.tx.transaction` maps them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Engine, and_, bindparam, insert, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ClauseElement

from hcat_notify.errors import HcatNotifyError, StoreError, StoreUnavailableError
from hcat_notify.model.names import TableName
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import topic_bucket
from hcat_notify.store.driver import compiled
from hcat_notify.store.engine import begin_immediate
from hcat_notify.store.event_ids import ALLOCATE_POSTGRESQL, HORIZON_POSTGRESQL
from hcat_notify.store.event_rows import OUTBOX_COLUMNS, RETENTION_COLUMNS, done_rows
from hcat_notify.store.models import EventCounterRow, OutboxRow, RetentionRow, TableRow
from hcat_notify.store.outbox import bucket_page_query
from hcat_notify.store.records import RetainedDone, as_datetime, table_not_found, trusted_json
from hcat_notify.store.tx import OUTBOX_CHANNEL

__all__ = ["FastPath"]

T = TypeVar("T")


class _Compiled:
    """A Core statement as the driver takes it: SQL text, parameter order (None: by
    name) and each parameter's bind processor (the column type's own conversion)."""

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)  # selects, inserts and updates
        self.sql = compiled.string
        order = compiled.positiontup
        self.order = None if order is None else tuple(order)
        # Values written into the statement itself (``id == 1``), then the caller's.
        self.fixed = {
            name: bind.effective_value for name, bind in compiled.binds.items() if not bind.required
        }
        self.processors = {
            name: processor
            for name, bind in compiled.binds.items()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }

    def params(self, values: dict[str, Any]) -> Any:
        values.update(self.fixed)
        for name, processor in self.processors.items():
            values[name] = processor(values[name])
        return values if self.order is None else [values[name] for name in self.order]


def _values(table: Any, names: Sequence[str]) -> dict[str, BindParameter[Any]]:
    return {name: bindparam(name, type_=table.c[name].type) for name in names}


@functools.lru_cache(maxsize=16)
def _write_statements(dialect: Dialect) -> dict[str, _Compiled]:
    """The statements of a MARK_SET_DONE, compiled for ``dialect``: the inserts take
    exactly the columns :mod:`hcat_notify.store.event_rows` fills."""
    return {
        "table": _Compiled(
            select(
                TableRow.id,
                TableRow.partition_keys,
                TableRow.topic,
                TableRow.retention_seconds,
                TableRow.rule_version,
            ).where(TableRow.db_name == bindparam("db"), TableRow.table_name == bindparam("table")),
            dialect,
        ),
        "counter": _Compiled(
            update(EventCounterRow)
            .where(EventCounterRow.id == 1)
            .values(last_event_id=EventCounterRow.last_event_id + bindparam("count"))
            .returning(EventCounterRow.last_event_id),
            dialect,
        ),
        "retention": _Compiled(
            insert(RetentionRow).values(_values(RetentionRow.__table__, RETENTION_COLUMNS)),
            dialect,
        ),
        "outbox": _Compiled(
            insert(OutboxRow).values(_values(OutboxRow.__table__, OUTBOX_COLUMNS)),
            dialect,
        ),
    }


@functools.lru_cache(maxsize=256)
def _covering_statement(dialect: Dialect, specs: int) -> _Compiled:
    """The covering-done lookup for ``specs`` candidate specs, compiled for ``dialect``."""
    candidates: list[BindParameter[str]] = [bindparam(f"spec{index}") for index in range(specs)]
    statement = (
        select(
            TableRow.id,
            TableRow.partition_keys,
            RetentionRow.event_id,
            RetentionRow.spec,
            RetentionRow.created_at,
            RetentionRow.expires_at,
            RetentionRow.generation,
            RetentionRow.reason,
        )
        .select_from(TableRow)
        .outerjoin(
            RetentionRow,
            and_(RetentionRow.table_id == TableRow.id, RetentionRow.spec.in_(candidates)),
        )
        .where(TableRow.db_name == bindparam("db"), TableRow.table_name == bindparam("table"))
    )
    return _Compiled(statement, dialect)


def _oldest(
    name: TableName, rows: Sequence[Any], now: datetime, min_generation: int
) -> RetainedDone | None:
    """The oldest of the covering rows unexpired at ``now`` and of ``min_generation`` or
    later, as a record."""
    best: Any = None
    for row in rows:
        if row[2] is None or row[6] < min_generation:
            continue  # the table row alone (nothing covers the spec), or too old
        expires_at = as_datetime(row[5])
        if expires_at > now and (best is None or row[2] < best[2]):
            best = (*row[:5], expires_at, row[6], row[7])
    if best is None:
        return None
    return RetainedDone(
        event_id=best[2],
        table=name,
        spec=PartitionSpec.parse_trusted(best[3]),
        created_at=as_datetime(best[4]),
        expires_at=best[5],
        generation=best[6],
        reason=best[7],
    )


class FastPath:
    """The covering-done lookup and the MARK_SET_DONE write, each one driver round trip
    on the pool's connections (SQLite reads on a connection of the calling thread's)."""

    def __init__(self, engine: Engine, url: str) -> None:
        self._engine = engine
        self._url = url
        self._postgres = engine.dialect.name == "postgresql"
        # SQLite: one reading connection per thread, kept out of the pool (its
        # check-out and reset cost a lookup more than the lookup itself).
        self._local = threading.local()
        self._readers: list[Any] = []
        self._readers_lock = threading.Lock()
        self._generation = 0

    def close(self) -> None:
        """Close the SQLite reading connections (the pool's close with the engine); a
        later read opens new ones, as the pool would."""
        with self._readers_lock:
            readers, self._readers = self._readers, []
            self._generation += 1
        for driver in readers:
            with suppress(Exception):
                driver.close()

    def covering_done(
        self, name: TableName, given: PartitionSpec, now: datetime, *, min_generation: int = 1
    ) -> RetainedDone | None:
        """The oldest done of ``name`` unexpired at ``now`` that covers ``given`` (of set
        generation ``min_generation`` or later).

        Raises:
            TableNotFoundError: no such table.
            UnknownPartitionKeyError, InvalidSpecError: ``given`` does not fit the
                table's keys or skips a leading one (:meth:`PartitionSpec.for_covering`).
        """
        rows = self._covering_rows(name, given.covering_canonicals())
        given.for_covering(trusted_json(rows[0][1]), table=str(name))
        return _oldest(name, rows, now, min_generation)

    def covering_dones(
        self, name: TableName, wanted: Sequence[tuple[PartitionSpec, int]], now: datetime
    ) -> list[RetainedDone | HcatNotifyError | None]:
        """:meth:`covering_done` of each (spec, minimum generation) of ``name``, in one
        round trip: the done, None, or what is wrong with that spec (it does not fit
        the table's keys).

        Raises:
            TableNotFoundError: no such table.
        """
        covering = [given.covering_canonicals() for given, _ in wanted]
        rows = self._covering_rows(name, sorted({spec for specs in covering for spec in specs}))
        keys = trusted_json(rows[0][1])
        by_spec: dict[str, list[Any]] = {}
        for row in rows:
            if row[2] is not None:
                by_spec.setdefault(row[3], []).append(row)
        found: list[RetainedDone | HcatNotifyError | None] = []
        for (given, minimum), specs in zip(wanted, covering, strict=True):
            try:
                given.for_covering(keys, table=str(name))
            except HcatNotifyError as exc:
                found.append(exc)
                continue
            candidates = [row for spec in specs for row in by_spec.get(spec, ())]
            found.append(_oldest(name, candidates, now, minimum))
        return found

    def _covering_rows(self, name: TableName, canonicals: Sequence[str]) -> Sequence[Any]:
        """The table's row joined with its retained dones of ``canonicals`` (at least the
        table's row).

        Raises:
            TableNotFoundError: no such table.
        """
        statement = _covering_statement(self._engine.dialect, len(canonicals))
        params: dict[str, Any] = {f"spec{index}": spec for index, spec in enumerate(canonicals)}
        params["db"] = name.db
        params["table"] = name.table
        with self._read_cursor() as cursor:
            cursor.execute(statement.sql, statement.params(params))
            rows: Sequence[Any] = cursor.fetchall()
        if not rows:
            raise table_not_found(name)
        return rows

    def mark_set_done(
        self, name: TableName, given: PartitionSpec, now: datetime, buckets: int
    ) -> tuple[int, PartitionSpec] | None:
        """Record a MARK_SET_DONE of ``given`` in one transaction, the rows
        :func:`~hcat_notify.store.event_rows.done_rows` builds; (event id, spec), or None
        (nothing written) when the table has a completeness rule: its dones count in
        the set's state, which the session path keeps.

        Raises:
            TableNotFoundError: no such table.
            UnknownPartitionKeyError, InvalidSpecError: ``given`` does not fit the table.
        """
        statements = _write_statements(self._engine.dialect)
        with self._cursor(write=True) as cursor:
            table = statements["table"]
            cursor.execute(table.sql, table.params({"db": name.db, "table": name.table}))
            found = cursor.fetchone()
            if found is None:
                raise table_not_found(name)
            table_id, keys, topic, retention_seconds, rule_version = found
            if rule_version is not None:
                return None
            canonical = given.for_done(trusted_json(keys), table=str(name))
            # Readers in id order stay below this id until the commit (event_ids).
            if self._postgres:
                cursor.execute(ALLOCATE_POSTGRESQL, (1,))
                ((event_id,),) = cursor.fetchone()
            else:
                counter = statements["counter"]
                cursor.execute(counter.sql, counter.params({"count": 1}))
                (event_id,) = cursor.fetchone()
            rows = done_rows(
                event_id=event_id,
                table_id=table_id,
                table=name,
                topic=topic,
                bucket=topic_bucket(topic, buckets),
                spec=canonical,
                retention=timedelta(seconds=retention_seconds),
                now=now,
            )
            for statement, values in (
                (statements["retention"], rows.retention),
                (statements["outbox"], rows.outbox),
            ):
                cursor.execute(statement.sql, statement.params(dict(values)))
            if self._postgres:
                cursor.execute("SELECT pg_notify(%s, '')", (OUTBOX_CHANNEL,))
        return int(event_id), canonical

    def outbox_page(
        self, buckets: Sequence[int], *, after: int, limit: int
    ) -> list[tuple[Any, ...]]:
        """A relay's page (:func:`~hcat_notify.store.outbox.bucket_page_query`) as the
        driver's row tuples, on this thread's own connection: on PostgreSQL two
        statements (the id-order horizon, then the page) where a session took five
        round trips (BEGIN, the sort setting, the horizon, the page, COMMIT)."""
        dialect = self._engine.dialect
        owned = list(buckets)  # PostgreSQL: one array; SQLite: a parameter each
        statement = compiled(dialect, bucket_page_query, None if self._postgres else len(owned))
        values: dict[str, Any] = {"after": after, "limit": limit}
        if self._postgres:
            values["owned"] = owned
        else:
            values.update((f"b{index}", bucket) for index, bucket in enumerate(owned))
        with self._read_cursor(own=True) as cursor:
            if self._postgres:
                cursor.execute(HORIZON_POSTGRESQL)
                ((values["bound"],),) = cursor.fetchall()
            cursor.execute(*statement.bind(values))
            return list(cursor.fetchall())

    def write(self, work: Callable[[Any, Dialect], T]) -> T:
        """``work(cursor, dialect)`` in one write transaction on a pool's driver
        connection (SQLite: ``BEGIN IMMEDIATE``), committed when it returns, rolled back
        when it raises; driver errors mapped as :func:`~hcat_notify.store.tx.transaction`
        maps them."""
        with self._cursor(write=True) as cursor:
            return work(cursor, self._engine.dialect)

    def own_rows(self, build: Callable[[str], ClauseElement]) -> list[tuple[Any, ...]]:
        """The rows of a statement without parameters (``build(dialect name)``, compiled
        once), on this thread's own connection as :meth:`outbox_page` reads: a small read
        beside a relay's page without a session's transaction."""
        statement = compiled(self._engine.dialect, build)
        with self._read_cursor(own=True) as cursor:
            cursor.execute(*statement.bind({}))
            return list(cursor.fetchall())

    @contextmanager
    def _read_cursor(self, *, own: bool = False) -> Iterator[Any]:
        """A cursor for reading statements: on SQLite, of this thread's own connection
        (autocommit: each statement reads the latest commit); on PostgreSQL, of a pool's
        connection, or with ``own`` of this thread's own (a relay's publishing thread:
        autocommit, and sorting off for its page, as ``SORT_OFF`` says why)."""
        if self._postgres and not own:
            with self._cursor() as cursor:
                yield cursor
            return
        mine: tuple[int, Any] | None = getattr(self._local, "reader", None)
        if mine is None or mine[0] != self._generation:  # none yet, or the catalog closed
            mine = None
        try:
            if mine is None:
                pooled = self._engine.raw_connection()  # connected as the pool's are
                mine = (self._generation, pooled.driver_connection)
                pooled.detach()
                with self._readers_lock:
                    self._readers.append(mine[1])
                self._local.reader = mine
                if self._postgres:
                    mine[1].autocommit = True
                    mine[1].execute("SET enable_sort = off")
            cursor = mine[1].cursor()
            try:
                yield cursor
            finally:
                cursor.close()
        except self._engine.dialect.loaded_dbapi.Error as exc:
            if mine is not None:  # a new connection next time
                self._local.reader = None
                with self._readers_lock, suppress(ValueError):
                    self._readers.remove(mine[1])
                with suppress(Exception):
                    mine[1].close()
            raise self._store_error(exc) from exc

    def _store_error(self, exc: Exception) -> StoreError:
        dbapi = self._engine.dialect.loaded_dbapi
        unavailable = isinstance(exc, dbapi.OperationalError | dbapi.InterfaceError) or (
            type(exc) is dbapi.DatabaseError
        )
        error = StoreUnavailableError if unavailable else StoreError
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        return error(f"database {self._url} failed: {reason or type(exc).__name__}")

    @contextmanager
    def _cursor(self, *, write: bool = False) -> Iterator[Any]:
        dbapi = self._engine.dialect.loaded_dbapi
        connection = self._engine.raw_connection()
        try:
            driver = connection.driver_connection
            reading = self._postgres and not write
            if reading:
                # One statement needs no BEGIN/COMMIT round trips. The pool hands the
                # connection out idle (it rolls back on return), so this is allowed.
                driver.autocommit = True  # type: ignore[union-attr]
            cursor = connection.cursor()
            try:
                if write and not self._postgres:
                    begin_immediate(driver)  # the SQLite writers' lock, at once
                try:
                    yield cursor
                except BaseException:
                    if write:
                        with suppress(dbapi.Error):  # the pool rolls back on return too
                            self._end(connection, cursor, commit=False)
                    raise
                if write:
                    self._end(connection, cursor, commit=True)
            finally:
                cursor.close()
                if reading:
                    with suppress(dbapi.Error):  # a broken connection is invalidated below
                        driver.autocommit = False  # type: ignore[union-attr]
        except dbapi.Error as exc:
            if self._engine.dialect.is_disconnect(exc, connection, None):
                connection.invalidate(exc)
            raise self._store_error(exc) from exc
        finally:
            connection.close()

    def _end(self, connection: Any, cursor: Any, *, commit: bool) -> None:
        if self._postgres:
            connection.commit() if commit else connection.rollback()
        else:  # the driver leaves transactions to us (engine.py takes control of them)
            cursor.execute("COMMIT" if commit else "ROLLBACK")
