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


def test_the_scale_benchmark_runs_quick_on_both_backends(tmp_path: Path, postgres_admin_url: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env["PYTHONPATH"] = str(ROOT)
    chart = tmp_path / "scale.png"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scale.py"),
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
    for backend in ("sqlite", "postgresql"):
        for size in ("1,000", "4,000"):
            assert (
                f"# {backend} N = {size}: checked table list | head -20, "
                "GET /v1/tables?limit=100, partitions list | head -20, table show"
            ) in done.stdout, output[-3000:]
        assert f"== {backend}: how each cost grows" in done.stdout, output[-3000:]
    assert chart.stat().st_size > 10_000
