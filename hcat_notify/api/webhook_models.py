"""The HTTP API's models of webhook subscriptions (docs/webhooks.md): ``/v1/webhooks``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from hcat_notify.store.webhooks import WebhookInfo, WebhookTopic

__all__ = ["NewWebhook", "Replay", "Webhook", "WebhookDetail", "WebhookSecret", "WebhookTopicModel"]


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class NewWebhook(BaseModel):
    """The body of ``POST /v1/webhooks``: ``hcat-notify webhooks add``."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )

    name: str = Field(description="Its name: letters, digits, '.', '_', '-'.")
    url: str = Field(description="The endpoint: https://, or http:// to an allowed host.")
    tables: list[str] = Field(min_length=1, description="db.table patterns ('*': any run).")
    events: list[str] | None = Field(default=None, description="Event kinds; null: every kind.")
    format: Literal["cloudevents", "cloudevents-batch", "hive"] = Field(
        default="cloudevents",
        description="cloudevents: one CloudEvent per request (structured mode, "
        "application/cloudevents+json); cloudevents-batch: a CloudEvents batch per request "
        "(application/cloudevents-batch+json); hive: the Hive body, HCAT_* as HTTP headers.",
    )
    from_event: int | None = Field(
        default=None, description="The first event id it gets; null: the events after now."
    )


class Replay(BaseModel):
    """The body of ``POST /v1/webhooks/{name}/replay``."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )

    from_event: int = Field(ge=1, description="Deliver again from this event id.")


class Webhook(_Model):
    """A webhook as shown to operators (never its secret)."""

    name: str
    url: str
    tables: list[str]
    events: list[str] | None
    format: str
    content_type: str = Field(description="The content-type of its requests.")
    state: str = Field(description="active, paused or disabled (410 Gone).")
    start_after: int = Field(description="It gets the events after this id.")
    created_at: datetime
    disabled_reason: str | None
    rotating_until: datetime | None = Field(
        description="While the previous secret still signs beside the new one: until when."
    )

    @classmethod
    def of(cls, info: WebhookInfo) -> Webhook:
        return cls(
            name=info.name,
            url=info.url,
            tables=list(info.tables.patterns),
            events=None if info.events is None else [kind.value for kind in info.events],
            format=info.format.value,
            content_type=info.format.content_type,
            state=info.state.value,
            start_after=info.start_after,
            created_at=datetime.fromtimestamp(info.created_at, UTC),
            disabled_reason=info.disabled_reason,
            rotating_until=_moment(info.rotating_until),
        )


class WebhookSecret(_Model):
    """A webhook and its signing secret, shown this once (add, rotate-secret)."""

    webhook: Webhook
    secret: str = Field(description="whsec_...: store it now, it is never shown again.")


_TIMES = ("retry_at", "failing_since", "parked_at")


class WebhookTopicModel(_Model):
    """Delivery of one topic to the webhook: how far, and the failures after it."""

    topic: str
    last_event_id: int
    attempts: int
    retry_at: datetime | None
    failing_since: datetime | None
    last_error: str | None
    parked_at: datetime | None

    @classmethod
    def of(cls, topic: WebhookTopic) -> WebhookTopicModel:
        plain = {name: getattr(topic, name) for name in ("topic", "last_event_id", "attempts")}
        times = {name: _moment(getattr(topic, name)) for name in _TIMES}
        return cls.model_validate({**plain, **times, "last_error": topic.last_error})


class WebhookDetail(_Model):
    """``webhooks show``: the webhook and its delivery per topic."""

    webhook: Webhook
    failing_topics: int = Field(description="Its topics failing (retried), counted.")
    parked_topics: int = Field(description="Its topics parked, counted.")
    delivered_through: int = Field(
        description="The highest event id its endpoint answered 2xx for (its start before)."
    )
    topics: list[WebhookTopicModel] = Field(description="A page of its topics, by name.")
    next: str | None = Field(description="Pass as after= for the next page; null on the last page.")
