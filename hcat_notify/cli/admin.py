"""``hcat-notify db upgrade`` and ``hcat-notify broker check``."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import click

from hcat_notify.cli.common import SECONDS, CliContext, emit, handle_errors, output_option
from hcat_notify.errors import BrokerAuthError, BrokerError, BrokerTimeoutError

if TYPE_CHECKING:
    from hcat_notify.broker import BrokerConnection
    from hcat_notify.config import Settings

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
@click.option(
    "--wait",
    type=SECONDS,
    help="Keep trying this long (jittered back-off) while no broker serves, e.g. during a "
    "failover.  [default: one attempt over every address]",
)
@output_option
@click.pass_obj
@handle_errors
def broker_check(obj: CliContext, wait: float | None) -> None:
    """Pass one message from the publisher to a consumer, and say which of the
    configured brokers serves."""
    from hcat_notify.broker import Backoff, consumer_connection, publisher_connection

    settings = obj.settings
    deadline = time.monotonic() + (wait or 0.0)
    backoff = Backoff()
    consumer, publisher = consumer_connection(settings), publisher_connection(settings)
    try:
        while True:
            try:
                elapsed_ms = _round_trip(settings, consumer, publisher)
                break
            except BrokerAuthError:
                raise  # a refused login or topic: waiting cannot help
            except BrokerError:
                delay = backoff.next_delay()
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)  # connect() then starts after a broker it lost
        publisher_at, consumer_at = str(publisher.address), str(consumer.address)
    finally:
        consumer.close()
        publisher.close()
    brokers = _broker_states(settings, publisher_at) if len(settings.broker_addresses) > 1 else []
    topic = f"{settings.topic_prefix}.healthcheck"
    results: dict[str, Any] = {
        "publisher": {"broker": publisher_at, "user": settings.broker_user},
        "consumer": {"broker": consumer_at, "user": settings.consumer_user},
        "topic": topic,
        "round_trip_ms": round(elapsed_ms, 1),
        "brokers": brokers,
    }

    def text() -> str:
        lines = [
            f"publisher: connected to {publisher_at} as {settings.broker_user}",
            f"consumer:  connected to {consumer_at} as {settings.consumer_user}",
            f"round trip on {topic}: {elapsed_ms:.1f} ms",
        ]
        lines += [f"broker {item['broker']}: {item['state']}" for item in brokers]
        return "\n".join(lines)

    emit(obj, results, text)


def _round_trip(
    settings: Settings, consumer: BrokerConnection, publisher: BrokerConnection
) -> float:
    """Connect both (again), subscribe, send one message, receive it; milliseconds."""
    from hcat_notify.model.topics import destination_for

    topic = f"{settings.topic_prefix}.healthcheck"
    token = uuid.uuid4().hex
    consumer.connect()
    publisher.connect()
    consumer.subscribe(destination_for(topic), "healthcheck", selector=f"HCAT_CHECK = '{token}'")
    started = time.monotonic()
    publisher.send(destination_for(topic), "{}", {"HCAT_CHECK": token})
    if consumer.receive(timeout=settings.broker_timeout) is None:
        raise BrokerTimeoutError(
            f"the consumer did not receive the check message on {topic} "
            f"within {settings.broker_timeout:g}s"
        )
    return (time.monotonic() - started) * 1000


def _broker_states(settings: Settings, serving: str) -> list[dict[str, str]]:
    """Each configured broker as a client sees it: the one that served the round trip,
    or why another does not (a slave waiting for the store's lock refuses connections)."""
    from hcat_notify.broker import BrokerConnection

    states = []
    for address in settings.broker_addresses:
        if str(address) == serving:
            states.append({"broker": str(address), "state": "serving"})
            continue
        probe = BrokerConnection(
            [address],
            user=settings.broker_user,
            password=settings.broker_password,
            timeout=settings.broker_timeout,
        )
        try:
            probe.connect()
            state = "accepts connections too (not the one that served)"
        except BrokerError as exc:
            state = f"not serving ({exc})"
        finally:
            probe.close()
        states.append({"broker": str(address), "state": state})
    return states
