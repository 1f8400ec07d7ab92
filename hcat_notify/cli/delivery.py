"""Delivery from the command line: ``mark-done``, ``relay``, ``status``, ``watch``,
``wait`` and ``sweep``."""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from hcat_notify.cli.common import (
    EXIT_TIMEOUT,
    SECONDS,
    CliContext,
    emit,
    handle_errors,
    json_default,
    output_option,
)
from hcat_notify.relay.config import RelayConfig

if TYPE_CHECKING:
    from hcat_notify.consumer import Notification

__all__ = ["mark_done", "relay", "status", "sweep", "wait", "watch"]

_RELAY_DEFAULTS = RelayConfig()
MAX_EVENT_ID = 2**63 - 1  # the catalog's BIGINT


@click.command("mark-done")
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="K=V...")
@output_option
@click.pass_obj
@handle_errors
def mark_done(obj: CliContext, name: str, spec: tuple[str, ...]) -> None:
    """Announce that every partition matching K=V... is complete."""
    from hcat_notify.model.specs import PartitionSpec
    from hcat_notify.writer import send_mark_set_done

    partial = PartitionSpec.from_args(spec)
    event_id = send_mark_set_done(name, partial, settings=obj.settings)
    emit(
        obj,
        {"table": name, "spec": partial.canonical(), "event_id": event_id},
        lambda: f"mark-set-done {partial.canonical()} recorded as event {event_id}",
    )


@click.command()
@click.option("--once", is_flag=True, help="Publish what is pending, then exit.")
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
@click.option(
    "--lease-ttl",
    type=click.FloatRange(min=1),
    default=_RELAY_DEFAULTS.lease_ttl,
    show_default=True,
    help="Seconds a standby relay waits before taking over from a silent one.",
)
@output_option
@click.pass_obj
@handle_errors
def relay(
    obj: CliContext, once: bool, batch_size: int, no_transactions: bool, lease_ttl: float
) -> None:
    """Publish the outbox to the broker (long-running; SIGTERM/SIGINT stop it cleanly)."""
    from hcat_notify.relay import Relay

    if logging.getLogger().level > logging.INFO:
        logging.getLogger().setLevel(logging.INFO)
    config = RelayConfig(
        batch_size=batch_size, use_transactions=not no_transactions, lease_ttl=lease_ttl
    )
    with Relay(obj.settings, config=config) as publisher:
        if once:
            count = publisher.drain()
            emit(obj, {"published": count}, lambda: f"published {count} events")
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
    emit(
        obj,
        {"published": stats.published, "batches": stats.batches, "failures": stats.failures},
        lambda: f"relay stopped after publishing {stats.published} events",
    )


@click.command()
@output_option
@click.pass_obj
@handle_errors
def status(obj: CliContext) -> None:
    """Outbox backlog, oldest unpublished event, last publish per topic, relay owner."""
    from hcat_notify.relay.config import DEFAULT_LEASE_NAME

    with obj.catalog(write=False) as catalog:
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

    emit(obj, data, text)


class _Stdout:
    """Prints notifications; when the reader goes away (``watch | head -1``) it calls
    ``on_closed`` once and prints nothing more."""

    def __init__(self, as_json: bool, on_closed: Callable[[], None]) -> None:
        self.as_json = as_json
        self.on_closed = on_closed
        self.closed = False

    def show(self, notification: Notification) -> None:
        if self.closed:
            return
        if self.as_json:
            line = json.dumps(notification.as_dict(), ensure_ascii=False, default=json_default)
        else:
            line = (
                f"{notification.event_id}\t{notification.event_type.value}\t"
                f"{notification.table}\t{notification.spec}\t({notification.source.value})"
            )
        try:
            click.echo(line)
        except BrokenPipeError:
            self.closed = True
            self.on_closed()


@click.command()
@click.argument("names", nargs=-1, required=True, metavar="DB.TABLE...")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (as -o json).")
@click.option("--max-messages", type=click.IntRange(min=1), help="Exit after this many.")
@click.option("--timeout", type=SECONDS, help="Exit after this many idle seconds.")
@click.option("--cursor", type=click.IntRange(0, MAX_EVENT_ID), help="Last event id already seen.")
@output_option
@click.pass_obj
@handle_errors
def watch(
    obj: CliContext,
    names: tuple[str, ...],
    as_json: bool,
    max_messages: int | None,
    timeout: float | None,
    cursor: int | None,
) -> None:
    """Print tables' notifications: retained and registered first, then live."""
    from hcat_notify.consumer import NotificationConsumer

    with NotificationConsumer(list(names), settings=obj.settings, cursor=cursor) as consumer:
        out = _Stdout(as_json or obj.output == "json", on_closed=consumer.stop)
        previous = signal.signal(signal.SIGTERM, lambda *_: consumer.stop())
        try:
            consumer.run(out.show, max_messages=max_messages, timeout=timeout)
        finally:
            signal.signal(signal.SIGTERM, previous)
    if out.closed:
        raise BrokenPipeError


@click.command()
@click.argument("name", metavar="DB.TABLE")
@click.argument("spec", nargs=-1, metavar="K=V...")
@click.option("--timeout", type=SECONDS, default=3600.0, show_default=True)
@output_option
@click.pass_obj
@handle_errors
def wait(obj: CliContext, name: str, spec: tuple[str, ...], timeout: float) -> None:
    """Exit 0 once a mark-set-done covers K=V... (at once if retained), 1 on timeout.

    A done already in the catalog answers without the broker; otherwise the command
    subscribes first and checks the catalog again, so no done slips in between.
    """
    from hcat_notify.consumer import NotificationConsumer
    from hcat_notify.model.specs import PartitionSpec

    wanted = PartitionSpec.from_args(spec)
    started = time.monotonic()
    with obj.catalog(write=False) as catalog:
        table_info = catalog.get_table(name)
        wanted = table_info.spec(wanted, partial=True)
        done = catalog.find_covering_done(table_info.name, wanted) is not None
        if not done:
            with NotificationConsumer(
                [table_info.name], settings=obj.settings, catalog=catalog
            ) as consumer:
                done = consumer.wait_for_set_done(table_info.name, wanted, timeout)
    waited = time.monotonic() - started
    data: dict[str, Any] = {
        "table": str(table_info.name),
        "spec": wanted.canonical(),
        "done": done,
        "waited_seconds": round(waited, 3),
    }
    emit(
        obj,
        data,
        lambda: (
            f"{table_info.name} {wanted.canonical()}: "
            + ("done" if done else f"not done after {timeout:g}s")
        ),
    )
    if not done:
        sys.exit(EXIT_TIMEOUT)


@click.command()
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@output_option
@click.pass_obj
@handle_errors
def sweep(obj: CliContext, batch_size: int) -> None:
    """Delete expired mark-set-done retention rows, in batches."""
    with obj.catalog() as catalog:
        removed = catalog.sweep_expired(batch_size=batch_size)
    emit(obj, {"removed": removed}, lambda: f"removed {removed} expired retention row(s)")
