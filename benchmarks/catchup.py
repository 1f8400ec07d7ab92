"""Catch-up: consumer start-up over retained dones, and "is this spec done?" lookups.

(a) A table with 100,000 retained MARK_SET_DONE messages (bulk-inserted, not timed, as
    ``Catalog.mark_set_done`` writes them: retention row + published outbox row with the
    same event id, ids taken from ``hcat_event_counter``). Timed: from
    ``NotificationConsumer(...)`` and ``.start()`` (subscribe, then catch up) to the
    100,000th notification handed out by ``consumer.notifications(timeout=...)``.
    Reference: the same rows fetched with a plain SELECT (sqlite3 directly).
    Target: < 5 s.

(b) A table with about 1,000,000 retention rows (1,000 datestamps x 1,000 regions, plus
    day-level dones for half the days). Timed: 2,000 random ``Catalog.find_covering_done``
    lookups, a quarter each of full-spec hits, full-spec misses, partial (datestamp-only)
    hits and partial misses. Reference: a raw indexed sqlite3 SELECT by
    (table_id, spec IN covering specs) on the same file, same lookups.
    Target: p99 < 10 ms.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from _support import (
    BenchEnv,
    Row,
    allocate_ids,
    bench_env,
    bulk_dones,
    create_table,
    footer,
    header,
    insert_chunks,
    log,
    parser,
    percentiles,
    print_table,
    run_main,
    table_id,
    unique_table,
)
from sqlalchemy import create_engine

from hcat_notify.consumer import CATCH_UP_PAGE, NotificationConsumer
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store import Catalog
from hcat_notify.store.models import RetentionRow

TARGET_CATCHUP_S = 5.0
TARGET_LOOKUP_P99_MS = 10.0
CHUNK = 20_000
FIRST_DAY = date(2020, 1, 1)


def day(index: int) -> str:
    return (FIRST_DAY + timedelta(days=index)).strftime("%Y%m%d")


def region(index: int) -> str:
    return f"region{index:04d}"


def bulk_dones_with_outbox(env: BenchEnv, catalog: Catalog, name: str, count: int) -> None:
    """``count`` retained dones of ``name``, written the way Catalog.mark_set_done does,
    and published long ago."""
    info = catalog.get_table(name)
    regions = 1_000
    specs = (
        {"datestamp": day(offset // regions), "region": region(offset % regions)}
        for offset in range(count)
    )
    bulk_dones(env.settings.database_url, info, specs, published=True)


def sqlite_time(value: datetime) -> str:
    """How SQLAlchemy stores a UTC datetime in SQLite (naive, microseconds)."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def raw_catchup_select(env: BenchEnv, tid: int) -> tuple[float, int]:
    """The floor: fetch the same outbox rows with one plain SELECT (no decoding)."""
    sql = (
        "SELECT event_id, topic, bucket, event_type, table_name, headers, body, created_at"
        " FROM hcat_outbox WHERE event_id IN (SELECT event_id FROM"
        " hcat_mark_set_done WHERE table_id = {p} AND expires_at > {p} AND event_id > 0)"
        " ORDER BY event_id"
    )
    now = datetime.now(UTC)
    if env.sqlite_path is not None:
        conn = sqlite3.connect(env.sqlite_path)
        try:
            started = time.perf_counter()
            rows = conn.execute(sql.format(p="?"), (tid, sqlite_time(now))).fetchall()
            return time.perf_counter() - started, len(rows)
        finally:
            conn.close()
    engine = create_engine(env.settings.database_url)
    try:
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            started = time.perf_counter()
            cursor.execute(sql.format(p="%s"), (tid, now))
            rows = cursor.fetchall()
            return time.perf_counter() - started, len(rows)
        finally:
            raw.close()
    finally:
        engine.dispose()


def part_a(env: BenchEnv, catalog: Catalog, count: int) -> tuple[list[Row], list[str]]:
    name = unique_table("catchup")
    create_table(catalog, name, ("datestamp", "region"))
    log(f"(a) bulk-inserting {count:,} retained dones (+ outbox rows) ...")
    started = time.perf_counter()
    bulk_dones_with_outbox(env, catalog, name, count)
    log(f"(a) inserted in {time.perf_counter() - started:.1f}s")
    tid = table_id_from_catalog(env, name)

    ref_s, ref_rows = min(raw_catchup_select(env, tid) for _ in range(3))

    t0 = time.perf_counter()
    consumer = NotificationConsumer([name], settings=env.settings)
    t1 = time.perf_counter()
    delivered = 0
    first_at = last_at = t1
    ids: list[int] = []
    try:
        consumer.start()
        t2 = time.perf_counter()
        for notification in consumer.notifications(timeout=30):
            delivered += 1
            ids.append(notification.event_id)
            if delivered == 1:
                first_at = time.perf_counter()
            if delivered >= count:
                break
        last_at = time.perf_counter()
    finally:
        consumer.close()
    total = last_at - t0
    in_order = ids == sorted(ids) and len(set(ids)) == len(ids)
    rows = [
        Row(
            f"(a) NotificationConsumer() + start() -> {count:,}th notification",
            total,
            ref_s,
            unit="s",
            target=("<", TARGET_CATCHUP_S),
            digits=2,
        ),
        Row(
            "    construct NotificationConsumer (open catalog, plan)", (t1 - t0), unit="s", digits=2
        ),
        Row(
            f"    start(): subscribe + first catch-up page ({CATCH_UP_PAGE:,})",
            (t2 - t1),
            unit="s",
            digits=2,
        ),
        Row("    start() -> first notification", (first_at - t2), unit="s", digits=3),
        Row(
            "    first -> last notification (iteration, reads the other pages)",
            (last_at - first_at),
            unit="s",
            digits=2,
        ),
        Row(
            "    delivered / retained (distinct, in event-id order)",
            f"{delivered:,} / {count:,} ({'yes' if in_order else 'NO'})",
            f"{ref_rows:,} rows",
        ),
    ]
    notes = [
        "(a) reference: one SELECT of the same outbox rows (event_id IN retained dones of the"
        " table, unexpired, ORDER BY event_id) with sqlite3 directly, fetchall, best of 3",
    ]
    return rows, notes


def table_id_from_catalog(env: BenchEnv, name: str) -> int:
    engine = create_engine(env.settings.database_url)
    try:
        return table_id(engine, name)
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- (b) lookups


def bulk_lookup_dones(env: BenchEnv, name: str, days: int, regions: int, day_level: int) -> int:
    """days x regions full-spec dones plus ``day_level`` datestamp-only dones."""
    engine = create_engine(env.settings.database_url)
    tid = table_id(engine, name)
    now = datetime.now(UTC)
    expires = now + timedelta(days=7)
    count = days * regions + day_level
    # The canonical forms Catalog.mark_set_done stores, checked against PartitionSpec.
    sample = PartitionSpec.from_mapping({"region": region(7), "datestamp": day(3)}).sorted()
    if sample.to_path() != f"datestamp={day(3)}/region={region(7)}":
        raise RuntimeError(f"unexpected canonical spec {sample.to_path()}")

    def rows(first: int) -> Iterator[dict[str, Any]]:
        event_id = first
        for d in range(days):
            ds = day(d)
            for r in range(regions):
                rs = region(r)
                yield {
                    "event_id": event_id,
                    "table_id": tid,
                    "spec": f"datestamp={ds}/region={rs}",
                    "spec_json": {"datestamp": ds, "region": rs},
                    "created_at": now,
                    "expires_at": expires,
                }
                event_id += 1
            if d < day_level:
                yield {
                    "event_id": event_id,
                    "table_id": tid,
                    "spec": f"datestamp={ds}",
                    "spec_json": {"datestamp": ds},
                    "created_at": now,
                    "expires_at": expires,
                }
                event_id += 1

    try:
        with engine.begin() as conn:
            first = allocate_ids(conn, count)
            inserted = insert_chunks(conn, RetentionRow.__table__, rows(first))
    finally:
        engine.dispose()
    return inserted


def lookups(days: int, regions: int, day_level: int, n: int, seed: int = 7) -> list[Any]:
    """(spec, expected_hit, kind) tuples: a quarter of each kind, shuffled."""
    rng = random.Random(seed)
    out: list[Any] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:  # full spec, hit
            spec = {"datestamp": day(rng.randrange(days)), "region": region(rng.randrange(regions))}
            out.append((spec, True, "full hit"))
        elif kind == 1:  # full spec, miss: a day not done yet
            spec = {
                "datestamp": day(days + rng.randrange(days)),
                "region": region(rng.randrange(regions)),
            }
            out.append((spec, False, "full miss"))
        elif kind == 2:  # partial (datestamp only), hit
            out.append(({"datestamp": day(rng.randrange(day_level))}, True, "partial hit"))
        else:  # partial, miss: regions done that day but the day itself not marked
            out.append(({"datestamp": day(rng.randrange(day_level, days))}, False, "partial miss"))
    rng.shuffle(out)
    return out


LOOKUP_SQL = (
    "SELECT event_id, spec_json, created_at, expires_at FROM hcat_mark_set_done"
    " INDEXED BY ix_hcat_mark_set_done_table_spec"
    " WHERE table_id = ? AND spec IN ({marks}) AND expires_at > ? ORDER BY event_id LIMIT 1"
)


def raw_lookups(env: BenchEnv, tid: int, cases: Sequence[Any]) -> tuple[list[float], int, str]:
    """Raw sqlite3 SELECT by (table_id, spec IN covering specs) for each case.

    Returns (times in ms, wrong answers, the query plan).
    """
    covering = [
        PartitionSpec.from_mapping(spec).sorted().covering_canonicals() for spec, _, _ in cases
    ]
    stamp = sqlite_time(datetime.now(UTC))
    times: list[float] = []
    wrong = 0
    conn = sqlite3.connect(env.sqlite_path or "")
    try:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + LOOKUP_SQL.format(marks="?,?"),
            (tid, "a", "b", stamp),
        ).fetchall()
        for (_, expected, _), specs in zip(cases, covering, strict=True):
            query = LOOKUP_SQL.format(marks=",".join("?" * len(specs)))
            started = time.perf_counter()
            row = conn.execute(query, (tid, *specs, stamp)).fetchone()
            times.append((time.perf_counter() - started) * 1000)
            wrong += (row is not None) != expected
    finally:
        conn.close()
    return times, wrong, " | ".join(str(step[-1]) for step in plan)


def part_b(
    env: BenchEnv, catalog: Catalog, days: int, regions: int, n: int
) -> tuple[list[Row], list[str]]:
    name = unique_table("done")
    create_table(catalog, name, ("datestamp", "region"))
    day_level = days // 2
    log(f"(b) bulk-inserting {days * regions + day_level:,} retention rows ...")
    started = time.perf_counter()
    inserted = bulk_lookup_dones(env, name, days, regions, day_level)
    log(f"(b) inserted {inserted:,} in {time.perf_counter() - started:.1f}s")
    tid = table_id_from_catalog(env, name)
    cases = lookups(days, regions, day_level, n)

    # Warm-up (statement compilation, page cache), not counted.
    for spec, _, _ in cases[:20]:
        catalog.find_covering_done(name, spec)
        catalog.find_covering_done(name, spec)

    ours: list[float] = []
    by_kind: dict[str, list[float]] = {}
    wrong = 0
    for spec, expected, kind in cases:
        started = time.perf_counter()
        found = catalog.find_covering_done(name, spec)
        elapsed = (time.perf_counter() - started) * 1000
        ours.append(elapsed)
        by_kind.setdefault(kind, []).append(elapsed)
        wrong += (found is not None) != expected
    notes: list[str] = []
    ref: list[float] = []
    ref_wrong = 0
    if env.sqlite_path is not None:
        ref, ref_wrong, ref_plan = raw_lookups(env, tid, cases)
        notes = [f"(b) reference plan: {ref_plan}"]
    else:
        notes = ["(b) the raw reference is measured for SQLite only"]

    o, r = percentiles(ours), percentiles(ref)
    rows = [
        Row(
            f"(b) find_covering_done {key}",
            o[key],
            r[key] if ref else None,
            unit="ms",
            target=("<", TARGET_LOOKUP_P99_MS) if key == "p99" else None,
            digits=3,
        )
        for key in ("p50", "p90", "p99", "max")
    ]
    for kind in ("full hit", "full miss", "partial hit", "partial miss"):
        k = percentiles(by_kind.get(kind, []))
        rows.append(Row(f"    {kind}: p50 / p99", f"{k['p50']:.3f} / {k['p99']:.3f}", unit="ms"))
    rows.append(
        Row(
            "    wrong answers (ours / reference)",
            f"{wrong} / {ref_wrong}",
            f"{inserted:,} rows, {n:,} lookups",
        )
    )
    notes = [
        "(b) ours: Catalog.find_covering_done(table, spec) on one open Catalog (each call is"
        " its own read transaction: table row, then retention rows by (table_id, spec IN"
        " covering specs), expiry checked in Python)",
        "(b) reference: sqlite3 SELECT ... INDEXED BY ix_hcat_mark_set_done_table_spec"
        " WHERE table_id=? AND spec IN (covering specs) AND expires_at > ?"
        " ORDER BY event_id LIMIT 1, covering specs precomputed (the indexed floor)",
        *notes,
    ]
    return rows, notes


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--retained", type=int, default=None, help="(a) retained dones (100,000)")
    p.add_argument("--days", type=int, default=None, help="(b) datestamps (1,000)")
    p.add_argument("--regions", type=int, default=None, help="(b) regions per day (1,000)")
    p.add_argument("--lookups", type=int, default=None, help="(b) lookups (2,000)")
    args = p.parse_args()
    retained = args.retained or (10_000 if args.quick else 100_000)
    days = args.days or (100 if args.quick else 1_000)
    regions = args.regions or 1_000
    n_lookups = args.lookups or (500 if args.quick else 2_000)

    with bench_env(args, "catchup") as env:
        header("catch-up: consumer start-up over retained dones; done lookups", args, env)
        catalog = env.catalog()
        try:
            rows_a, notes_a = part_a(env, catalog, retained)
            print_table(f"(a) consumer catch-up of {retained:,} retained dones", rows_a, notes_a)
            rows_b, notes_b = part_b(env, catalog, days, regions, n_lookups)
            print_table(
                f"(b) 'is this spec done?' over {days * regions + days // 2:,} retention rows",
                rows_b,
                notes_b,
            )
        finally:
            catalog.close()
        footer()


if __name__ == "__main__":
    run_main(main)
