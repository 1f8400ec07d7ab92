"""The command line and the frame that the growth benchmarks (``scale_*.py``) share:
their common options, their sizes, a working directory, one chart of every backend's
curves, the footer."""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from _scale_dbs import rss_bytes
from _scale_report import Series, chart
from _support import (
    command_env,
    drop_workdir,
    footer,
    machine_line,
    parser,
    stop_on_sigterm,
)

from hcat_notify.config import Settings


def growth_parser(
    doc: str, sizes_help: str | None, *, rounds: bool = False
) -> argparse.ArgumentParser:
    """The options every growth benchmark takes, and ``--sizes`` described by
    ``sizes_help`` (None: the benchmark names its sizes itself); with ``rounds``, also
    ``--rounds`` (:func:`rounds_of`)."""
    p = parser(doc.splitlines()[0])
    if sizes_help is not None:
        p.add_argument("--sizes", help=sizes_help)
    if rounds:
        p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--backends", default="sqlite,postgresql", help="sqlite, postgresql or both")
    p.add_argument("--postgresql-admin-url", help="a running PostgreSQL server's admin URL")
    p.add_argument("--chart", type=Path, default=None, help="the PNG (default: next to the record)")
    return p


ROUNDS = 3


def rounds_of(args: argparse.Namespace) -> int:
    """``--rounds``; a ``--quick`` run that left it at the default runs one."""
    return 1 if args.quick and args.rounds == ROUNDS else int(args.rounds)


def sizes_of(
    text: str | None, quick: bool, full: Sequence[int], quick_sizes: Sequence[int]
) -> list[int]:
    """The sizes asked for (``1000,1e6``), else the quick or the full default."""
    if text:
        return [int(float(s)) for s in text.split(",")]
    return list(quick_sizes if quick else full)


def backends_of(args: argparse.Namespace) -> list[str]:
    return [b.strip() for b in args.backends.split(",") if b.strip()]


@contextlib.contextmanager
def growth_run(
    args: argparse.Namespace, title: str, name: str
) -> Iterator[tuple[Path, dict[str, Sequence[Series]]]]:
    """The frame of a run: its heading, a working directory and the panels to chart;
    afterwards the directory dropped, the chart ``scale-<name>.png`` drawn (next to the
    record unless ``--chart``) and the footer printed."""
    stop_on_sigterm()
    print(f"# {title}{' (--quick)' if args.quick else ''}")
    print(f"# {machine_line()}")
    workdir = Path(tempfile.mkdtemp(prefix=f"hcat-bench-{name}-"))
    panels: dict[str, Sequence[Series]] = {}
    try:
        yield workdir, panels
    finally:
        drop_workdir(workdir, keep=args.keep)
    if panels:
        where = args.chart or (
            (args.results if not args.no_results else Path(tempfile.gettempdir()))
            / f"scale-{name}.png"
        )
        chart(where, panels)
    footer()


def command_with_peak(arguments: Sequence[str], settings: Settings) -> tuple[float, int, str]:
    """Run ``hcat-notify *arguments`` against ``settings`` (its home, catalog and broker,
    as environment variables; nothing else of ours inherited) to its end, sampling its
    RSS every 20 ms: its wall seconds, its peak RSS in bytes and its output (stdout and
    stderr together).

    Raises:
        RuntimeError: the command exited non-zero (the end of its output in the message).
    """
    env = command_env(settings)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("hcat-notify")), *arguments],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, rss_bytes(proc.pid))
        except (OSError, RuntimeError):  # it just ended
            break
        time.sleep(0.02)
    out = proc.communicate()[0]
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"hcat-notify {arguments[0]} exited {proc.returncode}: {out[-800:]}")
    return seconds, peak, out
