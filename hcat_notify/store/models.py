"""ORM rows of the catalog database (SQLAlchemy 2, typed, dataclass-mapped).

The schema itself is owned by the Alembic migrations in ``hcat_notify/migrations``; a
test checks that these models and the migrations agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

__all__ = [
    "EVENT_ID",
    "REFUSED_CONDITION",
    "WEBHOOK_FAILING_CONDITION",
    "WEBHOOK_PARKED_CONDITION",
    "Base",
    "CommitJournalRow",
    "EventCounterRow",
    "OutboxActionRow",
    "OutboxPrunedRow",
    "OutboxRow",
    "PartitionRow",
    "RelayBucketRow",
    "RelayGroupRow",
    "RelayMemberRow",
    "RetentionRow",
    "SetRuleRow",
    "SetStateRow",
    "StoredRule",
    "SubscriberRow",
    "SubscriberTableRow",
    "SubscriberTopicRow",
    "SubscriberWatermarkRow",
    "TableRow",
    "TopicProgressRow",
    "UTCDateTime",
    "WebhookProgressRow",
    "WebhookRow",
]


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite keeps no time zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the catalog; use an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class StoredRule(TypeDecorator[Any]):
    """A table's rule in force as the table row holds it: JSON, but read on SQLite as
    the stored text, undecoded (a dict on PostgreSQL, whose driver decodes it): every
    write to a table with a rule reads it, and the rule parsed from a text is found
    again by the text (docs/completeness.md, "What a write with a rule costs")."""

    impl = JSON()
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        if dialect.name == "sqlite":
            return None  # the column's text as stored
        return super().result_processor(dialect, coltype)


EVENT_ID = BigInteger().with_variant(Integer(), "sqlite")
"""The type of an event id that is its table's primary key: on SQLite ``INTEGER``, which
makes the column the table's rowid (``BIGINT`` would keep a second B-tree of the ids
beside the rowid's; SQLite's integers are 64-bit either way), ``BIGINT`` elsewhere
(migration 0021)."""
# Location keys (hcat_notify.warehouse.key_text) are looked up by prefix ranges: byte
# order on PostgreSQL too, whatever the database's collation.
LOCATION_KEY = Text().with_variant(Text(collation="C"), "postgresql")


# Stable constraint names, so migrations can refer to them on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(MappedAsDataclass, DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
    }


class TableRow(Base):
    """A registered partitioned table."""

    __tablename__ = "hcat_tables"
    __table_args__ = (
        UniqueConstraint("db_name", "table_name"),
        # which tables are at, inside or around a place: equality and prefix ranges
        Index("ix_hcat_tables_location_key", "location_key"),
        # the tables with a completeness rule (/metrics), few among many
        Index(
            "ix_hcat_tables_with_rule",
            "id",
            sqlite_where=text("rule_version IS NOT NULL"),
            postgresql_where=text("rule_version IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, init=False)
    db_name: Mapped[str] = mapped_column(String(128))
    table_name: Mapped[str] = mapped_column(String(128))
    location: Mapped[str] = mapped_column(Text)
    # the location's key (hcat_notify.warehouse.key_text; "" for one naming no directory)
    location_key: Mapped[str] = mapped_column(LOCATION_KEY)
    storage_format: Mapped[str] = mapped_column(String(16))
    partition_keys: Mapped[list[Any]]
    table_type: Mapped[str] = mapped_column(String(32))
    properties: Mapped[dict[str, Any]]
    retention_seconds: Mapped[int] = mapped_column(BigInteger)
    # Resolved once, at creation, from the creating process's prefix and strategy (or
    # the hcat.msgbus.topic.name property), so every process agrees on it.
    topic: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    version: Mapped[int] = mapped_column(Integer, default=1)
    # Where CREATE_TABLE and DROP_TABLE go (the prefix topic), fixed at creation too.
    prefix_topic: Mapped[str | None] = mapped_column(String(255), default=None)
    # The version of the table's current completeness rule (None: none) and the rule (its
    # stored form), so that writes of tables without one pay nothing to find out and
    # those with one read it with the table.
    rule_version: Mapped[int | None] = mapped_column(Integer, default=None)
    set_rule: Mapped[dict[str, Any] | str | None] = mapped_column(StoredRule(), default=None)


class PartitionRow(Base):
    """A registered partition; unique per (table, values) through its path spec."""

    __tablename__ = "hcat_partitions"
    __table_args__ = (
        UniqueConstraint("table_id", "path_spec"),
        # the few partitions outside their table's location, by key (registration's
        # overlap check; a partition inside its table costs this index nothing)
        Index(
            "ix_hcat_partitions_outside_key",
            "outside_key",
            sqlite_where=text("outside_key IS NOT NULL"),
            postgresql_where=text("outside_key IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, init=False)
    table_id: Mapped[int] = mapped_column(ForeignKey("hcat_tables.id", ondelete="CASCADE"))
    # Ordered values (None = default partition); path_spec is their escaped path form,
    # which is injective, so its uniqueness is the uniqueness of the values.
    partition_values: Mapped[list[Any]]
    path_spec: Mapped[str] = mapped_column(Text)
    location: Mapped[str] = mapped_column(Text)
    job_id: Mapped[str | None] = mapped_column(String(128))
    file_count: Mapped[int] = mapped_column(Integer)
    total_bytes: Mapped[int] = mapped_column(BigInteger)
    archived: Mapped[bool] = mapped_column(Boolean)
    event_id: Mapped[int | None] = mapped_column(BigInteger, index=True)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    version: Mapped[int] = mapped_column(Integer, default=1)
    # the location's key (hcat_notify.warehouse.key_text) when it lies outside the
    # table's location, else None
    outside_key: Mapped[str | None] = mapped_column(LOCATION_KEY, default=None)


class RetentionRow(Base):
    """A retained MARK_SET_DONE message, for subscribers that start late."""

    __tablename__ = "hcat_mark_set_done"
    __table_args__ = (
        # "all unexpired for table T", in event order
        Index("ix_hcat_mark_set_done_table_expiry", "table_id", "expires_at", "event_id"),
        # "covering spec S": the covering specs are computable, so an equality lookup
        Index("ix_hcat_mark_set_done_table_spec", "table_id", "spec"),
        Index("ix_hcat_mark_set_done_expires_at", "expires_at"),
        # catch-up pages: a table's retained dones in event order
        Index("ix_hcat_mark_set_done_table_event", "table_id", "event_id"),
    )

    event_id: Mapped[int] = mapped_column(EVENT_ID, primary_key=True, autoincrement=False)
    table_id: Mapped[int] = mapped_column(ForeignKey("hcat_tables.id", ondelete="CASCADE"))
    spec: Mapped[str] = mapped_column(Text)  # lexically sorted path form
    spec_json: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    # The set's generation (1: its first done) and why it was sent (rule, changed,
    # partial, writer; None: written before completeness rules).
    generation: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    reason: Mapped[str | None] = mapped_column(String(16), default=None)


class SetRuleRow(Base):
    """One version of a table's completeness rule (``rule`` None: removed)."""

    __tablename__ = "hcat_set_rules"

    table_id: Mapped[int] = mapped_column(
        ForeignKey("hcat_tables.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    rule: Mapped[dict[str, Any] | None] = mapped_column(JSON(), nullable=True)
    principal: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime]


class SetStateRow(Base):
    """Where one set of a table with a rule stands (the row writers lock to serialise
    on the set). Times are seconds since the epoch by the database's clock."""

    __tablename__ = "hcat_set_states"
    __table_args__ = (
        Index("ix_hcat_set_states_bucket_due", "bucket", "due_at"),
        # /metrics: the sets not done, few among the years of sets done; the sets done
        # lately. Neither holds a column a write's count changes (last_change_at, the
        # counts): such a write then rewrites no index entry (PostgreSQL's HOT update;
        # on SQLite no index page).
        Index(
            "ix_hcat_set_states_not_done",
            "table_id",
            sqlite_where=text("state <> 'done'"),
            postgresql_where=text("state <> 'done'"),
        ),
        Index(
            "ix_hcat_set_states_done_at",
            "done_at",
            "done_reason",
            sqlite_where=text("state = 'done'"),
            postgresql_where=text("state = 'done'"),
        ),
    )

    table_id: Mapped[int] = mapped_column(
        ForeignKey("hcat_tables.id", ondelete="CASCADE"), primary_key=True
    )
    set_spec: Mapped[str] = mapped_column(Text, primary_key=True)  # sorted path form
    bucket: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))  # open, done, late, reopened
    rule_version: Mapped[int] = mapped_column(Integer)
    first_part_at: Mapped[float | None] = mapped_column(Float, default=None)
    last_change_at: Mapped[float | None] = mapped_column(Float, default=None)
    done_at: Mapped[float | None] = mapped_column(Float, default=None)
    done_reason: Mapped[str | None] = mapped_column(String(16), default=None)
    done_event_id: Mapped[int | None] = mapped_column(BigInteger, default=None)
    late_emitted: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    deadline_at: Mapped[float | None] = mapped_column(Float, default=None)
    due_at: Mapped[float | None] = mapped_column(Float, default=None)
    # Kept by every write under the row's lock, so that the verdict reads no partitions:
    # the partitions under the set, and (a rule naming its parts) how many of the parts
    # the rule of ``rule_version`` expects are there (None: not counted yet).
    part_count: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    expected_present: Mapped[int | None] = mapped_column(Integer, default=None)


REFUSED_CONDITION = "attempts > 0 AND parked_at IS NULL AND dropped_at IS NULL"
"""Outbox rows the broker refused that are still tried (not parked, not dropped)."""
WEBHOOK_FAILING_CONDITION = "attempts > 0 AND parked_at IS NULL"
"""A webhook progress row whose next events fail and are retried (not parked)."""
WEBHOOK_PARKED_CONDITION = "parked_at IS NOT NULL"
"""A webhook progress row parked after failing too long."""


class OutboxRow(Base):
    """An event to publish, in the bucket of its topic.

    Whether it was published is the topic's progress (:class:`TopicProgressRow`): the
    relay records the highest id published per topic, not a mark per event.
    """

    __tablename__ = "hcat_outbox"
    __table_args__ = (
        # A relay's page query: its buckets' events after a position, in id order.
        Index("ix_hcat_outbox_bucket_event", "bucket", "event_id"),
        Index("ix_hcat_outbox_topic_event", "topic", "event_id"),
        # A table's newest DROP_TABLE by name (a dropped table, a re-created one's start).
        Index("ix_hcat_outbox_table_type_event", "table_name", "event_type", "event_id"),
        Index(
            "ix_hcat_outbox_parked",
            "event_id",
            sqlite_where=text("parked_at IS NOT NULL AND dropped_at IS NULL"),
            postgresql_where=text("parked_at IS NOT NULL AND dropped_at IS NULL"),
        ),
        # What the broker refused and the relay still tries (status, /metrics): rare rows.
        Index(
            "ix_hcat_outbox_refused",
            "event_id",
            sqlite_where=text(REFUSED_CONDITION),
            postgresql_where=text(REFUSED_CONDITION),
        ),
    )

    event_id: Mapped[int] = mapped_column(EVENT_ID, primary_key=True, autoincrement=False)
    topic: Mapped[str] = mapped_column(String(255))
    bucket: Mapped[int] = mapped_column(Integer)
    event_type: Mapped[str] = mapped_column(String(32))
    table_name: Mapped[str] = mapped_column(String(257))
    headers: Mapped[dict[str, Any]]
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    # Refusals by the broker of this very event (not outages); after the relay's limit the
    # event is parked: kept, shown by `status`, never sent again unless retried.
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    parked_at: Mapped[datetime | None] = mapped_column(default=None)
    dropped_at: Mapped[datetime | None] = mapped_column(default=None)


class OutboxActionRow(Base):
    """What an operator (or the relay) did to an undeliverable event, and when."""

    __tablename__ = "hcat_outbox_actions"
    __table_args__ = (Index("ix_hcat_outbox_actions_event", "event_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, init=False)
    event_id: Mapped[int] = mapped_column(BigInteger)
    action: Mapped[str] = mapped_column(String(16))  # parked, retried, dropped
    actor: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime]
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    new_event_id: Mapped[int | None] = mapped_column(BigInteger, default=None)


class OutboxPrunedRow(Base):
    """How far the outbox's retention sweep deleted a topic's events: the highest event
    id of the topic it deleted (a reader after a lower position would miss events).

    The row of topic ``*`` holds the highest of all (the oldest position from which
    every topic's history is complete) and the last sweep's figures; a sweep's batch
    and a webhook's replay lock it, and so does a durable subscriber's claim of topics it
    follows anew, so that neither misses what the other wrote.
    """

    __tablename__ = "hcat_outbox_pruned"

    topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    pruned_through: Mapped[int] = mapped_column(BigInteger)
    # topic "*" only: when the last sweep ended (DB clock) and what it held back, by why
    swept_at: Mapped[float | None] = mapped_column(Float, default=None)
    held: Mapped[dict[str, Any] | None] = mapped_column(JSON(), default=None)
    # topic "*" only: claims of durable subscribers that followed topics anew (a batch
    # judged before one judges again; read with the lock, no query of its own)
    claims: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))


class EventCounterRow(Base):
    """The single row that hands out event ids on SQLite.

    Allocating ids by updating one row serialises the writers of events until they
    commit, so events become visible in event-id order. PostgreSQL uses a sequence
    instead, with readers bounded by a horizon (:mod:`hcat_notify.store.event_ids`);
    there this row keeps the value it had when the catalog was migrated.
    """

    __tablename__ = "hcat_event_counter"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    last_event_id: Mapped[int] = mapped_column(BigInteger)


class RelayGroupRow(Base):
    """The relay group's one row: its bucket count and its controller (Kafka's).

    Times here and in the member, bucket and progress rows are seconds since the epoch
    by the database's clock, so that no host's clock judges a lease.
    """

    __tablename__ = "hcat_relay_group"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    bucket_count: Mapped[int] = mapped_column(Integer)
    controller_id: Mapped[str | None] = mapped_column(String(255), default=None)
    controller_epoch: Mapped[int] = mapped_column(BigInteger, default=0)
    controller_expires: Mapped[float] = mapped_column(Float, default=0.0)
    version: Mapped[int] = mapped_column(Integer, default=1)


class RelayMemberRow(Base):
    """A running relay: its heartbeat (DB clock) and the load it reports."""

    __tablename__ = "hcat_relay_members"

    member_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float)
    events_per_second: Mapped[float] = mapped_column(Float, default=0.0)
    backlog: Mapped[int] = mapped_column(BigInteger, default=0)
    topics: Mapped[int] = mapped_column(Integer, default=0)
    # bucket (as a string) -> events/s over the last minute, for load-based assignment
    bucket_loads: Mapped[dict[str, Any]] = mapped_column(JSON, default_factory=dict)
    oldest_unpublished: Mapped[float | None] = mapped_column(Float, default=None)
    leaving: Mapped[bool] = mapped_column(Boolean, default=False)
    # seconds of silence after which the member is dead: its own (``--session-timeout``);
    # rows written before it was recorded have the relays' default
    session_timeout: Mapped[float] = mapped_column(Float, default=3.0, server_default=text("3"))


class RelayBucketRow(Base):
    """One bucket of topics: its owner and the epoch of that ownership.

    The epoch increases whenever the owner changes; progress written under an older
    epoch changes nothing (fencing).
    """

    __tablename__ = "hcat_relay_buckets"
    __table_args__ = (Index("ix_hcat_relay_buckets_owner", "owner"),)

    bucket: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    owner: Mapped[str | None] = mapped_column(String(255), default=None)
    epoch: Mapped[int] = mapped_column(BigInteger, default=0)
    moved_at: Mapped[float] = mapped_column(Float, default=0.0)
    # The last move made to even out the group (not to adopt an orphan): a bucket stays
    # put for min_move_interval after one.
    rebalanced_at: Mapped[float] = mapped_column(Float, default=0.0)
    # Every event of the bucket up to here is published or parked: where a new owner
    # starts reading.
    published_through: Mapped[int] = mapped_column(BigInteger, default=0)


class TopicProgressRow(Base):
    """How far a topic is published (Hedwig's persistence info), fenced by epoch."""

    __tablename__ = "hcat_topic_progress"
    __table_args__ = (
        Index("ix_hcat_topic_progress_bucket", "bucket"),
        # the topics published last, newest first (status)
        Index("ix_hcat_topic_progress_updated", "updated_at"),
    )

    topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer)
    last_event_id: Mapped[int] = mapped_column(BigInteger)
    epoch: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[float] = mapped_column(Float)


class SubscriberRow(Base):
    """A durable subscriber (Hedwig's subscription data): who consumes under its name."""

    __tablename__ = "hcat_subscribers"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(255), default=None)
    heartbeat_at: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    version: Mapped[int] = mapped_column(Integer, default=1)
    followed: Mapped[int | None] = mapped_column(Integer, default=None)
    """How many topics its last claim stored (None: claimed by a version before 0022:
    it holds every topic of the outbox until it next starts)."""
    followed_version: Mapped[int | None] = mapped_column(Integer, default=None)
    """The ``version`` the claim that stored its topics and tables set (another one: an
    older library claimed it since, they are stale; it holds every topic)."""


class SubscriberTopicRow(Base):
    """A topic a durable subscriber follows (its subscriptions at its last claim)."""

    __tablename__ = "hcat_subscriber_topics"
    __table_args__ = (Index("ix_hcat_subscriber_topics_topic", "topic", "subscriber"),)

    subscriber: Mapped[str] = mapped_column(
        ForeignKey("hcat_subscribers.name", ondelete="CASCADE"), primary_key=True
    )
    topic: Mapped[str] = mapped_column(String(255), primary_key=True)


class SubscriberTableRow(Base):
    """A table a durable subscriber follows (its subscriptions at its last claim)."""

    __tablename__ = "hcat_subscriber_tables"
    __table_args__ = (Index("ix_hcat_subscriber_tables_table_name", "table_name", "subscriber"),)

    subscriber: Mapped[str] = mapped_column(
        ForeignKey("hcat_subscribers.name", ondelete="CASCADE"), primary_key=True
    )
    table_name: Mapped[str] = mapped_column(String(257), primary_key=True)


class SubscriberWatermarkRow(Base):
    """The highest event id a durable subscriber handled on one topic."""

    __tablename__ = "hcat_subscriber_watermarks"

    subscriber: Mapped[str] = mapped_column(
        ForeignKey("hcat_subscribers.name", ondelete="CASCADE"), primary_key=True
    )
    topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    last_event_id: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[float] = mapped_column(Float)
    version: Mapped[int] = mapped_column(Integer, default=1)


class CommitJournalRow(Base):
    """A write in progress: which partitions it claims and which file moves it makes.

    Written before the moves, closed in the transaction that registers the partitions,
    so that a crash in between can be rolled forward or back (``hcat-notify recover``).
    """

    __tablename__ = "hcat_commit_journal"
    __table_args__ = (
        Index("ix_hcat_commit_journal_table_state", "table_id", "state"),
        Index("ix_hcat_commit_journal_name_state", "table_name", "state"),
    )

    job_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    # None while an import that registers its table is pending (``table_name`` says which).
    table_id: Mapped[int | None] = mapped_column(ForeignKey("hcat_tables.id", ondelete="CASCADE"))
    table_name: Mapped[str] = mapped_column(String(257))  # db.table
    mode: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))  # pending, committed, aborted
    partitions: Mapped[list[Any]]  # path specs this write claims
    plan: Mapped[dict[str, Any]]
    started_at: Mapped[datetime]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON(), default=None)
    version: Mapped[int] = mapped_column(Integer, default=1)
    # An import into a new table: the table's definition, registered on completion.
    create_table: Mapped[dict[str, Any] | None] = mapped_column(JSON(), default=None)


class WebhookRow(Base):
    """A webhook subscription: an HTTP endpoint that gets the events of some tables.

    ``secret`` (and ``previous_secret`` during a rotation, until ``previous_until``) is
    stored as ``fernet:<token>`` when the operator configured a key, else ``plain:<secret>``
    (the signature needs the secret itself: it cannot be hashed). ``version`` moves with
    every change that resets delivery (replay, retry, drop): progress written under an
    older version changes nothing.
    """

    __tablename__ = "hcat_webhooks"
    __table_args__ = (UniqueConstraint("name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, init=False)
    name: Mapped[str] = mapped_column(String(255))
    url: Mapped[str] = mapped_column(Text)
    tables: Mapped[list[Any]]
    events: Mapped[list[Any] | None] = mapped_column(JSON())
    format: Mapped[str] = mapped_column(String(32))  # cloudevents, cloudevents-batch, hive
    state: Mapped[str] = mapped_column(String(16))  # active, paused, disabled
    secret: Mapped[str] = mapped_column(Text)
    start_after: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)
    previous_secret: Mapped[str | None] = mapped_column(Text, default=None)
    previous_until: Mapped[float | None] = mapped_column(Float, default=None)
    disabled_reason: Mapped[str | None] = mapped_column(Text, default=None)
    version: Mapped[int] = mapped_column(Integer, default=1)
    # the highest event id delivered (its start before any): /metrics reads it here, and
    # the recorder's fence, which updates this row anyway, moves it forward
    delivered_event_id: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))


class WebhookProgressRow(Base):
    """How far one topic is delivered to one webhook, fenced by the bucket's epoch, and
    the failures of the events after it."""

    __tablename__ = "hcat_webhook_progress"
    __table_args__ = (
        Index("ix_hcat_webhook_progress_bucket", "bucket"),
        # its failing and its parked topics (/metrics, status, webhooks show): rare rows
        Index(
            "ix_hcat_webhook_progress_failing",
            "webhook_id",
            "topic",
            sqlite_where=text(WEBHOOK_FAILING_CONDITION),
            postgresql_where=text(WEBHOOK_FAILING_CONDITION),
        ),
        Index(
            "ix_hcat_webhook_progress_parked",
            "webhook_id",
            "topic",
            sqlite_where=text(WEBHOOK_PARKED_CONDITION),
            postgresql_where=text(WEBHOOK_PARKED_CONDITION),
        ),
    )

    webhook_id: Mapped[int] = mapped_column(
        ForeignKey("hcat_webhooks.id", ondelete="CASCADE"), primary_key=True
    )
    topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer)
    last_event_id: Mapped[int] = mapped_column(BigInteger)
    epoch: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[float] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    retry_at: Mapped[float | None] = mapped_column(Float, default=None)
    failing_since: Mapped[float | None] = mapped_column(Float, default=None)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    parked_at: Mapped[float | None] = mapped_column(Float, default=None)
