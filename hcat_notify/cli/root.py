"""The root ``hcat-notify`` group: global options and lazily loaded commands.

A command's module is imported only when that command runs, so ``hcat-notify --help``
costs click and nothing else. Commands of other packages (``spark_output``'s compact and
recover) arrive through the ``hcat_notify.commands`` entry point group: this package
never imports them by name. The group is read from the installed distributions'
``entry_points.txt`` files directly: ``importlib.metadata`` alone would cost a third of
the start-up budget of ``hcat-notify --help`` (docs/architecture.md, "Start-up time").
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from hcat_notify.cli.common import CliContext, ReaderGone, stdout_reader_gone

__all__ = ["ENTRY_POINT_GROUP", "cli", "find_plugins"]

ENTRY_POINT_GROUP = "hcat_notify.commands"

# name -> (module, attribute, one-line help shown by --help without importing the module)
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "table": ("hcat_notify.cli.tables", "table", "Register, inspect and drop tables."),
    "topic": ("hcat_notify.cli.tables", "topic", "Print the topic a table's messages go to."),
    "partitions": (
        "hcat_notify.cli.partitions",
        "partitions",
        "List, add, drop and discover a table's partitions.",
    ),
    "mark-done": (
        "hcat_notify.cli.delivery",
        "mark_done",
        "Announce that every partition matching K=V... is complete.",
    ),
    "relay": ("hcat_notify.cli.delivery", "relay", "Publish the outbox to the broker."),
    "status": ("hcat_notify.cli.outbox", "status", "Outbox backlog, relays, parked events."),
    "outbox": ("hcat_notify.cli.outbox", "outbox", "Retry or drop events parked as undeliverable."),
    "webhooks": (
        "hcat_notify.cli.webhooks",
        "webhooks",
        "Signed HTTP deliveries of tables' events: add, list, show, pause, rotate, replay.",
    ),
    "watch": ("hcat_notify.cli.delivery", "watch", "Print tables' notifications as they come."),
    "wait": (
        "hcat_notify.cli.delivery",
        "wait",
        "Exit 0 once a mark-set-done covers K=V..., 1 on timeout.",
    ),
    "sweep": (
        "hcat_notify.cli.delivery",
        "sweep",
        "Delete expired retention rows and old outbox events.",
    ),
    "completeness": (
        "hcat_notify.cli.completeness",
        "completeness",
        "Where a set stands under its table's rule: expected, present, missing parts.",
    ),
    "subscribers": (
        "hcat_notify.cli.delivery",
        "subscribers",
        "Durable subscribers: owners, watermarks, lag.",
    ),
    "serve": ("hcat_notify.cli.serve", "serve", "Serve the HTTP API (needs the [api] extra)."),
    "hash-secret": (
        "hcat_notify.cli.serve",
        "hash_secret",
        "Print the stored form of an API principal's secret.",
    ),
    "db": ("hcat_notify.cli.admin", "db", "Manage the catalog database."),
    "broker": ("hcat_notify.cli.admin", "broker", "Check the message broker."),
}


def find_plugins(group: str = ENTRY_POINT_GROUP) -> dict[str, str]:
    """``name -> "module:attribute"`` of the entry points in ``group``.

    Reads ``entry_points.txt`` of every ``*.dist-info`` and ``*.egg-info`` on
    ``sys.path`` (the file format of the packaging specification: INI sections named
    after groups, ``name = module:attribute`` lines); the first distribution on the path
    to define a name wins, as with imports.
    """
    found: dict[str, str] = {}
    for directory in sys.path:
        try:
            names = os.listdir(directory or ".")
        except OSError:
            continue
        for name in sorted(names):
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(directory or ".", name, "entry_points.txt")) as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            section = None
            for line in lines:
                stripped = line.strip()
                if stripped.startswith("[") and stripped.endswith("]"):
                    section = stripped[1:-1].strip()
                elif section == group and "=" in stripped and not stripped.startswith("#"):
                    key, _, value = stripped.partition("=")
                    found.setdefault(key.strip(), value.split("[")[0].strip())
    return found


@contextlib.contextmanager
def _pipe_errors() -> Iterator[None]:
    """A broken pipe as every command ends on it: :class:`ReaderGone` when standard
    output's reader went away (``table list | head -1``: exit 141, quietly, as for
    ``watch``), else one error line. Click would exit 1 on either, silently."""
    try:
        yield
    except BrokenPipeError as exc:
        if stdout_reader_gone():
            raise ReaderGone from exc
        raise click.ClickException(f"broken pipe: {exc}") from exc


class _LazyGroup(click.Group):
    """A group whose commands are imported on first use (ours) or found as plugins."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plugins: dict[str, str] | None = None

    def _plugin_entry_points(self) -> dict[str, str]:
        if self._plugins is None:
            self._plugins = {
                name: target for name, target in find_plugins().items() if name not in _COMMANDS
            }
        return self._plugins

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with _pipe_errors():  # --help, --version
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _pipe_errors():  # every command's output
            return super().invoke(ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*_COMMANDS, *self._plugin_entry_points(), *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        ours = _COMMANDS.get(cmd_name)
        if ours is not None:
            module, attribute, _ = ours
            command = getattr(importlib.import_module(module), attribute)
        else:
            plugin = self._plugin_entry_points().get(cmd_name)
            if plugin is None:
                return None
            module, _, attribute = plugin.partition(":")
            command = importlib.import_module(module.strip())
            for part in attribute.strip().split("."):
                command = getattr(command, part)
        if not isinstance(command, click.Command):  # pragma: no cover - a broken plugin
            raise click.ClickException(f"command {cmd_name!r} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in _COMMANDS and name not in self.commands:
                rows.append((name, _COMMANDS[name][2]))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config", "config_file", type=click.Path(path_type=Path), help="TOML settings file."
)
@click.option(
    "--home",
    type=click.Path(),  # a string: load_settings refuses an empty one (Path("") is ".")
    help="Data directory (HCAT_NOTIFY_HOME).  [default: ~/.hcat-notify]",
)
@click.option("--db-url", help="Catalog database URL (HCAT_NOTIFY_DB_URL).")
@click.option("--broker-url", help="stomp://host:port[,...] (HCAT_NOTIFY_BROKER_URL).")
@click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", help="Output format."
)
@click.option("--verbose", "-v", count=True, help="Log more (repeat for debug).")
@click.version_option(package_name="hcat-notify")
@click.pass_context
def cli(
    ctx: click.Context,
    config_file: Path | None,
    home: str | None,
    db_url: str | None,
    broker_url: str | None,
    output: str,
    verbose: int,
) -> None:
    """Partition notifications for Hive-style partitioned tables."""
    import logging

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Third-party chatter only at -vv. stomp.py warns once per address and attempt while
    # a broker is down; hcat_notify.broker says the same once per reconnect round.
    logging.getLogger("alembic").setLevel(logging.DEBUG if verbose > 1 else logging.WARNING)
    logging.getLogger("stomp.py").setLevel(logging.DEBUG if verbose > 1 else logging.ERROR)
    overrides = {"home": home, "db_url": db_url, "broker_url": broker_url}
    # A command's own --output (after its name) is parsed later and overrides this.
    ctx.obj = CliContext(overrides, config_file, output)
