"""What every ``hcat-notify`` command shares, and what command plugins build on.

Commands (ours, and those a plugin such as ``spark_output`` registers through the
``hcat_notify.commands`` entry point group) take a :class:`CliContext` with
``@click.pass_obj``, wrap themselves in :func:`handle_errors` and print through
:func:`emit`, so that every command honours ``--output`` and reports a mistake as one
line. Nothing here imports the store, the broker or the settings at module level: the
command line starts in a fraction of the time those take to import.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import select
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from hcat_notify.durations import format_duration, parse_duration
from hcat_notify.errors import HcatNotifyError

if TYPE_CHECKING:
    from hcat_notify.config import Settings
    from hcat_notify.model.specs import PartitionSpec
    from hcat_notify.store import Catalog

__all__ = [
    "CREATES_CATALOG",
    "EVENT_ID",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_TIMEOUT",
    "SECONDS",
    "CliContext",
    "ReaderGone",
    "emit",
    "emit_pages",
    "fail",
    "format_duration",
    "handle_errors",
    "json_default",
    "output_option",
    "parse_duration",
    "progress_bar",
    "spec_args",
    "stdout_pipe",
    "stdout_reader_gone",
]

EXIT_ERROR = 2
EXIT_TIMEOUT = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report an interrupted command
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class _Seconds(click.ParamType[float]):
    """A positive, finite number of seconds (``nan``, ``inf``, ``0`` and ``-1`` refused)."""

    name = "seconds"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"{value!r} must be a positive, finite number of seconds", param, ctx)
        return number


SECONDS = _Seconds()
"""Click type for ``--timeout``-like options."""

_MAX_EVENT_ID = 2**63 - 1


class _EventId(click.ParamType[int]):
    """An event id: a positive integer (``0``, ``-1``, ``abc`` refused, naming the rule)."""

    name = "event_id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            number = int(text) if re.fullmatch(r"-?\d{1,20}", text) else 0
        if not 1 <= number <= _MAX_EVENT_ID:
            self.fail(
                f"{value!r} is not an event id: an event id is a positive integer "
                f"(1 to {_MAX_EVENT_ID})",
                param,
                ctx,
            )
        return number


EVENT_ID = _EventId()
"""Click type of an event id (``outbox retry``, ``webhooks replay --from-event``)."""


class ReaderGone(Exception):  # noqa: N818 - a condition, not a failure
    """Standard output's reader went away (``hcat-notify ... | head -1``): the command
    ends quietly with exit 141, as a Unix tool killed by SIGPIPE does."""


def stdout_pipe() -> int | None:
    """Standard output's descriptor if it is a pipe or a socket, else None (a file or a
    terminal, whose reader never goes away; no real descriptor, as under capture)."""
    try:
        fd = sys.stdout.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError):
        return None
    return fd if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None


def stdout_reader_gone(fd: int | None = None, timeout_ms: int = 0) -> bool:
    """Whether the reader of standard output (or of the pipe ``fd``) went away: its write
    end reports POLLERR / POLLHUP once nobody reads. Waits up to ``timeout_ms``."""
    fd = stdout_pipe() if fd is None else fd
    if fd is None:
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR, POLLHUP and POLLNVAL come whatever the mask
    try:
        return bool(poller.poll(timeout_ms))
    except OSError:
        return False


class CliContext:
    """What the global options give every command (``@click.pass_obj``)."""

    def __init__(
        self,
        overrides: dict[str, Any] | None = None,
        config_file: Path | None = None,
        output: str = "text",
    ) -> None:
        self.overrides = dict(overrides or {})
        self.config_file = config_file
        self.output = output
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        """The settings, loaded once, on first use."""
        if self._settings is None:
            from hcat_notify.config import load_settings

            self._settings = load_settings(config_file=self.config_file, **self.overrides)
        return self._settings

    @contextlib.contextmanager
    def catalog(
        self, *, write: bool = True, idle_in_transaction: float | None = None
    ) -> Iterator[Catalog]:
        """The open catalog, closed at the end of the ``with`` block; ``write=False``
        for commands that only read.

        A reading command never creates or migrates a catalog. A writing one migrates
        it, but creates it (a SQLite file, the schema of an empty database) only if it
        is one of :data:`CREATES_CATALOG`, what a fresh install begins with: any other,
        pointed at a mistyped home, says ``no catalog at ...`` and creates nothing. One
        of those that fails, having created a SQLite catalog that still holds nothing
        (no table, no event, no pending write), removes it again, and the directories
        it made for it: a failed first step leaves nothing behind.
        ``idle_in_transaction`` is :meth:`Catalog.open`'s.
        """
        from hcat_notify.store import Catalog

        if not write:
            with Catalog.open(self.settings, upgrade=False, create=False) as opened:
                yield opened
            return
        create = _command_path() in CREATES_CATALOG
        made = _sqlite_paths_made(self.settings.database_url) if create else None
        undo = False
        try:
            with Catalog.open(
                self.settings, create=create, idle_in_transaction=idle_in_transaction
            ) as opened:
                try:
                    yield opened
                except BaseException as exc:
                    undo = made is not None and _failure(exc) and _holds_nothing(opened)
                    raise
        finally:
            if undo and made is not None:
                _remove_made(made)


CREATES_CATALOG = frozenset({("table", "create"), ("import",), ("db", "upgrade")})
"""The commands (their names under ``hcat-notify``) that may create a catalog where there
is none: the first steps of a fresh install (README's Quickstart and "Try it by hand",
``deploy/local/demo.sh``). Kept here rather than on each command, since ``import`` is a
plugin's (``spark_output``)."""


def _sqlite_paths_made(url: str) -> list[Path] | None:
    """What opening the SQLite catalog at ``url`` would create: its file, then the
    missing directories above it, innermost first; None when the file exists or the
    catalog is not a SQLite file."""
    from hcat_notify.store.quick import sqlite_file

    path = sqlite_file(url)
    if path is None:
        return None
    path = path.absolute()
    if path.exists():
        return None
    made = [path]
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        made.append(parent)
        parent = parent.parent
    return made


def _failure(exc: BaseException) -> bool:
    return not (isinstance(exc, SystemExit) and exc.code in (0, None))


def _holds_nothing(catalog: Catalog) -> bool:
    """A catalog nobody wrote to: no table, no event, no write pending (another process
    may have created it at the same moment and used it; then it stays)."""
    try:
        return (
            not catalog.list_tables(limit=1)
            and catalog.last_event_id() == 0
            and not catalog.commits.pending()
        )
    except HcatNotifyError:
        return False


def _remove_made(made: list[Path]) -> None:
    """Remove a SQLite catalog file (with its journal files) and the directories made
    for it, those that are empty."""
    database, *directories = made
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            database.with_name(database.name + suffix).unlink()
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:
            return


def _command_path() -> tuple[str, ...]:
    """The running command's names below the root (``("table", "create")``)."""
    names: list[str] = []
    ctx = click.get_current_context(silent=True)
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return tuple(reversed(names))


def fail(message: str, code: int = EXIT_ERROR) -> None:
    """Print ``hcat-notify: error: <message>`` on stderr and exit with ``code``."""
    click.echo(f"hcat-notify: error: {message}", err=True)
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Map our errors to one line on stderr and exit code 2; Ctrl-C to exit code 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except HcatNotifyError as exc:
            fail(_one_line(str(exc)))
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED)
        return None

    return wrapper  # type: ignore[return-value]


def _one_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return "; ".join(lines) if lines else "failed"


def output_option(func: F) -> F:
    """``--output text|json`` on a command (also accepted before the command)."""

    def callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.ensure_object(CliContext).output = value

    return click.option(
        "--output",
        "-o",
        type=click.Choice(["text", "json"]),
        default=None,
        expose_value=False,
        callback=callback,
        is_eager=True,
        help="Output format (default: text).",
    )(func)


def json_default(value: Any) -> Any:
    """``json.dumps`` fallback: datetimes as ISO 8601, durations as seconds."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def emit(ctx: CliContext, data: Any, text: Callable[[], str]) -> None:
    """Print ``data`` as JSON with ``--output json``, else the text ``text()`` builds."""
    if ctx.output == "json":
        import json

        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=json_default))
    else:
        click.echo(text())


def emit_pages(
    ctx: CliContext,
    pages: Iterable[Sequence[T]],
    data: Callable[[T], Any],
    line: Callable[[T], str],
    empty: str,
) -> None:
    """Print a listing as its pages arrive: with ``--output json`` one JSON array (as
    :func:`emit` prints it) of ``data(item)``, else one ``line(item)`` each, or ``empty``
    when there is none. The first page is out before the second is read, so ``| head``
    costs one page however long the listing."""
    import json

    as_json = ctx.output == "json"
    first = True
    for page in pages:
        for item in page:
            if as_json:
                text = json.dumps(data(item), indent=2, ensure_ascii=False, default=json_default)
                lead = "[\n  " if first else ",\n  "
                click.echo(lead + text.replace("\n", "\n  "), nl=False)
            else:
                click.echo(line(item))
            first = False
        sys.stdout.flush()
    if as_json:
        click.echo("[]" if first else "\n]")
    elif first:
        click.echo(empty)


def spec_args(values: Sequence[str]) -> PartitionSpec | None:
    """``K=V`` arguments as a spec, or None when there are none."""
    if not values:
        return None
    from hcat_notify.model.specs import PartitionSpec

    return PartitionSpec.from_args(values)


@contextlib.contextmanager
def progress_bar(enabled: bool, label: str) -> Iterator[Callable[[int, int, str], None]]:
    """A ``progress(done, total, item)`` callback: a bar on stderr if ``enabled``."""
    with contextlib.ExitStack() as stack:
        bar = (
            stack.enter_context(click.progressbar(length=1, label=label, file=sys.stderr))
            if enabled
            else None
        )

        def progress(done: int, total: int, item: str) -> None:
            if bar is not None:
                bar.length = total
                bar.label = f"{label} {item}"
                bar.update(1)

        yield progress
