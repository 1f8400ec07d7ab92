"""How durable subscribers grow: the lag query and the watermark write at S subscribers.

At each S (default 10, 100, 1,000; ``--quick`` 10 and 100) the catalog holds S durable
subscribers (claimed with the 10 topics they follow and advanced through
``catalog.subscriptions``, as consumers do), each with a watermark on each of 10 topics
100 events behind its end (10 tables of 1,000 retained, published dones, bulk-loaded as
the store writes them). Measured, 3 rounds (``--rounds``), the median of the rounds:

* the lag of every subscriber, as ``/metrics`` and ``hcat-notify subscribers`` read it
  (``subscriptions.every()``, then ``subscriptions.lags`` of all), per subscriber;
* ``hcat-notify subscribers -o json`` (in this process), per subscriber;
* one subscriber's watermark write (``subscriptions.advance`` of its 10 topics, fenced
  by its owner), median of 50;
* checked: every subscriber's lag is 1,000 (10 topics x 100), printed.

Each is flat when the figure at the largest S is at most 1.5 x the smallest S's.
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import time
from pathlib import Path

from _scale_dbs import catalog_urls
from _scale_main import backends_of, growth_parser, growth_run, rounds_of, sizes_of
from _scale_report import Series, flat, report
from _support import (
    HOST,
    bulk_dones,
    free_port,
    load_text,
    log,
    make_settings,
    run_main,
)

from hcat_notify.cli import main as cli_main
from hcat_notify.store import Catalog

SIZES = (10, 100, 1_000)
QUICK_SIZES = (10, 100)
TOPICS = 10
EVENTS = 1_000
BEHIND = 100
OWNER = "bench-host:1"
XLABEL = "durable subscribers"


def prepare(catalog: Catalog) -> dict[str, int]:
    """The topics' events; the watermark of each topic (BEHIND before its end)."""
    marks = {}
    for t in range(TOPICS):
        info = catalog.create_table(
            f"subs.t{t}", location=f"/data/subs/t{t}", partition_keys=["ds"]
        )
        ids = bulk_dones(
            catalog.settings.database_url,
            info,
            ({"ds": f"{n:06d}"} for n in range(EVENTS)),
            published=True,
        )
        marks[info.topic] = ids[-BEHIND - 1]
    return marks


def subscribe(catalog: Catalog, marks: dict[str, int], first: int, last: int) -> None:
    for n in range(first, last):
        name = f"sub{n:05d}"
        # as a consumer claims: with the topics it follows (migration 0022), so the lag
        # and the sweep read the followed-topics path, not the pre-0022 "holds every topic"
        catalog.subscriptions.claim(name, OWNER, topics=list(marks))
        catalog.subscriptions.advance(name, OWNER, marks)


def every_lag(catalog: Catalog) -> dict[str, int]:
    found = catalog.subscriptions.lags(catalog.subscriptions.every())
    return {name: sum(topics.values()) for name, topics in found.items()}


def cli_subscribers(url: str) -> list[dict[str, object]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["--db-url", url, "subscribers", "-o", "json"])
    if code != 0:
        raise RuntimeError(f"hcat-notify subscribers exited {code}: {out.getvalue()[-300:]}")
    found: list[dict[str, object]] = json.loads(out.getvalue())
    return found


def _timed(call: object) -> float:
    started = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - started


def run_backend(
    backend: str, workdir: Path, sizes: list[int], rounds: int, admin_url: str | None
) -> list[Series]:
    lags = Series("lag of every subscriber, per subscriber", "ms", XLABEL, flat)
    listing = Series("hcat-notify subscribers, per subscriber", "ms", XLABEL, flat)
    write = Series("watermark write (10 topics), one subscriber", "ms", XLABEL, flat)
    with catalog_urls(backend, workdir, ["subscribers"], admin_url) as urls:
        settings = make_settings(workdir / backend, f"stomp://{HOST}:{free_port()}", urls[0])
        with Catalog.open(settings) as catalog:
            marks = prepare(catalog)
            have = 0
            for size in sizes:
                subscribe(catalog, marks, have, size)
                have = size
                found = every_lag(catalog)
                wanted = TOPICS * BEHIND
                listed = cli_subscribers(settings.database_url)
                if len(found) != size or set(found.values()) != {wanted} or len(listed) != size:
                    raise RuntimeError(f"{len(found)} subscribers, lags {set(found.values())}")
                print(f"# {backend} S = {size:,}: every subscriber {wanted:,} events behind")
                figures: dict[str, list[float]] = {"lag": [], "cli": [], "write": []}
                for _ in range(rounds):
                    figures["lag"].append(_timed(lambda: every_lag(catalog)) / size)
                    figures["cli"].append(
                        _timed(lambda: cli_subscribers(settings.database_url)) / size
                    )
                    figures["write"].append(
                        statistics.median(
                            _timed(lambda: catalog.subscriptions.advance("sub00000", OWNER, marks))
                            for _ in range(50)
                        )
                    )
                med = {k: statistics.median(v) * 1000 for k, v in figures.items()}
                lags.add(size, med["lag"])
                listing.add(size, med["cli"])
                write.add(size, med["write"])
                log(
                    f"{backend} S = {size:,}: lag {med['lag']:.3f} ms/subscriber, CLI "
                    f"{med['cli']:.3f} ms/subscriber, watermark write {med['write']:.2f} ms; "
                    f"{load_text()}"
                )
    return [lags, listing, write]


def main() -> None:
    p = growth_parser(__doc__, "comma-separated S, e.g. 10,100,1000", rounds=True)
    args = p.parse_args()
    sizes = sizes_of(args.sizes, args.quick, SIZES, QUICK_SIZES)
    rounds = rounds_of(args)
    title = f"how durable subscribers grow: {rounds} rounds"
    with growth_run(args, title, "subscribers") as (workdir, panels):
        for backend in backends_of(args):
            series = run_backend(backend, workdir, sizes, rounds, args.postgresql_admin_url)
            report(f"{backend}: how durable subscribers grow, S = {sizes}", series, [load_text()])
            panels[f"durable subscribers, {backend}"] = series


if __name__ == "__main__":
    run_main(main)
