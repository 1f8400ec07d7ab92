"""``hcat-notify webhooks``: the endpoints the relays deliver tables' events to, signed
(docs/webhooks.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from hcat_notify.cli.common import EVENT_ID, CliContext, emit, handle_errors, output_option
from hcat_notify.errors import InvalidInputError

if TYPE_CHECKING:
    from hcat_notify.store.webhooks import WebhookInfo, WebhookTopic

__all__ = ["webhooks"]


def _when(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _info_dict(info: WebhookInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "url": info.url,
        "tables": list(info.tables.patterns),
        "events": None if info.events is None else [kind.value for kind in info.events],
        "format": info.format.value,
        "content_type": info.format.content_type,
        "state": info.state.value,
        "disabled_reason": info.disabled_reason,
        "start_after": info.start_after,
        "created_at": _when(info.created_at),
        "rotating_until": _when(info.rotating_until),  # the API's rotatingUntil
        # Its name before it was the API's, kept for the scripts that read it.
        "previous_secret_signs_until": _when(info.rotating_until),
    }


def _topic_dict(topic: WebhookTopic) -> dict[str, Any]:
    return {
        "topic": topic.topic,
        "delivered_through": topic.last_event_id,
        "attempts": topic.attempts,
        "retry_at": _when(topic.retry_at),
        "failing_since": _when(topic.failing_since),
        "last_error": topic.last_error,
        "parked_at": _when(topic.parked_at),
    }


def _line(item: dict[str, Any]) -> str:
    events = ",".join(item["events"]) if item["events"] else "every kind"
    state = item["state"] + (f" ({item['disabled_reason']})" if item["disabled_reason"] else "")
    return (
        f"{item['name']}: {item['url']} [{state}] {item['format']} ({item['content_type']}), "
        f"tables {','.join(item['tables'])}, {events}"
    )


@click.group()
def webhooks() -> None:
    """Signed HTTP deliveries of tables' events (CloudEvents, one per request or in
    batches, or the Hive body), by the relay group, per topic in order, at least once."""


@webhooks.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--tables", required=True, help="db.table patterns, comma-separated ('web.*').")
@click.option("--events", help="Event kinds, comma-separated (default: every kind).")
@click.option(
    "--format",
    "format_",
    metavar="cloudevents|cloudevents-batch|hive",
    default="cloudevents",
    show_default=True,
    help="cloudevents: one CloudEvent per request (structured mode); cloudevents-batch: "
    "a CloudEvents batch per request; hive: the Hive body with HCAT_* headers, one per "
    "request.",
)
@click.option("--from-now", is_flag=True, help="Only events after now (the default).")
@click.option("--from-event", type=EVENT_ID, help="From this event id on.")
@output_option
@click.pass_obj
@handle_errors
def webhooks_add(
    obj: CliContext,
    name: str,
    url: str,
    tables: str,
    events: str | None,
    format_: str,
    from_now: bool,
    from_event: int | None,
) -> None:
    """Add a webhook; prints its signing secret, this once only."""
    if from_now and from_event is not None:
        raise InvalidInputError("give --from-now or --from-event, not both")
    with obj.catalog() as catalog:
        info, secret = catalog.webhooks.add(
            name, url, tables, events=events, format=format_, from_event=from_event
        )
    data = {**_info_dict(info), "secret": secret}
    emit(
        obj,
        data,
        lambda: f"{_line(data)}\nsigning secret (shown this once only): {secret}",
    )


@webhooks.command("list")
@output_option
@click.pass_obj
@handle_errors
def webhooks_list(obj: CliContext) -> None:
    """Every webhook: URL, state, format, tables, event kinds."""
    with obj.catalog(write=False) as catalog:
        found = [_info_dict(info) for info in catalog.webhooks.every()]
    emit(obj, found, lambda: "\n".join(_line(item) for item in found) or "no webhooks")


SHOW_LIMIT = 100
"""Topics ``webhooks show`` lists at a time (``--limit``): a page, never every topic."""


@webhooks.command("show")
@click.argument("name")
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=SHOW_LIMIT,
    show_default=True,
    help="Topics to list, by name (the next ones with --after).",
)
@click.option("--after", metavar="TOPIC", help="List the topics after this one (a page's next).")
@click.option(
    "--only",
    type=click.Choice(["failing", "parked"]),
    help="Only the topics failing (retried) or parked.",
)
@output_option
@click.pass_obj
@handle_errors
def webhooks_show(
    obj: CliContext, name: str, limit: int, after: str | None, only: str | None
) -> None:
    """A webhook, how many of its topics fail or are parked, and its delivery per topic
    (how far, failures, parked) a page at a time."""
    with obj.catalog(write=False) as catalog:
        (figures,) = catalog.webhooks.figures(name)
        info, page = catalog.webhooks.topics_page(name, after=after, limit=limit + 1, only=only)
    topics = [_topic_dict(topic) for topic in page[:limit]]
    data = {
        **_info_dict(info),
        "failing_topics": figures.failing,
        "parked_topics": figures.parked,
        "delivered_through": figures.delivered,
        "topics": topics,
        "next": topics[-1]["topic"] if len(page) > limit else None,
    }

    def text() -> str:
        lines = [_line(data)]
        if data["rotating_until"]:
            lines.append(f"previous secret signs too until {data['rotating_until']}")
        lines.append(
            f"delivered through event {figures.delivered}; topics failing: "
            f"{figures.failing}, parked: {figures.parked}"
        )
        for item in topics:
            line = f"  {item['topic']}: delivered through event {item['delivered_through']}"
            if item["parked_at"]:
                line += f", PARKED since {item['parked_at']}"
            elif item["attempts"]:
                line += f", {item['attempts']} failed attempt(s), next at {item['retry_at']}"
            if item["last_error"]:
                line += f": {item['last_error']}"
            lines.append(line)
        if data["next"] is not None:
            more = f" --limit {limit}" + (f" --only {only}" if only else "")
            lines.append(
                f"more topics: hcat-notify webhooks show {name}{more} --after {data['next']}"
            )
        if figures.parked:
            lines.append(f"release parked topics with: hcat-notify webhooks retry|drop {name}")
        return "\n".join(lines)

    emit(obj, data, text)


def _state_command(verb: str, doc: str) -> click.Command:
    @click.argument("name")
    @output_option
    @click.pass_obj
    @handle_errors
    def command(obj: CliContext, name: str) -> None:
        with obj.catalog() as catalog:
            info = getattr(catalog.webhooks, verb)(name)
        data = _info_dict(info)
        emit(obj, data, lambda: _line(data))

    command.__doc__ = doc
    return webhooks.command(verb)(command)


_state_command("pause", "Stop delivering to a webhook (what is under way finishes).")
_state_command("resume", "Deliver to a paused (or 410-disabled) webhook again.")


@webhooks.command("remove")
@click.argument("name")
@output_option
@click.pass_obj
@handle_errors
def webhooks_remove(obj: CliContext, name: str) -> None:
    """Forget a webhook and its delivery progress."""
    with obj.catalog() as catalog:
        catalog.webhooks.remove(name)
    emit(obj, {"removed": name}, lambda: f"webhook {name} removed")


@webhooks.command("rotate-secret")
@click.argument("name")
@output_option
@click.pass_obj
@handle_errors
def webhooks_rotate(obj: CliContext, name: str) -> None:
    """A new signing secret (printed this once only); the old one signs too for the
    webhook_rotation_overlap setting (24 h by default)."""
    with obj.catalog() as catalog:
        info, secret = catalog.webhooks.rotate_secret(name)
    data = {**_info_dict(info), "secret": secret}
    emit(
        obj,
        data,
        lambda: (
            f"new signing secret (shown this once only): {secret}\n"
            f"the previous one signs too until {data['rotating_until']}"
        ),
    )


@webhooks.command("replay")
@click.argument("name")
@click.option("--from-event", type=EVENT_ID, required=True, help="Deliver again from this id.")
@output_option
@click.pass_obj
@handle_errors
def webhooks_replay(obj: CliContext, name: str, from_event: int) -> None:
    """Deliver every matching event again from an event id, per topic in order."""
    with obj.catalog() as catalog:
        info = catalog.webhooks.replay(name, from_event)
    data = _info_dict(info)
    emit(obj, data, lambda: f"webhook {name} delivers again from event {from_event}")


def _release(verb: str, doc: str, drop: bool) -> None:
    @click.argument("name")
    @click.option("--topic", help="Only this topic (default: every parked topic).")
    @output_option
    @click.pass_obj
    @handle_errors
    def command(obj: CliContext, name: str, topic: str | None) -> None:
        with obj.catalog() as catalog:
            view = catalog.webhooks
            released = (view.drop_parked if drop else view.retry_parked)(name, topic)
        action = "dropped" if drop else "retried"
        emit(
            obj,
            {action: released},
            lambda: (
                "\n".join(f"{name} {topic_}: {action}" for topic_ in released) or "no parked topics"
            ),
        )

    command.__doc__ = doc
    webhooks.command(verb)(command)


_release("retry", "Try a webhook's parked topics again from their first undelivered event.", False)
_release("drop", "Give a webhook's parked events up (each topic up to its last event now).", True)
