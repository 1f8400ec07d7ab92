"""compact_table throughput (input bytes/s) for merge and HAR vs `cp -r` of the same bytes.

A Parquet table of P partitions x F small files (snappy; int64, double and string
columns; written once with pyarrow, not timed) is registered twice, as two tables whose
partitions point at the same directories, so that each compaction reads exactly the
same input and leaves it in place (maintenance never deletes the originals). Each round
times, on the same disk and with the page cache in the same state:

* reference: ``cp -r`` of the table's partition directories (the physical limit);
* ``compact_table(catalog, t, policy=CompactionPolicy(mode="merge"))`` in this process;
* the same with ``mode="har"``;

and deletes what they wrote. Best of N rounds each. ``--spark`` also runs both modes
as Spark tasks (local[2]) for context. Targets: merge/cp >= 0.3, har/cp >= 0.7.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _support import Row, footer, log, machine_line, make_settings, parser, print_table, run_main

from hcat_notify.store import Catalog, NewPartition
from spark_output import CompactionPolicy
from spark_output.maintenance import COMPACTED_DIR, CompactionSummary, compact_table


def _write_data(root: Path, partitions: int, files: int, rows_per_file: int) -> list[Path]:
    directories = []
    next_id = 0
    for number in range(partitions):
        directory = root / "datestamp=20260101" / f"region=r{number:03d}"
        directory.mkdir(parents=True)
        for index in range(files):
            ids = pa.array(range(next_id, next_id + rows_per_file), pa.int64())
            next_id += rows_per_file
            table = pa.table(
                {
                    "id": ids,
                    "user_id": pc.multiply(ids, pa.scalar(7919, pa.int64())),
                    "score": pc.divide(pc.cast(ids, pa.float64()), 7.0),
                    "url": pc.binary_join_element_wise(
                        "/page/", pc.cast(pc.bit_wise_and(ids, 1023), pa.string()), ""
                    ),
                }
            )
            name = f"part-{index:05d}-{number:05d}.c000.snappy.parquet"
            pq.write_table(table, directory / name, compression="snappy")
        directories.append(directory)
    return directories


def _register(catalog: Catalog, name: str, root: Path, directories: list[Path]) -> None:
    catalog.create_table(name, location=str(root), partition_keys=["datestamp", "region"])
    catalog.add_partitions(
        name,
        [
            NewPartition(
                spec={"datestamp": "20260101", "region": d.name.split("=", 1)[1]},
                location=f"file://{d}",
                file_count=sum(1 for _ in d.iterdir()),
                total_bytes=sum(f.stat().st_size for f in d.iterdir()),
            )
            for d in directories
        ],
        announce=False,
    )


def _cp(source: Path, target: Path) -> float:
    subprocess.run(["sync"], check=False)
    started = time.monotonic()
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)
    subprocess.run(["sync"], check=False)
    return time.monotonic() - started


def _compact(
    catalog: Catalog, table: str, mode: str, spark: Any = None
) -> tuple[float, CompactionSummary]:
    subprocess.run(["sync"], check=False)
    started = time.monotonic()
    summary = compact_table(
        catalog, table, policy=CompactionPolicy(min_files=10, mode=mode), spark=spark
    )
    subprocess.run(["sync"], check=False)
    elapsed = time.monotonic() - started
    if not summary.ok or summary.partitions_compacted == 0:
        raise RuntimeError(f"{mode} compaction failed: {summary.errors[:3]}")
    return elapsed, summary


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    p.add_argument("--spark", action="store_true", help="also run both modes as Spark tasks")
    args = p.parse_args()
    partitions, files, rows_per_file = (8, 20, 4_000) if args.quick else (40, 40, 20_000)
    rounds = 1 if args.quick else args.rounds

    workdir = Path(tempfile.mkdtemp(prefix="hcat-bench-compaction-throughput-"))
    spark = None
    try:
        settings = make_settings(workdir, "stomp://127.0.0.1:1", args.db_url)
        data = workdir / "data"
        started = time.monotonic()
        directories = _write_data(data, partitions, files, rows_per_file)
        total = sum(f.stat().st_size for d in directories for f in d.iterdir())
        flags = " (--quick)" if args.quick else ""
        print(
            f"# compaction_throughput: {partitions} partitions x {files} files, "
            f"{total / 2**20:,.0f} MiB{flags}"
        )
        print(f"# {machine_line()}")
        print(f"# catalog {settings.database_url}; data under {workdir}")
        log(f"wrote {total:,} bytes in {time.monotonic() - started:.1f}s")
        if args.spark:
            from compaction_scan import _spark

            spark = _spark()
        cp_times: list[float] = []
        mode_times: dict[str, list[float]] = {
            "merge": [],
            "har": [],
            "merge-spark": [],
            "har-spark": [],
        }
        summaries: dict[str, CompactionSummary] = {}
        with Catalog.open(settings) as catalog:
            subprocess.run(["cat", *map(str, data.rglob("*.parquet"))], stdout=subprocess.DEVNULL)
            for round_no in range(rounds):
                copy = workdir / f"cp-{round_no}"
                cp_times.append(_cp(data, copy))
                shutil.rmtree(copy)
                variants = ["merge", "har"] + (["merge-spark", "har-spark"] if spark else [])
                for variant in variants:
                    mode = variant.split("-")[0]
                    name = f"bench.t_{variant.replace('-', '_')}_{round_no}"
                    root = workdir / name.split(".")[1]
                    _register(catalog, name, root, directories)
                    elapsed, summary = _compact(
                        catalog, name, mode, spark if variant.endswith("spark") else None
                    )
                    if summary.bytes_before != total:
                        raise RuntimeError(f"{variant}: input {summary.bytes_before} != {total}")
                    mode_times[variant].append(elapsed)
                    summaries[variant] = summary
                    shutil.rmtree(root / COMPACTED_DIR)
                    for directory in directories:  # the superseded markers
                        (directory / "_hcat_superseded.json").unlink(missing_ok=True)
                log(
                    f"round {round_no + 1}: cp {cp_times[-1]:.2f}s, "
                    + ", ".join(f"{v} {mode_times[v][-1]:.2f}s" for v in variants)
                )
        mib = 2**20
        cp_rate = total / min(cp_times) / mib
        table_rows = [
            Row("cp -r (physical limit)", cp_rate, None, "MiB/s"),
            Row(
                "merge ({} -> {} files)".format(
                    summaries["merge"].files_before, summaries["merge"].files_after
                ),
                total / min(mode_times["merge"]) / mib,
                cp_rate,
                "MiB/s",
                target=(">=", 0.3),
                check="ratio",
            ),
            Row(
                "har",
                total / min(mode_times["har"]) / mib,
                cp_rate,
                "MiB/s",
                target=(">=", 0.7),
                check="ratio",
            ),
        ]
        if spark is not None:
            for variant in ("merge-spark", "har-spark"):
                table_rows.append(
                    Row(
                        f"{variant} (local[2] tasks, context)",
                        total / min(mode_times[variant]) / mib,
                        cp_rate,
                        "MiB/s",
                    )
                )
        print_table(
            f"compaction throughput, {total / mib:,.0f} MiB input, best of {rounds}",
            table_rows,
            [
                "ours = input bytes / wall time of compact_table (plan, copy via hard links, "
                "merge or archive, verification, registry switch), "
                "in this process (one thread per CPU)",
                "reference = cp -r of the same partition directories, same disk, same run; "
                "input in the page cache for both; each timing ends with sync "
                "(written bytes on disk)",
                "merge verifies rows + content checksum; har verifies each file's SHA-256",
            ],
        )
        footer()
    finally:
        if spark is not None:
            spark.stop()
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    run_main(main)
