"""The ``hcat-notify`` command line.

Exit codes: 0 success; 2 a user or environment error, reported as one line on stderr
(never a traceback); 1 is kept for "waited and it did not happen"; 130 interrupted
(Ctrl-C); 141 the reader of standard output went away (``table list | head -1``,
``watch | head -1``), quietly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from hcat_notify.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, ReaderGone, parse_duration
from hcat_notify.cli.root import cli

__all__ = ["EXIT_BROKEN_PIPE", "cli", "main", "parse_duration"]

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `cmd | head -1`


def _quiet_stdout() -> None:
    # Later writes (and the interpreter's final flush) must not raise again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hcat-notify`` console script; returns the exit code."""
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="hcat-notify",
            standalone_mode=False,
        )
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx is not None else str(exc))
        return EXIT_ERROR
    except click.ClickException as exc:  # usage errors and bad option values: one line
        click.echo(f"hcat-notify: error: {exc.format_message()}", err=True)
        return EXIT_ERROR
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.Abort:
        click.echo("hcat-notify: error: interrupted", err=True)
        return EXIT_INTERRUPTED
    except ReaderGone:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except SystemExit as exc:
        if isinstance(exc.code, str):
            return EXIT_ERROR
        return int(exc.code or 0)
    return result if isinstance(result, int) else 0


def run() -> None:  # pragma: no cover - the console script
    """``hcat-notify`` console script: exit with :func:`main`'s code."""
    sys.exit(main())
