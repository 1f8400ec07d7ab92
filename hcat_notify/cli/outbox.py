"""``hcat-notify status`` and ``hcat-notify outbox retry|drop``: the outbox's state, and
what operators do about events the broker will not take."""

from __future__ import annotations

import getpass
import re
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from hcat_notify.cli.common import (
    EVENT_ID,
    SECONDS,
    CliContext,
    emit,
    handle_errors,
    output_option,
)
from hcat_notify.errors import InvalidInputError

if TYPE_CHECKING:
    from hcat_notify.store import RefusedEvent

__all__ = ["outbox", "status"]

MAX_TOPIC_LINES = 20
"""Topics ``status`` shows, those published last (it counts the rest)."""
MAX_PARKED_WEBHOOK_LINES = 20
"""Parked (webhook, topic) pairs ``status`` shows, by webhook and topic (it counts the
rest; ``webhooks show NAME --only parked`` pages through them)."""


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


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


def _retention_lines(kept: dict[str, Any], now: datetime) -> list[str]:
    """What ``status`` says of the outbox's size and what holds it back."""
    if kept["oldest_event_id"] is None:
        return [f"outbox: empty (retention {kept['retention']})"]
    age = (now - kept["oldest_created_at"]).total_seconds() / 86400
    size = f", about {kept['rows_estimate']:,} rows" if kept["rows_estimate"] is not None else ""
    lines = [
        f"outbox: events {kept['oldest_event_id']} to {kept['newest_event_id']}{size}, "
        f"oldest {age:.1f} days old (retention {kept['retention']}); "
        f"deleted through event {kept['pruned_through']}",
        "oldest event held by: " + (", ".join(kept["oldest_held_by"]) or "nobody"),
    ]
    holders = kept["last_sweep_held_by"]
    if holders:
        shown = ", ".join(f"{name} {count}" for name, count in sorted(holders.items()))
        lines.append(f"last sweep held back: {shown}")
    return lines


@click.command()
@click.option("--member", "member_id", help="Only this relay member.")
@click.option(
    "--session-timeout",
    type=SECONDS,
    help="Judge every member silent after this many seconds without a heartbeat, instead "
    "of after its own --session-timeout (recorded when it joined).",
)
@output_option
@click.pass_obj
@handle_errors
def status(obj: CliContext, member_id: str | None, session_timeout: float | None) -> None:
    """The relay group (controller, members, buckets), backlog and parked events."""
    with obj.catalog(write=False) as catalog:
        relays = catalog.group.status(session_timeout)
        backlog, oldest = catalog.outbox.backlog()
        refused = catalog.outbox.refused()
        per_topic = catalog.outbox.last_published_by_topic(MAX_TOPIC_LINES)
        topic_count = catalog.outbox.published_topics()
        kept = catalog.outbox.retention(obj.settings.outbox_retention_period)
        hooks_parked = catalog.webhooks.parked(MAX_PARKED_WEBHOOK_LINES)
        hooks_parked_count = (
            catalog.webhooks.parked_count()
            if len(hooks_parked) == MAX_PARKED_WEBHOOK_LINES
            else len(hooks_parked)
        )
    group, members = relays.info, relays.members
    if member_id is not None and member_id not in {m.member_id for m in members}:
        known = ", ".join(m.member_id for m in members) or "none"
        raise InvalidInputError(f"no relay member {member_id!r} (members: {known})")
    now = datetime.now(UTC)
    age = (now - oldest).total_seconds() if oldest is not None else None
    owned = relays.owners()
    unassigned = relays.unassigned
    shown = [m for m in members if member_id is None or m.member_id == member_id]
    parked = [event for event in refused if event.parked_at is not None]
    trying = [event for event in refused if event.parked_at is None]
    data: dict[str, Any] = {
        "controller": {
            "member": group.controller_id if group.controller_alive else None,
            "epoch": group.controller_epoch,
        },
        "bucket_count": group.bucket_count,
        "members": [
            {
                "member_id": m.member_id,
                "host": m.host,
                "pid": m.pid,
                "heartbeat_age_seconds": round(m.heartbeat_age, 3),
                "alive": m.alive,
                "session_timeout_seconds": m.session_timeout,
                "buckets": len(owned.get(m.member_id, [])),
                "events_per_second": round(m.events_per_second, 3),
                "backlog": m.backlog,
                "topics": m.topics,
                "oldest_unpublished_age_seconds": m.oldest_unpublished_age,
            }
            for m in shown
        ],
        "unassigned_buckets": unassigned,
        "backlog": backlog,
        "oldest_unpublished_age_seconds": age,
        "parked": [_refused_dict(event) for event in parked],
        "refused": [_refused_dict(event) for event in trying],
        "topics_published": topic_count,
        "last_publish_by_topic": per_topic,
        "webhooks_parked": [
            {
                "webhook": name,
                "topic": t.topic,
                "after_event": t.last_event_id,
                "error": t.last_error,
            }
            for name, t in hooks_parked
        ],
        "webhooks_parked_count": hooks_parked_count,
        "outbox": {
            "retention": obj.settings.outbox_retention,
            "oldest_event_id": kept.oldest_event_id,
            "oldest_created_at": kept.oldest_created_at,
            "newest_event_id": kept.newest_event_id,
            "rows_estimate": kept.rows_estimate,
            "pruned_through": kept.pruned_through,
            "oldest_held_by": list(kept.oldest_held_by),
            "last_sweep_held_by": dict(kept.last_sweep_held),
        },
    }

    def text() -> str:
        controller = data["controller"]
        lines = [
            f"controller: {controller['member'] or 'none'} (epoch {controller['epoch']}), "
            f"{group.bucket_count} buckets, {len(unassigned)} unassigned",
        ]
        if not members:
            lines.append("relays: none running")
        for item in data["members"]:
            state = "alive" if item["alive"] else "silent"
            lines.append(
                f"relay {item['member_id']} ({state}, heartbeat "
                f"{item['heartbeat_age_seconds']:.1f} s ago): {item['buckets']} buckets, "
                f"{item['topics']} topics, "
                f"{item['events_per_second']:.1f} events/s, backlog {item['backlog']}, "
                f"oldest unpublished {_age(item['oldest_unpublished_age_seconds'])}"
            )
        lines.append(f"outbox backlog: {backlog} event(s)")
        lines.extend(_retention_lines(data["outbox"], now))
        if age is not None:
            lines.append(f"oldest unpublished: {age:.1f} s ago")
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
        if hooks_parked_count > len(hooks_parked):
            lines.append(
                f"{hooks_parked_count} webhook topics parked; the first {len(hooks_parked)} "
                "(hcat-notify webhooks show NAME --only parked):"
            )
        for item in data["webhooks_parked"]:
            lines.append(
                f"parked webhook {item['webhook']} topic {item['topic']} after event "
                f"{item['after_event']}: {item['error']} (hcat-notify webhooks retry|drop "
                f"{item['webhook']})"
            )
        if topic_count > len(per_topic):
            lines.append(f"{topic_count} topics published; the {len(per_topic)} published last:")
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


class _EventIdsCommand(click.Command):
    """A command of EVENT_ID arguments: ``-1`` is a bad event id, not an unknown option."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if re.fullmatch(r"-\d+", exc.option_name):
                ids = next(p for p in self.params if isinstance(p, click.Argument))
                EVENT_ID.convert(exc.option_name, ids, ctx)  # fails, naming the rule
            raise


@outbox.command("retry", cls=_EventIdsCommand)
@click.argument("event_ids", nargs=-1, type=EVENT_ID, metavar="EVENT_ID...")
@click.option("--all", "every", is_flag=True, help="Every parked event.")
@output_option
@click.pass_obj
@handle_errors
def outbox_retry(obj: CliContext, event_ids: tuple[int, ...], every: bool) -> None:
    """Announce parked events again, each as a new event (recorded with who and when)."""
    actor = _actor()
    with obj.catalog(write=False) as catalog:
        wanted = _event_ids(event_ids, every, catalog.outbox.refused() if every else [])
        retried = catalog.outbox.retry_parked(wanted, actor=actor)
    emit(
        obj,
        [{"event_id": old, "new_event_id": new} for old, new in retried.items()],
        lambda: (
            "\n".join(f"event {old} announced again as event {new}" for old, new in retried.items())
            or "no parked events"
        ),
    )


@outbox.command("drop", cls=_EventIdsCommand)
@click.argument("event_ids", nargs=-1, type=EVENT_ID, metavar="EVENT_ID...")
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
        wanted = _event_ids(event_ids, every, catalog.outbox.refused() if every else [])
        catalog.outbox.drop_parked(wanted, actor=actor, reason=reason)
    emit(
        obj,
        {"dropped": wanted},
        lambda: "\n".join(f"event {event_id} dropped" for event_id in wanted) or "no parked events",
    )
