"""How long a short ``hcat-notify`` command takes, beside ``python -c pass``.

Shell schedulers run ``hcat-notify wait`` or ``hcat-notify topic`` once per task, so the
command line's start-up is part of every task's latency. Each round runs, in turn, the
interpreter doing nothing (the floor), ``hcat-notify --help`` and ``hcat-notify topic
db.t`` on a SQLite catalog; wall time of the whole process, as a shell sees it.

Targets (issue 16): ``--help`` ≤ 0.15 s and ``topic`` ≤ 0.3 s, median of 5.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _support import Row, fmt, footer, machine_line, parser, print_table, run_main

CLI = str(Path(sys.executable).with_name("hcat-notify"))


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    rounds = 3 if args.quick else 5
    print("# CLI start-up" + (" (--quick)" if args.quick else ""))
    print(f"# {machine_line()}")
    with tempfile.TemporaryDirectory(prefix="hcat-cli-bench-") as workdir:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
        env["HCAT_NOTIFY_HOME"] = workdir
        env["HCAT_NOTIFY_WAREHOUSE_ROOTS"] = workdir
        subprocess.run(
            [
                CLI,
                "table",
                "create",
                "db.t",
                "--location",
                f"{workdir}/t",
                "--partition-keys",
                "ds",
            ],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "hcat-notify --help": [CLI, "--help"],
            "hcat-notify topic db.t": [CLI, "topic", "db.t"],
        }
        for command in commands.values():  # warm the page cache and the .pyc files
            _timed(command, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(rounds):  # alternate: the machine's drift hits every command alike
            for name, command in commands.items():
                times[name].append(_timed(command, env))
    floor = statistics.median(times["python -c pass"])
    rows = [
        Row("python -c pass (floor)", floor, unit="s", digits=3),
        Row(
            "hcat-notify --help, median",
            statistics.median(times["hcat-notify --help"]),
            floor,
            unit="s",
            target=("<", 0.1500001),
            digits=3,
        ),
        Row(
            "hcat-notify topic db.t, median",
            statistics.median(times["hcat-notify topic db.t"]),
            floor,
            unit="s",
            target=("<", 0.3000001),
            digits=3,
        ),
    ]
    notes = [
        f"{name}: best {fmt(min(values), 3)} s, median {fmt(statistics.median(values), 3)} s, "
        f"worst {fmt(max(values), 3)} s over {rounds} rounds"
        for name, values in times.items()
    ]
    print_table("wall time of one command (ratio: ours / python -c pass)", rows, notes)
    footer()


if __name__ == "__main__":
    run_main(main)
