"""What recording webhook deliveries costs PostgreSQL: the time of C ``record_delivered_many``
calls (``--calls``, default 10^5; ``--quick`` 2,000) of K lanes each (``--record``,
default 10: the 2xx of a few requests, as the relay's recorder writes them) on a catalog
of L lanes (``--lanes``, default 10^5; ``--quick`` 2,000) of one webhook, and how much
the progress table and its indexes grow meanwhile, with the share of the updates that
were heap-only (HOT: no index entry written).

Ours (this checkout) against a reference build (``--reference``: a directory holding
another version's ``hcat_notify``; default: ``git archive main`` into the run's
directory), each run as a process of this file (``--worker``) with that build first on
its path, in a database of its own migrated by that build (``Catalog.open``) on a private
PostgreSQL 15 cluster (``deploy/local/postgres.sh``; ``--postgresql-admin-url`` for
another), alternating ours and the reference (ours first in odd rounds), 3 rounds
(``--rounds``). The lanes are written first by the same calls (1,000 lanes each), then
vacuumed and analyzed (what autovacuum does to a catalog in use), then the C calls walk
the lanes in a fixed shuffled order, each call the next K, so that every lane moves
C x K / L times; autovacuum stays on, as in use. The sizes are ``pg_relation_size`` of
the table and of each index before and after the calls; the updates are read from
``pg_stat_user_tables`` once the worker's connections are closed. Printed per build:
the calls' seconds (best and median of the rounds), the index growth and the HOT share
(medians); the ratio ours / reference.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOAD_CALL = 1_000  # lanes per call while the lanes are first written


def worker(
    url: str, lanes: int, calls: int, record: int, home: str, fillfactor: int
) -> dict[str, Any]:
    """Run in a process whose ``hcat_notify`` is the build measured (``fillfactor``: the
    progress table's instead of its migrations', 0: theirs)."""
    import dataclasses

    from sqlalchemy import create_engine, text

    from hcat_notify.config import load_settings
    from hcat_notify.model.topics import topic_bucket
    from hcat_notify.store import Catalog
    from hcat_notify.store.group import MemberReport
    from hcat_notify.store.webhooks import LanePosition

    settings = load_settings(home=Path(home), db_url=url)
    with Catalog.open(settings, upgrade=True):
        pass
    sqlite = url.startswith("sqlite")
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    if fillfactor and not sqlite:
        with engine.connect() as conn:
            conn.execute(text(f"ALTER TABLE hcat_webhook_progress SET (fillfactor = {fillfactor})"))
    with Catalog.open(settings) as catalog:
        catalog.create_table("bench.t", location=f"{home}/warehouse/bench/t", partition_keys=["ds"])
        info, _ = catalog.webhooks.add("hook", "https://hooks.example.com/in", "bench.*")
        count = catalog.group.info().bucket_count
        catalog.group.heartbeat(MemberReport("a", "host", 1))
        epoch = catalog.group.claim_controller("a", ttl=3600)
        assert epoch is not None
        assert catalog.group.assign("a", epoch, dict.fromkeys(range(count), "a"), [])
        owned = catalog.group.owned("a")
        names = [f"hcat.bench.t{n:06d}" for n in range(lanes)]
        positions = [
            LanePosition(
                info.id,
                info.version,
                name,
                topic_bucket(name, count),
                owned[topic_bucket(name, count)].epoch,
                1,
                info.created_at,
            )
            for name in names
        ]
        for first in range(0, lanes, LOAD_CALL):
            catalog.webhooks.record_delivered_many("a", positions[first : first + LOAD_CALL])

    def sizes() -> dict[str, int]:
        with engine.connect() as conn:
            if sqlite:  # the pages of the table and of each of its indexes
                return {
                    name: int(size)
                    for name, size in conn.execute(
                        text(
                            "SELECT name, sum(pgsize) FROM dbstat WHERE name IN "
                            "(SELECT name FROM sqlite_master"
                            " WHERE tbl_name = 'hcat_webhook_progress') GROUP BY name"
                        )
                    ).all()
                }
            rows = conn.execute(
                text(
                    "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
                    "WHERE c.oid = 'hcat_webhook_progress'::regclass OR c.oid IN "
                    "(SELECT indexrelid FROM pg_index "
                    " WHERE indrelid = 'hcat_webhook_progress'::regclass)"
                )
            ).all()
        return {name: int(size) for name, size in rows}

    def updates() -> tuple[int, int]:
        if sqlite:
            return 0, 0
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            found = conn.execute(
                text(
                    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                    "WHERE relname = 'hcat_webhook_progress'"
                )
            ).one()
        return int(found[0]), int(found[1])

    options = None
    if not sqlite:  # (nothing in hcat-notify runs ANALYZE on SQLite)
        with engine.connect() as conn:
            conn.execute(text("VACUUM ANALYZE hcat_webhook_progress"))
            options = conn.execute(
                text("SELECT reloptions FROM pg_class WHERE relname = 'hcat_webhook_progress'")
            ).scalar()
    before, (updated_before, hot_before) = sizes(), updates()
    order = list(range(lanes))
    random.Random(7).shuffle(order)
    with Catalog.open(settings) as catalog:
        started = time.perf_counter()
        for call in range(calls):
            first = call * record
            batch = [
                dataclasses.replace(positions[order[(first + k) % lanes]], last_event_id=10 + call)
                for k in range(record)
            ]
            catalog.webhooks.record_delivered_many("a", batch)
        seconds = time.perf_counter() - started
    wanted = 0 if sqlite else updated_before + calls * record
    deadline = time.monotonic() + 30
    while (found := updates())[0] < wanted and time.monotonic() < deadline:
        time.sleep(0.1)  # the closed connections' counts, shared as their backends exit
    after = sizes()
    engine.dispose()
    index_names = [name for name in before if name != "hcat_webhook_progress"]
    return {
        "seconds": seconds,
        "updates": found[0] - updated_before,
        "hot": found[1] - hot_before,
        "table_before": before["hcat_webhook_progress"],
        "table_after": after["hcat_webhook_progress"],
        "indexes_before": sum(before[n] for n in index_names),
        "indexes_after": sum(after.get(n, 0) for n in index_names),
        "per_index": {n: [before[n], after.get(n, 0)] for n in sorted(index_names)},
        "reloptions": options,
    }


def _run_worker(build: Path, url: str, args: Any, workdir: Path, fillfactor: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env.update(PYTHONPATH=str(build), PYTHONDONTWRITEBYTECODE="1")
    home = tempfile.mkdtemp(prefix="home-", dir=workdir)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        url,
        str(args.lanes),
        str(args.calls),
        str(args.record),
        home,
        str(fillfactor),
    ]
    done = subprocess.run(
        command, env=env, cwd=build, capture_output=True, text=True, check=False, timeout=7200
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker ({build}) exited {done.returncode}:\n{done.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    sys.path.insert(0, str(HERE))
    from _scale_dbs import catalog_urls
    from _support import Row, footer, log, machine_line, parser, print_table, ratio_rows

    p = parser(__doc__.splitlines()[0])
    p.add_argument("--lanes", type=int, default=None, help="L (default 10^5; --quick 2,000)")
    p.add_argument("--calls", type=int, default=None, help="C (default 10^5; --quick 2,000)")
    p.add_argument("--record", type=int, default=10, help="K, lanes per call")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reference", type=Path, default=None, help="the reference build's tree")
    p.add_argument("--postgresql-admin-url", help="a running PostgreSQL server's admin URL")
    p.add_argument(
        "--backend", default="postgresql", help="postgresql, or sqlite (no HOT share there)"
    )
    p.add_argument(
        "--fillfactor",
        type=int,
        default=0,
        help="an experiment: ours with this fillfactor of the progress table, not its migration's",
    )
    args = p.parse_args()
    args.lanes = args.lanes or (2_000 if args.quick else 100_000)
    args.calls = args.calls or (2_000 if args.quick else 100_000)
    rounds = 1 if args.quick and args.rounds == 3 else args.rounds
    ours = HERE.parent
    print(f"# recording webhook deliveries on {args.backend}{' (--quick)' if args.quick else ''}")
    print(f"# {machine_line()}")
    print(f"# {args.calls:,} calls of {args.record} lanes on {args.lanes:,} lanes, {rounds} rounds")
    workdir = Path(tempfile.mkdtemp(prefix="hcat-bench-webhook-record-"))
    try:
        reference = args.reference
        if reference is None:
            reference = workdir / "reference"
            reference.mkdir()
            archive = subprocess.run(
                ["git", "archive", "main"], cwd=ours, capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(reference)], input=archive.stdout, check=True)
        builds = {"ours": ours, "reference": reference}
        names = [f"{build}_{r}" for r in range(rounds) for build in builds]
        results: dict[str, list[dict[str, Any]]] = {build: [] for build in builds}
        with catalog_urls(args.backend, workdir, names, args.postgresql_admin_url) as urls:
            url_of = dict(zip(names, urls, strict=True))
            for r in range(rounds):
                order = ["ours", "reference"] if r % 2 == 0 else ["reference", "ours"]
                for build in order:
                    fillfactor = args.fillfactor if build == "ours" else 0
                    found = _run_worker(
                        builds[build], url_of[f"{build}_{r}"], args, workdir, fillfactor
                    )
                    log(f"round {r + 1} {build}: {json.dumps(found)}")
                    results[build].append(found)
    finally:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)

    def series(build: str, key: str) -> list[float]:
        return [float(found[key]) for found in results[build]]

    figures: dict[str, tuple[str, Callable[[dict[str, Any]], float]]] = {
        "indexes of hcat_webhook_progress: growth, median": (
            "MiB",
            lambda f: (f["indexes_after"] - f["indexes_before"]) / 2**20,
        ),
        "the table itself: growth, median": (
            "MiB",
            lambda f: (f["table_after"] - f["table_before"]) / 2**20,
        ),
    }
    if args.backend == "postgresql":
        figures["updates that were HOT, median"] = (
            "%",
            lambda f: 100.0 * f["hot"] / f["updates"] if f["updates"] else 0.0,
        )
    rows = ratio_rows(
        f"{args.calls:,} record_delivered_many calls of {args.record} lanes, s",
        series("ours", "seconds"),
        series("reference", "seconds"),
        unit="s",
        target=("<=", 1.0),
        higher_is_better=False,
        digits=2,
    )
    for metric, (unit, of) in figures.items():
        ours_, reference_ = ([of(f) for f in results[b]] for b in builds)
        rows.append(
            Row(
                metric,
                statistics.median(ours_),
                statistics.median(reference_),
                unit=unit,
                digits=2,
                rounds=rounds,
            )
        )
    sizes_note = {
        build: {
            name: f"{b / 2**20:.2f} -> {a / 2**20:.2f} MiB"
            for name, (b, a) in results[build][-1]["per_index"].items()
        }
        for build in builds
    }
    print_table(
        f"recording deliveries on {args.backend}, {args.lanes:,} lanes",
        rows,
        [f"{build}, last round, per index: {sizes_note[build]}" for build in builds]
        + [f"{build} reloptions: {results[build][-1]['reloptions']}" for build in builds],
    )
    footer()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        url, lanes, calls, record, home, fillfactor = sys.argv[2:8]
        print(json.dumps(worker(url, int(lanes), int(calls), int(record), home, int(fillfactor))))
    else:
        sys.path.insert(0, str(HERE))
        from _support import run_main

        run_main(main)
