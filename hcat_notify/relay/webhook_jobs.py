"""The jobs of a member's webhook delivery: what one pool thread does with a lane (or
several lanes of a webhook in one CloudEvents batch): check the bucket is still the
member's, sign with the secrets the pass read last, POST, and hand the outcome back to
the pass (a 2xx to record) or record a failure, a parking, a 410 (docs/webhooks.md).
A URL this relay's settings do not allow (plain HTTP to a host its allow list does not
name: the check a registration made, made again here) is not sent to: its lane parks
with the reason.
The pass that finds the work is :mod:`hcat_notify.relay.webhooks`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from hcat_notify.config import Settings
from hcat_notify.errors import InvalidInputError
from hcat_notify.model.webhooks import backoff_delay, check_webhook_url, parse_retry_after
from hcat_notify.relay.config import RelayConfig
from hcat_notify.relay.member import Membership
from hcat_notify.relay.webhook_buffers import Held
from hcat_notify.relay.webhook_http import HttpxPoster, Poster, PostResult, requests_for
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.records import OutboxEvent
from hcat_notify.store.webhooks import DeliveryFailure, LanePosition, WebhookTarget

__all__ = ["BACKOFF_INITIAL", "BACKOFF_MAX", "Lane", "LaneSender", "Outcome", "WebhookStats"]

logger = logging.getLogger(__name__)

BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 600.0


@dataclass
class WebhookStats:
    """What a member's webhook delivery has done since it started."""

    requests: int = 0
    delivered: int = 0  # events in requests answered 2xx
    failures: int = 0  # requests that failed (retried later)
    parked: int = 0
    disabled: int = 0
    fenced: int = 0  # jobs whose record found the bucket (or the webhook) changed
    released: int = 0  # idle lanes let go (opened again, their progress read, with events)


@dataclass(frozen=True)
class Lane:
    """One (webhook, topic) of an owned bucket: delivered through ``cursor``, events
    waiting up to ``head``."""

    webhook_id: int
    topic: str
    bucket: int
    epoch: int
    cursor: int
    head: int = 0
    attempts: int = 0
    retry_at: float = 0.0  # time.time()
    failing_since: float | None = None
    parked: bool = False


@dataclass(frozen=True)
class Outcome:
    """What a job did to one lane, for the pass to take in."""

    lane: Lane | None  # the lane as it stands now (None: drop it)
    bucket: int = -1
    epoch: int = 0  # the lane's epoch (what a lost bucket was fenced at)
    lost: bool = False  # the bucket is another member's
    changed: bool = False  # the webhook changed (replay, retry, pause, remove): reload it
    delivered: LanePosition | None = None  # a 2xx whose progress the pass records
    sent: int = 0  # the events it carries (what a failover may send again)


class LaneSender:
    """Sends lanes' batches from the pool's threads (:meth:`deliver_group`).

    Args:
        catalog: the catalog (records of failures, a lane's own reads).
        member: the membership whose buckets fence the sends.
        settings: timeouts, max age, the CloudEvents source.
        config: the batch size, the heartbeat interval.
        poster: the transport (default: httpx, built by :meth:`open`).
    """

    def __init__(
        self,
        catalog: Catalog,
        member: Membership,
        settings: Settings,
        config: RelayConfig,
        poster: Poster | None = None,
    ) -> None:
        self._catalog = catalog
        self._member = member
        self._settings = settings
        self._config = config
        self.poster = poster
        self.stats = WebhookStats()
        self.latest: dict[int, WebhookTarget] = {}  # the webhooks as the pass read them last
        self.failed_at: dict[int, float] = {}  # webhook id -> its last failure (monotonic)
        self.answered: set[int] = set()  # webhooks that answered 2xx to this member
        self._refused: dict[str, str | None] = {}  # url -> why it is not sent to (None: it is)

    def open(self, connections: int) -> None:
        """Build the transport, if none was given (at the first delivery)."""
        if self.poster is None:
            self.poster = HttpxPoster(
                timeout=self._settings.webhook_timeout, connections=connections
            )

    def close(self) -> None:
        if self.poster is not None:
            self.poster.close()

    def still_owned(self, lane: Lane) -> bool:
        member = self._member
        if time.monotonic() - member.refreshed_at > 2 * self._config.heartbeat_interval:
            # the membership thread has not read our buckets lately (this process was
            # paused, or the database is slow): read them before sending anything more
            member.refresh()
        owned = member.owned().get(lane.bucket)
        return owned is not None and owned.epoch == lane.epoch

    def refusal(self, url: str) -> PostResult | None:
        """None if this relay's settings allow ``url`` (its ``webhook_allow`` may not be
        what the registration was checked against); else the failure that parks its
        lanes, nothing sent. Checked once per URL."""
        if url not in self._refused:
            if len(self._refused) >= 4096:
                self._refused.clear()
            try:
                check_webhook_url(url, self._settings.webhook_allow)
                self._refused[url] = None
            except InvalidInputError as exc:
                self._refused[url] = f"not sent, refused by this relay's settings: {exc}"
        reason = self._refused.get(url)
        return None if reason is None else PostResult(None, error=reason, refused=True)

    def signed(self, target: WebhookTarget) -> WebhookTarget | None:
        """``target`` with the secrets the pass read last (a rotation seen since the job
        began signs its next request); None: the webhook is no longer active."""
        latest = self.latest.get(target.info.id)
        if latest is None:
            return None
        if latest.stamp == target.stamp:
            return target
        return replace(target, secrets=latest.secrets, stamp=latest.stamp)

    def deliver_group(
        self,
        target: WebhookTarget,
        group: list[tuple[Lane, Held | None]],
        limit: int,
    ) -> dict[tuple[int, str], Outcome]:
        """A job: one lane (:meth:`_deliver`, at most ``limit`` events), or several in
        one CloudEvents batch (the events the pass holds)."""
        if len(group) == 1:
            lane, held = group[0]
            return {(lane.webhook_id, lane.topic): self.deliver(target, lane, held, limit)}
        found: dict[tuple[int, str], Outcome] = {}
        live: list[tuple[Lane, int, int]] = []
        carried: list[OutboxEvent] = []
        for lane, held in group:
            assert held is not None  # only lanes whose events the pass holds are grouped
            if not self.still_owned(lane):
                found[(lane.webhook_id, lane.topic)] = Outcome(
                    None, lane.bucket, lane.epoch, lost=True
                )
                continue
            wanted, through = held
            carried += wanted
            live.append((lane, through, len(wanted)))
        if not live:
            return found
        carried.sort(key=lambda event: event.event_id)
        signed = self.signed(target)
        if signed is None:
            found.update(
                {(lane.webhook_id, lane.topic): Outcome(None, changed=True) for lane, *_ in live}
            )
            return found
        (request,) = requests_for(signed, carried, source=self._settings.event_source)
        assert self.poster is not None
        result = self.refusal(target.info.url)
        if result is None:
            result = self.poster.post(target.info.url, request.body, request.headers)
            self.stats.requests += 1
        if result.ok:
            self.stats.delivered += request.events
            self.answered.add(target.info.id)
        gone = None
        for lane, through, count in live:
            key = (lane.webhook_id, lane.topic)
            if result.ok:
                found[key] = self.delivered(target, lane, through, count)
            elif result.status == 410:
                gone = gone or self.gone(target, lane, result, lane.cursor)
                found[key] = gone
            else:
                found[key] = self.record(target, lane, lane.cursor, result)
        return found

    def delivered(self, target: WebhookTarget, lane: Lane, through: int, sent: int) -> Outcome:
        """A 2xx through ``through`` (``sent`` events): the lane moves on; the pass
        records it."""
        if through <= lane.cursor:
            return Outcome(lane)
        info = target.info
        return Outcome(
            replace(lane, cursor=through, attempts=0, retry_at=0.0, failing_since=None),
            delivered=LanePosition(
                info.id, info.version, lane.topic, lane.bucket, lane.epoch, through, info.created_at
            ),
            sent=sent,
        )

    def deliver(self, target: WebhookTarget, lane: Lane, held: Held | None, batch: int) -> Outcome:
        """Send the lane's next batch (``held``: its wanted events the pass read, and how
        far their delivery reaches; None: read them here); record how far it got, or
        hand a 2xx to the pass to record."""
        if not self.still_owned(lane):
            return Outcome(None, lane.bucket, lane.epoch, lost=True)
        if held is None:
            read = self._catalog.webhooks.topic_events(
                lane.topic, after_event_id=lane.cursor, through=lane.head, limit=batch
            )
            if not read:
                return Outcome(replace(lane, head=lane.cursor))
            last_read = read[-1].event_id
            wanted = [e for e in read if target.info.wants(e.table, e.event_type)]
        else:
            # the buffer holds every wanted event through last_read: those between are not
            wanted, last_read = held
        delivered_through = lane.cursor
        assert self.poster is not None
        source = self._settings.event_source
        # one CloudEvents batch, or a request per event (one CloudEvent, or the Hive
        # body), each signed as it goes
        if target.info.format.batched:
            chunks = [wanted] if wanted else []
        else:
            chunks = [[event] for event in wanted]
        failure = self.refusal(target.info.url) if chunks else None
        for chunk in chunks if failure is None else ():
            signed = self.signed(target)
            if signed is None:
                return Outcome(None, changed=True)
            (request,) = requests_for(signed, chunk, source=source)
            result = self.poster.post(target.info.url, request.body, request.headers)
            self.stats.requests += 1
            if not result.ok:
                failure = result
                break
            self.stats.delivered += request.events
            self.answered.add(target.info.id)
            delivered_through = request.last_event_id
        if failure is None:  # the events between that it does not want too
            return self.delivered(target, lane, last_read, len(wanted))
        if failure.status == 410:
            return self.gone(target, lane, failure, delivered_through)
        return self.record(target, lane, delivered_through, failure)

    def record(
        self, target: WebhookTarget, lane: Lane, through: int, failure: PostResult | None
    ) -> Outcome:
        webhooks = self._catalog.webhooks
        info = target.info
        at = LanePosition(
            info.id, info.version, lane.topic, lane.bucket, lane.epoch, through, info.created_at
        )
        member_id = self._member.member_id
        if through > lane.cursor:
            fence = webhooks.record_delivered(member_id, at)
            if fence != "ok":
                return self.fenced(lane, fence)
            lane = replace(lane, cursor=through, attempts=0, retry_at=0.0, failing_since=None)
        if failure is None:
            return Outcome(lane)
        self.stats.failures += 1
        self.failed_at[info.id] = time.monotonic()
        now = time.time()
        since = lane.failing_since or now
        attempts = lane.attempts + 1
        parked = failure.refused or now - since >= self._settings.webhook_max_age
        delay = backoff_delay(
            attempts,
            initial=BACKOFF_INITIAL,
            maximum=BACKOFF_MAX,
            retry_after=parse_retry_after(failure.retry_after, now),
        )
        error = failure.error or f"HTTP {failure.status}"
        recorded = DeliveryFailure(attempts, now + delay, since, error, parked)
        fence = webhooks.record_failure(member_id, at, recorded)
        if fence != "ok":
            return self.fenced(lane, fence)
        if parked and failure.refused:
            self.stats.parked += 1
            logger.error(
                "relay webhook parked webhook=%s topic=%s: %s (then hcat-notify webhooks "
                "retry|drop %s)",
                info.name,
                lane.topic,
                error,
                info.name,
            )
        elif parked:
            self.stats.parked += 1
            logger.error(
                "relay webhook parked webhook=%s topic=%s after %d attempts since %.0f s "
                "(hcat-notify webhooks retry|drop %s) error=%r",
                info.name,
                lane.topic,
                attempts,
                now - since,
                info.name,
                error,
            )
        else:
            logger.warning(
                "relay webhook failed webhook=%s topic=%s attempt=%d retry_in=%.1fs error=%r",
                info.name,
                lane.topic,
                attempts,
                delay,
                error,
            )
        lane = replace(lane, attempts=attempts, retry_at=now + delay, failing_since=since)
        return Outcome(replace(lane, parked=parked))

    def fenced(self, lane: Lane, fence: str) -> Outcome:
        logger.info(
            "relay webhook progress fenced topic=%s bucket=%d epoch=%d: %s",
            lane.topic,
            lane.bucket,
            lane.epoch,
            "bucket lost" if fence == "lost" else "webhook changed",
        )
        return Outcome(
            None, lane.bucket, lane.epoch, lost=fence == "lost", changed=fence == "changed"
        )

    def gone(self, target: WebhookTarget, lane: Lane, failure: PostResult, through: int) -> Outcome:
        outcome = self.record(target, lane, through, None) if through > lane.cursor else None
        if outcome is not None and outcome.lane is None:
            return outcome
        info = target.info
        reason = failure.error or "HTTP 410"
        if self._catalog.webhooks.disable(info.id, info.version, info.created_at, reason):
            self.stats.disabled += 1
            logger.error(
                "relay webhook disabled webhook=%s url=%s: the endpoint answered 410 Gone "
                "(hcat-notify webhooks resume %s)",
                info.name,
                info.url,
                info.name,
            )
        return Outcome(None, changed=True)
