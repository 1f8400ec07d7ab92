"""Webhooks delivered by real ``hcat-notify relay`` processes to real HTTP receivers on
loopback, SQLite and PostgreSQL (issue 30): per (endpoint, topic) every event in order
through kill -9 and a SIGSTOP zombie, duplicates bounded by a batch per failover;
signatures verified by the ``standardwebhooks`` package, CloudEvents parsed by the
``cloudevents`` SDK; failures (500, 429 with Retry-After, a hang, a closed socket, 410)
retried, parked and released; a dead endpoint does not hold up the others.

The kill/zombie test runs 3 endpoints x 12 topics x 60 events in the suite;
``HCAT_TEST_WEBHOOK_SIZE=5x50x2000`` runs it at the issue's full size (tests/README.md)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from hcat_notify.config import Settings
from hcat_notify.model.topics import topic_bucket
from hcat_notify.store import Catalog, NewPartition, TableInfo
from tests.fixtures.webhook_receiver import Received, Receiver
from tests.integration import test_relay_group as relay_group
from tests.integration.delivery import CliProcess, run_cli, running_relay
from tests.integration.test_relay_group import (
    NOTICED,
    RELAY_ARGS,
    group_of_relays,
    stop_holding_its_buckets,
    wait_until,
)
from tests.wire import parse_cloudevent, parse_cloudevent_batch

pytestmark = pytest.mark.integration

BATCH = 10  # events per webhook request (the relays' --webhook-batch here)
HOOK_ARGS = (*RELAY_ARGS, "--webhook-batch", str(BATCH))
SIZE_VARIABLE = "HCAT_TEST_WEBHOOK_SIZE"
SUITE_SIZE = (3, 12, 60)
"""The kill/zombie test's endpoints, topics and events per topic in the suite."""


def failover_size() -> tuple[int, int, int]:
    """Endpoints, topics, events per topic of the kill/zombie test: ``SIZE_VARIABLE``
    (``ENDPOINTSxTOPICSxEVENTS``, e.g. the issue's ``5x50x2000``) or :data:`SUITE_SIZE`."""
    given = os.environ.get(SIZE_VARIABLE)
    if not given:
        return SUITE_SIZE
    try:
        endpoints, topics, events = (int(part) for part in given.lower().split("x"))
    except ValueError:
        raise pytest.UsageError(f"{SIZE_VARIABLE}={given!r}: not ENDPOINTSxTOPICSxEVENTS") from None
    if endpoints < 3 or topics < 1 or events < 3:
        raise pytest.UsageError(f"{SIZE_VARIABLE}={given!r}: at least 3 endpoints and 3 events")
    return endpoints, topics, events


class Tally:
    """The events a receiver got answered 2xx so far, each request verified and parsed
    once, soon after it came (a poll reads only the requests that arrived since the
    last): a Standard Webhooks signature older than 5 minutes no longer verifies, and
    the issue's full size takes longer than that."""

    def __init__(self, receiver: Receiver, secret: str) -> None:
        self.receiver, self.secret = receiver, secret
        self.arrived: list[tuple[str, int]] = []
        self.ids: set[int] = set()
        self._read = 0

    def count(self) -> int:
        """Distinct event ids so far."""
        requests = self.receiver.ok()
        for request in requests[self._read :]:
            found = events_of(request, [self.secret])
            self.arrived.extend(found)
            self.ids.update(i for _, i in found)
        self._read = len(requests)
        return len(self.ids)


@pytest.fixture
def hook_settings(delivery_settings: Settings) -> Settings:
    return dataclasses.replace(delivery_settings, webhook_allow=("127.0.0.1",), webhook_timeout=1.0)


@pytest.fixture
def hook_catalog(hook_settings: Settings) -> Iterator[Catalog]:
    with Catalog.open(hook_settings) as catalog:
        yield catalog


@contextmanager
def receivers(count: int) -> Iterator[list[Receiver]]:
    started = [Receiver() for _ in range(count)]
    try:
        yield started
    finally:
        for receiver in started:
            receiver.close()


def add_hook(settings: Settings, name: str, url: str, tables: str, *extra: str) -> str:
    """``webhooks add`` through the command line; the secret it printed."""
    done = run_cli(settings, "-o", "json", "webhooks", "add", name, url, "--tables", tables, *extra)
    assert done.returncode == 0, done.stderr
    secret: str = json.loads(done.stdout)["secret"]
    return secret


def events_of(request: Received, secrets: list[str]) -> list[tuple[str, int]]:
    """(topic, event id) of each event a request carried, after its signature verified
    with each secret (Standard Webhooks), its CloudEvents parsed by the SDK (a batch, or
    one event in structured mode, which ``from_http`` tells by the request's headers),
    or the Hive body with HCAT_* headers."""
    for secret in secrets:
        Webhook(secret).verify(request.body, request.headers)
    content_type = request.headers["content-type"]
    if content_type.startswith("application/cloudevents"):
        if content_type == "application/cloudevents-batch+json":
            events = parse_cloudevent_batch(request.body)
        else:
            events = [parse_cloudevent(request.body, request.headers)]
            assert content_type == "application/cloudevents+json", content_type
            assert events[0].get_id() == request.headers["webhook-id"]
        found = []
        for event in events:
            data = event.get_data()
            body = data if isinstance(data, dict) else json.loads(data)
            table = f"{body['db']}.{body['table']}"
            found.append((table, int(event.get_id())))
        return found
    assert content_type == "application/json", content_type
    body = json.loads(request.body)
    assert request.headers["hcat_event_id"] == request.headers["webhook-id"]
    return [(f"{body['db']}.{body['table']}", int(request.headers["hcat_event_id"]))]


def check_order(
    receiver: Receiver | Tally,
    secret: str,
    expected: dict[str, list[int]],
    bound: int | dict[str, int],
) -> int:
    """Every expected event arrived at ``receiver`` (or at a tally's, verified as they
    came), the first deliveries of each topic in id order; returns the duplicates (at
    most ``bound`` per topic, or ``bound[table]``)."""
    if isinstance(receiver, Tally):
        receiver.count()
        arrived = receiver.arrived
    else:
        arrived = []
        for request in receiver.ok():
            arrived.extend(events_of(request, [secret]))
    first: dict[str, list[int]] = {}
    seen: set[int] = set()
    for topic, event_id in arrived:
        if event_id not in seen:
            seen.add(event_id)
            first.setdefault(topic, []).append(event_id)
    for table, ids in expected.items():
        assert first.get(table) == ids, f"{table}: {first.get(table)} != {ids}"
    repeats: dict[str, int] = {}
    for (topic, _), count in Counter(arrived).items():
        repeats[topic] = repeats.get(topic, 0) + count - 1
    over = {
        table: (count, limit)
        for table, count in repeats.items()
        if count > (limit := bound if isinstance(bound, int) else bound[table])
    }
    assert not over, f"duplicates over the bound per topic, (repeats, bound): {over}"
    return sum(repeats.values())


def write_events(catalog: Catalog, tables: list[TableInfo], count: int) -> dict[str, list[int]]:
    """``count`` dones per table, interleaved; the event ids per table."""
    ids: dict[str, list[int]] = {}
    for n in range(count):
        for table in tables:
            ids.setdefault(str(table.name), []).append(
                catalog.mark_set_done(table.name, {"ds": str(n)})
            )
    return ids


def _tables(catalog: Catalog, db: str, count: int) -> list[TableInfo]:
    return [
        catalog.create_table(f"{db}.t{n:02d}", location=f"/w/{n}", partition_keys=["ds"])
        for n in range(count)
    ]


def test_every_event_in_order_through_kill_and_zombie(
    hook_settings: Settings, hook_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
):
    """Endpoints take the three formats in turn; the second takes MARK_SET_DONEs of the
    tables ``t0*`` only, in batches."""
    monkeypatch.setattr(relay_group, "RELAY_ARGS", HOOK_ARGS)  # what Group.start runs
    endpoints, topic_count, events = failover_size()
    phase = events // 3
    db = f"w{uuid.uuid4().hex[:8]}"
    tables = _tables(hook_catalog, db, topic_count)
    narrow = {str(t.name) for t in tables if t.name.table.startswith("t0")}
    with receivers(endpoints) as hooks:
        secrets = []
        for n, receiver in enumerate(hooks):
            if n % 3 == 0:
                extra: tuple[str, ...] = ()
            elif n % 3 == 1:
                extra = ("--events", "MARK_SET_DONE", "--format", "cloudevents-batch")
            else:
                extra = ("--format", "hive")
            pattern = f"{db}.t0*" if n == 1 else f"{db}.*"
            secrets.append(add_hook(hook_settings, f"h{n}", receiver.url, pattern, *extra))
        expected = {}
        with group_of_relays(hook_settings, hook_catalog, 2) as group:
            epochs = {b.bucket: b.epoch for b in hook_catalog.group.buckets()}
            expected = write_events(hook_catalog, tables, phase)
            victim = group.owners().most_common(1)[0][0]
            group.failover(signal.SIGKILL, victim)
            group.processes[victim].finish(timeout=30)
            group.start()
            more = write_events(hook_catalog, tables, phase)
            group.wait_settled()
            zombie = group.owners().most_common(1)[0][0]
            process = group.processes[zombie]
            # stopped while it holds, in memory, exactly what the catalog says it owns
            # (else it has nothing to lose, or learns of its buckets only after SIGCONT)
            had = stop_holding_its_buckets(process, zombie, hook_catalog)
            later = write_events(hook_catalog, tables, events - 2 * phase)
            wait_until(
                lambda: (
                    not any(
                        b.owner == zombie for b in hook_catalog.group.buckets() if b.bucket in had
                    )
                ),
                60,
                lambda: "the zombie's buckets never moved",
            )
            continued = len(process.stderr)
            group.failover(signal.SIGCONT, zombie)
            wait_until(
                lambda: NOTICED.search(process.stderr[continued:]) is not None,
                30,
                lambda: f"{zombie} never noticed: {process.stderr[continued:][-2000:]}",
            )
            for table, ids in [*more.items(), *later.items()]:
                expected[table] += ids
            wanted = {table: ids for table, ids in expected.items() if table in narrow}
            wanted_by = [
                sum(len(ids) for ids in (wanted if n == 1 else expected).values())
                for n in range(endpoints)
            ]
            tallies = [
                Tally(receiver, secret) for receiver, secret in zip(hooks, secrets, strict=True)
            ]

            def counts() -> list[int]:
                return [tally.count() for tally in tallies]

            wait_until(
                lambda: counts() == wanted_by,
                90 + sum(wanted_by) / 200,
                lambda: f"not delivered: {counts()} of {wanted_by}",
            )
            # every change of a bucket's owner is a failover of its topics: the kill and
            # the zombie, and the moves they bring (the restarted member's share, the
            # zombie's at its return, a new controller's); a batch of a topic that was
            # under way (sent, its 2xx not recorded yet) at one of them may come again
            moves = {b.bucket: b.epoch - epochs[b.bucket] for b in hook_catalog.group.buckets()}
            group.stop_all()
        count = len(epochs)
        bound = {str(t.name): BATCH * moves[topic_bucket(t.topic, count)] for t in tables}
        for n, (tally, secret) in enumerate(zip(tallies, secrets, strict=True)):
            check_order(tally, secret, wanted if n == 1 else expected, bound)


def _show(settings: Settings, name: str) -> dict[str, Any]:
    done = run_cli(settings, "-o", "json", "webhooks", "show", name)
    assert done.returncode == 0, done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


# what an endpoint answers is the backend's business only through the rows the store
# tests cover on both: one backend here keeps the suite's time
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_failures_back_off_park_disable_and_spare_the_others(
    hook_settings: Settings, hook_catalog: Catalog
):
    settings = dataclasses.replace(hook_settings, webhook_timeout=3.0, webhook_max_age=3.0)
    db = f"f{uuid.uuid4().hex[:8]}"
    tables = _tables(hook_catalog, db, 2)
    script = {
        "flaky": lambda n: "500" if n < 2 else "200",
        "limited": lambda n: "429" if n < 1 else "200",
        "closer": lambda n: "close" if n < 1 else "200",
        "gone": lambda _n: "410",
        "dead": lambda _n: "hang",
        "fast": lambda _n: "200",
    }
    with receivers(len(script)) as started:
        hooks = dict(zip(script, started, strict=True))
        secrets = {}
        for name, receiver in hooks.items():
            receiver.answer = script[name]
            receiver.retry_after = 2
            secrets[name] = add_hook(settings, name, receiver.url, f"{db}.*")
        relay = CliProcess(settings, "-v", *HOOK_ARGS, "--member-id", "solo")
        try:
            wait_until(
                lambda: {b.owner for b in hook_catalog.group.buckets()} == {"solo"},
                60,
                lambda: f"the relay never took the buckets: {relay.stderr[-2000:]}",
            )
            written_at = time.monotonic()
            expected = write_events(hook_catalog, tables, 3)
            total = sum(len(ids) for ids in expected.values())
            everyone = ["flaky", "limited", "closer", "fast"]
            wait_until(
                lambda: all(
                    len({i for r in hooks[n].ok() for _, i in events_of(r, [secrets[n]])}) == total
                    for n in everyone
                ),
                60,
                lambda: f"{ {n: len(hooks[n].ok()) for n in everyone} }: {relay.stderr[-3000:]}",
            )
            # the healthy endpoint got its events while "dead" hung for its timeout (3 s)
            fast_latency = max(r.at for r in hooks["fast"].ok()) - written_at
            assert fast_latency < 2.5, fast_latency
            refused, *rest = hooks["limited"].received
            again = next(r for r in rest if r.body == refused.body)  # the same batch
            assert again.at - refused.at >= 1.9  # Retry-After: 2 honoured
            # 410: the webhook is disabled, and nothing more is sent to it
            wait_until(lambda: _show(settings, "gone")["state"] == "disabled", 30, lambda: "")
            assert "410" in (_show(settings, "gone")["disabled_reason"] or "")
            # the dead endpoint is parked after the max age (3 s here), shown by show
            wait_until(
                lambda: any(t["parked_at"] for t in _show(settings, "dead")["topics"]),
                60,
                lambda: f"never parked: {_show(settings, 'dead')}",
            )
            shown = run_cli(settings, "webhooks", "show", "dead").stdout
            assert "PARKED" in shown, shown
            assert "timeout" in shown, shown
            status = run_cli(settings, "status").stdout
            assert "parked webhook dead topic" in status, status
            # released once the endpoint answers again: everything arrives, in order
            hooks["dead"].answer = lambda _n: "200"
            done = run_cli(settings, "webhooks", "retry", "dead")
            assert done.returncode == 0, done.stderr
            wait_until(
                lambda: (
                    len({i for r in hooks["dead"].ok() for _, i in events_of(r, [secrets["dead"]])})
                    == total
                ),
                60,
                lambda: f"dead not delivered after retry: {_show(settings, 'dead')}",
            )
            gone_requests = len(hooks["gone"].received)
            relay.proc.send_signal(signal.SIGTERM)
            code, err = relay.finish(timeout=60)
            assert code == 0, err[-3000:]
        finally:
            if relay.proc.poll() is None:
                relay.proc.kill()
                relay.finish(timeout=30)
        assert gone_requests == len(hooks["gone"].received) <= 2  # one per topic, once
        for name in [*everyone, "dead"]:
            check_order(hooks[name], secrets[name], expected, BATCH)
        for name in ("flaky", "closer"):
            assert [r.answered for r in hooks[name].received][:1] != ["200"]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_rotation_signs_with_both_secrets_and_replay_delivers_again(
    hook_settings: Settings, hook_catalog: Catalog
):
    db = f"r{uuid.uuid4().hex[:8]}"
    tables = _tables(hook_catalog, db, 2)
    with receivers(1) as (receiver,):
        old = add_hook(hook_settings, "rot", receiver.url, f"{db}.*", "--format", "hive")
        relay = CliProcess(hook_settings, "-v", *HOOK_ARGS, "--member-id", "solo")
        try:
            first = write_events(hook_catalog, tables, 2)
            count = sum(len(ids) for ids in first.values())
            wait_until(lambda: len(receiver.ok()) >= count, 60, lambda: relay.stderr[-2000:])
            assert all(len(r.headers["webhook-signature"].split()) == 1 for r in receiver.ok())
            done = run_cli(hook_settings, "-o", "json", "webhooks", "rotate-secret", "rot")
            assert done.returncode == 0, done.stderr
            new = json.loads(done.stdout)["secret"]
            second = write_events(hook_catalog, tables, 2)
            wait_until(lambda: len(receiver.ok()) >= 2 * count, 60, lambda: relay.stderr[-2000:])
            rotated = receiver.ok()[count:]
            for request in rotated:  # both sign: a receiver with either secret verifies
                assert len(request.headers["webhook-signature"].split()) == 2
                events_of(request, [old, new])
            # replay from the first event of the second round: those come again, in order
            start = min(min(ids) for ids in second.values())
            done = run_cli(hook_settings, "webhooks", "replay", "rot", "--from-event", str(start))
            assert done.returncode == 0, done.stderr
            wait_until(lambda: len(receiver.ok()) >= 3 * count, 60, lambda: relay.stderr[-2000:])
            again = [events_of(r, [new])[0] for r in receiver.ok()[2 * count :]]
            for table, ids in second.items():
                assert [i for t, i in again if t == table] == ids
            relay.proc.send_signal(signal.SIGTERM)
            code, err = relay.finish(timeout=60)
            assert code == 0, err[-3000:]
        finally:
            if relay.proc.poll() is None:
                relay.proc.kill()
                relay.finish(timeout=30)
    assert len(receiver.ok()) == 3 * count  # nothing more than asked for


def test_relay_once_delivers_to_the_webhooks_too(hook_settings: Settings, hook_catalog: Catalog):
    db = f"o{uuid.uuid4().hex[:8]}"
    tables = _tables(hook_catalog, db, 2)
    with receivers(1) as (receiver,):
        secret = add_hook(hook_settings, f"once-{db}", receiver.url, f"{db}.*")
        expected = write_events(hook_catalog, tables, 15)
        done = run_cli(hook_settings, "relay", "--once", "--webhook-batch", str(BATCH))
        assert done.returncode == 0, done.stderr
        assert check_order(receiver, secret, expected, bound=0) == 0
    recorded = {t.topic: t.last_event_id for t in hook_catalog.webhooks.topics(f"once-{db}")}
    assert recorded == {f"hcat.{table}": ids[-1] for table, ids in expected.items()}


def test_each_format_reaches_a_real_receiver_as_it_says(
    hook_settings: Settings, hook_catalog: Catalog
):
    """``cloudevents`` (the default): one event per request in structured mode, which
    the SDK's ``from_http`` reads from the request as it came (mode from its headers);
    ``cloudevents-batch``: arrays; ``hive``: the broker's body. Every request verified
    with the ``standardwebhooks`` package; the same events, in order, each ``data`` the
    Hive body unchanged; a real ``hcat-notify relay --once`` process."""
    db = f"s{uuid.uuid4().hex[:8]}"
    (table,) = _tables(hook_catalog, db, 1)
    forms = ("cloudevents", "cloudevents-batch", "hive")
    with receivers(len(forms)) as started:
        hooks = dict(zip(forms, started, strict=True))
        # the default through the command line, the others through Python
        secrets = {
            "cloudevents": add_hook(hook_settings, f"ce-{db}", hooks["cloudevents"].url, f"{db}.*")
        }
        for form in forms[1:]:
            secrets[form] = hook_catalog.webhooks.add(
                f"{form}-{db}", hooks[form].url, f"{db}.*", format=form
            )[1]
        added = hook_catalog.add_partitions(
            table.name, [NewPartition({"ds": str(n)}, f"/w/{db}/ds={n}") for n in range(2)]
        )
        expected = [p.event_id for p in added] + write_events(hook_catalog, [table], 2)[
            str(table.name)
        ]
        done = run_cli(hook_settings, "relay", "--once", "--webhook-batch", str(BATCH))
        assert done.returncode == 0, done.stderr
    arrived = {
        form: [event_id for r in hooks[form].ok() for _, event_id in events_of(r, [secrets[form]])]
        for form in forms
    }
    assert arrived == {form: expected for form in forms}
    structured = hooks["cloudevents"].ok()
    assert len(structured) == len(expected)  # one request per event
    assert len(hooks["cloudevents-batch"].ok()) == 1  # all four in one batch
    hive_bodies = [r.body for r in hooks["hive"].ok()]
    for request, hive_body in zip(structured, hive_bodies, strict=True):
        event = parse_cloudevent(request.body, request.headers)
        assert event.get_type() in (
            "org.apache.hive.hcatalog.add_partition",
            "org.apache.hive.hcatalog.mark_set_done",
        )
        assert event.get_subject().startswith(f"{db}.t00/ds=")
        assert event.get_extension("sequence") == event.get_id().zfill(19)
        assert json.loads(request.body)["data"] == json.loads(hive_body)
        assert request.body.endswith(b',"data":' + hive_body + b"}")  # byte for byte


def test_a_webhook_change_wakes_the_relay_at_once(hook_settings: Settings, hook_catalog: Catalog):
    """A webhook resumed or added is delivered to at once, though the relay's pass would
    not read the webhooks (nor the outbox) again for a minute: the change's commit wakes
    it (PostgreSQL: NOTIFY on the webhooks' channel; SQLite: the file's data_version)."""
    db = f"w{uuid.uuid4().hex[:8]}"
    (table,) = _tables(hook_catalog, db, 1)
    first = hook_catalog.outbox.last_event_id() + 1
    with receivers(3) as (a, b, c), running_relay(hook_settings, webhook_interval=60.0):
        hook_catalog.webhooks.add("wake-a", a.url, f"{db}.*", from_event=first)
        hook_catalog.webhooks.add("wake-b", b.url, f"{db}.*", from_event=first)
        hook_catalog.webhooks.pause("wake-b")
        expected = write_events(hook_catalog, [table], 3)[str(table.name)]

        def delivered(receiver: Receiver) -> list[int]:
            return [event_id for r in receiver.ok() for _, event_id in events_of(r, [])]

        # a's delivery recorded: the pass has read the webhooks (b paused) and the events
        wait_until(
            lambda: (
                [t.last_event_id for t in hook_catalog.webhooks.topics("wake-a")] == [expected[-1]]
            ),
            30,
            lambda: f"wake-a got {delivered(a)}",
        )
        for receiver, change in (
            (b, lambda: hook_catalog.webhooks.resume("wake-b")),
            (c, lambda: hook_catalog.webhooks.add("wake-c", c.url, f"{db}.*", from_event=first)),
        ):
            change()
            wait_until(
                functools.partial(lambda r: delivered(r) == expected, receiver),
                10,  # the pass's interval is 60 s
                functools.partial(lambda r: f"got {delivered(r)} of {expected}", receiver),
            )
