"""What operators read of the webhooks' delivery: each webhook's figures (its failing and
parked topics counted, the highest event id delivered to it), a page of its topics, the
parked (webhook, topic) pairs; each from an index or the webhook's own row, never every
progress row (docs/webhooks.md; the delivery itself is :mod:`hcat_notify.store.webhooks`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, literal_column, select, text

from hcat_notify.errors import InvalidInputError
from hcat_notify.store.models import (
    WEBHOOK_FAILING_CONDITION,
    WEBHOOK_PARKED_CONDITION,
    WebhookProgressRow,
    WebhookRow,
)
from hcat_notify.store.tx import Tx
from hcat_notify.store.webhooks import (
    WebhookInfo,
    WebhookNotFoundError,
    WebhookTopic,
    info_of,
    topic_of,
    webhook_row,
)

__all__ = ["TOPIC_STATES", "WebhookFigures", "figures", "parked", "parked_count", "topics_page"]


@dataclass(frozen=True)
class WebhookFigures:
    """A webhook with the figures ``/metrics`` and ``webhooks show`` give of it, each
    read from an index or its own row (never from every progress row)."""

    info: WebhookInfo
    failing: int
    """Topics whose next events fail and are retried (not parked)."""
    parked: int
    """Topics parked after failing too long."""
    delivered: int
    """The highest event id its endpoint answered 2xx for (its start before any), as the
    writes of its progress leave it on its row."""


TOPIC_STATES = {"failing": WEBHOOK_FAILING_CONDITION, "parked": WEBHOOK_PARKED_CONDITION}
"""What a page of a webhook's topics may be narrowed to: the topics failing (retried, not
parked) or parked (each a partial index)."""


def topics_page(
    tx: Tx, name: str, *, after: str | None, limit: int, only: str | None = None
) -> tuple[WebhookInfo, list[WebhookTopic]]:
    """The webhook ``name`` and a page of its topics by name: at most ``limit`` after
    ``after`` (None: from the first), only those of state ``only`` (a key of
    :data:`TOPIC_STATES`) if given. One index range, however many topics it has.

    Raises:
        WebhookNotFoundError: no webhook has that name.
        InvalidInputError: ``only`` is not a state.
    """
    if only is not None and only not in TOPIC_STATES:
        raise InvalidInputError(f"topic state {only!r} is not one of {', '.join(TOPIC_STATES)}")
    row = webhook_row(tx, name)
    progress = WebhookProgressRow
    query = select(progress).where(progress.webhook_id == row.id)
    if only is not None:
        query = query.where(text(TOPIC_STATES[only]))
    if after is not None:
        query = query.where(progress.topic > after)
    found = tx.session.scalars(query.order_by(progress.topic).limit(limit))
    return info_of(row, tx.clock()), [topic_of(item) for item in found]


_COUNTED = (
    (WEBHOOK_FAILING_CONDITION, "ix_hcat_webhook_progress_failing"),
    (WEBHOOK_PARKED_CONDITION, "ix_hcat_webhook_progress_parked"),
)


@functools.cache
def _figures_query(dialect: str) -> Select[Any]:
    """Each webhook (with its highest delivered event id, a column of its own row) and
    its failing and parked topics counted on their partial indexes: one statement, two
    index seeks per webhook."""
    # SQLite plans without statistics (nothing runs ANALYZE here) and, told nothing,
    # counts through every row of the webhook
    counts: list[Any] = [
        literal_column(
            f"(SELECT count(*) FROM hcat_webhook_progress"
            f"{f' INDEXED BY {index}' if dialect == 'sqlite' else ''}"
            f" WHERE hcat_webhook_progress.webhook_id = hcat_webhooks.id AND {condition})"
        )
        for condition, index in _COUNTED
    ]
    return select(WebhookRow, *counts).order_by(WebhookRow.name)


def figures(tx: Tx, name: str | None = None) -> list[WebhookFigures]:
    """Every webhook (or the one named) by name, with its figures.

    Raises:
        WebhookNotFoundError: ``name`` is given and no webhook has it.
    """
    query = _figures_query(tx.dialect)
    if name is not None:
        query = query.where(WebhookRow.name == name)
    now = tx.clock()
    found = [
        WebhookFigures(
            info_of(row, now), failing, parked, max(row.delivered_event_id, row.start_after)
        )
        for row, failing, parked in tx.session.execute(query)
    ]
    if name is not None and not found:
        raise WebhookNotFoundError(f"no webhook named {name!r} (hcat-notify webhooks list)")
    return found


def parked(tx: Tx, limit: int | None = None) -> list[tuple[str, WebhookTopic]]:
    """The parked (webhook name, topic) pairs by name and topic (the first ``limit``):
    the parked rows' partial index, webhook by webhook."""
    query = (
        select(WebhookRow.name, WebhookProgressRow)
        .join(WebhookRow, WebhookRow.id == WebhookProgressRow.webhook_id)
        .where(text(WEBHOOK_PARKED_CONDITION))
        .order_by(WebhookRow.name, WebhookProgressRow.topic)
    )
    if limit is not None:
        query = query.limit(limit)
    return [(name, topic_of(row)) for name, row in tx.session.execute(query)]


def parked_count(tx: Tx) -> int:
    """How many (webhook, topic) pairs are parked (the partial index's entries)."""
    query = (
        select(func.count()).select_from(WebhookProgressRow).where(text(WEBHOOK_PARKED_CONDITION))
    )
    return int(tx.session.scalar(query) or 0)
