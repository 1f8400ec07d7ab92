"""``hcat-notify db upgrade`` and ``hcat-notify broker check``."""

from __future__ import annotations

import time
import uuid
from typing import Any

import click

from hcat_notify.cli.common import CliContext, emit, handle_errors, output_option

__all__ = ["broker", "db"]


@click.group()
def db() -> None:
    """Manage the catalog database."""


@db.command("upgrade")
@output_option
@click.pass_obj
@handle_errors
def db_upgrade(obj: CliContext) -> None:
    """Create the catalog or apply pending schema migrations."""
    from hcat_notify.store import engine as engines

    url = engines.redact(obj.settings.database_url)
    before, after = engines.upgrade_database(obj.settings.database_url)
    emit(
        obj,
        {"database": url, "from": before, "to": after},
        lambda: (
            f"{url}: already at {after}"
            if before == after
            else f"{url}: {before or 'empty'} -> {after}"
        ),
    )


@click.group()
def broker() -> None:
    """Check the message broker."""


@broker.command("check")
@output_option
@click.pass_obj
@handle_errors
def broker_check(obj: CliContext) -> None:
    """Connect as consumer and publisher and pass one message between them."""
    from hcat_notify.broker import consumer_connection, publisher_connection
    from hcat_notify.errors import BrokerTimeoutError
    from hcat_notify.model.topics import destination_for

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
    emit(
        obj,
        results,
        lambda: (
            f"publisher: connected to {publisher_at} as {settings.broker_user}\n"
            f"consumer:  connected to {consumer_at} as {settings.consumer_user}\n"
            f"round trip on {topic}: {elapsed_ms:.1f} ms"
        ),
    )
