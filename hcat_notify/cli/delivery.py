"""Delivery from the command line: ``mark-done``, ``relay``, ``status``, ``watch``,
``wait`` and ``sweep``."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from hcat_notify.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_TIMEOUT,
    SECONDS,
    CliContext,
    ReaderGone,
    emit,
    fail,
    handle_errors,
    json_default,
    output_option,
    stdout_pipe,
    stdout_reader_gone,
)
from hcat_notify.errors import BrokerCredentialsError, InvalidInputError
from hcat_notify.relay.config import RelayConfig

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from hcat_notify.consumer import CatalogReader, Notification
    from hcat_notify.relay import Relay, RelayStats

__all__ = [
    "EXIT_CREDENTIALS",
    "EXIT_UNDELIVERABLE",
    "mark_done",
    "relay",
    "subscribers",
    "sweep",
    "wait",
    "watch",
]

_RELAY_DEFAULTS = RelayConfig()
EXIT_UNDELIVERABLE = 3  # relay --once: some events were refused or parked
EXIT_CREDENTIALS = 77  # the broker refused the login (sysexits' EX_NOPERM)


@click.command("mark-done")
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="K=V...")
@output_option
@click.pass_obj
@handle_errors
def mark_done(obj: CliContext, name: str, spec: tuple[str, ...]) -> None:
    """Announce that every partition matching K=V... is complete."""
    from hcat_notify.model.specs import PartitionSpec

    partial = PartitionSpec.from_args(spec)
    with obj.catalog() as catalog:  # send_mark_set_done's write, on no new catalog
        event_id = catalog.mark_set_done(name, partial)
    emit(
        obj,
        {"table": name, "spec": partial.canonical(), "event_id": event_id},
        lambda: f"mark-set-done {partial.canonical()} recorded as event {event_id}",
    )


@click.command()
@click.option(
    "--once",
    is_flag=True,
    help="Publish what is pending and deliver it to the webhooks (each endpoint tried once), "
    "then exit (no other relay).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=_RELAY_DEFAULTS.batch_size,
    show_default=True,
)
@click.option(
    "--no-transactions",
    is_flag=True,
    help="Send each event with its own receipt instead of STOMP transactions.",
)
@click.option("--member-id", help="This relay's id in the group.  [default: host:pid]")
@click.option(
    "--heartbeat-interval",
    type=SECONDS,
    default=_RELAY_DEFAULTS.heartbeat_interval,
    show_default=True,
    help="Seconds between heartbeats.",
)
@click.option(
    "--session-timeout",
    type=SECONDS,
    default=_RELAY_DEFAULTS.session_timeout,
    show_default=True,
    help="Seconds without a heartbeat (database clock) after which a relay's buckets move.",
)
@click.option(
    "--min-move-interval",
    type=SECONDS,
    default=_RELAY_DEFAULTS.min_move_interval,
    show_default=True,
    help="Seconds a bucket stays with its owner after a move (unless the owner dies).",
)
@click.option(
    "--timed-interval",
    type=SECONDS,
    default=_RELAY_DEFAULTS.timed_interval,
    show_default=True,
    help="Seconds between passes over the owned sets' quiet periods and deadlines.",
)
@click.option(
    "--webhook-batch",
    type=click.IntRange(1, 10_000),
    default=_RELAY_DEFAULTS.webhook_batch,
    show_default=True,
    help="Events per webhook request (CloudEvents) or per recorded run (hive).",
)
@click.option(
    "--buckets",
    type=click.IntRange(1, 65_536),
    help="Expected bucket count; it is fixed when the catalog is created (default 256).",
)
@output_option
@click.pass_obj
@handle_errors
def relay(
    obj: CliContext,
    once: bool,
    batch_size: int,
    no_transactions: bool,
    member_id: str | None,
    heartbeat_interval: float,
    session_timeout: float,
    min_move_interval: float,
    timed_interval: float,
    webhook_batch: int,
    buckets: int | None,
) -> None:
    """Publish the outbox as a member of the relay group (long-running; SIGTERM/SIGINT
    hand its buckets over and stop it, exit 0 / 130)."""
    import dataclasses

    from hcat_notify.relay import Relay

    if logging.getLogger().level > logging.INFO:
        logging.getLogger().setLevel(logging.INFO)
    config = RelayConfig(
        batch_size=batch_size,
        use_transactions=not no_transactions,
        heartbeat_interval=heartbeat_interval,
        session_timeout=session_timeout,
        min_move_interval=min_move_interval,
        timed_interval=timed_interval,
        webhook_batch=webhook_batch,
        freeze_heap=True,  # this process is the relay's
    )
    settings = obj.settings
    if buckets is not None:
        settings = dataclasses.replace(settings, relay_buckets=buckets)
    try:
        with (
            # Never creates a catalog: a relay at a mistyped home says "no catalog at".
            obj.catalog(idle_in_transaction=config.session_timeout) as catalog,
            Relay(settings, config=config, catalog=catalog, member_id=member_id) as publisher,
        ):
            if once:
                _drain(obj, publisher)
                return
            stats, interrupted = _run_until_signalled(publisher)
    except BrokerCredentialsError as exc:
        fail(
            f"{exc} (a wrong user or password is not retried; fix the settings)",
            EXIT_CREDENTIALS,
        )
    emit(
        obj,
        {
            "published": stats.published,
            "batches": stats.batches,
            "failures": stats.failures,
            "parked": sorted(stats.parked),
        },
        lambda: f"relay stopped after publishing {stats.published} events",
    )
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)


def _drain(obj: CliContext, publisher: Relay) -> None:
    count = publisher.drain()
    stats = publisher.stats
    unsent = sorted(set(stats.refused) - set(stats.parked))
    data = {
        "published": count,
        "parked": [{"event_id": i, "reason": r} for i, r in sorted(stats.parked.items())],
        "refused": [{"event_id": i, "reason": stats.refused[i]} for i in unsent],
    }

    def text() -> str:
        lines = [f"published {count} events"]
        lines += [f"parked event {i}: {r}" for i, r in sorted(stats.parked.items())]
        lines += [f"refused event {i}: {stats.refused[i]}" for i in unsent]
        if stats.parked:
            lines.append("(hcat-notify status lists parked events; outbox retry|drop EVENT_ID)")
        return "\n".join(lines)

    emit(obj, data, text)
    if stats.parked or unsent:
        sys.exit(EXIT_UNDELIVERABLE)


def _run_until_signalled(publisher: Relay) -> tuple[RelayStats, bool]:
    """Run until SIGTERM or SIGINT, each a graceful stop (buckets handed over); return
    the stats and whether SIGINT stopped it (Ctrl-C exits 130, as any command does)."""
    received: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        received.append(signum)
        publisher.stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        stats = publisher.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stats, signal.SIGINT in received


class _Stdout:
    """Prints notifications; when the reader goes away (``watch | head -1``) it calls
    ``on_closed`` once and prints nothing more."""

    def __init__(
        self, as_json: bool, on_closed: Callable[[], None], cursor: Callable[[], object]
    ) -> None:
        self.as_json = as_json
        self.on_closed = on_closed
        self.cursor = cursor
        self.closed = False

    def show(self, notification: Notification) -> None:
        if self.closed:
            return
        if self.as_json:
            # The cursor after this line: give it to --cursor to resume right after it.
            data = {**notification.as_dict(), "cursor": str(self.cursor())}
            line = json.dumps(data, ensure_ascii=False, default=json_default)
        else:
            line = (
                f"{notification.event_id}\t{notification.event_type.value}\t"
                f"{notification.table}\t{notification.describe()}\t({notification.source.value})"
            )
        try:
            click.echo(line)
        except BrokenPipeError:
            self.reader_gone()

    def reader_gone(self) -> None:
        """Print nothing more and stop the consumer (from any thread)."""
        if not self.closed:
            self.closed = True
            self.on_closed()


@contextlib.contextmanager
def _noticing_reader_gone(on_gone: Callable[[], None]) -> Iterator[None]:
    """Call ``on_gone`` as soon as standard output's reader goes away, not at the next
    line: a quiet table may print nothing for hours (``watch ... | head -1``).

    Only for a pipe or a socket, whose write end reports POLLERR / POLLHUP once nobody
    reads; a file or a terminal never goes away so.
    """
    fd = stdout_pipe()
    if fd is None:
        yield
        return
    done = threading.Event()

    def look() -> None:
        while not done.is_set():
            if stdout_reader_gone(fd, 200):
                on_gone()
                return

    thread = threading.Thread(target=look, name="hcat-watch-stdout", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@click.command()
@click.argument("names", nargs=-1, required=True, metavar="DB.TABLE...")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (as -o json).")
@click.option("--max-messages", type=click.IntRange(min=1), help="Exit after this many.")
@click.option("--timeout", type=SECONDS, help="Exit after this many idle seconds.")
@click.option(
    "--cursor",
    help="Resume after this cursor (TOPIC:ID,... as --json prints it, or an event id).",
)
@click.option("--subscriber", help="A durable subscriber name: resume where it stopped.")
@click.option("--takeover", is_flag=True, help="Take --subscriber over from a live process.")
@output_option
@click.pass_obj
@handle_errors
def watch(
    obj: CliContext,
    names: tuple[str, ...],
    as_json: bool,
    max_messages: int | None,
    timeout: float | None,
    cursor: str | None,
    subscriber: str | None,
    takeover: bool,
) -> None:
    """Print tables' notifications: retained and registered first, then live.

    Every kind: partitions (a batch as one line), dones, inserts, table events. A table
    dropped while watching is printed and watched on; one dropped before the start is
    caught up (given a cursor or --subscriber, its DROP_TABLE) and ends it with exit 2.
    """
    from hcat_notify.consumer import NotificationConsumer

    with (
        _reader(obj, subscriber, takeover) as catalog,  # never creates a catalog
        NotificationConsumer(
            list(names),
            settings=obj.settings,
            catalog=catalog,
            cursor=cursor,
            subscriber=subscriber,
            takeover=takeover,
        ) as consumer,
    ):
        out = _Stdout(
            as_json or obj.output == "json", on_closed=consumer.stop, cursor=lambda: consumer.cursor
        )
        previous = signal.signal(signal.SIGTERM, lambda *_: consumer.stop())
        try:
            with _noticing_reader_gone(out.reader_gone):
                consumer.run(out.show, max_messages=max_messages, timeout=timeout)
        finally:
            signal.signal(signal.SIGTERM, previous)
    if out.closed:
        raise ReaderGone


@click.command()
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="K=V...")
@click.option("--timeout", type=SECONDS, default=3600.0, show_default=True)
@click.option(
    "--min-generation",
    type=click.IntRange(min=1),
    help="Only a done of this set generation or a later one counts (a set that changed "
    "after its done is done again at the next generation).",
)
@click.option("--subscriber", help="A durable subscriber name to consume under.")
@click.option("--takeover", is_flag=True, help="Take --subscriber over from a live process.")
@output_option
@click.pass_obj
@handle_errors
def wait(
    obj: CliContext,
    name: str,
    spec: tuple[str, ...],
    timeout: float,
    min_generation: int | None,
    subscriber: str | None,
    takeover: bool,
) -> None:
    """Exit 0 once a mark-set-done covers K=V... (at once if retained), 1 on timeout,
    2 if the table is dropped (or was). A SET_LATE or SET_REOPENED does not end it.

    A done already in the catalog answers without the broker; otherwise the command
    subscribes first and checks the catalog again, so no done slips in between. With
    HCAT_NOTIFY_API_URL set, the catalog is read through the HTTP API.
    """
    from hcat_notify.consumer import NotificationConsumer
    from hcat_notify.model.specs import PartitionSpec

    wanted = PartitionSpec.from_args(spec)
    started = time.monotonic()
    with _reader(obj, subscriber, takeover) as catalog:
        table_info = catalog.get_table(name)
        wanted = table_info.covering_spec(wanted)
        found = catalog.find_covering_done(table_info.name, wanted, min_generation=min_generation)
        done = found is not None
        if not done:
            with NotificationConsumer(
                [table_info.name],
                settings=obj.settings,
                catalog=catalog,
                subscriber=subscriber,
                takeover=takeover,
            ) as consumer:
                done = consumer.wait_for_set_done(
                    table_info.name, wanted, timeout, min_generation=min_generation
                )
    waited = time.monotonic() - started
    data: dict[str, Any] = {
        "table": str(table_info.name),
        "spec": wanted.canonical(),
        "done": done,
        "waited_seconds": round(waited, 3),
    }
    if min_generation is not None:
        data["min_generation"] = min_generation
    emit(
        obj,
        data,
        lambda: (
            f"{table_info.name} {wanted.canonical()}"
            + (f" (generation >= {min_generation})" if min_generation is not None else "")
            + (": done" if done else f": not done after {timeout:g}s")
        ),
    )
    if not done:
        sys.exit(EXIT_TIMEOUT)


def _reader(
    obj: CliContext, subscriber: str | None, takeover: bool
) -> AbstractContextManager[CatalogReader]:
    """The HTTP API when HCAT_NOTIFY_API_URL names it (and no durable subscriber needs
    the database), else the catalog database, which must exist."""
    from hcat_notify.consumer import open_reader

    if takeover and subscriber is None:
        raise InvalidInputError(
            "--takeover takes a durable subscriber over from a live process: "
            "name it with --subscriber"
        )
    reader = open_reader(obj.settings, durable=subscriber is not None)
    return contextlib.closing(reader)


@click.command()
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="The most rows one batch (one transaction) deletes; on SQLite batches are "
    "also cut to about 1 ms each, so that writers wait little for the lock.",
)
@click.option(
    "--max-duty",
    type=click.FloatRange(0, 1, min_open=True),
    default=None,
    help="The most of its time the sweep spends deleting, pausing the rest (default "
    "1/3): lower leaves the writers beside it more of the machine, and the sweep takes "
    "longer.",
)
@output_option
@click.pass_obj
@handle_errors
def sweep(obj: CliContext, batch_size: int, max_duty: float | None) -> None:
    """Delete expired mark-set-done retention rows, then the outbox's events older than
    outbox_retention that nobody still needs, in batches."""
    if max_duty is not None and max_duty != max_duty:  # NaN passes the range's test
        raise click.BadParameter("nan is not in the range 0<x<=1.", param_hint="'--max-duty'")
    shown = obj.output == "text" and sys.stderr.isatty()

    def progress(what: str) -> Callable[[int], None]:
        def show(done: int) -> None:
            click.echo(f"\rswept {done:,} {what}", nl=False, err=True)

        return show

    retention = obj.settings.outbox_retention_period
    with obj.catalog() as catalog:
        try:
            removed = catalog.dones.sweep_expired(
                batch_size=batch_size,
                progress=progress("rows") if shown else None,
                max_duty=max_duty,
            )
            if shown:
                click.echo(err=True)
            pruned = catalog.outbox.sweep(
                retention,
                batch_size=batch_size,
                progress=progress("outbox events") if shown else None,
                max_duty=max_duty,
            )
        finally:
            if shown:
                click.echo(err=True)
    held = pruned.by_kind()
    data = {
        "removed": removed,
        "outbox": {
            "retention": obj.settings.outbox_retention,
            "deleted": pruned.deleted,
            "held_back": pruned.kept,
            "held_by_kind": held,
            "held_by": dict(pruned.held),
        },
    }

    def text() -> str:
        lines = [f"removed {removed} expired retention row(s)"]
        if retention is None:
            lines.append("outbox: kept forever (outbox_retention = forever)")
            return "\n".join(lines)
        line = (
            f"outbox: deleted {pruned.deleted} event(s) older than {obj.settings.outbox_retention}"
        )
        if pruned.kept:
            kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(held.items()))
            line += f"; held back {pruned.kept} ({kinds})"
        lines.append(line)
        for holder, count in sorted(pruned.held.items()):
            if holder.startswith(("webhook ", "subscriber ")):
                lines.append(f"  {holder} holds {count} event(s)")
        return "\n".join(lines)

    emit(obj, data, text)


_FOLLOWED_SHOWN = 100
"""The followed topics and tables ``subscribers -o json`` lists per subscriber (the
first, by name; ``followed_count`` says how many topics)."""


@click.command()
@click.option(
    "--remove",
    "remove",
    multiple=True,
    metavar="NAME",
    help="Forget this durable subscriber and its watermarks (repeatable): one that is gone "
    "for good holds the outbox back from its watermarks (hcat-notify status).",
)
@output_option
@click.pass_obj
@handle_errors
def subscribers(obj: CliContext, remove: tuple[str, ...]) -> None:
    """Durable subscribers: who consumes under each name, watermarks, lag, the topics it
    follows (what the outbox is kept for)."""
    if remove:
        _remove_subscribers(obj, list(dict.fromkeys(remove)))
        return
    with obj.catalog(write=False) as catalog:
        found = catalog.subscriptions.every()
        lags = catalog.subscriptions.lags(found)
        followed = {
            item.name: catalog.subscriptions.followed(item.name, limit=_FOLLOWED_SHOWN)
            for item in found
        }
        tables = {
            item.name: catalog.subscriptions.followed_tables(item.name, limit=_FOLLOWED_SHOWN)
            for item in found
        }
    data = [
        {
            "subscriber": item.name,
            "owner": item.owner,
            "heartbeat_age_seconds": round(item.heartbeat_age, 3),
            "cursor": str(item.cursor),
            "watermarks": dict(item.cursor.watermarks),
            "lag": lags[item.name],
            "lag_total": sum(lags[item.name].values()),
            # None: claimed before 0022 (or by such a library since); it holds every
            # topic until it next starts
            "followed_count": item.followed,
            "followed_topics": followed[item.name],
            "followed_tables": tables[item.name],
        }
        for item in found
    ]

    def text() -> str:
        if not data:
            return "no durable subscribers"
        lines = []
        for item in data:
            owner = item["owner"] or "nobody (stopped)"
            follows = (
                "follows every topic (claimed before 0022 or by a library before it since,"
                " until it next starts)"
                if item["followed_count"] is None
                else f"follows {item['followed_count']} topic(s)"
            )
            lines.append(
                f"{item['subscriber']}: {owner}, heartbeat {item['heartbeat_age_seconds']:.1f} s "
                f"ago, {item['lag_total']} event(s) behind, cursor {item['cursor'] or '-'}, "
                f"{follows}"
            )
        return "\n".join(lines)

    emit(obj, data, text)


def _remove_subscribers(obj: CliContext, names: list[str]) -> None:
    """Forget ``names`` (all known, else nothing is removed)."""
    with obj.catalog() as catalog:
        known = {item.name for item in catalog.subscriptions.every()}
        unknown = [name for name in names if name not in known]
        if unknown:
            raise InvalidInputError(
                f"no durable subscriber named {unknown[0]!r} (hcat-notify subscribers)"
            )
        removed = catalog.subscriptions.remove(names)
    emit(obj, {"removed": removed}, lambda: f"removed durable subscriber(s) {', '.join(removed)}")
