"""``catalog.webhooks``: webhook subscriptions and their delivery progress, each call one
transaction (the store's functions are in :mod:`hcat_notify.store.webhooks`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.topics import validate_topic_name
from hcat_notify.model.webhooks import (
    TablePatterns,
    WebhookFormat,
    WebhookState,
    check_webhook_url,
    new_secret,
    parse_event_kinds,
    validate_webhook_name,
)
from hcat_notify.store import outbox, webhook_figures, webhooks
from hcat_notify.store.fast_path import FastPath
from hcat_notify.store.records import OutboxEvent, outbox_events
from hcat_notify.store.tx import Tx
from hcat_notify.store.webhook_figures import WebhookFigures
from hcat_notify.store.webhooks import (
    DeliveryFailure,
    LanePosition,
    WebhookInfo,
    WebhookTarget,
    WebhookTopic,
    seal_secret,
    stamps_of,
    stamps_query,
)

__all__ = ["Webhooks"]


class Webhooks:
    """Webhook subscriptions in the catalog (``catalog.webhooks``).

    Args:
        transaction: opens a :class:`Tx` of the catalog (``write=True`` for writers).
        fast: the catalog's driver-level reads (a relay's page).
    """

    def __init__(
        self, transaction: Callable[..., AbstractContextManager[Tx]], fast: FastPath
    ) -> None:
        self._transaction = transaction
        self._fast = fast

    # -- what operators do -------------------------------------------------------------

    def add(
        self,
        name: str,
        url: str,
        tables: str | Sequence[str],
        *,
        events: str | Sequence[str] | None = None,
        format: WebhookFormat | str = WebhookFormat.CLOUDEVENTS,
        from_event: int | None = None,
    ) -> tuple[WebhookInfo, str]:
        """Add a webhook; returns it and its signing secret (shown this once only).

        Args:
            name: the webhook's name.
            url: its endpoint (``https://``; plain ``http://`` only to a host of the
                ``webhook_allow`` setting).
            tables: ``db.table`` patterns (``*`` for any characters), each matching a table.
            events: the event kinds it gets (default: every kind).
            format: ``cloudevents`` (default: one CloudEvent per request, structured
                mode), ``cloudevents-batch`` (a CloudEvents batch per request) or
                ``hive`` (the Hive body, one per request).
            from_event: the first event id it gets (default: the events after now).

        Raises:
            InvalidInputError: a bad name, URL, pattern or kind; a pattern that matches no
                table; a name in use. Nothing is written then.
        """
        validate_webhook_name(name)
        patterns = TablePatterns.parse(tables)
        kinds = parse_event_kinds(events)
        chosen = WebhookFormat.parse(format)
        secret = new_secret()
        with self._transaction(write=True) as tx:
            check_webhook_url(url, tx.settings.webhook_allow)
            info = webhooks.add(
                tx,
                name=name,
                url=url,
                tables=patterns,
                events=kinds,
                format=chosen,
                start_after=None if from_event is None else from_event - 1,
                stored_secret=seal_secret(secret, tx.settings.webhook_key),
            )
        return info, secret

    def every(self) -> list[WebhookInfo]:
        """Every webhook, by name."""
        with self._transaction() as tx:
            return webhooks.every(tx)

    def get(self, name: str) -> WebhookInfo:
        """The webhook ``name`` (WebhookNotFoundError if none)."""
        with self._transaction() as tx:
            return webhooks.one(tx, name)

    def topics(self, name: str) -> list[WebhookTopic]:
        """Its delivery per topic: how far, failures, parked."""
        with self._transaction() as tx:
            return webhooks.topics(tx, [webhooks.one(tx, name).id])

    def topics_page(
        self, name: str, *, after: str | None = None, limit: int = 100, only: str | None = None
    ) -> tuple[WebhookInfo, list[WebhookTopic]]:
        """The webhook and a page of its topics by name: at most ``limit`` after the topic
        ``after``, only the ``failing`` or the ``parked`` ones if ``only`` says so (one
        index range, however many topics it delivers)."""
        if limit < 1:
            raise InvalidInputError(f"--limit must be at least 1, not {limit}")
        if after is not None:
            validate_topic_name(after)  # a topic a page ended at, not any text
        with self._transaction() as tx:
            return webhook_figures.topics_page(tx, name, after=after, limit=limit, only=only)

    def figures(self, name: str | None = None) -> list[WebhookFigures]:
        """Every webhook (or the one named, WebhookNotFoundError if none) by name, with
        its failing and parked topics counted and the highest event id delivered to it,
        each read from an index."""
        with self._transaction() as tx:
            return webhook_figures.figures(tx, name)

    def parked(self, limit: int | None = None) -> list[tuple[str, WebhookTopic]]:
        """The parked (webhook name, topic) pairs by name and topic (the first ``limit``)."""
        with self._transaction() as tx:
            return webhook_figures.parked(tx, limit)

    def parked_count(self) -> int:
        """How many (webhook, topic) pairs are parked."""
        with self._transaction() as tx:
            return webhook_figures.parked_count(tx)

    def pause(self, name: str) -> WebhookInfo:
        """Stop delivering to it (what is in flight finishes)."""
        return self._set_state(name, WebhookState.PAUSED)

    def resume(self, name: str) -> WebhookInfo:
        """Deliver again (after a pause, or a 410 that disabled it)."""
        return self._set_state(name, WebhookState.ACTIVE)

    def _set_state(self, name: str, state: WebhookState) -> WebhookInfo:
        with self._transaction(write=True) as tx:
            return webhooks.set_state(tx, name, state)

    def remove(self, name: str) -> None:
        """Forget it and its progress."""
        with self._transaction(write=True) as tx:
            webhooks.remove(tx, name)

    def rotate_secret(self, name: str) -> tuple[WebhookInfo, str]:
        """A new secret (returned, shown this once); the old one signs too for the
        ``webhook_rotation_overlap`` setting's seconds."""
        secret = new_secret()
        with self._transaction(write=True) as tx:
            settings = tx.settings
            info = webhooks.rotate(
                tx,
                name,
                seal_secret(secret, settings.webhook_key),
                settings.webhook_rotation_overlap,
            )
        return info, secret

    def replay(self, name: str, from_event: int) -> WebhookInfo:
        """Deliver every matching event again from ``from_event`` on, per topic in order."""
        with self._transaction(write=True) as tx:
            return webhooks.replay(tx, name, from_event)

    def retry_parked(self, name: str, topic: str | None = None) -> list[str]:
        """Try a webhook's parked topics again from their first undelivered event."""
        with self._transaction(write=True) as tx:
            return webhooks.release_parked(tx, name, topic, drop=False)

    def drop_parked(self, name: str, topic: str | None = None) -> list[str]:
        """Give a webhook's parked events up (up to each topic's last event now)."""
        with self._transaction(write=True) as tx:
            return webhooks.release_parked(tx, name, topic, drop=True)

    # -- what relays do ----------------------------------------------------------------

    def targets(self) -> list[WebhookTarget]:
        """The active webhooks with their secrets (for the relays that deliver)."""
        with self._transaction() as tx:
            return webhooks.targets(tx, tx.settings.webhook_key)

    def stamps(self) -> dict[int, tuple[Any, ...]]:
        """Each active webhook's stamp (:attr:`WebhookTarget.stamp`): a cheap look at
        whether the webhooks changed since :meth:`targets` was read (on the driver, on the
        calling thread's own connection, as :meth:`page` reads them)."""
        return stamps_of(self._fast.own_rows(stamps_query))

    def page(
        self, in_buckets: Sequence[int], *, after_event_id: int, limit: int
    ) -> tuple[list[OutboxEvent], dict[int, tuple[Any, ...]]]:
        """A relay's page of its buckets' events and, read after them, each active
        webhook's stamp: a rotation (or any change) committed before those events were
        is seen with them (each read sees every commit before it began). Both on the
        driver, on the calling thread's own connection, as the publisher reads its page
        (:meth:`FastPath.outbox_page`)."""
        fast = self._fast
        rows = fast.outbox_page(in_buckets, after=after_event_id, limit=limit) if in_buckets else []
        return outbox_events(rows), self.stamps()

    def progress(self, keys: Sequence[tuple[int, str]]) -> list[WebhookTopic]:
        """The progress rows of some (webhook id, topic) lanes, those that have one."""
        with self._transaction() as tx:
            return webhooks.topics_of(tx, keys)

    def topic_events(
        self, topic: str, *, after_event_id: int, through: int, limit: int
    ) -> list[OutboxEvent]:
        """A topic's events after an id, up to another, in id order."""
        with self._transaction() as tx:
            return outbox.topic_events(
                tx, topic, after_event_id=after_event_id, through=through, limit=limit
            )

    def record_delivered(self, member_id: str, at: LanePosition) -> str:
        """Record a 2xx, fenced by the bucket's owner and epoch and the webhook's version:
        ``ok``, ``lost`` (the bucket is another member's) or ``changed``."""
        with self._transaction(write=True) as tx:
            return webhooks.record_delivered(tx, member_id, at)

    def record_delivered_many(self, member_id: str, items: Sequence[LanePosition]) -> list[str]:
        """Record several 2xx in one transaction, each fenced as :meth:`record_delivered`:
        ``ok``, ``lost`` or ``changed`` per item."""
        if not items:
            return []
        return self._fast.write(
            lambda cursor, dialect: webhooks.record_delivered_many(
                cursor, dialect, member_id, items
            )
        )

    def record_failure(self, member_id: str, at: LanePosition, failure: DeliveryFailure) -> str:
        """Record a failed attempt (parked once too old), fenced as :meth:`record_delivered`."""
        with self._transaction(write=True) as tx:
            return webhooks.record_failure(tx, member_id, at, failure)

    def disable(self, webhook_id: int, version: int, created_at: float, reason: str) -> bool:
        """Disable a webhook whose endpoint is gone (410), unless it changed meanwhile."""
        with self._transaction(write=True) as tx:
            return webhooks.disable(tx, webhook_id, version, created_at, reason)
