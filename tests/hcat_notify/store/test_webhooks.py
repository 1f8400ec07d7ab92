"""Webhook subscriptions in the catalog: refusals that write nothing, secrets (once, at
rest), rotation, replay, parked topics, and progress fenced by the bucket's epoch and
the webhook's version; SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from hcat_notify.config import Settings, load_settings
from hcat_notify.errors import ConfigError, InvalidInputError
from hcat_notify.model.topics import topic_bucket
from hcat_notify.model.webhooks import WebhookFormat, WebhookState
from hcat_notify.store import Catalog
from hcat_notify.store.group import MemberReport
from hcat_notify.store.progress import keep_bucket_params
from hcat_notify.store.webhooks import DeliveryFailure, LanePosition, WebhookNotFoundError
from tests.revisions import catalog_at

URL = "https://hooks.example.com/in"
TOPIC = "hcat.web.clicks"


@pytest.fixture
def tables(catalog: Catalog) -> None:
    catalog.create_table("web.clicks", location="/c", partition_keys=["ds"])
    catalog.create_table("sales.orders", location="/o", partition_keys=["ds"])


def _stored(settings: Settings) -> list[tuple[object, ...]]:
    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as connection:
            return [
                tuple(r) for r in connection.execute(text("SELECT name, secret FROM hcat_webhooks"))
            ]
    finally:
        engine.dispose()


@pytest.mark.usefixtures("tables")
def test_add_returns_the_secret_once_and_lists_without_it(catalog: Catalog, settings: Settings):
    info, secret = catalog.webhooks.add("ops", URL, "web.*,sales.orders", events="mark_set_done")
    assert secret.startswith("whsec_")
    assert len(secret) >= 6 + 32
    assert info.format is WebhookFormat.CLOUDEVENTS
    assert info.state is WebhookState.ACTIVE
    assert info.tables.patterns == ("web.*", "sales.orders")
    assert [kind.value for kind in info.events or ()] == ["MARK_SET_DONE"]
    assert info.start_after == catalog.outbox.last_event_id()  # from now on
    listed = catalog.webhooks.every()
    assert [w.name for w in listed] == ["ops"]
    assert secret not in repr(listed)
    assert _stored(settings) == [("ops", "plain:" + secret)]  # no key configured


REFUSALS: list[tuple[tuple[str, str, str], dict[str, Any], str]] = [
    (("bad name", URL, "web.*"), {}, "invalid webhook name"),
    (("a", "ftp://x/y", "web.*"), {}, "https:// URL"),
    (("a", "not a url", "web.*"), {}, "invalid webhook URL"),
    (("a", "http://hooks.example.com/in", "web.*"), {}, "plain HTTP to hooks.example.com"),
    (("a", "http://127.0.0.1:9/in", "web.*"), {}, "loopback too must be listed"),
    (("a", "https://u:p@x.example/in", "web.*"), {}, "no credentials"),
    (("a", URL, "nosuch.*"), {}, "'nosuch.*' matches no table"),
    (("a", URL, "web"), {}, "malformed table pattern 'web'"),
    (("a", URL, "web.cl-icks"), {}, "malformed table pattern"),
    (("a", URL, "web.*"), {"events": "ADD_PARTITION,NOPE"}, "unknown event kind 'NOPE'"),
    (("a", URL, "web.*"), {"format": "xml"}, "unknown webhook format 'xml'"),
    (("a", URL, "web.*"), {"format": "cloudevents+json"}, "cloudevents, cloudevents-batch, hive"),
    (("a", URL, "web.*"), {"from_event": 0}, "at least 1"),
    (("a", URL, "web.*"), {"from_event": 10**9}, "beyond the newest event"),
]


@pytest.mark.usefixtures("tables")
def test_bad_input_is_refused_and_nothing_is_written(catalog: Catalog, settings: Settings):
    for args, kwargs, message in REFUSALS:
        with pytest.raises(InvalidInputError, match=message):
            catalog.webhooks.add(*args, **kwargs)
        assert catalog.webhooks.every() == []
        assert _stored(settings) == []


@pytest.mark.usefixtures("tables")
def test_each_format_is_kept_with_its_content_type(catalog: Catalog):
    for form, content_type in [
        ("cloudevents", "application/cloudevents+json"),
        ("cloudevents-batch", "application/cloudevents-batch+json"),
        ("hive", "application/json"),
    ]:
        catalog.webhooks.add(form, URL, "web.*", format=form)
        shown = catalog.webhooks.get(form).format
        assert (shown.value, shown.content_type) == (form, content_type)
        assert shown.batched is (form == "cloudevents-batch")


def test_the_webhooks_stored_before_structured_mode_keep_their_batches(
    empty_db_url: str, tmp_path: Path
):
    """Before 0017 the format ``cloudevents`` sent batches: such webhooks now have
    ``cloudevents-batch``, and ``hive`` stays."""
    catalog_at(
        empty_db_url,
        "0016",
        *(
            "INSERT INTO hcat_webhooks (name, url, tables, format, state, secret, start_after,"
            f" created_at, version) VALUES ('{name}', '{URL}', '[\"web.*\"]', '{form}',"
            " 'active', 'plain:whsec_AAAA', 0, 0, 1)"
            for name, form in (("old-ce", "cloudevents"), ("old-hive", "hive"))
        ),
    )
    settings = load_settings(home=tmp_path, db_url=empty_db_url)
    with Catalog.open(settings, upgrade=True) as catalog:  # as `hcat-notify db upgrade`
        assert {w.name: w.format.value for w in catalog.webhooks.every()} == {
            "old-ce": "cloudevents-batch",
            "old-hive": "hive",
        }


@pytest.mark.usefixtures("tables")
def test_a_duplicate_name_is_refused(catalog: Catalog):
    catalog.webhooks.add("ops", URL, "web.*")
    with pytest.raises(InvalidInputError, match="a webhook named 'ops' exists already"):
        catalog.webhooks.add("ops", "https://other.example/in", "sales.*")
    assert [w.url for w in catalog.webhooks.every()] == [URL]


@pytest.mark.usefixtures("tables")
def test_plain_http_to_an_allowed_host(catalog: Catalog, settings: Settings):
    allowed = Catalog(catalog._engine, dataclasses.replace(settings, webhook_allow=("127.0.0.1",)))
    info, _ = allowed.webhooks.add("local", "http://127.0.0.1:8123/in", "web.clicks")
    assert info.url == "http://127.0.0.1:8123/in"


@pytest.mark.usefixtures("tables")
def test_secrets_are_encrypted_at_rest_with_a_key(catalog: Catalog, settings: Settings):
    from cryptography.fernet import Fernet

    keyed = dataclasses.replace(settings, webhook_key=Fernet.generate_key().decode())
    with Catalog.open(keyed) as sealed:
        _, secret = sealed.webhooks.add("ops", URL, "web.*")
        ((_, stored),) = _stored(settings)
        assert isinstance(stored, str)
        assert stored.startswith("fernet:")
        assert secret not in stored
        (target,) = sealed.webhooks.targets()
        assert target.secrets == (secret,)
    with pytest.raises(ConfigError, match="encrypted at rest, and no webhook_key"):
        catalog.webhooks.targets()


@pytest.mark.usefixtures("tables")
def test_rotation_signs_with_both_until_the_overlap_ends(catalog: Catalog, settings: Settings):
    _, old = catalog.webhooks.add("ops", URL, "web.*")
    info, new = catalog.webhooks.rotate_secret("ops")
    assert new != old
    assert info.rotating_until is not None
    (target,) = catalog.webhooks.targets()
    assert target.secrets == (new, old)
    brief = Catalog(catalog._engine, dataclasses.replace(settings, webhook_rotation_overlap=1e-3))
    _, newest = brief.webhooks.rotate_secret("ops")
    import time

    time.sleep(0.01)
    (target,) = catalog.webhooks.targets()
    assert target.secrets == (newest,)  # the overlap is over


def _own(catalog: Catalog, member: str, bucket: int) -> int:
    catalog.group.heartbeat(MemberReport(member, "host", 1))
    epoch = catalog.group.claim_controller(member, ttl=30)
    assert epoch is not None
    assert catalog.group.assign(member, epoch, {bucket: member}, [])
    return catalog.group.owned(member)[bucket].epoch


@pytest.mark.usefixtures("tables")
def test_progress_is_fenced_by_the_buckets_epoch_and_the_webhooks_version(catalog: Catalog):
    info, _ = catalog.webhooks.add("ops", URL, "web.*", from_event=1)
    bucket = topic_bucket(TOPIC, catalog.group.info().bucket_count)
    epoch = _own(catalog, "a", bucket)

    def at(version: int, epoch: int, last_event_id: int) -> LanePosition:
        return LanePosition(info.id, version, TOPIC, bucket, epoch, last_event_id, info.created_at)

    assert catalog.webhooks.record_delivered("a", at(info.version, epoch, 5)) == "ok"
    # another member, or an older epoch: nothing written
    assert catalog.webhooks.record_delivered("b", at(info.version, epoch, 9)) == "lost"
    assert catalog.webhooks.record_delivered("a", at(info.version, epoch - 1, 9)) == "lost"
    (row,) = catalog.webhooks.topics("ops")
    assert row.last_event_id == 5
    # a replay moves the version: what was under way before it changes nothing
    catalog.webhooks.replay("ops", 3)
    assert catalog.webhooks.record_delivered("a", at(info.version, epoch, 9)) == "changed"
    assert catalog.webhooks.topics("ops") == []
    assert catalog.webhooks.get("ops").start_after == 2


@pytest.mark.usefixtures("tables")
def test_progress_recorded_together_is_fenced_per_item_and_only_moves_forward(
    catalog: Catalog,
):
    info, _ = catalog.webhooks.add("ops", URL, "web.*", from_event=1)
    bucket = topic_bucket(TOPIC, catalog.group.info().bucket_count)
    epoch = _own(catalog, "a", bucket)
    mine = LanePosition(info.id, info.version, TOPIC, bucket, epoch, 9, info.created_at)
    stale = dataclasses.replace(mine, topic="hcat.sales.orders", epoch=epoch - 1)
    assert catalog.webhooks.record_delivered_many("a", [mine, stale]) == ["ok", "lost"]
    assert [(r.topic, r.last_event_id) for r in catalog.webhooks.topics("ops")] == [(TOPIC, 9)]
    # a failure recorded since, further on, is kept by an older 2xx recorded late
    failure = DeliveryFailure(2, 1e12, 1.0, "HTTP 500", parked=False)
    further = dataclasses.replace(mine, last_event_id=12)
    assert catalog.webhooks.record_failure("a", further, failure) == "ok"
    late = dataclasses.replace(mine, last_event_id=11)
    assert catalog.webhooks.record_delivered_many("a", [late]) == ["ok"]
    (row,) = catalog.webhooks.topics("ops")
    assert (row.last_event_id, row.attempts, row.last_error) == (12, 2, "HTTP 500")
    # and a 2xx further on clears it
    assert catalog.webhooks.record_delivered_many(
        "a", [dataclasses.replace(mine, last_event_id=15)]
    ) == ["ok"]
    (row,) = catalog.webhooks.topics("ops")
    assert (row.last_event_id, row.attempts, row.last_error) == (15, 0, None)
    catalog.webhooks.replay("ops", 3)
    assert catalog.webhooks.record_delivered_many("a", [mine]) == ["changed"]
    assert catalog.webhooks.topics("ops") == []


@pytest.mark.usefixtures("tables")
def test_a_record_fences_its_buckets_in_bucket_order(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
):
    """As the publisher's progress takes them: the recorder took them in its lanes' order,
    and the two writers deadlocked on PostgreSQL (issue 31's lanes test saw it, retried)."""
    info, _ = catalog.webhooks.add("ops", URL, "web.*", from_event=1)
    buckets = [200, 7, 50, 3]
    epochs = {bucket: _own(catalog, "a", bucket) for bucket in buckets}
    taken: list[int] = []

    def recorded(member_id: str, bucket: int, epoch: int, through: int = -1) -> dict[str, Any]:
        taken.append(bucket)
        return keep_bucket_params(member_id, bucket, epoch, through)

    monkeypatch.setattr("hcat_notify.store.webhooks.keep_bucket_params", recorded)
    items = [
        LanePosition(info.id, info.version, f"hcat.web.t{b}", b, epochs[b], 5, info.created_at)
        for b in buckets
    ]
    stale = dataclasses.replace(items[0], topic="hcat.web.old", epoch=epochs[200] - 1)
    found = catalog.webhooks.record_delivered_many("a", [*items, stale])
    assert found == ["ok", "ok", "ok", "ok", "lost"]
    assert taken == [3, 7, 50, 200, 200]  # (200, its old epoch) then (200, its epoch)
    assert sorted(t.topic for t in catalog.webhooks.topics("ops")) == sorted(
        item.topic for item in items
    )


@pytest.mark.usefixtures("tables")
def test_parked_topics_are_retried_or_dropped(catalog: Catalog):
    info, _ = catalog.webhooks.add("ops", URL, "web.*", from_event=1)
    for n in range(3):
        catalog.mark_set_done("web.clicks", {"ds": str(n)})
    bucket = topic_bucket(TOPIC, catalog.group.info().bucket_count)
    epoch = _own(catalog, "a", bucket)
    failure = DeliveryFailure(7, 1e12, 1.0, "HTTP 500: boom", parked=True)
    assert (
        catalog.webhooks.record_failure(
            "a",
            LanePosition(info.id, info.version, TOPIC, bucket, epoch, 0, info.created_at),
            failure,
        )
        == "ok"
    )
    (row,) = catalog.webhooks.topics("ops")
    assert (row.attempts, row.last_error, row.parked_at is not None) == (7, "HTTP 500: boom", True)
    assert catalog.webhooks.parked() == [("ops", row)]
    assert catalog.webhooks.retry_parked("ops") == [TOPIC]
    (row,) = catalog.webhooks.topics("ops")
    assert (row.attempts, row.parked_at, row.last_event_id) == (0, None, 0)
    version = catalog.webhooks.get("ops").version
    assert version > info.version
    catalog.webhooks.record_failure(
        "a", LanePosition(info.id, version, TOPIC, bucket, epoch, 0, info.created_at), failure
    )
    assert catalog.webhooks.drop_parked("ops", TOPIC) == [TOPIC]
    (row,) = catalog.webhooks.topics("ops")
    assert row.parked_at is None
    assert row.last_event_id == catalog.outbox.last_event_id()  # given up to the last one
    # a topic named that is not parked, or not the webhook's: one line, nothing changed
    version = catalog.webhooks.get("ops").version
    for release in (catalog.webhooks.retry_parked, catalog.webhooks.drop_parked):
        with pytest.raises(
            InvalidInputError, match=f"topic '{TOPIC}' of webhook ops is not parked"
        ):
            release("ops", TOPIC)
        for other in ("hcat.nosuch", ""):
            with pytest.raises(InvalidInputError, match="is none of its topics"):
                release("ops", other)
    assert catalog.webhooks.get("ops").version == version


@pytest.mark.usefixtures("tables")
def test_pause_resume_remove(catalog: Catalog):
    catalog.webhooks.add("ops", URL, "web.*")
    assert catalog.webhooks.pause("ops").state is WebhookState.PAUSED
    assert catalog.webhooks.targets() == []
    assert catalog.webhooks.resume("ops").state is WebhookState.ACTIVE
    assert [t.info.name for t in catalog.webhooks.targets()] == ["ops"]
    catalog.webhooks.remove("ops")
    assert catalog.webhooks.every() == []
    with pytest.raises(WebhookNotFoundError, match="no webhook named 'ops'"):
        catalog.webhooks.remove("ops")


@pytest.mark.usefixtures("tables")
def test_metrics_give_each_webhooks_state_failing_parked_topics_and_position(catalog: Catalog):
    from hcat_notify.api.metrics import CatalogCollector

    info, _ = catalog.webhooks.add("ops", URL, "web.*", from_event=1)
    catalog.mark_set_done("sales.orders", {"ds": "1"})  # event 3: idle starts after it
    catalog.webhooks.add("idle", URL, "sales.*", from_event=4)
    catalog.webhooks.pause("idle")
    bucket = topic_bucket(TOPIC, catalog.group.info().bucket_count)
    epoch = _own(catalog, "a", bucket)
    delivered = LanePosition(info.id, info.version, TOPIC, bucket, epoch, 7, info.created_at)
    assert catalog.webhooks.record_delivered_many("a", [delivered]) == ["ok"]
    failure = DeliveryFailure(3, 1e12, 1.0, "HTTP 500", parked=True)
    other = dataclasses.replace(delivered, topic="hcat.web.other", last_event_id=2)
    assert catalog.webhooks.record_failure("a", other, failure) == "ok"
    found = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in CatalogCollector(lambda: catalog).collect()
        if family.name.startswith("hcat_notify_webhook_")
        for sample in family.samples
    }
    assert found == {
        ("hcat_notify_webhook_state", (("state", "active"), ("webhook", "ops"))): 1,
        ("hcat_notify_webhook_state", (("state", "paused"), ("webhook", "idle"))): 1,
        ("hcat_notify_webhook_failing_topics", (("webhook", "ops"),)): 0,
        ("hcat_notify_webhook_failing_topics", (("webhook", "idle"),)): 0,
        ("hcat_notify_webhook_parked_topics", (("webhook", "ops"),)): 1,
        ("hcat_notify_webhook_parked_topics", (("webhook", "idle"),)): 0,
        ("hcat_notify_webhook_delivered_event_id", (("webhook", "ops"),)): 7,
        ("hcat_notify_webhook_delivered_event_id", (("webhook", "idle"),)): 3,
    }


def _delivered(catalog: Catalog, name: str) -> tuple[int, int]:
    """A webhook's delivered figure, and the highest position of its progress rows (its
    start before any): what the figure was read from before 0020."""
    (figures,) = catalog.webhooks.figures(name)
    rows = [t.last_event_id for t in catalog.webhooks.topics(name)]
    return figures.delivered, max([figures.info.start_after, *rows])


@pytest.mark.usefixtures("tables")
def test_the_delivered_figure_is_the_highest_position_after_every_kind_of_write(
    catalog: Catalog,
):
    """It is kept on the webhook's row by the writes of progress (0020), no longer read
    from the progress rows: each write leaves it at their highest position."""
    for day in ("a", "b"):  # events 3 and 4: a start must not be beyond the next event
        catalog.mark_set_done("sales.orders", {"ds": day})
    info, _ = catalog.webhooks.add("ops", URL, "web.*", from_event=4)
    assert _delivered(catalog, "ops") == (3, 3)
    for n in range(12):
        catalog.mark_set_done("web.clicks", {"ds": str(n)})
    bucket = topic_bucket(TOPIC, catalog.group.info().bucket_count)
    epoch = _own(catalog, "a", bucket)
    at = LanePosition(info.id, info.version, TOPIC, bucket, epoch, 5, info.created_at)
    other = dataclasses.replace(at, topic="hcat.web.other", last_event_id=8)
    stale = dataclasses.replace(at, topic="hcat.web.stale", epoch=epoch - 1, last_event_id=20)
    parked = DeliveryFailure(3, 1e12, 1.0, "HTTP 500", parked=True)
    hooks = catalog.webhooks
    steps = [
        (lambda: hooks.record_delivered("a", at), "ok", 5),
        (lambda: hooks.record_delivered("b", dataclasses.replace(at, last_event_id=9)), "lost", 5),
        (lambda: hooks.record_delivered_many("a", [other, stale]), ["ok", "lost"], 8),
        (
            lambda: hooks.record_failure("a", dataclasses.replace(at, last_event_id=6), parked),
            "ok",
            8,
        ),
        (
            lambda: hooks.record_delivered_many("a", [dataclasses.replace(other, last_event_id=7)]),
            ["ok"],
            8,
        ),
    ]
    for write, answer, wanted in steps:
        assert write() == answer
        assert _delivered(catalog, "ops") == (wanted, wanted)
    # the parked topic given up to its last event, past every position
    assert hooks.drop_parked("ops") == [TOPIC]
    last = catalog.outbox.last_event_id()
    assert last > 8
    assert _delivered(catalog, "ops") == (last, last)
    hooks.replay("ops", 3)
    assert _delivered(catalog, "ops") == (2, 2)


def _progress_options(connection: Any) -> object:
    """The progress table's storage options on PostgreSQL (``sqlite`` on SQLite)."""
    if connection.dialect.name == "sqlite":
        return "sqlite"
    query = "SELECT reloptions FROM pg_class WHERE relname = 'hcat_webhook_progress'"
    return connection.execute(text(query)).scalar()


def test_0020_moves_each_webhooks_delivered_position_to_its_row_and_back(empty_db_url: str):
    """Upgrading keeps ``/metrics``'s figure (the highest position, or the start) and
    drops the (webhook, position) index; downgrading restores the index."""
    from alembic import command
    from sqlalchemy import inspect

    from hcat_notify.store.engine import alembic_config, open_engine

    hook = (
        "INSERT INTO hcat_webhooks (id, name, url, tables, format, state, secret, start_after,"
        " created_at, version) VALUES ({id}, '{name}', '{url}', '[\"web.*\"]', 'hive',"
        " 'active', 'plain:whsec_AAAA', {start}, 0, 1)"
    )
    topic = (
        "INSERT INTO hcat_webhook_progress (webhook_id, topic, bucket, last_event_id, epoch,"
        " updated_at, attempts) VALUES ({id}, '{topic}', 1, {at}, 1, 0, 0)"
    )
    catalog_at(
        empty_db_url,
        "0018",
        hook.format(id=1, name="busy", url=URL, start=2),
        hook.format(id=2, name="idle", url=URL, start=40),
        hook.format(id=3, name="behind", url=URL, start=50),
        topic.format(id=1, topic="a", at=9),
        topic.format(id=1, topic="b", at=30),
        topic.format(id=3, topic="a", at=45),  # before its start (a replay since, say)
    )
    engine = open_engine(empty_db_url)
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection, None), "0020")
        with engine.connect() as connection:
            found: dict[str, int] = dict(
                connection.execute(text("SELECT name, delivered_event_id FROM hcat_webhooks")).all()
            )
            indexes = {i["name"] for i in inspect(connection).get_indexes("hcat_webhook_progress")}
            options = _progress_options(connection)
        assert found == {"busy": 30, "idle": 40, "behind": 50}
        assert "ix_hcat_webhook_progress_delivered" not in indexes
        assert options in ("sqlite", ["fillfactor=90"])  # room on each page for HOT updates
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection, None), "0018")
        with engine.connect() as connection:
            columns = {c["name"] for c in inspect(connection).get_columns("hcat_webhooks")}
            indexes = {i["name"] for i in inspect(connection).get_indexes("hcat_webhook_progress")}
            options = _progress_options(connection)
        assert "delivered_event_id" not in columns
        assert "ix_hcat_webhook_progress_delivered" in indexes
        assert options in ("sqlite", None)
        with engine.connect() as connection:
            kept = connection.execute(text("SELECT count(*) FROM hcat_webhook_progress"))
            assert kept.scalar() == 3
    finally:
        engine.dispose()


def _writes(statements: list[str]) -> list[str]:
    """The webhook tables each write statement changes, in order."""
    found = []
    for statement in statements:
        words = statement.split()
        verb = words[0].upper()
        if verb in ("UPDATE", "DELETE", "INSERT"):
            table = (words[2] if verb in ("DELETE", "INSERT") else words[1]).strip('"')
            if table.startswith("hcat_webhook"):
                found.append(f"{verb} {table}")
    return found


@pytest.mark.usefixtures("tables")
def test_replay_release_and_remove_write_the_webhook_before_its_progress(catalog: Catalog):
    """The recorder locks a webhook's row, then its progress rows; a replay that deleted
    the progress first and then updated the webhook could deadlock with it (PostgreSQL
    aborts one: the operator's command failed)."""
    from sqlalchemy import Engine, event

    info, _ = catalog.webhooks.add("ops", URL, "web.*", from_event=1)
    catalog.mark_set_done("web.clicks", {"ds": "1"})
    bucket = topic_bucket(TOPIC, catalog.group.info().bucket_count)
    epoch = _own(catalog, "a", bucket)
    position = LanePosition(info.id, info.version, TOPIC, bucket, epoch, 0, info.created_at)
    failure = DeliveryFailure(7, 1e12, 1.0, "HTTP 500: boom", parked=True)
    assert catalog.webhooks.record_failure("a", position, failure) == "ok"
    statements: list[str] = []

    def capture(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(Engine, "before_cursor_execute", capture)
    try:
        assert catalog.webhooks.retry_parked("ops") == [TOPIC]
        released = _writes(statements)
        statements.clear()
        catalog.webhooks.replay("ops", from_event=1)
        replayed = _writes(statements)
        statements.clear()
        catalog.webhooks.remove("ops")
        removed = _writes(statements)
    finally:
        event.remove(Engine, "before_cursor_execute", capture)
    assert released == ["UPDATE hcat_webhooks", "UPDATE hcat_webhook_progress"]
    assert replayed[:2] == ["UPDATE hcat_webhooks", "DELETE hcat_webhook_progress"]
    assert removed == [
        "UPDATE hcat_webhooks",
        "DELETE hcat_webhook_progress",
        "DELETE hcat_webhooks",
    ]


@pytest.mark.usefixtures("tables")
def test_a_removed_webhooks_late_record_or_410_does_not_touch_the_next_one_of_its_id(
    catalog: Catalog, settings: Settings
):
    """SQLite gives a removed webhook's id to the next one added when it was the highest,
    and the new one starts at version 1 too: a 2xx of the removed one recorded late
    passed the fence and moved the new one's topic past events it never sent."""
    old, _ = catalog.webhooks.add("old", URL, "web.*", from_event=1)
    catalog.mark_set_done("web.clicks", {"ds": "1"})
    bucket = topic_bucket(TOPIC, catalog.group.info().bucket_count)
    epoch = _own(catalog, "a", bucket)
    late = LanePosition(old.id, old.version, TOPIC, bucket, epoch, 1, old.created_at)
    catalog.webhooks.remove("old")
    new, _ = catalog.webhooks.add("new", URL, "web.*", from_event=1)
    if settings.database_url.startswith("sqlite"):
        assert (new.id, new.version) == (old.id, old.version)  # the case itself
    assert catalog.webhooks.record_delivered_many("a", [late]) == ["changed"]
    assert catalog.webhooks.record_delivered("a", late) == "changed"
    assert not catalog.webhooks.disable(old.id, old.version, old.created_at, "HTTP 410")
    assert catalog.webhooks.topics("new") == []
    assert catalog.webhooks.get("new").state is WebhookState.ACTIVE
