"""Bulk loading for ``benchmarks/scale.py``: a catalog grown to a size the way the store
writes it (the same tables and columns, ids from the catalog's counter or sequence), by
``executemany`` on SQLite and ``COPY`` on PostgreSQL, in transactions of 50,000 rows."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from _support import analyze, bulk_dones, table_id
from sqlalchemy import create_engine, text

from hcat_notify.config import Settings
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.model.topics import DEFAULT_BUCKETS, topic_bucket
from hcat_notify.model.wire import build_mark_set_done
from hcat_notify.store import Catalog
from hcat_notify.store.event_ids import allocate_event_ids
from hcat_notify.store.event_rows import OUTBOX_COLUMNS, RETENTION_COLUMNS
from hcat_notify.warehouse import key_text

BIG = "scale.big"
SMALL = "scale.small"
SMALL_DONES = 1_000
REGIONS = 1_000
FIRST_DAY = datetime(2000, 1, 1, tzinfo=UTC)
LOAD_CHUNK = 50_000


FEWEST_TABLES = 300
"""Tables of the smallest catalog: more than the status page shows (200), so that both
catalogs fill its page (at 100 the smallest showed 102 tables against the grown's 200,
and the page's bound read as growth)."""


def tables_at(size: int) -> int:
    return max(FEWEST_TABLES, min(100_000, size // 100))


def day(index: int) -> str:
    return (FIRST_DAY + timedelta(days=index)).strftime("%Y%m%d")


def spec_of(n: int) -> tuple[str, str]:
    return day(n // REGIONS), f"r{n % REGIONS:03d}"


# --------------------------------------------------------------------------- bulk load


def sqlite_time(value: datetime) -> str:
    """How the catalog stores a UTC datetime in SQLite (naive, microseconds)."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


class Loader:
    """Rows into one catalog database, in the columns the store writes, fast."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite")
        self.engine = create_engine(url)

    def close(self) -> None:
        self.engine.dispose()

    def time(self, value: datetime) -> Any:
        return sqlite_time(value) if self.sqlite else value

    def put(
        self, conn: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        raw = conn.connection.driver_connection
        if self.sqlite:
            marks = ", ".join("?" * len(columns))
            raw.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)
            return
        with raw.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def ids(self, conn: Any, count: int) -> list[int]:
        return allocate_event_ids(conn, count)

    def put_progress(self, conn: Any, topics: Sequence[tuple[str, float]]) -> None:
        """Each (topic, updated_at) a progress row at event 0, epoch 1, in its bucket."""
        rows = [(t, topic_bucket(t, DEFAULT_BUCKETS), 0, 1, at) for t, at in topics]
        columns = ("topic", "bucket", "last_event_id", "epoch", "updated_at")
        self.put(conn, "hcat_topic_progress", columns, rows)


def _template(info: Any, now: datetime) -> tuple[str, str]:
    """The headers (as JSON text) and body of a MARK_SET_DONE of ``scale.big``, with
    markers where the event id and the spec's values go."""
    message = build_mark_set_done(
        event_id=987654321987,
        table=info.name,
        topic=info.topic,
        spec=PartitionSpec.from_mapping({"ds": "DSDSDSDS", "region": "RGRG"}),
        timestamp=int(now.timestamp()),
    )
    return json.dumps(dict(message.headers)), message.body


def _fill(template: str, event_id: int, ds: str, region: str) -> str:
    return (
        template.replace("987654321987", str(event_id))
        .replace("DSDSDSDS", ds)
        .replace("RGRG", region)
    )


@dataclass
class Grown:
    """What a catalog holds so far."""

    url: str
    partitions: int = 0
    tables: int = 0
    info: Any = None
    big_id: int = 0
    proto: dict[str, Any] = field(default_factory=dict)


def prepare(settings: Settings) -> Grown:
    """The two tables every catalog starts with, registered the ordinary way."""
    with Catalog.open(settings) as catalog:
        catalog.create_table(BIG, location="/data/scale/big", partition_keys=["ds", "region"])
        catalog.create_table(SMALL, location="/data/scale/small", partition_keys=["ds"])
        info = catalog.get_table(BIG)
        small = catalog.get_table(SMALL)
    bulk_dones(
        settings.database_url, small, ({"ds": day(n)} for n in range(SMALL_DONES)), published=True
    )
    grown = Grown(settings.database_url, info=info)
    engine = create_engine(settings.database_url)
    try:
        grown.big_id = table_id(engine, BIG)
        with engine.connect() as conn:
            row = conn.execute(text("SELECT * FROM hcat_tables WHERE table_name = 'small'")).one()
            grown.proto = {k: v for k, v in row._mapping.items() if k != "id"}
    finally:
        engine.dispose()
    return grown


def grow(grown: Grown, size: int) -> float:
    """Bulk-load ``grown`` up to ``size``; the seconds it took."""
    started = time.perf_counter()
    loader = Loader(grown.url)
    now = datetime.now(UTC)
    info = grown.info
    headers_t, body_t = _template(info, now)
    bucket = topic_bucket(info.topic, DEFAULT_BUCKETS)
    expires = loader.time(now + timedelta(days=365))
    at = loader.time(now)
    try:
        last_id = 0
        while grown.partitions < size:
            count = min(LOAD_CHUNK, size - grown.partitions)
            first = grown.partitions
            with loader.engine.begin() as conn:
                ids = loader.ids(conn, count)
                specs = [spec_of(n) for n in range(first, first + count)]
                loader.put(
                    conn,
                    "hcat_partitions",
                    (
                        "table_id",
                        "partition_values",
                        "path_spec",
                        "location",
                        "job_id",
                        "file_count",
                        "total_bytes",
                        "archived",
                        "event_id",
                        "created_at",
                        "updated_at",
                        "version",
                    ),
                    [
                        (
                            grown.big_id,
                            json.dumps([ds, rg]),
                            f"ds={ds}/region={rg}",
                            f"/data/scale/big/ds={ds}/region={rg}",
                            None,
                            1,
                            1000,
                            False,
                            None,
                            at,
                            at,
                            1,
                        )
                        for ds, rg in specs
                    ],
                )
                loader.put(
                    conn,
                    "hcat_mark_set_done",
                    RETENTION_COLUMNS,
                    [
                        (
                            eid,
                            grown.big_id,
                            f"ds={ds}/region={rg}",
                            json.dumps({"ds": ds, "region": rg}),
                            at,
                            expires,
                            1,
                            "writer",
                        )
                        for eid, (ds, rg) in zip(ids, specs, strict=True)
                    ],
                )
                loader.put(
                    conn,
                    "hcat_outbox",
                    OUTBOX_COLUMNS,
                    [
                        (
                            eid,
                            info.topic,
                            bucket,
                            "MARK_SET_DONE",
                            BIG,
                            _fill(headers_t, eid, ds, rg),
                            _fill(body_t, eid, ds, rg),
                            at,
                            0,
                        )
                        for eid, (ds, rg) in zip(ids, specs, strict=True)
                    ],
                )
                last_id = ids[-1]
            grown.partitions += count
        wanted = tables_at(size)
        if grown.tables < wanted:
            with loader.engine.begin() as conn:
                columns = list(grown.proto)
                rows = []
                progress = []
                for n in range(grown.tables, wanted):
                    values = dict(grown.proto)
                    values.update(
                        db_name=f"db{n % 100:02d}",
                        table_name=f"t{n:06d}",
                        location=f"/data/scale/t{n}",
                        location_key=key_text(f"/data/scale/t{n}"),
                        topic=f"hcat.scale.t{n:06d}",
                    )
                    rows.append(
                        [
                            json.dumps(values[c])
                            if isinstance(values[c], dict | list)
                            else loader.time(values[c])
                            if isinstance(values[c], datetime)
                            else values[c]
                            for c in columns
                        ]
                    )
                    progress.append((f"hcat.scale.t{n:06d}", now.timestamp() - n))
                loader.put(conn, "hcat_tables", columns, rows)
                loader.put_progress(conn, progress)
            grown.tables = wanted
        with loader.engine.begin() as conn:
            if last_id:
                conn.execute(
                    text("DELETE FROM hcat_topic_progress WHERE topic = :t"), {"t": info.topic}
                )
                conn.execute(
                    text(
                        "INSERT INTO hcat_topic_progress (topic, bucket, last_event_id, epoch,"
                        " updated_at) VALUES (:t, :b, :e, 1, :u)"
                    ),
                    {"t": info.topic, "b": bucket, "e": last_id, "u": now.timestamp()},
                )
            top = conn.execute(text("SELECT max(event_id) FROM hcat_outbox")).scalar_one()
            conn.execute(text("UPDATE hcat_relay_buckets SET published_through = :e"), {"e": top})
        if loader.sqlite:
            analyze(loader.engine)
        else:  # what autovacuum does within a minute: statistics and the visibility map
            with loader.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM ANALYZE")
    finally:
        loader.close()
    return time.perf_counter() - started


# --------------------------------------------------------------------------- page cache


def warm(url: str) -> float:
    """Read a SQLite catalog's files through once (into the OS page cache, where a
    catalog in use keeps them); the seconds it took. Loading 10^7 rows writes some
    24 GB (file and WAL), which pushes the early pages out: the first lookups after it
    read the disk, which a catalog's size does not cost by itself. Not PostgreSQL's."""
    if not url.startswith("sqlite"):
        return 0.0
    started = time.perf_counter()
    path = url.split("///", 1)[1]
    for name in (path, path + "-wal"):
        try:
            with open(name, "rb", buffering=0) as f:
                while f.read(1 << 24):
                    pass
        except FileNotFoundError:
            continue
    return time.perf_counter() - started


def disk_reads() -> int:
    """Bytes this process has read from storage (not the page cache) so far: Linux's
    ``/proc/self/io`` (0 elsewhere)."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
