"""write_partitions vs a plain df.write.partitionBy(...).parquet(...) of the same DataFrame.

1,000 partitions, 2,000,000 rows, one local[2] Spark session with a warm JVM (one
unmeasured write of each first); rounds alternate plain and ours; best and median of each
are reported (target: ratio <= 1.05, issue 13). Also: the commit phase's share of our
time, and the time from the Spark job's end to the last ADD_PARTITION message at a
subscriber (relay and a STOMP subscriber running in this process), for
announce="partition" (one message per partition) and announce="write" (one per write,
split under the cap).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from typing import TYPE_CHECKING, Any

from _spark import local_spark
from _support import (
    BenchEnv,
    Row,
    bench_env,
    footer,
    header,
    log,
    parser,
    print_table,
    ratio_rows,
    run_main,
)

from hcat_notify import Relay, RelayConfig
from hcat_notify.broker import consumer_connection
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.model.topics import destination_for
from hcat_notify.store import Catalog

if TYPE_CHECKING:
    from spark_output import CommitResult


def _frame(spark: Any, rows: int, datestamps: int, regions: int) -> Any:
    from pyspark.sql import functions as sf

    partitions = datestamps * regions
    return (
        spark.range(0, rows, numPartitions=2)
        .withColumn("p", sf.col("id") % partitions)
        .withColumn("datestamp", sf.format_string("2026%04d", (sf.col("p") / regions).cast("long")))
        .withColumn("region", sf.format_string("r%03d", sf.col("p") % regions))
        .withColumn("user_id", (sf.col("id") * 7919) % 1_000_003)
        .withColumn("url", sf.concat(sf.lit("/page/"), (sf.col("id") % 997).cast("string")))
        .drop("p")
        .cache()
    )


def _ours(
    env: BenchEnv,
    catalog: Catalog,
    df: Any,
    partitions: int,
    round_no: int | str,
    mode: str,
) -> tuple[float, CommitResult, float | None]:
    """One write_partitions of ``df`` into a new table with ``announce=mode``; (wall time,
    result, job end -> the subscriber has every partition announced, or None)."""
    from spark_output import write_partitions

    table = f"bench.w{round_no}_{mode}_{os.getpid()}"
    info = catalog.create_table(
        table,
        location=str(env.workdir / f"ours-{round_no}-{mode}"),
        partition_keys=["datestamp", "region"],
    )
    listed = 0
    last: float | None = None
    with consumer_connection(env.settings) as subscriber:
        subscriber.subscribe(destination_for(info.topic), "bench")
        started = time.monotonic()
        result = write_partitions(
            df, table, settings=env.settings, max_partitions=partitions, announce=AnnounceMode(mode)
        )
        elapsed = time.monotonic() - started
        job_end = started + result.phase_seconds["stage"]
        deadline = time.monotonic() + 300
        while listed < partitions and time.monotonic() < deadline:
            message = subscriber.receive(timeout=5)
            if message is not None and message.headers.get("HCAT_EVENT") == "ADD_PARTITION":
                listed += len(json.loads(message.body)["partitions"])
                last = time.monotonic()
    shutil.rmtree(env.workdir / f"ours-{round_no}-{mode}", ignore_errors=True)
    return elapsed, result, (last - job_end) if listed == partitions and last else None


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds of each (3)")
    args = p.parse_args()
    rows, datestamps, regions = (100_000, 5, 20) if args.quick else (2_000_000, 10, 100)
    partitions = datestamps * regions
    rounds = 1 if args.quick else args.rounds

    with bench_env(args, "write-partitions") as env:
        header(f"write_partitions: {partitions} partitions, {rows:,} rows", args, env)
        spark = local_spark("hcat-bench-write-partitions")
        df = _frame(spark, rows, datestamps, regions)
        log(f"materialising {df.count():,} cached rows")
        plain_times: list[float] = []
        ours_times: list[float] = []
        commit_shares: list[float] = []
        stage_times: list[float] = []
        arrival_after_job: dict[str, list[float]] = {"partition": [], "write": []}
        messages: dict[str, int] = {}
        catalog = env.catalog()
        relay = Relay(env.settings, config=RelayConfig(batch_size=500))
        relay_thread = threading.Thread(target=relay.run, name="relay", daemon=True)
        relay_thread.start()
        try:
            # Warm up both, unmeasured: one plain write (the JVM) and one of ours (its
            # first call imports modules and touches Spark's catalog for the first time;
            # it waits until the subscriber has every message, so no publishing is left
            # to run into the first round).
            warm = env.workdir / "warm"
            df.write.partitionBy("datestamp", "region").parquet(str(warm))
            shutil.rmtree(warm)
            _ours(env, catalog, df, partitions, "warm", "partition")
            for round_no in range(rounds):
                target = env.workdir / f"plain-{round_no}"
                started = time.monotonic()
                df.write.partitionBy("datestamp", "region").parquet(str(target))
                plain_times.append(time.monotonic() - started)
                shutil.rmtree(target)
                log(f"round {round_no + 1}: plain {plain_times[-1]:.2f}s")

                for mode in ("partition", "write"):
                    elapsed, result, last = _ours(env, catalog, df, partitions, round_no, mode)
                    if mode == "partition":
                        ours_times.append(elapsed)
                        stage_times.append(result.phase_seconds["stage"])
                        commit = elapsed - result.phase_seconds["stage"]
                        commit_shares.append(commit / elapsed)
                    if last is not None:
                        arrival_after_job[mode].append(last)
                    messages[mode] = len(result.event_ids)
                    log(
                        f"round {round_no + 1}: ours ({mode}) {elapsed:.2f}s, "
                        f"{len(result.event_ids)} ADD_PARTITION message(s), last at the "
                        f"subscriber {last if last is None else round(last, 2)}s after the job; "
                        "phases "
                        + " ".join(f"{k}={v:.2f}" for k, v in result.phase_seconds.items())
                    )
        finally:
            relay.stop()
            relay_thread.join(30)
            relay.close()
            catalog.close()
            spark.stop()

        table_rows = [
            *ratio_rows(
                f"wall time, {partitions} partitions, {rows:,} rows",
                ours_times,
                plain_times,
                unit="s",
                target=("<=", 1.05),
                higher_is_better=False,
                digits=2,
            ),
            Row("commit phase share of our time", 100 * min(commit_shares), None, "%"),
            Row(
                "our Spark job alone (staging write) / plain write, best",
                min(stage_times),
                min(plain_times),
                "s",
                digits=2,
            ),
        ]
        for mode in ("partition", "write"):
            times = arrival_after_job[mode]
            table_rows.append(
                Row(
                    f'Spark job end -> last announcement at a subscriber, announce="{mode}" '
                    f"({messages.get(mode, '?')} messages)",
                    min(times) if times else "not all received",
                    None,
                    "s",
                    digits=2,
                )
            )
        print_table(
            "write_partitions vs df.write.partitionBy(...).parquet(...)",
            table_rows,
            [
                "ours = write_partitions(df, table) incl. the Spark job, discovery, journal, "
                "moves, registry transaction and cleanup; reference = the same cached DataFrame "
                "written plainly by the same session (warm JVM), best and median of each, "
                "alternating",
                "commit phase = ours minus the Spark job (staging write)",
                "subscriber: a STOMP subscription (reader principal) made before the write counts "
                "the partitions listed in ADD_PARTITION bodies; relay in a thread; "
                'announce="write" splits under max_message_bytes (64 KiB)',
            ],
        )
        footer()


if __name__ == "__main__":
    run_main(main)
