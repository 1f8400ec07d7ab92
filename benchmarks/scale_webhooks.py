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
``ANALYZE``: the plans are those of a catalog in use). A real ``hcat-notify serve``
runs on each catalog.

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
"""

from __future__ import annotations

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
from _scale_dbs import catalog_urls
from _scale_load import LOAD_CHUNK, Loader
from _scale_main import backends_of, growth_parser, growth_run, rounds_of, sizes_of
from _scale_report import Series, flat, report
from _scale_serve import cli, serve
from _support import HOST, free_port, load_text, log, make_settings, run_main

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


def prepare(settings: Settings, webhooks: int) -> dict[str, int]:
    """The webhooks (and the table their pattern needs), added the ordinary way."""
    with Catalog.open(settings) as catalog:
        catalog.create_table("hooks.t", location="/data/hooks/t", partition_keys=["ds"])
        for w in range(webhooks):
            catalog.webhooks.add(f"hook{w:02d}", URL, "hooks.*", from_event=1)
        return {info.name: info.id for info in catalog.webhooks.every()}


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


def run_backend(
    backend: str,
    workdir: Path,
    sizes: list[int],
    rounds: int,
    webhooks: int,
    admin_url: str | None,
    checked: bool = True,
) -> list[Series]:
    series = {name: Series(f"{name}, median", "ms", XLABEL, flat) for name in COSTS}
    broker = f"stomp://{HOST}:{free_port()}"  # none: nothing here publishes
    servers: list[subprocess.Popen[bytes]] = []
    with catalog_urls(backend, workdir, ["hooks_base", "hooks_grown"], admin_url) as urls:
        roles = ("base", "grown")
        settings = {
            role: make_settings(workdir / f"{backend}-{role}", broker, url)
            for role, url in zip(roles, urls, strict=True)
        }
        hooks = {role: prepare(s, webhooks) for role, s in settings.items()}
        seconds = grow(urls[0], hooks["base"], 0, sizes[0])
        log(f"{backend}: base catalog at T = {sizes[0]:,} in {seconds:.1f} s")
        clients = {role: httpx.Client(auth=WRITER, timeout=60) for role in roles}
        try:
            apis = {}
            for role, s in settings.items():
                proc, apis[role] = serve(workdir, s, f"hooks-{backend}-{role}")
                servers.append(proc)
            have = 0
            for size in sizes:
                seconds = grow(urls[1], hooks["grown"], have, size)
                have = size
                log(
                    f"{backend}: grown catalog at T = {size:,} ({size * webhooks:,} progress "
                    f"rows) loaded in {seconds:.1f} s; {load_text()}"
                )
                if checked:
                    said = verify(urls[1], apis["grown"], clients["grown"], hooks["grown"], size)
                    verify(urls[0], apis["base"], clients["base"], hooks["base"], sizes[0])
                    print(f"# {backend} T = {size:,}: checked {said}", flush=True)
                for name, cost in COSTS.items():
                    calls = {r: cost(settings[r].database_url, apis[r], clients[r]) for r in roles}
                    for role in roles:  # warm: caches, plans
                        calls[role]()
                    medians: dict[str, list[float]] = {"base": [], "grown": []}
                    for _ in range(rounds):
                        times: dict[str, list[float]] = {"base": [], "grown": []}
                        for _ in range(SLICES):
                            for role in roles:
                                times[role].append(_timed(calls[role]))
                        for role in roles:
                            medians[role].append(statistics.median(times[role]))
                    series[name].add(
                        size,
                        statistics.median(medians["grown"]) * 1000,
                        statistics.median(medians["base"]) * 1000,
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
    args = p.parse_args()
    sizes = sizes_of(args.sizes, args.quick, SIZES, QUICK_SIZES)
    rounds = rounds_of(args)
    title = f"how the webhooks' overviews grow: {args.webhooks} webhooks, {rounds} rounds"
    with growth_run(args, title, "webhooks") as (workdir, panels):
        for backend in backends_of(args):
            series = run_backend(
                backend,
                workdir,
                sizes,
                rounds,
                args.webhooks,
                args.postgresql_admin_url,
                not args.unchecked,
            )
            report(
                f"{backend}: how the webhooks' overviews grow, {args.webhooks} webhooks x "
                f"T = {', '.join(f'{s:,}' for s in sizes)} topics each, against the same at "
                f"T = {sizes[0]:,} (same rounds)",
                series,
                [load_text()],
            )
            panels[f"webhooks' overviews, {backend}"] = series


if __name__ == "__main__":
    run_main(main)
