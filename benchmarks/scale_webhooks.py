"""How the webhooks' overviews grow with the topics they deliver: ``GET /metrics``,
``status``, ``webhooks show`` (its first page), ``GET /v1/webhooks/{name}?limit=100`` and
``webhooks list`` at W webhooks x T topics (issue 31, for the webhooks of issue 30).

Two catalogs on each backend (SQLite files; PostgreSQL databases of a private cluster
from ``deploy/local/postgres.sh`` unless ``--postgresql-admin-url``): the *grown* one is
loaded to each T in turn (default 10^3, 10^4, 10^5; ``--quick`` 300 and 3,000), the
*base* one stays at the smallest. Each holds W webhooks (``--webhooks``, default 10),
added through ``catalog.webhooks.add`` as operators add them, and per webhook one
progress row per topic in the columns the relay writes (a position, its bucket and
epoch; every 500th topic failing and retried, every 1,000th parked, as
``record_failure`` leaves them), by ``executemany`` on SQLite and ``COPY`` on
PostgreSQL, in transactions of 50,000 rows; PostgreSQL is then vacuumed and analyzed
(what autovacuum does within a minute), SQLite is not (nothing in hcat-notify runs
``ANALYZE``: the plans are those of a catalog in use), and both SQLite catalogs' files
are read through once after each load (the page cache a catalog in use has, as
``scale.py`` does). A real ``hcat-notify serve`` runs on each catalog.

At each T every cost runs on both catalogs for 3 rounds (``--rounds``), each round
alternating base and grown a call at a time (so that both meet the same load); a
figure is the median of the rounds' medians, beside the base's of the same rounds.
Checked at each T (printed): ``/metrics`` gives each webhook's failing and parked
topics and its delivered position right, ``webhooks show`` its first 100 topics and the
next, ``status`` the parked pairs counted. Printed per cost: the figure at every T, the
ratio to the base, the fitted exponent k (ratio ~ T^k) and the verdict: flat when the
ratio at the largest T is at most 1.5. ``webhooks list`` reads the W webhooks' rows
only: it is flat in T by construction and measured as a control. ``--unchecked`` skips
the checks, to measure a build whose answers differ (one from before the pages and the
counts: ``PYTHONPATH=<its checkout>``).

The relay (``--parts b``; needs a broker: a private one, or ``--broker-url``): the
webhooks point at a receiver on loopback (``tests/fixtures/webhook_receiver.py``, a
process); per round, 20 dones of one table (``hooks.zz``, one topic) are written on each
catalog, then ``hcat-notify relay --once`` (a process) publishes them and delivers them
to the W webhooks: its wall time and peak RSS (sampled every 20 ms), alternating base
and grown, median of the rounds; every webhook's progress of that topic checked at the
last done. Its first pass over buckets it gains holds the W x T idle lanes or not: what
the relay keeps must grow with the topics that have events only.
"""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _receivers import Receivers
from _scale_dbs import catalog_urls
from _scale_load import LOAD_CHUNK, Loader, warm
from _scale_main import (
    backends_of,
    command_with_peak,
    growth_parser,
    growth_run,
    rounds_of,
    sizes_of,
)
from _scale_report import Series, flat, report
from _scale_serve import cli, serve
from _support import HOST, Broker, free_port, free_ports, load_text, log, make_settings, run_main
from sqlalchemy import create_engine, inspect, text

from hcat_notify.config import Settings
from hcat_notify.model.topics import DEFAULT_BUCKETS, topic_bucket
from hcat_notify.store import Catalog

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (300, 3_000)
WEBHOOKS = 10
SLICES = 9  # calls per catalog per round, alternating
XLABEL = "topics per webhook (T)"
WRITER = ("hcat-publisher", "hcat-publisher-dev")
URL = "https://hooks.example.com/in"
SHOWN = "hook00"
ACTIVE = "hooks.zz"  # the table with events: its topic sorts after every idle one
DONES = 20  # written before each relay run
COLUMNS = (
    "webhook_id",
    "topic",
    "bucket",
    "last_event_id",
    "epoch",
    "updated_at",
    "attempts",
    "retry_at",
    "failing_since",
    "last_error",
    "parked_at",
)


def topic(n: int) -> str:
    return f"hcat.hooks.t{n:06d}"


def failing(n: int) -> bool:
    return n % 500 == 250


def parked(n: int) -> bool:
    return n % 1000 == 999


def prepare(settings: Settings, webhooks: int, url: str) -> dict[str, int]:
    """The webhooks to ``url`` (and the table their pattern needs), added the ordinary
    way."""
    settings = dataclasses.replace(settings, webhook_allow=(HOST,))
    with Catalog.open(settings) as catalog:
        catalog.create_table(ACTIVE, location="/data/hooks/zz", partition_keys=["ds"])
        for w in range(webhooks):
            # from now: the table's creation (on the catalog's own topics) goes to none
            catalog.webhooks.add(f"hook{w:02d}", url, "hooks.*")
        return {info.name: info.id for info in catalog.webhooks.every()}


def relay_round(settings: Settings, hooks: dict[str, int], round_: int) -> tuple[float, int]:
    """Write the dones, run ``relay --once``: its seconds and peak RSS; check that every
    webhook got the last done."""
    with Catalog.open(settings) as catalog:
        for n in range(DONES):
            last = catalog.mark_set_done(ACTIVE, {"ds": f"r{round_:03d}-{n:02d}"})
        topic_name = catalog.get_table(ACTIVE).topic
    # the relay checks its own allow list before it sends (plain HTTP to the receiver)
    relay = dataclasses.replace(settings, webhook_allow=(HOST,))
    seconds, peak, _ = command_with_peak(["relay", "--once"], relay)
    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            found: dict[int, int] = dict(
                conn.execute(
                    text(
                        "SELECT webhook_id, last_event_id FROM hcat_webhook_progress"
                        " WHERE topic = :topic"
                    ),
                    {"topic": topic_name},
                ).all()
            )
    finally:
        engine.dispose()
    if found != {hook: last for hook in hooks.values()}:
        raise RuntimeError(f"relay --once: the webhooks are at {found}, not at {last}")
    return seconds, peak


def grow(url: str, hooks: dict[str, int], have: int, size: int) -> float:
    """Progress rows of topics ``have`` .. ``size`` - 1 for every webhook; the seconds."""
    started = time.perf_counter()
    loader = Loader(url)
    now = time.time()
    try:
        rows: list[tuple[Any, ...]] = []

        def flush() -> None:
            with loader.engine.begin() as conn:
                loader.put(conn, "hcat_webhook_progress", COLUMNS, rows)
            rows.clear()

        for hook in hooks.values():
            for n in range(have, size):
                name = topic(n)
                bad = failing(n) or parked(n)
                rows.append(
                    (
                        hook,
                        name,
                        topic_bucket(name, DEFAULT_BUCKETS),
                        1_000 + n + hook,  # the highest: the last topic's
                        1,
                        now,
                        3 if bad else 0,
                        now + 60 if bad else None,
                        now - 3600 if bad else None,
                        "HTTP 503" if bad else None,
                        now - 60 if parked(n) else None,
                    )
                )
                if len(rows) >= LOAD_CHUNK:
                    flush()
        if rows:
            flush()
        with loader.engine.begin() as conn:  # as the recorder's fence leaves them (0020)
            if "delivered_event_id" in {
                c["name"] for c in inspect(conn).get_columns("hcat_webhooks")
            }:
                for hook in hooks.values():
                    conn.execute(
                        text("UPDATE hcat_webhooks SET delivered_event_id = :at WHERE id = :id"),
                        {"at": 1_000 + size - 1 + hook, "id": hook},
                    )
        if not loader.sqlite:
            with loader.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM ANALYZE")
    finally:
        loader.close()
    return time.perf_counter() - started


def _metric(text: str, name: str, hook: str) -> float:
    found = re.search(rf'^{name}{{webhook="{hook}"}} (\S+)$', text, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"/metrics has no {name} of {hook}")
    return float(found.group(1))


def verify(url: str, api: str, http: httpx.Client, hooks: dict[str, int], size: int) -> str:
    """The answers are the right ones (not timed)."""
    failing_n = sum(1 for n in range(size) if failing(n))
    parked_n = sum(1 for n in range(size) if parked(n))
    metrics = http.get(f"{api}/metrics").text
    for name, hook in hooks.items():
        wanted = {
            "hcat_notify_webhook_failing_topics": failing_n,
            "hcat_notify_webhook_parked_topics": parked_n,
            "hcat_notify_webhook_delivered_event_id": 1_000 + size - 1 + hook,
        }
        for metric, value in wanted.items():
            if _metric(metrics, metric, name) != value:
                raise RuntimeError(f"/metrics {metric} of {name}: {_metric(metrics, metric, name)}")
    shown = json.loads(cli(url, "-o", "json", "webhooks", "show", SHOWN))
    first = [t["topic"] for t in shown["topics"]]
    if first != [topic(n) for n in range(min(100, size))] or shown["next"] != first[-1]:
        raise RuntimeError(f"webhooks show {SHOWN}: {first[:3]}... next {shown['next']}")
    if (shown["failing_topics"], shown["parked_topics"]) != (failing_n, parked_n):
        raise RuntimeError(f"webhooks show {SHOWN}: {shown['failing_topics']} failing")
    page = http.get(f"{api}/v1/webhooks/{SHOWN}", params={"limit": 100}).json()
    if [t["topic"] for t in page["topics"]] != first or page["next"] != first[-1]:
        raise RuntimeError(f"GET /v1/webhooks/{SHOWN}?limit=100: next {page['next']}")
    status = json.loads(cli(url, "-o", "json", "status"))
    if status["webhooks_parked_count"] != parked_n * len(hooks):
        raise RuntimeError(f"status: {status['webhooks_parked_count']} parked webhook topics")
    return (
        f"/metrics failing {failing_n}, parked {parked_n} and the delivered position of each "
        f"webhook, webhooks show's first 100 topics and next, GET /v1/webhooks/{SHOWN}"
        f"?limit=100, status's {parked_n * len(hooks)} parked pairs counted"
    )


def _get(api: str, http: httpx.Client, path: str) -> Callable[[], object]:
    def call() -> None:
        answer = http.get(api + path)
        if answer.status_code != 200:
            raise RuntimeError(f"GET {path}: {answer.status_code} {answer.text[:200]}")

    return call


COSTS: dict[str, Callable[[str, str, httpx.Client], Callable[[], object]]] = {
    "GET /metrics": lambda url, api, http: _get(api, http, "/metrics"),
    "status": lambda url, api, http: lambda: cli(url, "status"),
    f"webhooks show {SHOWN} (first page, 100 topics)": lambda url, api, http: (
        lambda: cli(url, "webhooks", "show", SHOWN)
    ),
    f"GET /v1/webhooks/{SHOWN}?limit=100": lambda url, api, http: _get(
        api, http, f"/v1/webhooks/{SHOWN}?limit=100"
    ),
    "webhooks list": lambda url, api, http: lambda: cli(url, "webhooks", "list"),
}


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(
    series: dict[str, Series],
    size: int,
    rounds: int,
    calls: dict[str, dict[str, Callable[[], object]]],
) -> None:
    """Each cost's calls on both catalogs, alternating a call at a time: the median of
    the rounds' medians, grown beside base."""
    for name, of_role in calls.items():
        for call in of_role.values():  # warm: caches, plans
            call()
        medians: dict[str, list[float]] = {"base": [], "grown": []}
        for _ in range(rounds):
            times: dict[str, list[float]] = {"base": [], "grown": []}
            for _ in range(SLICES):
                for role, call in of_role.items():
                    times[role].append(_timed(call))
            for role in of_role:
                medians[role].append(statistics.median(times[role]))
        series[name].add(
            size,
            statistics.median(medians["grown"]) * 1000,
            statistics.median(medians["base"]) * 1000,
        )


def measure_relay(
    series: dict[str, Series],
    size: int,
    rounds: int,
    settings: dict[str, Settings],
    hooks: dict[str, dict[str, int]],
    done: list[int],
) -> None:
    """``relay --once`` on both catalogs, alternating, ``rounds`` times: the median wall
    time and peak RSS, grown beside base (``done``: the rounds each catalog ran so far)."""
    figures: dict[str, list[tuple[float, int]]] = {"base": [], "grown": []}
    for _ in range(rounds):
        for role in ("base", "grown"):
            done[0] += 1
            figures[role].append(relay_round(settings[role], hooks[role], done[0]))
    wall = {role: statistics.median(s for s, _ in found) for role, found in figures.items()}
    rss = {role: statistics.median(p for _, p in found) for role, found in figures.items()}
    series[RELAY_WALL].add(size, wall["grown"], wall["base"])
    series[RELAY_RSS].add(size, rss["grown"] / 2**20, rss["base"] / 2**20)


RELAY_WALL = f"relay --once, {DONES} dones to each webhook, wall"
RELAY_RSS = f"relay --once, {DONES} dones to each webhook, peak RSS"


def run_backend(
    backend: str,
    workdir: Path,
    sizes: list[int],
    rounds: int,
    webhooks: int,
    admin_url: str | None,
    relay: tuple[str, str] | None,
    checked: bool = True,
    overviews: bool = True,
) -> list[Series]:
    """The overviews' costs at each size (unless not ``overviews``); with ``relay`` (a
    broker's URL, a receiver's) also the relay's."""
    costs = COSTS if overviews else {}
    series = {name: Series(f"{name}, median", "ms", XLABEL, flat) for name in costs}
    if relay is not None:
        series[RELAY_WALL] = Series(f"{RELAY_WALL}, median", "s", XLABEL, flat)
        series[RELAY_RSS] = Series(f"{RELAY_RSS}, median", "MiB", XLABEL, flat)
    # without the relay, no broker: nothing publishes
    broker, url = relay if relay is not None else (f"stomp://{HOST}:{free_port()}", URL)
    servers: list[subprocess.Popen[bytes]] = []
    with catalog_urls(backend, workdir, ["hooks_base", "hooks_grown"], admin_url) as urls:
        roles = ("base", "grown")
        settings = {
            role: make_settings(workdir / f"{backend}-{role}", broker, db_url)
            for role, db_url in zip(roles, urls, strict=True)
        }
        hooks = {role: prepare(s, webhooks, url) for role, s in settings.items()}
        seconds = grow(urls[0], hooks["base"], 0, sizes[0])
        log(f"{backend}: base catalog at T = {sizes[0]:,} in {seconds:.1f} s")
        clients = {role: httpx.Client(auth=WRITER, timeout=60) for role in roles}
        relay_rounds = [0]
        try:
            apis = {}
            for role, s in settings.items():
                proc, apis[role] = serve(workdir, s, f"hooks-{backend}-{role}")
                servers.append(proc)
            if relay is not None:  # the tables' creation published and delivered: not timed
                measure_relay(
                    {k: Series(k, "", "") for k in (RELAY_WALL, RELAY_RSS)},
                    0,
                    1,
                    settings,
                    hooks,
                    relay_rounds,
                )
            have = 0
            for size in sizes:
                seconds = grow(urls[1], hooks["grown"], have, size)
                have = size
                warmed = sum(warm(db_url) for db_url in urls)
                log(
                    f"{backend}: grown catalog at T = {size:,} ({size * webhooks:,} progress "
                    f"rows) loaded in {seconds:.1f} s, read into the page cache in "
                    f"{warmed:.1f} s; {load_text()}"
                )
                if checked and overviews:
                    said = verify(urls[1], apis["grown"], clients["grown"], hooks["grown"], size)
                    verify(urls[0], apis["base"], clients["base"], hooks["base"], sizes[0])
                    print(f"# {backend} T = {size:,}: checked {said}", flush=True)
                calls = {
                    name: {r: cost(settings[r].database_url, apis[r], clients[r]) for r in roles}
                    for name, cost in costs.items()
                }
                measure(series, size, rounds, calls)
                if relay is not None:
                    measure_relay(series, size, rounds, settings, hooks, relay_rounds)
                    print(
                        f"# {backend} T = {size:,}: relay --once delivered every done to "
                        f"every webhook, {rounds} round(s) a catalog",
                        flush=True,
                    )
                log(f"{backend} T = {size:,} measured; {load_text()}")
        finally:
            for client in clients.values():
                client.close()
            for proc in servers:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return list(series.values())


def main() -> None:
    p = growth_parser(__doc__, "comma-separated T, e.g. 1000,10000,100000", rounds=True)
    p.add_argument("--webhooks", type=int, default=WEBHOOKS, help="W, the webhooks")
    p.add_argument("--unchecked", action="store_true", help="do not check the answers")
    p.add_argument("--parts", default="a,b", help="a (the overviews), b (the relay)")
    p.add_argument(
        "--broker-url",
        help="(b): a running broker (STOMP URL, the default publisher's credentials) instead "
        "of starting a private one",
    )
    args = p.parse_args()
    sizes = sizes_of(args.sizes, args.quick, SIZES, QUICK_SIZES)
    rounds = rounds_of(args)
    parts = {part.strip() for part in args.parts.split(",")}
    title = f"how the webhooks' overviews grow: {args.webhooks} webhooks, {rounds} rounds"
    with growth_run(args, title, "webhooks") as (workdir, panels):
        broker = None
        if "b" in parts and args.broker_url is None:
            stomp_port, openwire_port = free_ports(2)
            broker = Broker(workdir, stomp_port, openwire_port, java_opts=args.broker_java_opts)
        receiver = Receivers() if "b" in parts else None
        try:
            if broker is not None:
                broker.start()
            broker_url = args.broker_url or (broker.url if broker is not None else None)
            relay = (broker_url, receiver.url("all")) if receiver and broker_url else None
            for backend in backends_of(args):
                series = run_backend(
                    backend,
                    workdir,
                    sizes,
                    rounds,
                    args.webhooks,
                    args.postgresql_admin_url,
                    relay,
                    not args.unchecked,
                    "a" in parts,
                )
                report(
                    f"{backend}: how the webhooks' overviews grow, {args.webhooks} webhooks x "
                    f"T = {', '.join(f'{s:,}' for s in sizes)} topics each, against the same "
                    f"at T = {sizes[0]:,} (same rounds)",
                    series,
                    [load_text()],
                )
                panels[f"webhooks' overviews, {backend}"] = series
        finally:
            if receiver is not None:
                receiver.close()
            if broker is not None:
                broker.stop()


if __name__ == "__main__":
    run_main(main)
