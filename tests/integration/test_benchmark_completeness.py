"""``benchmarks/completeness.py --quick`` runs to its end: every part prints its table
(its figures are not judged here: speed belongs to the benchmark's own run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_the_completeness_benchmark_runs_quick():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "completeness.py"), "--quick", "--no-results"],
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
    for title in (
        "== (a) the write path with a rule",
        "== (b) last part -> done at a subscriber",
        "== (c) the timed pass",
    ):
        assert title in done.stdout, output[-3000:]
