"""Catch-up: consumer start-up over retained dones, and "is this spec done?" lookups.

(a) A table with 100,000 retained MARK_SET_DONE messages (bulk-inserted, not timed, as
    ``Catalog.mark_set_done`` writes them: retention row + published outbox row with the
    same event id, ids taken as the catalog takes them). Timed: from
    ``NotificationConsumer(...)`` and ``.start()`` (subscribe, then catch up) to the
    100,000th notification handed out by ``consumer.notifications(timeout=...)``.
    Reference: the same rows fetched with one plain SELECT on the driver (sqlite3 or
    psycopg), no decoding. 3 rounds (5 with --rounds), alternating reference and ours.
    Targets (issue 13): < 1 s and <= 3x the reference.

(b) A table with about 1,000,000 retention rows (1,000 datestamps x 1,000 regions, plus
    day-level dones for half the days). Timed: 2,000 random ``Catalog.find_covering_done``
    lookups, a quarter each of full-spec hits, full-spec misses, partial (datestamp-only)
    hits and partial misses. Reference: a raw indexed SELECT by (table_id, spec IN
    covering specs) on the driver (sqlite3 with INDEXED BY, or psycopg), same lookups.
    Rounds alternate ours and the reference. Target (issue 13): p99 < 0.5 ms.
"""

from __future__ import annotations

import random
import sqlite3
import statistics
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
    load_text,
    log,
    parser,
    percentile,
    percentiles,
    print_table,
    ratio_rows,
    run_main,
    table_id,
    unique_table,
)
from sqlalchemy import create_engine, make_url

from hcat_notify.consumer import CATCH_UP_PAGE, NotificationConsumer
from hcat_notify.model.specs import PartitionSpec
from hcat_notify.store import Catalog
from hcat_notify.store.models import RetentionRow

TARGET_CATCHUP_S = 1.0
TARGET_CATCHUP_RATIO = 3.0
TARGET_LOOKUP_P99_MS = 0.5
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
    """The floor: fetch the same outbox rows with one plain SELECT (no decoding: the
    headers as text, as the catalog reads them)."""
    sql = (
        "SELECT event_id, topic, bucket, event_type, table_name, CAST(headers AS TEXT), body,"
        " created_at"
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
            fetched = cursor.fetchall()
            return time.perf_counter() - started, len(fetched)
        finally:
            raw.close()
    finally:
        engine.dispose()


def consumer_round(env: BenchEnv, name: str, count: int) -> dict[str, Any]:
    """One timed start-up: construct, start, iterate to the ``count``-th notification."""
    t0 = time.perf_counter()
    consumer = NotificationConsumer([name], settings=env.settings)
    t1 = time.perf_counter()
    delivered = 0
    first_at = last_at = t2 = t1
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
    return {
        "total": last_at - t0,
        "construct": t1 - t0,
        "start": t2 - t1,
        "first": first_at - t2,
        "iterate": last_at - first_at,
        "delivered": delivered,
        "in_order": ids == sorted(ids) and len(set(ids)) == len(ids),
    }


def part_a(env: BenchEnv, catalog: Catalog, count: int, rounds: int) -> tuple[list[Row], list[str]]:
    name = unique_table("catchup")
    create_table(catalog, name, ("datestamp", "region"))
    log(f"(a) bulk-inserting {count:,} retained dones (+ outbox rows) ...")
    started = time.perf_counter()
    bulk_dones_with_outbox(env, catalog, name, count)
    log(f"(a) inserted in {time.perf_counter() - started:.1f}s")
    tid = table_id_from_catalog(env, name)

    refs: list[float] = []
    ours: list[dict[str, Any]] = []
    ref_rows = 0
    for index in range(rounds):
        ref_s, ref_rows = raw_catchup_select(env, tid)
        refs.append(ref_s)
        ours.append(consumer_round(env, name, count))
        log(
            f"(a) round {index + 1}: reference {ref_s:.3f}s, ours {ours[-1]['total']:.3f}s"
            f" ({load_text()})"
        )
    best = min(ours, key=lambda run: run["total"])
    totals = [run["total"] for run in ours]
    rows = [
        Row(
            f"(a) NotificationConsumer() + start() -> {count:,}th notification, best",
            min(totals),
            min(refs),
            unit="s",
            target=("<", TARGET_CATCHUP_S),
            digits=3,
        ),
        *ratio_rows(
            "    ours / reference",
            totals,
            refs,
            unit="s",
            target=("<=", TARGET_CATCHUP_RATIO),
            higher_is_better=False,
            digits=3,
        ),
        Row(
            "    of the best: construct NotificationConsumer", best["construct"], unit="s", digits=3
        ),
        Row(
            f"    of the best: start(), subscribe + first catch-up page ({CATCH_UP_PAGE:,})",
            best["start"],
            unit="s",
            digits=3,
        ),
        Row(
            "    of the best: first -> last notification (reads the other pages)",
            best["iterate"],
            unit="s",
            digits=3,
        ),
        Row(
            "    delivered / retained (distinct, in event-id order), every round",
            " / ".join(
                f"{run['delivered']:,}{'' if run['in_order'] else ' (NOT in order)'}"
                for run in ours
            ),
            f"{ref_rows:,} rows",
        ),
        Row("    rounds (ours)", " ".join(f"{value:.3f}" for value in totals), unit="s"),
        Row("    rounds (reference)", " ".join(f"{value:.3f}" for value in refs), unit="s"),
    ]
    driver = "sqlite3" if env.sqlite_path is not None else "psycopg"
    notes = [
        f"(a) reference: one SELECT of the same outbox rows (event_id IN retained dones of the"
        f" table, unexpired, ORDER BY event_id; the headers as text) with {driver} directly,"
        f" fetchall; rounds alternate reference and ours. The bulk load is followed by"
        f" ANALYZE (what autovacuum does within a minute)",
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

    def rows(ids: list[int]) -> Iterator[dict[str, Any]]:
        taken = iter(ids)
        for d in range(days):
            ds = day(d)
            for r in range(regions):
                rs = region(r)
                yield {
                    "event_id": next(taken),
                    "table_id": tid,
                    "spec": f"datestamp={ds}/region={rs}",
                    "spec_json": {"datestamp": ds, "region": rs},
                    "created_at": now,
                    "expires_at": expires,
                }
            if d < day_level:
                yield {
                    "event_id": next(taken),
                    "table_id": tid,
                    "spec": f"datestamp={ds}",
                    "spec_json": {"datestamp": ds},
                    "created_at": now,
                    "expires_at": expires,
                }

    try:
        with engine.begin() as conn:
            ids = allocate_ids(conn, count)
            inserted = insert_chunks(conn, RetentionRow.__table__, rows(ids))
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
    " {hint} WHERE table_id = {p} AND spec IN ({marks}) AND expires_at > {p}"
    " ORDER BY event_id LIMIT 1"
)
SQLITE_HINT = "INDEXED BY ix_hcat_mark_set_done_table_spec"


class RawLookups:
    """The floor of (b): one indexed SELECT per lookup on an open driver connection
    (sqlite3, or psycopg in autocommit mode), covering specs precomputed."""

    def __init__(self, env: BenchEnv, tid: int, cases: Sequence[Any]) -> None:
        self.tid = tid
        self.cases = cases
        self.covering = [
            PartitionSpec.from_mapping(spec).sorted().covering_canonicals() for spec, _, _ in cases
        ]
        self.sqlite = env.sqlite_path is not None
        if self.sqlite:
            self.conn: Any = sqlite3.connect(env.sqlite_path or "")
            self.stamp: Any = sqlite_time(datetime.now(UTC))
            self.mark, self.hint = "?", SQLITE_HINT
        else:
            import psycopg  # the PostgreSQL driver the catalog uses

            url = make_url(env.settings.database_url).set(drivername="postgresql")
            self.conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
            self.stamp = datetime.now(UTC)
            self.mark, self.hint = "%s", ""

    def query(self, specs: int) -> str:
        marks = ",".join([self.mark] * specs)
        return LOOKUP_SQL.format(hint=self.hint, p=self.mark, marks=marks)

    def plan(self) -> str:
        explain = "EXPLAIN QUERY PLAN " if self.sqlite else "EXPLAIN "
        steps = self.conn.execute(
            explain + self.query(2), (self.tid, "a", "b", self.stamp)
        ).fetchall()
        return " | ".join(str(step[-1]).strip() for step in steps)

    def run(self) -> tuple[list[float], int]:
        """(times in ms, wrong answers)."""
        times: list[float] = []
        wrong = 0
        for (_, expected, _), specs in zip(self.cases, self.covering, strict=True):
            query = self.query(len(specs))
            started = time.perf_counter()
            row = self.conn.execute(query, (self.tid, *specs, self.stamp)).fetchone()
            times.append((time.perf_counter() - started) * 1000)
            wrong += (row is not None) != expected
        return times, wrong

    def close(self) -> None:
        self.conn.close()


def our_lookups(catalog: Catalog, name: str, cases: Sequence[Any]) -> tuple[list[float], int]:
    times: list[float] = []
    wrong = 0
    for spec, expected, _ in cases:
        started = time.perf_counter()
        found = catalog.find_covering_done(name, spec)
        times.append((time.perf_counter() - started) * 1000)
        wrong += (found is not None) != expected
    return times, wrong


def part_b(
    env: BenchEnv, catalog: Catalog, days: int, regions: int, n: int, rounds: int
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
    raw = RawLookups(env, tid, cases)
    try:
        # Warm-up (statement compilation, page cache), not counted.
        for spec, _, _ in cases[:20]:
            catalog.find_covering_done(name, spec)
        raw.run()
        ours_rounds: list[list[float]] = []
        ref_rounds: list[list[float]] = []
        wrong = ref_wrong = 0
        by_kind: dict[str, list[float]] = {}
        for index in range(rounds):
            times, bad = our_lookups(catalog, name, cases)
            ours_rounds.append(times)
            wrong += bad
            for (_, _, kind), elapsed in zip(cases, times, strict=True):
                by_kind.setdefault(kind, []).append(elapsed)
            ref_times, ref_bad = raw.run()
            ref_rounds.append(ref_times)
            ref_wrong += ref_bad
            log(
                f"(b) round {index + 1}: p99 ours {percentile(times, 99):.3f} ms,"
                f" reference {percentile(ref_times, 99):.3f} ms ({load_text()})"
            )
        plan = raw.plan()
    finally:
        raw.close()

    def summary(runs: list[list[float]], key: str, pick: Any) -> float:
        return float(pick([percentiles(run)[key] for run in runs]))

    rows = []
    for key in ("p50", "p90", "p99", "max"):
        for label, pick in (("best", min), ("median", statistics.median)):
            rows.append(
                Row(
                    f"(b) find_covering_done {key}, {label} of {rounds} rounds",
                    summary(ours_rounds, key, pick),
                    summary(ref_rounds, key, pick),
                    unit="ms",
                    target=("<", TARGET_LOOKUP_P99_MS) if key == "p99" else None,
                    digits=3,
                )
            )
    for kind in ("full hit", "full miss", "partial hit", "partial miss"):
        k = percentiles(by_kind.get(kind, []))
        rows.append(
            Row(f"    {kind}: p50 / p99, all rounds", f"{k['p50']:.3f} / {k['p99']:.3f}", unit="ms")
        )
    rows.append(
        Row(
            "    wrong answers (ours / reference)",
            f"{wrong} / {ref_wrong}",
            f"{inserted:,} rows, {n:,} lookups x {rounds}",
        )
    )
    driver = (
        "sqlite3 SELECT ... INDEXED BY ix_hcat_mark_set_done_table_spec"
        if raw.sqlite
        else ("psycopg (autocommit) SELECT ...")
    )
    notes = [
        "(b) ours: Catalog.find_covering_done(table, spec) on one open Catalog (one"
        " statement: the table row joined with its retention rows by (table_id, spec IN"
        " covering specs), expiry checked in Python)",
        f"(b) reference: {driver} WHERE table_id=? AND spec IN (covering specs) AND"
        " expires_at > ? ORDER BY event_id LIMIT 1, covering specs precomputed, on one open"
        " connection (the indexed floor); rounds alternate ours and the reference",
        f"(b) reference plan: {plan}",
    ]
    return rows, notes


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--retained", type=int, default=None, help="(a) retained dones (100,000)")
    p.add_argument("--days", type=int, default=None, help="(b) datestamps (1,000)")
    p.add_argument("--regions", type=int, default=None, help="(b) regions per day (1,000)")
    p.add_argument("--lookups", type=int, default=None, help="(b) lookups (2,000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of (a) and (b), at least 3")
    p.add_argument("--part", choices=("a", "b", "both"), default="both", help="what to run")
    args = p.parse_args()
    retained = args.retained or (10_000 if args.quick else 100_000)
    days = args.days or (100 if args.quick else 1_000)
    regions = args.regions or 1_000
    n_lookups = args.lookups or (500 if args.quick else 2_000)
    rounds = max(3, args.rounds)

    with bench_env(args, "catchup") as env:
        header("catch-up: consumer start-up over retained dones; done lookups", args, env)
        catalog = env.catalog()
        try:
            if args.part in ("a", "both"):
                rows_a, notes_a = part_a(env, catalog, retained, rounds)
                print_table(
                    f"(a) consumer catch-up of {retained:,} retained dones", rows_a, notes_a
                )
            if args.part in ("b", "both"):
                rows_b, notes_b = part_b(env, catalog, days, regions, n_lookups, rounds)
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
