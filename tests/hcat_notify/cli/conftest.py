"""Fixtures of the command line's tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hcat_notify.cli import main


def _runner(capsys: pytest.CaptureFixture[str], db_url: str) -> Callable[..., tuple[int, str, str]]:
    def _run(*args: str) -> tuple[int, str, str]:
        code = main(["--db-url", db_url, *args])
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], db_url: str) -> Callable[..., tuple[int, str, str]]:
    """``run(*args)``: ``hcat-notify --db-url <the test's catalog> ARGS`` in this process;
    (exit code, stdout, stderr)."""
    return _runner(capsys, db_url)


@pytest.fixture
def run_empty(
    capsys: pytest.CaptureFixture[str], empty_db_url: str
) -> Callable[..., tuple[int, str, str]]:
    """As :func:`run`, on an empty database (no catalog in it yet)."""
    return _runner(capsys, empty_db_url)
