"""``benchmarks/scale.py --quick`` runs to its end on SQLite and PostgreSQL: the paged
commands answer right at every size (the benchmark checks ``table list | head -20``,
``GET /v1/tables?limit=100``, ``partitions list | head -20`` and ``table show`` against
the catalog it loaded, and every ``find_covering_done``, ``…/done`` and catch-up answer),
and it prints each backend's growth table and writes the chart. Its timings are not
judged here: speed belongs to the benchmark's own run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run_quick(script: str, tmp_path: Path, postgres_admin_url: str) -> str:
    """``benchmarks/SCRIPT --quick`` on both backends; its output (it must succeed and
    write its chart)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env["PYTHONPATH"] = str(ROOT)
    chart = tmp_path / f"{script}.png"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / script),
            "--quick",
            "--no-results",
            "--chart",
            str(chart),
            "--postgresql-admin-url",
            postgres_admin_url,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "BENCHMARK ERROR" not in output, output[-3000:]
    assert chart.stat().st_size > 10_000
    return output


def test_the_scale_benchmark_runs_quick_on_both_backends(tmp_path: Path, postgres_admin_url: str):
    output = _run_quick("scale.py", tmp_path, postgres_admin_url)
    for backend in ("sqlite", "postgresql"):
        for size in ("1,000", "4,000"):
            assert (
                f"# {backend} N = {size}: checked table list | head -20, "
                "GET /v1/tables?limit=100, partitions list | head -20, table show"
            ) in output, output[-3000:]
        assert f"== {backend}: how each cost grows" in output, output[-3000:]


def test_the_long_poll_rows_run_quick_on_both_backends(tmp_path: Path, postgres_admin_url: str):
    """``benchmarks/scale_waiters.py --quick``: 100, then 1,000 long polls on one real
    ``hcat-notify serve``, one done: every waiter answered once, 200, with that done's
    event id (the benchmark checks each answer and fails otherwise)."""
    output = _run_quick("scale_waiters.py", tmp_path, postgres_admin_url)
    for backend in ("sqlite", "postgresql"):
        for size in ("100", "1,000"):
            assert f"# {backend} N = {size}: every waiter answered once, 200, with event" in output
        assert f"== {backend}: how long polls grow" in output, output[-3000:]
