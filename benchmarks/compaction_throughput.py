"""compact_table throughput (input bytes/s) for merge and HAR vs `cp -r` of the same bytes.

A Parquet table of P partitions x F small files (snappy; int64, double and string
columns; written once with pyarrow, not timed) is registered several times, as tables
whose partitions point at the same directories, so that each compaction reads exactly
the same input and leaves it in place (maintenance never deletes the originals). Each
round times, on the same disk:

* reference: ``cp -r`` of the table's partition directories (the physical limit);
* ``compact_table(catalog, t, policy=CompactionPolicy(mode="merge"))`` in this process;
* the same with ``mode="har"``;

each twice: once with the input on disk only ("cold": written back and dropped from
the page cache with ``posix_fadvise(DONTNEED)``, as for partitions written earlier,
which is what maintenance compacts), once with the input in the page cache ("warm",
as for the committer's freshly staged output). Every timing ends with ``sync``, so
the written bytes are on disk. Best of N rounds each. Targets (on the cold figures,
"the same bytes on the same disk"): merge/cp >= 0.3, har/cp >= 0.7. ``--spark`` also
runs both modes as Spark tasks (local[2]) for context.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _support import (
    Row,
    drop_workdir,
    footer,
    log,
    machine_line,
    make_settings,
    parser,
    print_table,
    run_main,
)

from hcat_notify.store import Catalog, NewPartition
from spark_output import CompactionPolicy
from spark_output.maintenance.table_compaction import (
    COMPACTED_DIR,
    CompactionSummary,
    compact_table,
)


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
    )


def _prepare(files: list[Path], cold: bool) -> None:
    """Put the input on disk only (``cold``) or in the page cache, then sync."""
    subprocess.run(["sync"], check=False)
    for path in files:
        if cold:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        else:
            path.read_bytes()


def _cp(source: Path, target: Path) -> float:
    started = time.monotonic()
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)
    subprocess.run(["sync"], check=False)
    return time.monotonic() - started


def _compact(
    catalog: Catalog, table: str, mode: Literal["merge", "har"], spark: Any = None
) -> tuple[float, CompactionSummary]:
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
            from _spark import local_spark

            spark = local_spark("hcat-bench-compaction-throughput", har_cache=1000)
        input_files = [f for d in directories for f in sorted(d.iterdir())]
        states = ("cold", "warm")
        variants = ["cp", "merge", "har"] + (["merge-spark", "har-spark"] if spark else [])
        times: dict[tuple[str, str], list[float]] = {}
        summaries: dict[str, CompactionSummary] = {}
        with Catalog.open(settings) as catalog:
            for round_no in range(rounds):
                for state in states:
                    for variant in variants:
                        if state == "warm" and variant.endswith("spark"):
                            continue
                        _prepare(input_files, cold=state == "cold")
                        if variant == "cp":
                            copy = workdir / f"cp-{round_no}"
                            elapsed = _cp(data, copy)
                            shutil.rmtree(copy)
                        else:
                            name = f"bench.t_{variant.replace('-', '_')}_{state}_{round_no}"
                            root = workdir / name.split(".")[1]
                            _register(catalog, name, root, directories)
                            elapsed, summary = _compact(
                                catalog,
                                name,
                                "har" if variant.startswith("har") else "merge",
                                spark if variant.endswith("spark") else None,
                            )
                            if summary.bytes_before != total:
                                raise RuntimeError(
                                    f"{variant}: input {summary.bytes_before} != {total}"
                                )
                            summaries[variant] = summary
                            shutil.rmtree(root / COMPACTED_DIR)
                            for directory in directories:  # the superseded markers
                                (directory / "_hcat_superseded.json").unlink(missing_ok=True)
                        times.setdefault((state, variant), []).append(elapsed)
                    log(
                        f"round {round_no + 1} {state}: "
                        + ", ".join(
                            f"{v} {times[(state, v)][-1]:.2f}s"
                            for v in variants
                            if (state, v) in times
                        )
                    )
        mib = 2**20

        def rate(state: str, variant: str) -> float:
            return total / min(times[(state, variant)]) / mib

        merge_files = "{} -> {} files".format(
            summaries["merge"].files_before, summaries["merge"].files_after
        )
        table_rows = [
            Row("cp -r, input on disk (physical limit)", rate("cold", "cp"), None, "MiB/s")
        ]
        table_rows += [
            Row(
                f"merge, input on disk ({merge_files})",
                rate("cold", "merge"),
                rate("cold", "cp"),
                "MiB/s",
                target=(">=", 0.3),
                check="ratio",
            ),
            Row(
                "har, input on disk",
                rate("cold", "har"),
                rate("cold", "cp"),
                "MiB/s",
                target=(">=", 0.7),
                check="ratio",
            ),
            Row("cp -r, input in page cache (context)", rate("warm", "cp"), None, "MiB/s"),
            Row(
                "merge, input in page cache (context)",
                rate("warm", "merge"),
                rate("warm", "cp"),
                "MiB/s",
            ),
            Row(
                "har, input in page cache (context)",
                rate("warm", "har"),
                rate("warm", "cp"),
                "MiB/s",
            ),
        ]
        if spark is not None:
            for variant in ("merge-spark", "har-spark"):
                table_rows.append(
                    Row(
                        f"{variant}, input on disk (local[2] tasks, context)",
                        rate("cold", variant),
                        rate("cold", "cp"),
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
                "reference = cp -r of the same partition directories, same disk, same run, "
                "same cache state; every timing ends with sync (written bytes on disk)",
                "input on disk = synced and dropped from the page cache (posix_fadvise "
                "DONTNEED) before each timing; the targets apply to these rows",
                "merge verifies rows + content checksum; har verifies each file's SHA-256",
            ],
        )
        footer()
    finally:
        if spark is not None:
            spark.stop()
        drop_workdir(workdir, keep=args.keep)


if __name__ == "__main__":
    run_main(main)
