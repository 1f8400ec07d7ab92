"""``hcat-notify status`` and ``hcat-notify outbox retry|drop``: the outbox's state, and
what operators do about events the broker will not take."""

from __future__ import annotations

import getpass
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from hcat_notify.cli.common import CliContext, emit, handle_errors, output_option
from hcat_notify.errors import InvalidInputError

if TYPE_CHECKING:
    from hcat_notify.store import RefusedEvent

__all__ = ["outbox", "status"]


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _refused_dict(event: RefusedEvent) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "table": event.table,
        "topic": event.topic,
        "event": event.event_type.value,
        "attempts": event.attempts,
        "reason": event.reason,
        "parked_at": event.parked_at,
    }


@click.command()
@output_option
@click.pass_obj
@handle_errors
def status(obj: CliContext) -> None:
    """Outbox backlog, relays, parked events, last publish per topic."""
    from hcat_notify.relay.config import DEFAULT_LEASE_NAME

    with obj.catalog(write=False) as catalog:
        backlog, oldest = catalog.outbox_backlog()
        refused = catalog.refused_events()
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
    parked = [event for event in refused if event.parked_at is not None]
    trying = [event for event in refused if event.parked_at is None]
    data = {
        "backlog": backlog,
        "oldest_unpublished_age_seconds": age,
        "parked": [_refused_dict(event) for event in parked],
        "refused": [_refused_dict(event) for event in trying],
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
        for event in parked:
            since = event.parked_at.isoformat(timespec="seconds") if event.parked_at else "?"
            lines.append(
                f"parked event {event.event_id} ({event.event_type.value} {event.table}, "
                f"topic {event.topic}) since {since} after {event.attempts} refusal(s): "
                f"{event.reason}"
            )
        for event in trying:
            lines.append(
                f"refused event {event.event_id} ({event.table}, topic {event.topic}), "
                f"{event.attempts} time(s), still tried: {event.reason}"
            )
        if parked:
            lines.append("retry or drop parked events with: hcat-notify outbox retry|drop ID...")
        for topic_name, when in per_topic.items():
            lines.append(f"last publish {topic_name}: {when.isoformat(timespec='seconds')}")
        return "\n".join(lines)

    emit(obj, data, text)


@click.group()
def outbox() -> None:
    """Retry or drop events parked as undeliverable (see hcat-notify status)."""


def _event_ids(event_ids: tuple[int, ...], every: bool, parked: list[RefusedEvent]) -> list[int]:
    if every and event_ids:
        raise InvalidInputError("give EVENT_IDs or --all, not both")
    if every:
        return [event.event_id for event in parked if event.parked_at is not None]
    if not event_ids:
        raise InvalidInputError("give the EVENT_ID(s) of parked events, or --all")
    return list(dict.fromkeys(event_ids))


@outbox.command("retry")
@click.argument("event_ids", nargs=-1, type=click.IntRange(1, 2**63 - 1), metavar="EVENT_ID...")
@click.option("--all", "every", is_flag=True, help="Every parked event.")
@output_option
@click.pass_obj
@handle_errors
def outbox_retry(obj: CliContext, event_ids: tuple[int, ...], every: bool) -> None:
    """Announce parked events again, each as a new event (recorded with who and when)."""
    actor = _actor()
    with obj.catalog(write=False) as catalog:
        wanted = _event_ids(event_ids, every, catalog.refused_events() if every else [])
        retried = catalog.retry_parked(wanted, actor=actor)
    emit(
        obj,
        [{"event_id": old, "new_event_id": new} for old, new in retried.items()],
        lambda: (
            "\n".join(f"event {old} announced again as event {new}" for old, new in retried.items())
            or "no parked events"
        ),
    )


@outbox.command("drop")
@click.argument("event_ids", nargs=-1, type=click.IntRange(1, 2**63 - 1), metavar="EVENT_ID...")
@click.option("--all", "every", is_flag=True, help="Every parked event.")
@click.option("--reason", help="Why, for the record.")
@output_option
@click.pass_obj
@handle_errors
def outbox_drop(
    obj: CliContext, event_ids: tuple[int, ...], every: bool, reason: str | None
) -> None:
    """Give parked events up for good (kept in the outbox, recorded with who and when)."""
    actor = _actor()
    with obj.catalog(write=False) as catalog:
        wanted = _event_ids(event_ids, every, catalog.refused_events() if every else [])
        catalog.drop_parked(wanted, actor=actor, reason=reason)
    emit(
        obj,
        {"dropped": wanted},
        lambda: "\n".join(f"event {event_id} dropped" for event_id in wanted) or "no parked events",
    )
