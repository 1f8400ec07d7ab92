"""The writer's call: ``send_mark_set_done`` against a raw driver transaction.

(a) One writer. Timed: N calls of ``send_mark_set_done(table, spec, settings=...)`` in
    one process (its catalog kept open, as the function does), each a distinct spec.
    Reference, same run: the same rows written by a raw driver transaction per call
    (sqlite3 or psycopg on one open connection): look up the table row, take an id as
    the catalog does (SQLite: ``hcat_event_counter``, UPDATE ... RETURNING, its row lock
    held to the commit; PostgreSQL: ``SELECT hcat_allocate_event_ids(1)``, the sequence
    and the horizon's lock), INSERT the retention row and the outbox row (headers and
    body built with ``json.dumps``), ``pg_notify`` on PostgreSQL, COMMIT. Rounds
    alternate reference and ours. Target (issue 13): ours >= 0.5 x the reference.

(b) PostgreSQL only: 8 writer processes, one table each, all started together; aggregate
    calls/s of ``send_mark_set_done`` against 8 raw writer processes doing (a)'s raw
    transaction. Target: >= 0.5 x. Context rows, same run: the same 8 raw writers with
    ids from the old counter row (what it cost: writers wait for each other's commits)
    and from a bare ``nextval`` (no order for readers: what the horizon's locks cost),
    and 1 raw writer (aggregate must not fall as writers are added).

No broker is needed: nothing is published.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _support import (
    Row,
    create_table,
    drop_workdir,
    footer,
    load_text,
    log,
    machine_line,
    make_settings,
    parser,
    print_table,
    ratio_rows,
    run_main,
    unique_table,
)
from sqlalchemy import make_url

from hcat_notify.config import Settings
from hcat_notify.model.topics import topic_bucket
from hcat_notify.store import Catalog
from hcat_notify.writer import close_catalogs, send_mark_set_done

TARGET_RATIO = 0.5
WRITERS = 8
BARRIER_TIMEOUT = 120.0  # a writer that failed to start must not hang the others


def sqlite_time(value: datetime) -> str:
    """How SQLAlchemy stores a UTC datetime in SQLite (naive, microseconds)."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


class RawWriter:
    """(a)'s reference: one raw driver transaction per mark-set-done."""

    def __init__(self, settings: Settings, *, ids: str = "catalog") -> None:
        url = make_url(settings.database_url)
        self.postgres = url.get_backend_name() == "postgresql"
        if self.postgres:
            import psycopg

            plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
            self.conn: Any = psycopg.connect(plain)
            self.mark = "%s"
        else:
            self.conn = sqlite3.connect(url.database or "", isolation_level=None, timeout=30)
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.mark = "?"
        (self.buckets,) = self.conn.execute(
            "SELECT bucket_count FROM hcat_relay_group WHERE id = 1"
        ).fetchone()
        if self.postgres:
            self.conn.commit()
        m = self.mark
        self.table_sql = (
            "SELECT id, partition_keys, topic, retention_seconds FROM hcat_tables"
            f" WHERE db_name = {m} AND table_name = {m}"
        )
        # On PostgreSQL the catalog's counter row is no longer used; the old way gets a
        # counter row of its own, so that its ids do not collide with the catalog's.
        counter = (
            "UPDATE {table} SET last_event_id = last_event_id + 1"
            " WHERE id = 1 RETURNING last_event_id"
        )
        self.ids_sql = {
            "catalog": "SELECT (hcat_allocate_event_ids(1))[1]"
            if self.postgres
            else counter.format(table="hcat_event_counter"),
            "counter": counter.format(table="hcat_bench_counter"),
            "nextval": "SELECT nextval('hcat_bench_ids')",
        }[ids]
        json_cast = "::json" if self.postgres else ""
        self.retention_sql = (
            "INSERT INTO hcat_mark_set_done (event_id, table_id, spec, spec_json, created_at,"
            f" expires_at) VALUES ({m}, {m}, {m}, {m}{json_cast}, {m}, {m})"
        )
        self.outbox_sql = (
            "INSERT INTO hcat_outbox (event_id, topic, bucket, event_type, table_name, headers,"
            f" body, created_at, attempts) VALUES ({m}, {m}, {m}, {m}, {m}, {m}{json_cast},"
            f" {m}, {m}, 0)"
        )

    def prepare(self) -> None:
        """Create the context kinds' own id sources (PostgreSQL), once, before any
        writer process starts: concurrent CREATE ... IF NOT EXISTS can fail."""
        # Far above the catalog's ids, so every kind of writer can share a catalog.
        self.conn.execute("CREATE SEQUENCE IF NOT EXISTS hcat_bench_ids START WITH 1000000000000")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS hcat_bench_counter"
            " (id integer PRIMARY KEY, last_event_id bigint NOT NULL)"
        )
        self.conn.execute(
            "INSERT INTO hcat_bench_counter VALUES (1, 2000000000000) ON CONFLICT DO NOTHING"
        )
        self.conn.commit()

    def write(self, name: str, spec: dict[str, str]) -> int:
        db, table = name.split(".")
        now = datetime.now(UTC)
        stamp: Any = now if self.postgres else sqlite_time(now)
        cur = self.conn.cursor()
        if not self.postgres:
            cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(self.table_sql, (db, table))
            table_id, _keys, topic, retention = cur.fetchone()
            cur.execute(self.ids_sql)
            (event_id,) = cur.fetchone()
            path = "/".join(f"{key}={value}" for key, value in sorted(spec.items()))
            headers = {
                "HCAT_EVENT": "MARK_SET_DONE",
                "HCAT_MESSAGE_VERSION": "0.1",
                "HCAT_MESSAGE_FORMAT": "json",
                "HCAT_EVENT_ID": str(event_id),
                "HCAT_TABLE": name,
                "HCAT_SPEC": path,
            }
            body = {
                "eventType": "MARK_SET_DONE",
                "db": db,
                "table": table,
                "timestamp": int(now.timestamp()),
                "eventId": event_id,
                "spec": path,
                "partitionSpec": dict(sorted(spec.items())),
            }
            expires = now + timedelta(seconds=retention)
            cur.execute(
                self.retention_sql,
                (
                    event_id,
                    table_id,
                    path,
                    json.dumps(dict(sorted(spec.items()))),
                    stamp,
                    expires if self.postgres else sqlite_time(expires),
                ),
            )
            cur.execute(
                self.outbox_sql,
                (
                    event_id,
                    topic,
                    topic_bucket(topic, self.buckets),
                    "MARK_SET_DONE",
                    name,
                    json.dumps(headers),
                    json.dumps(body, separators=(",", ":")),
                    stamp,
                ),
            )
            if self.postgres:
                cur.execute("SELECT pg_notify('hcat_outbox', '')")
                self.conn.commit()
            else:
                cur.execute("COMMIT")
        except BaseException:
            if self.postgres:
                self.conn.rollback()
            else:
                cur.execute("ROLLBACK")
            raise
        finally:
            cur.close()
        return int(event_id)

    def close(self) -> None:
        self.conn.close()


def specs(prefix: str, count: int) -> list[dict[str, str]]:
    return [
        {"datestamp": f"{prefix}{i // 100:05d}", "region": f"r{i % 100:02d}"} for i in range(count)
    ]


def timed_calls(kind: str, settings: Settings, name: str, wanted: list[dict[str, str]]) -> float:
    """Seconds for ``len(wanted)`` calls of one kind of writer (after one warm-up call)."""
    if kind == "ours":
        send_mark_set_done(name, {"datestamp": "warm", "region": kind}, settings=settings)
        started = time.perf_counter()
        for spec in wanted:
            send_mark_set_done(name, spec, settings=settings)
        return time.perf_counter() - started
    raw = RawWriter(settings)
    try:
        raw.write(name, {"datestamp": "warm", "region": kind})
        started = time.perf_counter()
        for spec in wanted:
            raw.write(name, spec)
        return time.perf_counter() - started
    finally:
        raw.close()


def part_a(settings: Settings, calls: int, rounds: int) -> tuple[list[Row], list[str]]:
    with Catalog.open(settings) as catalog:
        name = unique_table("writer")
        create_table(catalog, name, ("datestamp", "region"))
    ours: list[float] = []
    refs: list[float] = []
    for index in range(rounds):
        refs.append(calls / timed_calls("raw", settings, name, specs(f"x{index}", calls)))
        ours.append(calls / timed_calls("ours", settings, name, specs(f"o{index}", calls)))
        log(f"(a) round {index + 1}: raw {refs[-1]:,.0f}/s, ours {ours[-1]:,.0f}/s ({load_text()})")
    close_catalogs()
    rows = [
        *ratio_rows(
            f"(a) send_mark_set_done, one writer, {calls:,} calls",
            ours,
            refs,
            unit="calls/s",
            target=(">=", TARGET_RATIO),
            higher_is_better=True,
            digits=0,
        ),
        Row("    rounds (ours)", " ".join(f"{value:,.0f}" for value in ours), unit="calls/s"),
        Row("    rounds (raw)", " ".join(f"{value:,.0f}" for value in refs), unit="calls/s"),
    ]
    notes = [
        "(a) raw: one driver transaction per call on one open connection: table row, an id"
        " as the catalog takes it (SQLite: counter UPDATE ... RETURNING; PostgreSQL:"
        " hcat_allocate_event_ids), INSERT retention row, INSERT outbox row, pg_notify"
        " (PostgreSQL), COMMIT; rounds alternate raw and ours",
    ]
    return rows, notes


# --------------------------------------------------------------------------- (b) 8 writers


def writer_process(args: tuple[str, Settings, str, int, Any]) -> tuple[float, float]:
    """One writer process: warm up, wait for the others, write; (start, end) monotonic."""
    kind, settings, name, calls, barrier = args
    wanted = specs(f"p{kind[:3]}", calls)
    if kind == "ours":
        send_mark_set_done(name, {"datestamp": "warm", "region": kind}, settings=settings)
        barrier.wait(BARRIER_TIMEOUT)
        started = time.monotonic()
        for spec in wanted:
            send_mark_set_done(name, spec, settings=settings)
        ended = time.monotonic()
        close_catalogs()
        return started, ended
    raw = RawWriter(settings, ids=kind.removeprefix("raw-") if kind != "raw" else "catalog")
    try:
        raw.write(name, {"datestamp": "warm", "region": kind})
        barrier.wait(BARRIER_TIMEOUT)
        started = time.monotonic()
        for spec in wanted:
            raw.write(name, spec)
        return started, time.monotonic()
    finally:
        raw.close()


def parallel(kind: str, settings: Settings, names: list[str], calls: int) -> float:
    """Aggregate calls/s of one writer process per table, started together."""
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(len(names))
        with context.Pool(len(names)) as pool:
            spans = pool.map(
                writer_process, [(kind, settings, name, calls, barrier) for name in names]
            )
    started = min(span[0] for span in spans)
    ended = max(span[1] for span in spans)
    return calls * len(names) / (ended - started)


def part_b(settings: Settings, calls: int, rounds: int) -> tuple[list[Row], list[str]]:
    with Catalog.open(settings) as catalog:
        names = [unique_table(f"w{index}") for index in range(WRITERS)]
        for name in names:
            create_table(catalog, name, ("datestamp", "region"))
    preparer = RawWriter(settings)
    try:
        preparer.prepare()
    finally:
        preparer.close()
    kinds = ("raw", "ours", "raw-counter", "raw-nextval")
    results: dict[str, list[float]] = {kind: [] for kind in (*kinds, "raw-1")}
    for index in range(rounds):
        for kind in kinds:
            results[kind].append(parallel(kind, settings, names, calls))
        results["raw-1"].append(parallel("raw", settings, names[:1], calls))
        log(
            f"(b) round {index + 1}: "
            + ", ".join(f"{kind} {values[-1]:,.0f}/s" for kind, values in results.items())
            + f" ({load_text()})"
        )
    ours, raw = results["ours"], results["raw"]
    rows = [
        *ratio_rows(
            f"(b) {WRITERS} writer processes, {WRITERS} tables, {calls:,} calls each",
            ours,
            raw,
            unit="calls/s",
            target=(">=", TARGET_RATIO),
            higher_is_better=True,
            digits=0,
        ),
        *(
            Row(f"    context: {what}, best", max(results[kind]), max(raw), "calls/s", digits=0)
            for kind, what in (
                ("raw-counter", f"{WRITERS} raw writers, ids from the counter row (before)"),
                ("raw-nextval", f"{WRITERS} raw writers, ids from a bare nextval"),
                ("raw-1", "1 raw writer"),
            )
        ),
        Row(
            f"    ours, {WRITERS} writers vs 1 raw writer, best (ratio > 1: no global bottleneck)",
            max(ours),
            max(results["raw-1"]),
            unit="calls/s",
            digits=0,
        ),
    ]
    for kind, values in results.items():
        rows.append(Row(f"    rounds ({kind})", " ".join(f"{v:,.0f}" for v in values)))
    notes = [
        "(b) each process warms up (opens its catalog or connection, one call), then all"
        " start at a barrier; aggregate = all calls / (last end - first start)",
        "(b) 'counter row': the raw transaction with the counter UPDATE ... RETURNING that"
        " the catalog used before (its row lock held to commit: writers wait for each"
        " other); 'bare nextval': ids with no lock, which would let a reader in id order"
        " pass an id that commits later",
    ]
    return rows, notes


@contextlib.contextmanager
def writers_env(args: Any) -> Iterator[Settings]:
    workdir = Path(tempfile.mkdtemp(prefix="hcat-bench-writers-"))
    try:
        yield make_settings(workdir, "stomp://127.0.0.1:1", args.db_url)
    finally:
        drop_workdir(workdir, keep=args.keep)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=None, help="(a) calls per round (2,000)")
    p.add_argument("--parallel-calls", type=int, default=None, help="(b) calls per writer (500)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, at least 3")
    args = p.parse_args()
    calls = args.calls or (300 if args.quick else 2_000)
    per_writer = args.parallel_calls or (100 if args.quick else 500)
    rounds = max(3, args.rounds)
    with writers_env(args) as settings:
        quick = " (--quick)" if args.quick else ""
        print(f"# writers: send_mark_set_done against raw driver transactions{quick}")
        print(f"# {machine_line()}")
        print(f"# catalog {settings.database_url}")
        with Catalog.open(settings):
            pass  # create and migrate the catalog before anything is timed
        rows, notes = part_a(settings, calls, rounds)
        print_table("(a) one writer", rows, notes)
        if make_url(settings.database_url).get_backend_name() == "postgresql":
            rows, notes = part_b(settings, per_writer, rounds)
            print_table(f"(b) {WRITERS} writer processes on {WRITERS} tables", rows, notes)
        else:
            print("\n(b) runs on PostgreSQL only (--db-url); SQLite has one writer at a time")
        footer()


if __name__ == "__main__":
    run_main(main)
