"""Webhook subscriptions and their delivery progress (docs/webhooks.md).

A webhook's row holds its endpoint, what it gets and its signing secret; its progress
rows hold, per topic, the highest event id delivered, written by the relay member that
owns the topic's bucket, fenced by the bucket's epoch exactly as relay progress is (the
same statement starts the transaction), and by the webhook's version: a replay, a retry
or a drop of parked events moves the version, and what a member was delivering under the
old one changes nothing.

Secrets are kept as ``fernet:<token>`` when the settings give a key (``webhook_key``),
else ``plain:<secret>``: the signature needs the secret itself, so it cannot be hashed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Insert,
    Select,
    Update,
    bindparam,
    case,
    delete,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from hcat_notify.errors import ConfigError, InvalidInputError
from hcat_notify.model.events import EventType
from hcat_notify.model.webhooks import TablePatterns, WebhookFormat, WebhookState
from hcat_notify.store.driver import compiled
from hcat_notify.store.models import (
    WEBHOOK_PARKED_CONDITION,
    OutboxRow,
    TableRow,
    WebhookProgressRow,
    WebhookRow,
)
from hcat_notify.store.outbox_retention import check_replay_from
from hcat_notify.store.progress import keep_bucket, keep_bucket_params, keep_bucket_statement
from hcat_notify.store.tx import WEBHOOKS_CHANNEL, Tx, clock_sql

__all__ = [
    "DeliveryFailure",
    "LanePosition",
    "WebhookInfo",
    "WebhookNotFoundError",
    "WebhookTarget",
    "WebhookTopic",
    "info_of",
    "seal_secret",
    "stamps_of",
    "stamps_query",
    "topic_of",
    "unseal_secret",
    "webhook_row",
]

_FERNET = "fernet:"
_PLAIN = "plain:"
_MISSING_EXTRA = (
    "webhook secrets encrypted at rest need the [webhooks] extra: "
    "pip install 'hcat-notify[webhooks]' ({error})"
)


class WebhookNotFoundError(InvalidInputError, LookupError):
    """No webhook has that name."""


def _fernet(key: str) -> Any:
    try:
        from cryptography.fernet import Fernet
    except ImportError as exc:
        raise ConfigError(_MISSING_EXTRA.format(error=exc)) from None
    try:
        return Fernet(key.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise ConfigError(
            "webhook_key is not a Fernet key (32 url-safe base64-encoded bytes: "
            "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key())')"
        ) from None


def seal_secret(secret: str, key: str | None) -> str:
    """The stored form of ``secret``: encrypted with ``key`` when there is one."""
    if key is None:
        return _PLAIN + secret
    token: bytes = _fernet(key).encrypt(secret.encode("ascii"))
    return _FERNET + token.decode("ascii")


def unseal_secret(stored: str, key: str | None) -> str:
    """The secret of a stored form.

    Raises:
        ConfigError: it is encrypted and no key, or another key, is configured.
    """
    if stored.startswith(_PLAIN):
        return stored.removeprefix(_PLAIN)
    if key is None:
        raise ConfigError("a webhook secret is encrypted at rest, and no webhook_key is set")
    from cryptography.fernet import InvalidToken

    try:
        plain: bytes = _fernet(key).decrypt(stored.removeprefix(_FERNET).encode("ascii"))
    except InvalidToken:
        raise ConfigError("a webhook secret does not decrypt with the webhook_key set") from None
    return plain.decode("ascii")


@dataclass(frozen=True)
class WebhookInfo:
    """A webhook as shown to operators (never its secret)."""

    id: int
    name: str
    url: str
    tables: TablePatterns
    events: tuple[EventType, ...] | None
    format: WebhookFormat
    state: WebhookState
    start_after: int
    created_at: float
    version: int
    disabled_reason: str | None
    rotating_until: float | None
    """While a rotation's previous secret still signs: until when (seconds)."""

    def wants(self, table: str, kind: EventType) -> bool:
        """Whether an event of ``kind`` about ``table`` goes to this webhook."""
        return (self.events is None or kind in self.events) and self.tables.matches(table)


@dataclass(frozen=True)
class WebhookTarget:
    """An active webhook as its deliverer needs it: with its secrets (current first)."""

    info: WebhookInfo
    secrets: tuple[str, ...]
    stamp: tuple[Any, ...] = ()
    """The row as read (:func:`stamps_query`): whatever changes it (a rotation, a replay, a
    pause) changes this."""


@dataclass(frozen=True)
class WebhookTopic:
    """Delivery of one topic to one webhook: how far, and the failures after it."""

    webhook_id: int
    topic: str
    bucket: int
    last_event_id: int
    attempts: int
    retry_at: float | None
    failing_since: float | None
    last_error: str | None
    parked_at: float | None


@dataclass(frozen=True)
class LanePosition:
    """Where a (webhook, topic) lane's delivery stands, with the fences a write of it
    passes: the bucket's owner at ``epoch`` and the webhook at ``version``, the one
    created at ``created_at`` (SQLite gives a removed webhook's id to the next one added
    when it was the highest, and the new one starts at version 1 too)."""

    webhook_id: int
    version: int
    topic: str
    bucket: int
    epoch: int
    last_event_id: int
    created_at: float


@dataclass(frozen=True)
class DeliveryFailure:
    """A failed attempt at a topic's next events, as recorded."""

    attempts: int
    retry_at: float
    failing_since: float
    error: str
    parked: bool


def info_of(row: WebhookRow, now: float) -> WebhookInfo:
    rotating = row.previous_until if row.previous_secret and row.previous_until else None
    return WebhookInfo(
        id=row.id,
        name=row.name,
        url=row.url,
        tables=TablePatterns(tuple(row.tables)),
        events=None if row.events is None else tuple(EventType(e) for e in row.events),
        format=WebhookFormat(row.format),
        state=WebhookState(row.state),
        start_after=row.start_after,
        created_at=row.created_at,
        version=row.version,
        disabled_reason=row.disabled_reason,
        rotating_until=rotating if rotating is not None and rotating > now else None,
    )


def webhook_row(tx: Tx, name: str) -> WebhookRow:
    row = tx.session.scalars(select(WebhookRow).where(WebhookRow.name == name)).one_or_none()
    if row is None:
        raise WebhookNotFoundError(f"no webhook named {name!r} (hcat-notify webhooks list)")
    return row


def check_tables_exist(tx: Tx, patterns: TablePatterns) -> None:
    """Every pattern matches a registered table.

    Raises:
        InvalidInputError: naming the first pattern that matches none.
    """
    names = [
        f"{db}.{table}".lower()
        for db, table in tx.session.execute(select(TableRow.db_name, TableRow.table_name))
    ]
    for pattern in patterns.patterns:
        if not any(TablePatterns((pattern,)).matches(name) for name in names):
            raise InvalidInputError(f"table pattern {pattern!r} matches no table")


def add(
    tx: Tx,
    *,
    name: str,
    url: str,
    tables: TablePatterns,
    events: Sequence[EventType] | None,
    format: WebhookFormat,
    start_after: int | None,
    stored_secret: str,
) -> WebhookInfo:
    """Add a webhook (``start_after`` None: from the last event now).

    Raises:
        InvalidInputError: the name is taken, a table pattern matches no table, or
            ``start_after`` is beyond the newest event.
        HistoryGoneError: the outbox's retention deleted events after ``start_after``.
    """
    if tx.session.scalars(select(WebhookRow.id).where(WebhookRow.name == name)).first():
        raise InvalidInputError(f"a webhook named {name!r} exists already")
    check_tables_exist(tx, tables)
    if start_after is not None:
        check_from_event(tx, start_after + 1)
    now = tx.clock()
    row = WebhookRow(
        name=name,
        url=url,
        tables=list(tables.patterns),
        events=None if events is None else [kind.value for kind in events],
        format=format.value,
        state=WebhookState.ACTIVE.value,
        secret=stored_secret,
        start_after=tx.last_event_id() if start_after is None else start_after,
        created_at=now,
    )
    row.delivered_event_id = row.start_after
    tx.session.add(row)
    tx.session.flush()
    tx.notify(WEBHOOKS_CHANNEL)
    return info_of(row, now)


def every(tx: Tx) -> list[WebhookInfo]:
    now = tx.clock()
    rows = tx.session.scalars(select(WebhookRow).order_by(WebhookRow.name))
    return [info_of(row, now) for row in rows]


def one(tx: Tx, name: str) -> WebhookInfo:
    return info_of(webhook_row(tx, name), tx.clock())


def set_state(tx: Tx, name: str, state: WebhookState) -> WebhookInfo:
    row = webhook_row(tx, name)
    row.state = state.value
    row.disabled_reason = None
    tx.session.flush()
    tx.notify(WEBHOOKS_CHANNEL)
    return info_of(row, tx.clock())


def _bump(tx: Tx, row: WebhookRow) -> None:
    """A new version of ``row``, written now: on PostgreSQL it locks the webhook's row
    before any of its progress rows, the order the recorder takes them in (the other
    order deadlocked a replay with a delivery being recorded)."""
    row.version += 1
    tx.session.flush()


def remove(tx: Tx, name: str) -> None:
    row = webhook_row(tx, name)
    _bump(tx, row)
    tx.session.execute(delete(WebhookProgressRow).where(WebhookProgressRow.webhook_id == row.id))
    tx.session.delete(row)
    tx.notify(WEBHOOKS_CHANNEL)


def rotate(tx: Tx, name: str, stored_secret: str, overlap: float) -> WebhookInfo:
    """Make ``stored_secret`` the secret; the current one signs too for ``overlap`` s."""
    row = webhook_row(tx, name)
    now = tx.clock()
    row.previous_secret, row.previous_until = row.secret, now + overlap
    row.secret = stored_secret
    tx.session.flush()
    tx.notify(WEBHOOKS_CHANNEL)
    return info_of(row, now)


def check_from_event(tx: Tx, from_event: int) -> None:
    """Refuse a webhook's start at ``from_event`` (``add``, ``replay``; CLI, Python and API
    alike) below 1, beyond the next event (it would skip every event up to it silently),
    or at or below what the outbox's retention deleted (HistoryGoneError).
    """
    if from_event < 1:
        raise InvalidInputError(f"the first event must be at least 1, not {from_event}")
    last = tx.last_event_id()
    if from_event > last + 1:
        raise InvalidInputError(
            f"the first event {from_event} is beyond the newest event ({last}): give at "
            f"most {last + 1}, the next event (or, to add one, the events after now)"
        )
    check_replay_from(tx, from_event)


def replay(tx: Tx, name: str, from_event: int) -> WebhookInfo:
    """Deliver again from ``from_event``: every topic starts after ``from_event - 1``.

    Raises:
        WebhookNotFoundError: no such webhook.
        InvalidInputError: ``from_event`` below 1 or beyond the next event.
        HistoryGoneError: the outbox's retention deleted events from ``from_event`` on.
    """
    row = webhook_row(tx, name)
    check_from_event(tx, from_event)
    _bump(tx, row)
    tx.session.execute(delete(WebhookProgressRow).where(WebhookProgressRow.webhook_id == row.id))
    row.start_after = row.delivered_event_id = from_event - 1
    tx.session.flush()
    tx.notify(WEBHOOKS_CHANNEL)
    return info_of(row, tx.clock())


def _parked_rows(tx: Tx, row: WebhookRow, topic: str | None) -> list[WebhookProgressRow]:
    query = select(WebhookProgressRow).where(
        WebhookProgressRow.webhook_id == row.id, text(WEBHOOK_PARKED_CONDITION)
    )
    if topic is not None:
        query = query.where(WebhookProgressRow.topic == topic)
    return list(tx.session.scalars(query))


def release_parked(tx: Tx, name: str, topic: str | None, *, drop: bool) -> list[str]:
    """Release a webhook's parked topics (all, or ``topic``): tried again from their
    first undelivered event, or with ``drop`` given up up to the topic's last event now.
    Returns the topics released; a ``topic`` that is not a parked one is refused.
    """
    row = webhook_row(tx, name)
    parked = _parked_rows(tx, row, topic)
    if topic is not None and not parked:
        known = tx.session.get(WebhookProgressRow, (row.id, topic)) is not None
        why = "is not parked" if known else "is none of its topics"
        raise InvalidInputError(
            f"topic {topic!r} of webhook {name} {why} (webhooks show {name} --only parked)"
        )
    if parked:
        _bump(tx, row)
    bound = tx.last_event_id()
    for item in parked:
        if drop:
            last = tx.session.scalar(
                select(func.max(OutboxRow.event_id)).where(
                    OutboxRow.topic == item.topic, OutboxRow.event_id <= bound
                )
            )
            item.last_event_id = max(item.last_event_id, last or 0)
            row.delivered_event_id = max(row.delivered_event_id, item.last_event_id)
        item.parked_at = item.retry_at = item.failing_since = item.last_error = None
        item.attempts = 0
    if parked:
        tx.notify(WEBHOOKS_CHANNEL)
    tx.session.flush()
    return [item.topic for item in parked]


def disable(tx: Tx, webhook_id: int, version: int, created_at: float, reason: str) -> bool:
    """Disable a webhook (410 Gone) unless it changed since ``version`` (or is another
    one, created at another time, of the same id); whether it did."""
    changed = tx.session.execute(
        update(WebhookRow)
        .where(
            WebhookRow.id == webhook_id,
            WebhookRow.version == version,
            WebhookRow.created_at == created_at,
        )
        .values(state=WebhookState.DISABLED.value, disabled_reason=reason, version=version + 1)
    )
    if changed.rowcount:  # type: ignore[attr-defined]
        tx.notify(WEBHOOKS_CHANNEL)  # the group's other members stop too
    return bool(changed.rowcount)  # type: ignore[attr-defined]


def targets(tx: Tx, key: str | None, webhook_id: int | None = None) -> list[WebhookTarget]:
    """The active webhooks (or the one of ``webhook_id``) with their secrets (the previous
    one while it still signs).

    Raises:
        ConfigError: a secret does not decrypt with ``key``.
    """
    now = tx.clock()
    found = []
    query = select(WebhookRow).where(WebhookRow.state == WebhookState.ACTIVE.value)
    if webhook_id is not None:
        query = query.where(WebhookRow.id == webhook_id)
    for row in tx.session.scalars(query.order_by(WebhookRow.id)):
        keys = [unseal_secret(row.secret, key)]
        if row.previous_secret and row.previous_until and row.previous_until > now:
            keys.append(unseal_secret(row.previous_secret, key))
        stamp = tuple(getattr(row, column.key) for column in _STAMPED[1:])
        found.append(WebhookTarget(info_of(row, now), tuple(keys), stamp))
    return found


_STAMPED = (
    WebhookRow.id,
    WebhookRow.version,
    WebhookRow.url,
    WebhookRow.secret,
    WebhookRow.previous_secret,
    WebhookRow.previous_until,
)


_STAMPS = select(*_STAMPED).where(WebhookRow.state == WebhookState.ACTIVE.value)


def stamps_query(dialect: str) -> Select[int, int, str, str, str | None, float | None]:
    """Each active webhook's :attr:`WebhookTarget.stamp` (plain columns, no decryption):
    a deliverer reads them on the driver with each page of events, and reads
    :func:`targets` again when they changed (the same statement for every dialect)."""
    return _STAMPS


def stamps_of(rows: Iterable[Sequence[Any]]) -> dict[int, tuple[Any, ...]]:
    """The stamps, by webhook id, of the rows of :func:`stamps_query`."""
    return {row[0]: tuple(row[1:]) for row in rows}


def topic_of(row: WebhookProgressRow) -> WebhookTopic:
    return WebhookTopic(
        row.webhook_id,
        row.topic,
        row.bucket,
        row.last_event_id,
        row.attempts,
        row.retry_at,
        row.failing_since,
        row.last_error,
        row.parked_at,
    )


def topics(
    tx: Tx, webhook_ids: Sequence[int], in_buckets: Sequence[int] | None = None
) -> list[WebhookTopic]:
    """The progress rows of some webhooks (in some buckets)."""
    if not webhook_ids:
        return []
    query = select(WebhookProgressRow).where(WebhookProgressRow.webhook_id.in_(list(webhook_ids)))
    if in_buckets is not None:
        query = query.where(WebhookProgressRow.bucket.in_(list(in_buckets)))
    return [topic_of(row) for row in tx.session.scalars(query.order_by(WebhookProgressRow.topic))]


def topics_of(tx: Tx, keys: Sequence[tuple[int, str]]) -> list[WebhookTopic]:
    """The progress rows of some (webhook id, topic) pairs, those that have one (probes
    of the primary key)."""
    wanted = set(keys)
    if not wanted:
        return []
    progress = WebhookProgressRow
    query = select(progress).where(
        progress.webhook_id.in_(sorted({hook for hook, _ in wanted})),
        progress.topic.in_(sorted({topic for _, topic in wanted})),
    )
    found = tx.session.scalars(query)
    return [topic_of(row) for row in found if (row.webhook_id, row.topic) in wanted]


def _fenced(tx: Tx, member_id: str, at: LanePosition) -> str:
    """The fence of a progress write: ``lost`` (the bucket is not the member's at that
    epoch), ``changed`` (the webhook changed or went), else ``ok``, and the webhook's
    highest delivered event id moved to ``at``'s position; on PostgreSQL both rows are
    locked until ``tx`` ends."""
    if not keep_bucket(tx, member_id, at.bucket, at.epoch):
        return "lost"
    same = tx.session.execute(
        _SAME_VERSION,
        {
            "same_id": at.webhook_id,
            "same_version": at.version,
            "same_created": at.created_at,
            "same_through": at.last_event_id,
        },
    )
    return "ok" if same.rowcount else "changed"  # type: ignore[attr-defined]


def _upsert(
    tx: Tx, values: Mapping[str, Any], update_columns: Sequence[str], *, forward: bool = False
) -> None:
    """Insert or update a progress row; ``forward``: its position only moves forward."""
    dialect = postgresql if tx.dialect == "postgresql" else sqlite
    statement = dialect.insert(WebhookProgressRow).values(**values)
    excluded = statement.excluded
    set_: dict[str, Any] = {name: getattr(excluded, name) for name in update_columns}
    if forward:
        existing = WebhookProgressRow.__table__.c.last_event_id
        later = func.max if tx.dialect == "sqlite" else func.greatest
        set_["last_event_id"] = later(excluded.last_event_id, existing)
    tx.session.execute(
        statement.on_conflict_do_update(
            index_elements=[WebhookProgressRow.webhook_id, WebhookProgressRow.topic], set_=set_
        )
    )


_CLEARED = {"attempts": 0, "retry_at": None, "failing_since": None, "last_error": None}


def record_delivered(tx: Tx, member_id: str, at: LanePosition) -> str:
    """Record that a topic's events up to ``at.last_event_id`` were delivered (a 2xx),
    fenced by the bucket's owner and epoch and the webhook's version: ``ok``, ``lost`` or
    ``changed`` (then nothing is written)."""
    fence = _fenced(tx, member_id, at)
    if fence != "ok":
        return fence
    values = {**_position(at, tx.clock()), "parked_at": None, **_CLEARED}
    _upsert(tx, values, [k for k in values if k not in ("webhook_id", "topic")])
    return "ok"


def record_delivered_many(
    cursor: Any, dialect: Dialect, member_id: str, items: Sequence[LanePosition]
) -> list[str]:
    """Record several 2xx in one transaction, each fenced as :func:`record_delivered`
    (the fence read once per bucket and per webhook): ``ok``, ``lost`` or ``changed`` per
    item, in order. A topic's position only moves forward here, and its failure count is
    cleared only when it does: a failure recorded meanwhile (at a later position, by the
    same member) is kept. The rows are written by one statement, built once.

    Run on the driver's ``cursor`` in a write transaction the caller opened and ends
    (:meth:`~hcat_notify.store.fast_path.FastPath.write`): the relay's recorder writes
    one for every few requests, and a session's steps cost more than its statements.
    """
    keep = compiled(dialect, keep_bucket_statement)
    same_version = compiled(dialect, _same_version_statement)
    clock = compiled(dialect, _clock_statement)
    buckets: dict[tuple[int, int], bool] = {}
    hooks: dict[tuple[int, int, float], bool] = {}
    found: list[str] = []
    rows: list[dict[str, Any]] = []
    cursor.execute(*clock.bind({}))
    now = float(cursor.fetchone()[0])
    # the fences first, buckets in bucket order (as the publisher's progress takes them:
    # two writers locking bucket rows in two orders deadlock on PostgreSQL), then webhooks
    for bucket, epoch in sorted({(item.bucket, item.epoch) for item in items}):
        cursor.execute(*keep.bind(keep_bucket_params(member_id, bucket, epoch)))
        buckets[(bucket, epoch)] = cursor.rowcount > 0
    through: dict[tuple[int, int, float], int] = {}
    for item in items:
        if buckets[(item.bucket, item.epoch)]:
            hook = (item.webhook_id, item.version, item.created_at)
            through[hook] = max(through.get(hook, item.last_event_id), item.last_event_id)
    for hook in sorted(through):
        identity = dict(zip(("same_id", "same_version", "same_created"), hook, strict=True))
        cursor.execute(*same_version.bind({**identity, "same_through": through[hook]}))
        hooks[hook] = cursor.rowcount > 0
    for item in items:
        if not buckets[(item.bucket, item.epoch)]:
            found.append("lost")
            continue
        if not hooks[(item.webhook_id, item.version, item.created_at)]:
            found.append("changed")
            continue
        rows.append({**_position(item, now), "parked_at": None, **_CLEARED})
        found.append("ok")
    if rows:
        upsert = compiled(dialect, _forward_upsert)
        cursor.executemany(upsert.sql, [upsert.bind(row)[1] for row in rows])
    return found


def _same_version_statement(dialect: str) -> Update:
    return _SAME_VERSION


def _clock_statement(dialect: str) -> Select[tuple[float]]:
    return select(clock_sql(dialect))


_THROUGH = bindparam("same_through", type_=BigInteger)
_SAME_VERSION = (
    update(WebhookRow)
    .where(
        WebhookRow.id == bindparam("same_id"),
        WebhookRow.version == bindparam("same_version"),
        WebhookRow.created_at == bindparam("same_created"),
    )
    .values(
        delivered_event_id=case(
            (WebhookRow.delivered_event_id < _THROUGH, _THROUGH),
            else_=WebhookRow.delivered_event_id,
        )
    )
)
"""The webhook fence of a progress write: updates the row only at the version given (on
PostgreSQL it stays locked until the write commits), moving its highest delivered event
id forward to the write's (``same_through``): kept there, not read from the progress
rows, so that no index of theirs holds their position (docs/architecture.md)."""


@functools.cache
def _forward_upsert(dialect: str) -> Insert:
    """The upsert of 2xx progress rows (executed with many rows): a topic's position only
    moves forward, and its failure columns are cleared only when it does."""
    table = WebhookProgressRow.__table__
    statement = (postgresql if dialect == "postgresql" else sqlite).insert(table)
    excluded = statement.excluded
    moved = excluded.last_event_id > table.c.last_event_id
    later = func.max if dialect == "sqlite" else func.greatest
    upsert: Insert = statement.on_conflict_do_update(
        index_elements=[table.c.webhook_id, table.c.topic],
        set_={
            "last_event_id": later(excluded.last_event_id, table.c.last_event_id),
            "bucket": excluded.bucket,
            "epoch": excluded.epoch,
            "updated_at": excluded.updated_at,
            **{
                name: case((moved, getattr(excluded, name)), else_=table.c[name])
                for name in (*_CLEARED, "parked_at")
            },
        },
    )
    return upsert


def record_failure(tx: Tx, member_id: str, at: LanePosition, failure: DeliveryFailure) -> str:
    """Record a failed attempt (and a parking), fenced as :func:`record_delivered`."""
    fence = _fenced(tx, member_id, at)
    if fence != "ok":
        return fence
    now = tx.clock()
    values = {
        **_position(at, now),
        "attempts": failure.attempts,
        "retry_at": failure.retry_at,
        "failing_since": failure.failing_since,
        "last_error": failure.error[:1000],
        "parked_at": now if failure.parked else None,
    }
    # the position too (forward only): 2xx the member has not recorded yet are in it, and
    # their record, coming later, then keeps this failure (record_delivered_many)
    _upsert(
        tx,
        values,
        [k for k in values if k not in ("webhook_id", "topic", "last_event_id")],
        forward=True,
    )
    return "ok"


def _position(at: LanePosition, now: float) -> dict[str, Any]:
    """A progress row's columns for ``at`` (the webhook's version is a fence, not a column)."""
    return {
        "webhook_id": at.webhook_id,
        "topic": at.topic,
        "bucket": at.bucket,
        "last_event_id": at.last_event_id,
        "epoch": at.epoch,
        "updated_at": now,
    }
