"""How ``hcat-notify sweep`` grows: M expired retention rows deleted by the real command.

At each M (default 10,000, 100,000, 1,000,000; ``--sizes`` for more, e.g. 10^7;
``--quick`` 1,000 and 4,000) a fresh catalog holds M expired MARK_SET_DONE retention
rows of one table (bulk-loaded as the store writes them: ids from the catalog's counter
or sequence, ``executemany``/``COPY`` in transactions of 50,000, then ``ANALYZE``) and
1,000 live ones. Then ``hcat-notify sweep`` runs as a process while a writer in this
process records one MARK_SET_DONE of another table every 20 ms. Measured:

* the sweep's wall time, less the same command's on the catalog before the load (its
  start; linear: the fitted exponent of time against M at most 1.15);
* the sweep process's peak RSS (bounded: at most 1.5 x the smallest M's);
* the writer's p99 latency during the sweep, against the same writer's p99 over 250
  calls (``--quick``: 20) just before it and 250 just after it (the sweep deletes in
  batches, one transaction each, of about 1 ms on SQLite, and pauses between two: a
  writer waits at most one batch). Beside it, the old reference: the 200 calls just
  before (``--quick``: 20). Why both sides: the other work on the machine comes and
  goes over the tens of seconds a sweep of 10^6 takes (at load 3, the same writer's p99
  over alternating 5 s windows with no sweep was 4 to 22 ms), and the p99 of 200
  calls is their second slowest; 500 calls around the sweep see the load it ran in;
* on PostgreSQL the catalog settled as one in use is (``VACUUM ANALYZE`` after the
  load, ``VACUUM`` after the sweep before the calls after it): the vacuum that
  autovacuum owes a freshly loaded table of 10^6 rows runs neither in the calls
  before nor during the sweep, nor the one the sweep's dead rows call for in the calls
  after it (autovacuum's runs on the table during the sweep are printed);
* checked: every expired row gone, every live one kept (printed).

Then the outbox's row (``_scale_outbox.py``): D simulated days of steady writes, swept
daily; the outbox's rows stay within the retention's days of writes.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _scale_dbs import catalog_urls
from _scale_load import LOAD_CHUNK, Loader, day
from _scale_main import backends_of, command_with_peak, growth_parser, growth_run, sizes_of
from _scale_outbox import DAYS, QUICK_DAYS, run_outbox
from _scale_report import Series, flat, linear, report
from _support import (
    HOST,
    analyze,
    free_port,
    load_text,
    log,
    make_settings,
    percentile,
    run_main,
    table_id,
)
from sqlalchemy import Engine, create_engine, text

from hcat_notify.config import Settings
from hcat_notify.store import Catalog
from hcat_notify.store.event_rows import RETENTION_COLUMNS

SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 4_000)
LIVE = 1_000
TABLE = "scale.swept"
WRITTEN = "scale.written"
XLABEL = "expired retention rows swept"
WRITE_EVERY = 0.02
AROUND = 250
"""The writer's calls before the sweep, and again after it: its reference."""
QUICK_AROUND = 20
OLD_BEFORE = {False: 200, True: 20}
"""The reference before 2026-11-28: this many calls just before the sweep."""


def load(url: str, expired: int) -> None:
    """``expired`` expired retention rows of TABLE and LIVE unexpired ones."""
    loader = Loader(url)
    engine = create_engine(url)
    now = datetime.now(UTC)
    try:
        tid = table_id(engine, TABLE)
        made = 0
        while made < expired + LIVE:
            count = min(LOAD_CHUNK, expired + LIVE - made)
            with loader.engine.begin() as conn:
                ids = loader.ids(conn, count)
                rows = []
                for n, event_id in zip(range(made, made + count), ids, strict=True):
                    ds, region = day(n // 1000), f"r{n % 1000:03d}"
                    ends = now - timedelta(days=1) if n < expired else now + timedelta(days=30)
                    rows.append(
                        (
                            event_id,
                            tid,
                            f"ds={ds}/region={region}",
                            json.dumps({"ds": ds, "region": region}),
                            loader.time(now - timedelta(days=8)),
                            loader.time(ends),
                            1,
                            "writer",
                        )
                    )
                loader.put(conn, "hcat_mark_set_done", RETENTION_COLUMNS, rows)
            made += count
        settle(engine, "VACUUM ANALYZE")
    finally:
        engine.dispose()
        loader.close()


def settle(engine: Engine, vacuum: str) -> None:
    """PostgreSQL: ``vacuum`` (VACUUM or VACUUM ANALYZE) the retention table, as
    autovacuum would soon; SQLite: the planner's statistics after a load."""
    if engine.dialect.name != "postgresql":
        if "ANALYZE" in vacuum:
            analyze(engine)
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"{vacuum} hcat_mark_set_done")


def autovacuums(engine: Engine) -> int:
    """How many times autovacuum has vacuumed the retention table (PostgreSQL; 0 on
    SQLite)."""
    if engine.dialect.name != "postgresql":
        return 0
    query = "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = %s"
    with engine.connect() as conn:
        count = conn.exec_driver_sql(query, ("hcat_mark_set_done",)).scalar()
    return int(count or 0)


def _remaining(url: str) -> tuple[int, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT count(*), sum(CASE WHEN expires_at > :now THEN 1 ELSE 0 END) "
                    "FROM hcat_mark_set_done"
                ),
                {"now": Loader(url).time(datetime.now(UTC))},
            ).one()
            return int(row[0]), int(row[1] or 0)
    finally:
        engine.dispose()


class Writer(threading.Thread):
    """One MARK_SET_DONE every WRITE_EVERY seconds; each call's latency."""

    def __init__(self, catalog: Catalog, first: int) -> None:
        super().__init__(daemon=True)
        self.catalog = catalog
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.count = first  # the specs written so far, by earlier writers

    def run(self) -> None:
        while not self.stop.wait(WRITE_EVERY):
            self.count += 1
            started = time.perf_counter()
            self.catalog.mark_set_done(WRITTEN, {"ds": f"w{self.count:09d}"})
            self.latencies.append(time.perf_counter() - started)

    def for_calls(self, calls: int) -> list[float]:
        """Latencies of the next ``calls`` calls."""
        first = len(self.latencies)
        while len(self.latencies) < first + calls:
            time.sleep(WRITE_EVERY)
        return self.latencies[first : first + calls]


def sweep_process(settings: Settings, batch: int, duty: float | None) -> tuple[float, int, str]:
    """``hcat-notify sweep`` as a process: wall seconds, peak RSS (sampled), output."""
    duty_option = [] if duty is None else ["--max-duty", str(duty)]
    return command_with_peak(["sweep", "--batch-size", str(batch), *duty_option], settings)


def run_backend(
    backend: str,
    workdir: Path,
    sizes: list[int],
    admin_url: str | None,
    batch: int,
    duty: float | None,
    quick: bool,
) -> list[Series]:
    took = Series("sweep wall time", "s", XLABEL, linear)
    memory = Series("sweep process peak RSS", "MiB", XLABEL, flat)
    writer_p99 = Series(
        "writer p99 during the sweep (ref: the calls before and after it)", "ms", XLABEL, flat
    )
    writer_old = Series(
        "writer p99 during the sweep (ref: the calls just before, the old way)",
        "ms",
        XLABEL,
        flat,
    )
    around = QUICK_AROUND if quick else AROUND
    with catalog_urls(backend, workdir, ["sweep"], admin_url) as urls:
        url = urls[0]
        settings = make_settings(workdir / backend, f"stomp://{HOST}:{free_port()}", url)
        kept = 0  # what each sweep must leave: the live rows and the writer's, so far
        with Catalog.open(settings) as catalog:
            catalog.create_table(
                TABLE, location="/data/scale/swept", partition_keys=["ds", "region"]
            )
            catalog.create_table(WRITTEN, location="/data/scale/written", partition_keys=["ds"])
            idle, _, _ = sweep_process(settings, batch, duty)  # the command's start, nothing to do
        for size in sizes:
            with Catalog.open(settings) as catalog:
                started = time.perf_counter()
                load(url, size)
                loaded = time.perf_counter() - started
                log(f"{backend}: {size:,} expired rows loaded in {loaded:.1f} s")
                writer = Writer(catalog, kept)
                engine = create_engine(url)
                writer.start()
                try:
                    before = writer.for_calls(around)
                    first = len(writer.latencies)
                    vacuumed = autovacuums(engine)
                    seconds, peak, out = sweep_process(settings, batch, duty)
                    during = writer.latencies[first:]
                    vacuumed = autovacuums(engine) - vacuumed
                    settle(engine, "VACUUM")
                    after = writer.for_calls(around)
                finally:
                    engine.dispose()
                    writer.stop.set()
                    writer.join()
            kept += LIVE + len(writer.latencies)
            total, live = _remaining(url)
            if (total, live) != (kept, kept) or f"removed {size} " not in out:
                raise RuntimeError(
                    f"after the sweep of {size:,}: {total} rows, {live} live (wanted {kept} "
                    f"both); it said {out.strip()!r}"
                )
            print(
                f"# {backend} M = {size:,}: every expired row swept, every live one kept",
                flush=True,
            )
            took.add(size, seconds - idle)
            memory.add(size, peak / 2**20)
            reference = before + after
            p99_around = percentile(reference, 99) * 1000
            p99_before = percentile(before[-OLD_BEFORE[quick] :], 99) * 1000
            p99_during = percentile(during, 99) * 1000 if during else p99_around
            writer_p99.add(size, p99_during, p99_around)
            writer_old.add(size, p99_during, p99_before)
            log(
                f"writer ms during: p50 {percentile(during, 50) * 1000:.1f} p90 "
                f"{percentile(during, 90) * 1000:.1f} max {max(during) * 1000:.1f}; before "
                f"and after: p50 {percentile(reference, 50) * 1000:.1f} p90 "
                f"{percentile(reference, 90) * 1000:.1f} max {max(reference) * 1000:.1f} "
                f"(p99 before {percentile(before, 99) * 1000:.1f}, after "
                f"{percentile(after, 99) * 1000:.1f})"
            )
            log(
                f"{backend} M = {size:,}: sweep {seconds:.2f} s ({size / seconds:,.0f} rows/s), "
                f"peak RSS {peak / 2**20:.0f} MiB, writer p99 {p99_during:.1f} ms during "
                f"({len(during)} calls) vs {p99_around:.1f} before and after ({len(reference)}), "
                f"{p99_before:.1f} the {OLD_BEFORE[quick]} just before; autovacuum ran {vacuumed} "
                f"time(s) on the table during the sweep; {load_text()}"
            )
    return [took, memory, writer_p99, writer_old]


def main() -> None:
    p = growth_parser(__doc__, "comma-separated M, e.g. 10000,100000,1000000,10000000")
    p.add_argument("--batch-size", type=int, default=1000, help="sweep --batch-size")
    p.add_argument("--max-duty", type=float, default=None, help="sweep --max-duty")
    p.add_argument("--rows", default="dones,outbox", help="dones, outbox or both")
    args = p.parse_args()
    sizes = sizes_of(args.sizes, args.quick, SIZES, QUICK_SIZES)
    rows = {row.strip() for row in args.rows.split(",") if row.strip()}
    with growth_run(args, "how sweep grows", "sweep") as (workdir, panels):
        for backend in backends_of(args):
            if "dones" in rows:
                series = run_backend(
                    backend,
                    workdir,
                    sizes,
                    args.postgresql_admin_url,
                    args.batch_size,
                    args.max_duty,
                    args.quick,
                )
                report(f"{backend}: how sweep grows, M = {sizes}", series, [load_text()])
                panels[f"sweep, {backend}"] = series
                for path in workdir.glob("*.db*"):
                    path.unlink()
            if "outbox" in rows:
                days = list(QUICK_DAYS if args.quick else DAYS)
                admin = args.postgresql_admin_url
                with catalog_urls(backend, workdir, ["outbox"], admin) as urls:
                    settings = make_settings(
                        workdir / f"{backend}-outbox", f"stomp://{HOST}:{free_port()}", urls[0]
                    )
                    kept = run_outbox(backend, settings, days, args.quick)
                report(f"{backend}: how the outbox grows, D = {days}", kept, [load_text()])
                panels[f"outbox, {backend}"] = kept


if __name__ == "__main__":
    run_main(main)
