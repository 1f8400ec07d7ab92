"""The commit phase of ``write_partitions`` as ``benchmarks/scale.py`` times it: what
follows the Spark job (discover the staged partitions, plan against the registered
ones, journal, move the files, register and announce, clean up), run by the same
``PartitionCommitter`` on output staged as Spark leaves it, into the table that holds N
partitions. No Spark: the staged files are written by this module, not timed."""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hcat_notify.store import Catalog
from spark_output.commit.committer import PartitionCommitter
from spark_output.fs import TableLocation

PARTITIONS = 10
"""New partitions per timed write (planned against the table's registered ones)."""


def _stage(committer: PartitionCommitter, specs: list[tuple[str, str]]) -> None:
    staging = Path(committer.staging)
    for ds, region in specs:
        where = staging / f"ds={ds}" / f"region={region}"
        where.mkdir(parents=True)
        (where / f"part-00000-{uuid.uuid4()}.c000.snappy.parquet").write_bytes(b"PAR1" * 64)
    (staging / "_SUCCESS").write_bytes(b"")


def commit_times(
    catalog: Catalog,
    table: str,
    root: Path,
    specs: list[list[tuple[str, str]]],
) -> list[float]:
    """Seconds of each commit phase, one write per item of ``specs`` (the partitions it
    writes), into ``table`` as if it lived under ``root`` (a warehouse directory: the
    registered rows stay as loaded, the files go there)."""
    info = catalog.get_table(table)
    located: Any = dataclasses.replace(info, location=TableLocation.parse(str(root)).uri)
    found = []
    for write in specs:
        committer = PartitionCommitter(
            catalog, located, job_id=f"scale-{uuid.uuid4().hex[:12]}", mode="append"
        )
        _stage(committer, write)
        phases: dict[str, float] = {}
        started = time.perf_counter()
        record, _ = committer.commit(
            started_at=datetime.now(UTC),
            max_partitions=1000,
            mark_set_done=None,
            compact=None,
            phases=phases,
        )
        found.append(time.perf_counter() - started)
        if len(record.created) != len(write):
            raise RuntimeError(f"the commit registered {record.created}, not {write}")
    return found
