"""A run ended by SIGTERM (a CI job cancelled, ``kill`` of the run's process group) tears
its fixtures down as Ctrl-C does (tests/conftest.py), so the brokers and PostgreSQL
clusters they started are stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

A_RUN = """
import time
from pathlib import Path

import pytest

MARKS = Path(__file__).parent


@pytest.fixture(scope="session")
def part():
    (MARKS / "up").touch()
    yield
    (MARKS / "down").touch()


def test_long(part):
    (MARKS / "started").touch()
    time.sleep(120)
"""


def test_sigterm_tears_the_session_fixtures_down(tmp_path: Path):
    (tmp_path / "test_a_run.py").write_text(A_RUN)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider"]
    run = subprocess.Popen(
        [*command, "-q", str(tmp_path / "test_a_run.py")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert run.poll() is None, run.communicate()[0]
            assert time.monotonic() < deadline, "the inner run did not start its test"
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=60)
    finally:
        run.kill()
    assert (tmp_path / "down").exists(), output
    assert run.returncode != 0
    assert "KeyboardInterrupt" in output or "Interrupted" in output, output
