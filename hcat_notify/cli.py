"""The ``hcat-notify`` command line.

Exit codes: 0 success; 2 a user or environment error, reported as one line on stderr
(never a traceback); 1 is kept for "waited and it did not happen".
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from hcat_notify.broker import consumer_connection, publisher_connection
from hcat_notify.consumer import Notification, NotificationConsumer
from hcat_notify.errors import BrokerTimeoutError, ConfigError, HcatNotifyError, InvalidInputError
from hcat_notify.relay import DEFAULT_LEASE_NAME, Relay, RelayConfig
from hcat_notify.settings import Settings, load_settings
from hcat_notify.specs import PartitionSpec
from hcat_notify.store import Catalog, PartitionInfo, TableInfo
from hcat_notify.store import engine as engines
from hcat_notify.topics import destination_for
from hcat_notify.writer import send_mark_set_done

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_output.compaction import CompactionPolicy

__all__ = ["main", "parse_duration"]

logger = logging.getLogger(__name__)

EXIT_ERROR = 2
EXIT_TIMEOUT = 1
F = TypeVar("F", bound=Callable[..., Any])

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """Parse ``7d``, ``12h``, ``30m``, ``45s``, ``2w`` (combinations like ``1d12h`` too).

    Raises:
        InvalidInputError: anything else, or a zero duration.
    """
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not compact or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise InvalidInputError(f"invalid duration {text!r}: use e.g. 7d, 12h, 30m or 45s")
    total = sum((timedelta(**{_UNITS[unit]: float(number)}) for number, unit in parts), timedelta())
    if total <= timedelta(0):
        raise InvalidInputError(f"duration {text!r} must be positive")
    return total


class _Context:
    """What the group options give every command."""

    def __init__(self, overrides: dict[str, Any], config_file: Path | None, output: str) -> None:
        self.overrides = overrides
        self.config_file = config_file
        self.output = output
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(config_file=self.config_file, **self.overrides)
        return self._settings

    def catalog(self) -> Catalog:
        return Catalog.open(self.settings)


def _fail(message: str) -> None:
    click.echo(f"hcat-notify: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _handle_errors(func: F) -> F:
    """Map our errors to one line on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except HcatNotifyError as exc:
            _fail(str(exc))
        return None

    return wrapper  # type: ignore[return-value]


def _output_option(func: F) -> F:
    """``--output text|json`` on every command (also accepted before the command)."""

    def callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.ensure_object(_Context).output = value

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


def _emit(ctx: _Context, data: Any, text: Callable[[], str]) -> None:
    if ctx.output == "json":
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=_json_default))
    else:
        click.echo(text())


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return int(value.total_seconds())
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _table_dict(table: TableInfo) -> dict[str, Any]:
    return {
        "table": str(table.name),
        "db": table.name.db,
        "name": table.name.table,
        "location": table.location,
        "format": table.storage_format,
        "partition_keys": list(table.partition_keys),
        "table_type": table.table_type,
        "properties": dict(table.properties),
        "retention_seconds": int(table.retention.total_seconds()),
        "topic": table.topic,
        "destination": destination_for(table.topic),
        "created_at": table.created_at,
        "version": table.version,
    }


def _partition_dict(partition: PartitionInfo) -> dict[str, Any]:
    return {
        "spec": partition.spec.to_path(),
        "values": partition.spec.as_dict(),
        "location": partition.location,
        "file_count": partition.file_count,
        "bytes": partition.total_bytes,
        "archived": partition.archived,
        "job_id": partition.job_id,
        "event_id": partition.event_id,
        "created_at": partition.created_at,
    }


def _format_table(table: TableInfo) -> str:
    rows = [
        ("table", str(table.name)),
        ("location", table.location),
        ("format", table.storage_format),
        ("partition keys", ", ".join(table.partition_keys)),
        ("table type", table.table_type),
        ("retention", str(table.retention)),
        ("topic", table.topic),
        ("destination", destination_for(table.topic)),
        ("created", table.created_at.isoformat(timespec="seconds")),
        ("version", str(table.version)),
    ]
    rows += [(f"property {key}", value) for key, value in sorted(table.properties.items())]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config", "config_file", type=click.Path(path_type=Path), help="TOML settings file."
)
@click.option("--home", type=click.Path(path_type=Path), help="Data directory (HCAT_NOTIFY_HOME).")
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
    home: Path | None,
    db_url: str | None,
    broker_url: str | None,
    output: str,
    verbose: int,
) -> None:
    """Partition notifications for Hive-style partitioned tables."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Third-party chatter only at -vv.
    for noisy in ("alembic", "stomp.py"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose > 1 else logging.WARNING)
    overrides = {"home": home, "db_url": db_url, "broker_url": broker_url}
    ctx.obj = _Context(overrides, config_file, output)


# -- table ----------------------------------------------------------------------------


@cli.group()
def table() -> None:
    """Register and inspect tables."""


@table.command("create")
@click.argument("name", metavar="DB.TABLE")
@click.option("--location", required=True, help="Table root directory or URI.")
@click.option("--partition-keys", required=True, help="Ordered keys, comma-separated: k1,k2.")
@click.option(
    "--format",
    "storage_format",
    type=click.Choice(["parquet", "orc", "csv", "json"]),
    default="parquet",
    show_default=True,
)
@click.option(
    "--retention", default="7d", show_default=True, help="How long mark-set-done messages are kept."
)
@click.option("--topic", help="Topic name for this table (hcat.msgbus.topic.name).")
@click.option("--external", is_flag=True, help="Register as EXTERNAL_TABLE.")
@_output_option
@click.pass_obj
@_handle_errors
def table_create(
    obj: _Context,
    name: str,
    location: str,
    partition_keys: str,
    storage_format: str,
    retention: str,
    topic: str | None,
    external: bool,
) -> None:
    """Register a partitioned table."""
    keys = [key.strip() for key in partition_keys.split(",")]
    if any(not key for key in keys):
        raise InvalidInputError(f"empty partition key in {partition_keys!r}")
    period = parse_duration(retention)
    with obj.catalog() as catalog:
        info = catalog.create_table(
            name,
            location=location,
            partition_keys=keys,
            storage_format=storage_format,
            table_type="EXTERNAL_TABLE" if external else "MANAGED_TABLE",
            retention=period,
            topic=topic,
        )
    _emit(obj, _table_dict(info), lambda: f"created {info.name} (topic {info.topic})")


@table.command("show")
@click.argument("name", metavar="DB.TABLE")
@_output_option
@click.pass_obj
@_handle_errors
def table_show(obj: _Context, name: str) -> None:
    """Show a table's definition and topic."""
    with obj.catalog() as catalog:
        info = catalog.get_table(name)
    _emit(obj, _table_dict(info), lambda: _format_table(info))


@table.command("list")
@click.option("--db", help="Only this database.")
@_output_option
@click.pass_obj
@_handle_errors
def table_list(obj: _Context, db: str | None) -> None:
    """List registered tables."""
    with obj.catalog() as catalog:
        tables = catalog.list_tables(db)
    _emit(
        obj,
        [_table_dict(info) for info in tables],
        lambda: (
            "\n".join(f"{info.name}\t{info.topic}\t{info.location}" for info in tables)
            or "no tables"
        ),
    )


# -- topic, partitions ------------------------------------------------------------------


@cli.command()
@click.argument("name", metavar="DB.TABLE")
@_output_option
@click.pass_obj
@_handle_errors
def topic(obj: _Context, name: str) -> None:
    """Print the topic a table's messages are published to."""
    with obj.catalog() as catalog:
        info = catalog.get_table(name)
    _emit(
        obj,
        {"table": str(info.name), "topic": info.topic, "destination": destination_for(info.topic)},
        lambda: info.topic,
    )


def _spec_args(values: Sequence[str]) -> PartitionSpec | None:
    return PartitionSpec.from_args(values) if values else None


@cli.command()
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="[K=V]...")
@_output_option
@click.pass_obj
@_handle_errors
def partitions(obj: _Context, name: str, spec: tuple[str, ...]) -> None:
    """List a table's registered partitions, optionally matching K=V filters."""
    with obj.catalog() as catalog:
        found = catalog.list_partitions(name, _spec_args(spec))
    _emit(
        obj,
        [_partition_dict(item) for item in found],
        lambda: (
            "\n".join(
                f"{item.spec}\t{item.location}\t{item.file_count} files\t{item.total_bytes} bytes"
                for item in found
            )
            or "no partitions"
        ),
    )


# -- db, broker ------------------------------------------------------------------------------


@cli.group()
def db() -> None:
    """Manage the catalog database."""


@db.command("upgrade")
@_output_option
@click.pass_obj
@_handle_errors
def db_upgrade(obj: _Context) -> None:
    """Apply pending schema migrations."""
    engine = engines.open_engine(obj.settings.database_url)
    try:
        before, after = engines.upgrade(engine)
    finally:
        engine.dispose()
    url = engines.redact(obj.settings.database_url)
    _emit(
        obj,
        {"database": url, "from": before, "to": after},
        lambda: (
            f"{url}: already at {after}"
            if before == after
            else f"{url}: {before or 'empty'} -> {after}"
        ),
    )


@cli.group()
def broker() -> None:
    """Check the message broker."""


@broker.command("check")
@_output_option
@click.pass_obj
@_handle_errors
def broker_check(obj: _Context) -> None:
    """Connect as consumer and publisher and pass one message between them."""
    settings = obj.settings
    topic = f"{settings.topic_prefix}.healthcheck"
    token = uuid.uuid4().hex
    with consumer_connection(settings) as consumer, publisher_connection(settings) as publisher:
        consumer.subscribe(
            destination_for(topic), "healthcheck", selector=f"HCAT_CHECK = '{token}'"
        )
        started = time.monotonic()
        publisher.send(destination_for(topic), "{}", {"HCAT_CHECK": token})
        received = consumer.receive(timeout=settings.broker_timeout)
        if received is None:
            raise BrokerTimeoutError(
                f"the consumer did not receive the check message on {topic} "
                f"within {settings.broker_timeout:g}s"
            )
        elapsed_ms = (time.monotonic() - started) * 1000
        publisher_at, consumer_at = str(publisher.address), str(consumer.address)
        results: dict[str, Any] = {
            "publisher": {"broker": publisher_at, "user": settings.broker_user},
            "consumer": {"broker": consumer_at, "user": settings.consumer_user},
            "topic": topic,
            "round_trip_ms": round(elapsed_ms, 1),
        }
    _emit(
        obj,
        results,
        lambda: (
            f"publisher: connected to {publisher_at} as {settings.broker_user}\n"
            f"consumer:  connected to {consumer_at} as {settings.consumer_user}\n"
            f"round trip on {topic}: {elapsed_ms:.1f} ms"
        ),
    )


# -- delivery: mark-done, relay, status, watch, wait, sweep ------------------------------


@cli.command("mark-done")
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="K=V...")
@_output_option
@click.pass_obj
@_handle_errors
def mark_done(obj: _Context, name: str, spec: tuple[str, ...]) -> None:
    """Announce that every partition matching K=V... is complete."""
    partial = PartitionSpec.from_args(spec)
    event_id = send_mark_set_done(name, partial, settings=obj.settings)
    _emit(
        obj,
        {"table": name, "spec": partial.canonical(), "event_id": event_id},
        lambda: f"mark-set-done {partial.canonical()} recorded as event {event_id}",
    )


@cli.command()
@click.option("--once", is_flag=True, help="Publish what is pending, then exit.")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=500, show_default=True)
@click.option(
    "--no-transactions",
    is_flag=True,
    help="Send each event with its own receipt instead of STOMP transactions.",
)
@click.option(
    "--lease-ttl",
    type=click.FloatRange(min=1),
    default=15.0,
    show_default=True,
    help="Seconds a standby relay waits before taking over from a silent one.",
)
@_output_option
@click.pass_obj
@_handle_errors
def relay(
    obj: _Context, once: bool, batch_size: int, no_transactions: bool, lease_ttl: float
) -> None:
    """Publish the outbox to the broker (long-running; SIGTERM/SIGINT stop it cleanly)."""
    if logging.getLogger().level > logging.INFO:
        logging.getLogger().setLevel(logging.INFO)
    config = RelayConfig(
        batch_size=batch_size, use_transactions=not no_transactions, lease_ttl=lease_ttl
    )
    with Relay(obj.settings, config=config) as publisher:
        if once:
            count = publisher.drain()
            _emit(obj, {"published": count}, lambda: f"published {count} events")
            return
        previous = {
            sig: signal.signal(sig, lambda *_: publisher.stop())
            for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            stats = publisher.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    _emit(
        obj,
        {"published": stats.published, "batches": stats.batches, "failures": stats.failures},
        lambda: f"relay stopped after publishing {stats.published} events",
    )


@cli.command()
@_output_option
@click.pass_obj
@_handle_errors
def status(obj: _Context) -> None:
    """Outbox backlog, oldest unpublished event, last publish per topic, relay owner."""
    with obj.catalog() as catalog:
        backlog, oldest = catalog.outbox_backlog()
        per_topic = catalog.last_published_by_topic()
        lease = catalog.get_lease(DEFAULT_LEASE_NAME)
    now = datetime.now(UTC)
    age = (now - oldest).total_seconds() if oldest is not None else None
    relay_info = None
    if lease is not None:
        relay_info = {
            "owner": lease.owner,
            "expires_at": lease.expires_at,
            "alive": lease.expires_at > now,
        }
    data = {
        "backlog": backlog,
        "oldest_unpublished_age_seconds": age,
        "last_publish_by_topic": per_topic,
        "relay": relay_info,
    }

    def text() -> str:
        lines = [f"outbox backlog: {backlog} event(s)"]
        if age is not None:
            lines.append(f"oldest unpublished: {age:.1f} s ago")
        if relay_info is None:
            lines.append("relay: not running")
        else:
            state = "active" if relay_info["alive"] else "lease expired"
            lines.append(f"relay: {relay_info['owner']} ({state})")
        for topic_name, when in per_topic.items():
            lines.append(f"last publish {topic_name}: {when.isoformat(timespec='seconds')}")
        return "\n".join(lines)

    _emit(obj, data, text)


@cli.command()
@click.argument("names", nargs=-1, required=True, metavar="DB.TABLE...")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, with headers.")
@click.option("--max-messages", type=click.IntRange(min=1), help="Exit after this many.")
@click.option("--timeout", type=click.FloatRange(min=0), help="Exit after this many idle seconds.")
@click.option("--cursor", type=click.IntRange(min=0), help="Last event id already seen.")
@click.pass_obj
@_handle_errors
def watch(
    obj: _Context,
    names: tuple[str, ...],
    as_json: bool,
    max_messages: int | None,
    timeout: float | None,
    cursor: int | None,
) -> None:
    """Print notifications of tables: retained and registered first, then live."""

    def show(notification: Notification) -> None:
        if as_json:
            line = json.dumps(notification.as_dict(), ensure_ascii=False, default=_json_default)
        else:
            line = (
                f"{notification.event_id}\t{notification.event_type.value}\t"
                f"{notification.table}\t{notification.spec}\t({notification.source.value})"
            )
        click.echo(line)

    with NotificationConsumer(list(names), settings=obj.settings, cursor=cursor) as consumer:
        previous = signal.signal(signal.SIGTERM, lambda *_: consumer.stop())
        try:
            consumer.run(show, max_messages=max_messages, timeout=timeout)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)


@cli.command()
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="K=V...")
@click.option("--timeout", type=click.FloatRange(min=0), default=3600.0, show_default=True)
@_output_option
@click.pass_obj
@_handle_errors
def wait(obj: _Context, name: str, spec: tuple[str, ...], timeout: float) -> None:
    """Exit 0 once a mark-set-done covers K=V... (at once if retained), 1 on timeout."""
    wanted = PartitionSpec.from_args(spec)
    started = time.monotonic()
    with NotificationConsumer([name], settings=obj.settings) as consumer:
        done = consumer.wait_for_set_done(name, wanted, timeout)
    waited = time.monotonic() - started
    _emit(
        obj,
        {
            "table": name,
            "spec": wanted.canonical(),
            "done": done,
            "waited_seconds": round(waited, 3),
        },
        lambda: (
            f"{name} {wanted.canonical()}: " + ("done" if done else f"not done after {timeout:g}s")
        ),
    )
    if not done:
        sys.exit(EXIT_TIMEOUT)


@cli.command()
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@_output_option
@click.pass_obj
@_handle_errors
def sweep(obj: _Context, batch_size: int) -> None:
    """Delete expired mark-set-done retention rows, in batches."""
    with obj.catalog() as catalog:
        removed = catalog.sweep_expired(batch_size=batch_size)
    _emit(obj, {"removed": removed}, lambda: f"removed {removed} expired retention row(s)")


@cli.command("recover")
@click.argument("name", required=False, metavar="[DB.TABLE]")
@click.option("--force", is_flag=True, help="Also writes whose process still seems alive.")
@_output_option
@click.pass_obj
@_handle_errors
def recover_command(obj: _Context, name: str | None, force: bool) -> None:
    """Roll interrupted writes forward or back so files, registry and messages agree."""
    try:
        from spark_output.committer import recover as recover_writes
    except ImportError as exc:  # pragma: no cover - spark_output ships with hcat_notify
        raise HcatNotifyError(f"spark_output is not installed: {exc}") from exc
    with obj.catalog() as catalog:
        if name is not None:
            catalog.get_table(name)
        outcomes = recover_writes(catalog, name, force=force)
    _emit(
        obj,
        [{"job_id": o.job_id, "table": o.table, "action": o.action} for o in outcomes],
        lambda: (
            "\n".join(f"{o.job_id}\t{o.table}\t{o.action}" for o in outcomes)
            or "nothing to recover"
        ),
    )


@contextlib.contextmanager
def _progress_bar(enabled: bool, label: str) -> Iterator[Callable[[int, int, str], None]]:
    """A progress callback for compact_table / purge_superseded: a bar on stderr if
    ``enabled``, else one that does nothing."""
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


def _is_local_master(master: str) -> bool:
    return master == "local" or master.startswith(("local[", "local-cluster["))


@contextlib.contextmanager
def _spark_session(master: str) -> Iterator[SparkSession]:
    """A Spark session with ``master`` for one command, stopped at its end.

    A session already running in this process (the command called from a Spark driver)
    is used as it is and left running. Executors run this interpreter
    (``PYSPARK_PYTHON`` defaults to it), so they can import spark_output; a local master
    binds to 127.0.0.1. Further settings come from Spark's own configuration
    (``SPARK_CONF_DIR/spark-defaults.conf``).

    Raises:
        ConfigError: pyspark is not installed, or Spark does not start.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ConfigError(
            f"--spark needs pyspark, which is not installed ({exc}); "
            "install it with: pip install 'hcat-notify[spark]'"
        ) from exc
    from pyspark import SparkContext

    running: SparkSession | None = None
    with contextlib.suppress(Exception):  # no active or default session
        running = SparkSession.active()
    if running is None and getattr(SparkContext, "_active_spark_context", None) is not None:
        running = SparkSession.builder.getOrCreate()  # a bare SparkContext: not ours either
    if running is not None:
        if running.sparkContext.master != master:
            logger.warning(
                "using the running Spark session (master %s), not %s",
                running.sparkContext.master,
                master,
            )
        yield running
        return
    local = _is_local_master(master)
    env = {"PYSPARK_PYTHON": sys.executable, **({"SPARK_LOCAL_IP": "127.0.0.1"} if local else {})}
    saved = {key: os.environ.get(key) for key in env}
    for key, value in env.items():
        os.environ.setdefault(key, value)
    try:
        builder = (
            SparkSession.builder.master(master)
            .appName("hcat-notify-compact")
            .config("spark.ui.showConsoleProgress", "false")
        )
        if local:
            builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
                "spark.driver.host", "127.0.0.1"
            )
        session = builder.getOrCreate()
    except Exception as exc:  # no Java, a bad master URL, no cluster there: one line
        lines = [line for line in str(exc).splitlines() if line.strip()]
        reason = lines[0].strip() if lines else type(exc).__name__
        raise ConfigError(f"cannot start Spark with master {master!r}: {reason}") from exc
    finally:
        # The JVM and the context have read them; do not leak them into the caller.
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
    verbose = logging.getLogger().getEffectiveLevel() <= logging.INFO
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    try:
        yield session
    finally:
        session.stop()


_COMPACT_ONLY = {
    "mode": "--mode",
    "min_files": "--min-files",
    "small_file_mb": "--small-file-mb",
    "spark_master": "--spark",
}


@cli.command("compact")
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="[K=V]...")
@click.option("--mode", type=click.Choice(["merge", "har"]), default="merge", show_default=True)
@click.option("--min-files", type=click.IntRange(min=2), default=10, show_default=True)
@click.option(
    "--small-file-mb",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Files under this size count as small.",
)
@click.option(
    "--spark",
    "spark_master",
    metavar="MASTER",
    help="Compact each partition as a task of a Spark session with this master "
    "(local[2], yarn, spark://host:7077); default: threads of this process.",
)
@click.option(
    "--purge",
    is_flag=True,
    help="Do not compact: delete the directories earlier compactions superseded, "
    "once older than --older-than, no longer registered and safe to lose.",
)
@click.option(
    "--older-than",
    metavar="AGE",
    help="With --purge: keep directories superseded less than AGE ago (7d, 12h, 30m), "
    "for readers that listed them before the switch.  [default: 1h]",
)
@click.option("--dry-run", is_flag=True, help="Show what would be done; change nothing.")
@_output_option
@click.pass_obj
@_handle_errors
def compact_command(
    obj: _Context,
    name: str,
    spec: tuple[str, ...],
    mode: str,
    min_files: int,
    small_file_mb: int,
    spark_master: str | None,
    purge: bool,
    older_than: str | None,
    dry_run: bool,
) -> None:
    """Compact existing partitions' small files (merge or HAR), swapping each atomically.

    With --purge, delete instead the old directories earlier compactions left for
    readers; afterwards, scans of the table directory by path no longer see those
    partitions (readers through the registry or the catalog are not affected).
    """
    from spark_output.compaction import CompactionPolicy
    from spark_output.errors import SparkOutputError

    ctx = click.get_current_context()
    if purge:
        given = [
            flag
            for param, flag in _COMPACT_ONLY.items()
            if ctx.get_parameter_source(param) != ParameterSource.DEFAULT
        ]
        if given:
            raise InvalidInputError(
                f"{', '.join(given)} cannot be combined with --purge, which only deletes "
                "superseded directories"
            )
    elif older_than is not None:
        raise InvalidInputError("--older-than only applies with --purge")
    try:
        if purge:
            _purge(obj, name, spec, older_than=older_than, dry_run=dry_run)
        else:
            policy = CompactionPolicy(
                min_files=min_files,
                small_file_bytes=small_file_mb * 1024 * 1024,
                target_file_bytes=small_file_mb * 1024 * 1024,
                mode="har" if mode == "har" else "merge",
            )
            _compact(obj, name, spec, policy=policy, spark_master=spark_master, dry_run=dry_run)
    except SparkOutputError as exc:  # e.g. merge on a CSV table: a user mistake
        _fail(str(exc))


def _compact(
    obj: _Context,
    name: str,
    spec: tuple[str, ...],
    *,
    policy: CompactionPolicy,
    spark_master: str | None,
    dry_run: bool,
) -> None:
    from spark_output.maintenance import compact_table

    with obj.catalog() as catalog, contextlib.ExitStack() as stack:
        info = catalog.get_table(name)
        partial = _spec_args(spec)
        if partial is not None:
            info.spec(partial, partial=True)  # a bad key fails before Spark starts
        # A dry run only plans, on this machine: no Spark needed.
        spark = (
            stack.enter_context(_spark_session(spark_master))
            if spark_master is not None and not dry_run
            else None
        )
        show_bar = obj.output == "text" and not dry_run and sys.stderr.isatty()
        progress = stack.enter_context(_progress_bar(show_bar, "compacting"))
        summary = compact_table(
            catalog,
            str(info.name),
            partial,
            policy=policy,
            spark=spark,
            dry_run=dry_run,
            progress=progress,
        )
        application = str(spark.sparkContext.applicationId) if spark is not None else None
    data = {
        "table": summary.table,
        "mode": summary.mode,
        "dry_run": summary.dry_run,
        "spark_application": application,
        "considered": summary.partitions_considered,
        "compacted": summary.partitions_compacted,
        "skipped": summary.partitions_skipped,
        "failed": summary.partitions_failed,
        "files_before": summary.files_before,
        "files_after": summary.files_after,
        "bytes_before": summary.bytes_before,
        "bytes_after": summary.bytes_after,
        "seconds": round(summary.seconds, 3),
        "errors": list(summary.errors),
        "old_locations": list(summary.old_locations),
        "spark_catalog_errors": list(summary.spark_catalog_errors),
    }

    def text() -> str:
        verb = "would compact" if summary.dry_run else "compacted"
        lines = [
            f"{summary.table}: {verb} {summary.partitions_compacted} of "
            f"{summary.partitions_considered} partition(s) ({summary.mode}), "
            f"{summary.partitions_skipped} skipped, {summary.partitions_failed} failed",
            f"files {summary.files_before} -> {summary.files_after}, "
            f"bytes {summary.bytes_before:,} -> {summary.bytes_after:,}, {summary.seconds:.1f} s",
        ]
        lines += [f"error: {error}" for error in summary.errors]
        lines += [f"spark catalog: {error}" for error in summary.spark_catalog_errors]
        if summary.old_locations:
            lines.append(
                f"{len(summary.old_locations)} superseded location(s) kept for readers "
                "(hcat-notify compact --purge deletes them later)"
            )
        return "\n".join(lines)

    _emit(obj, data, text)
    if not summary.ok:
        sys.exit(EXIT_ERROR)


_PURGE_LABELS = {
    "deleted": "deleted",
    "planned": "would delete",
    "kept": "kept",
    "refused": "refused",
    "failed": "failed",
}


def _purge(
    obj: _Context, name: str, spec: tuple[str, ...], *, older_than: str | None, dry_run: bool
) -> None:
    from spark_output.maintenance import DEFAULT_PURGE_AGE, purge_superseded

    age = parse_duration(older_than) if older_than is not None else DEFAULT_PURGE_AGE
    with obj.catalog() as catalog:
        info = catalog.get_table(name)
        show_bar = obj.output == "text" and not dry_run and sys.stderr.isatty()
        with _progress_bar(show_bar, "purging") as progress:
            summary = purge_superseded(
                catalog,
                str(info.name),
                _spec_args(spec),
                older_than=age,
                dry_run=dry_run,
                progress=progress,
            )
    data = {
        "table": summary.table,
        "dry_run": summary.dry_run,
        "older_than": summary.older_than,
        "deleted": summary.directories_deleted,
        "files_deleted": summary.files_deleted,
        "bytes_freed": summary.bytes_freed,
        "kept": summary.directories_kept,
        "refused": summary.directories_refused,
        "failed": summary.directories_failed,
        "seconds": round(summary.seconds, 3),
        "directories": [dataclasses.asdict(result) for result in summary.results],
        "errors": list(summary.errors),
    }

    def text() -> str:
        verb = "would purge" if summary.dry_run else "purged"
        lines = [
            f"{summary.table}: {verb} {summary.directories_deleted} superseded "
            f"director{'y' if summary.directories_deleted == 1 else 'ies'} "
            f"({summary.files_deleted} files, {summary.bytes_freed:,} bytes freed), "
            f"{summary.directories_kept} kept, {summary.directories_refused} refused, "
            f"{summary.directories_failed} failed"
        ]
        for result in summary.results:
            reason = f": {result.reason}" if result.reason else ""
            lines.append(f"{_PURGE_LABELS[result.status]}: {result.location}{reason}")
        return "\n".join(lines)

    _emit(obj, data, text)
    if not summary.ok:
        sys.exit(EXIT_ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hcat-notify`` console script."""
    try:
        cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="hcat-notify",
            standalone_mode=True,
        )
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_ERROR
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
