"""Many short ``hcat-notify`` commands, each in its own process, cheaply.

Each command runs in a process of its own (its own catalog connections, its own exit
code), forked from multiprocessing's fork server, which imported the CLI and the store
once: Python's start-up and imports are most of a short command's cost (measured: about
0.35 s of the 0.5 s of CPU a ``partitions add`` takes), and a forked child does not
pay them again. The command runs through :func:`hcat_notify.cli.main`, as the console
script does.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Mapping, Sequence
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

__all__ = ["run_commands"]

PRELOAD = [
    __name__,
    "hcat_notify.cli",
    "hcat_notify.cli.partitions",
    "hcat_notify.lifecycle",
    "hcat_notify.files",
    "sqlalchemy.dialects.postgresql",
    "sqlalchemy.dialects.sqlite",
    "psycopg",
]


def _command(env: Mapping[str, str], argv: Sequence[str], output: str) -> None:
    """The child: the environment of an ``hcat-notify`` process, its output to a file."""
    written = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(written, 1)
    os.dup2(written, 2)
    os.environ.clear()
    os.environ.update(env)
    from hcat_notify.cli import main

    sys.exit(main(list(argv)))


def run_commands(
    env: Mapping[str, str],
    commands: Sequence[Sequence[str]],
    workdir: Path,
    *,
    at_once: int,
    timeout: float = 120.0,
) -> list[tuple[int | None, str]]:
    """Run each of ``commands`` (``hcat-notify`` arguments) in a process of its own,
    started in the given order, at most ``at_once`` running at a time; the exit code
    and the output of each."""
    context: Any = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    workdir.mkdir(parents=True, exist_ok=True)
    outputs = [workdir / f"command-{index}.out" for index in range(len(commands))]
    running: list[Any] = []
    started: list[Any] = []
    for argv, output in zip(commands, outputs, strict=True):
        while len(running) >= at_once:
            if not wait([process.sentinel for process in running], timeout):
                raise AssertionError(f"no command of {len(running)} ended in {timeout} s")
            running = [process for process in running if process.is_alive()]
        process = context.Process(target=_command, args=(dict(env), list(argv), str(output)))
        process.start()
        running.append(process)
        started.append(process)
    for process in started:
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
    return [
        (process.exitcode, output.read_text() if output.exists() else "")
        for process, output in zip(started, outputs, strict=True)
    ]
