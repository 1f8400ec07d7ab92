"""How each cost grows with the catalog: the same operation on a catalog grown through
geometric sizes and on one kept at the smallest size, alternating, in the same run.

Two catalogs on each backend (SQLite files; PostgreSQL databases of a private cluster
from ``deploy/local/postgres.sh``, unless ``--backends sqlite``): the *grown* one is
bulk-loaded to each size in turn, the *base* one stays at the smallest. At a size N the
grown catalog holds one table ``scale.big`` (keys ds, region) with N partitions and N
retained, published MARK_SET_DONEs (retention and outbox rows, as ``mark_set_done``
writes them), N/100 other tables (at least 100, at most 100,000), each with its topic's
progress row, and ``scale.small`` with 1,000 retained dones. Rows go in the way the
store writes them (the same tables and columns, ids from the catalog's counter or
sequence), by ``executemany`` on SQLite and ``COPY`` on PostgreSQL, in big transactions,
then ``ANALYZE``; each relay bucket is marked published through the last event, as a
running relay leaves it.

After each load both catalogs' SQLite files are read through once (the page cache a
catalog in use has; the load's writes push the early pages out). At each size every
cost is measured on both catalogs for 3 rounds (``--rounds``), each round alternating
base and grown a few calls at a time, so that both meet the same load; a figure is the
median of the rounds' statistic (p99 where the row says so, else the median call).
``find_covering_done`` on SQLite is timed in the calling thread's CPU time (its p99 in
wall time is the shared machine's scheduler); what the process read from the disk
during the rounds is printed per size. ``--costs`` picks rows by name. Printed: per
size, grown / base (the ratio to the smallest size, same rounds), and per cost the
figures at every size, the fitted exponent k (least squares of log(cost / the
smallest's, same rounds) on log N, so that the machine's load drifting over the run
cancels out: cost ~ N^k) and the verdict: flat when the ratio at the largest size is at
most 1.5. A PNG of the curves goes next to the record
(``--chart``; matplotlib, the ``benchmarks`` extra).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from _scale_commit import PARTITIONS, commit_times
from _scale_dbs import admin_connection as _admin
from _scale_load import (
    BIG,
    SMALL,
    SMALL_DONES,
    day,
    disk_reads,
    grow,
    prepare,
    spec_of,
    tables_at,
    warm,
)
from _scale_serve import cli, serve
from _support import (
    HOST,
    Broker,
    Row,
    drop_workdir,
    footer,
    free_port,
    free_ports,
    load_text,
    log,
    machine_line,
    make_settings,
    parser,
    percentile,
    postgres,
    print_table,
    run_main,
    stop_on_sigterm,
)
from sqlalchemy import URL, make_url, text

from hcat_notify.config import Settings
from hcat_notify.store import Catalog, NewPartition
from hcat_notify.writer import send_mark_set_done

FLAT = 1.5
SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
POSTGRESQL_SIZES = (10_000, 100_000, 1_000_000)  # 10^7 on both would not fit 30 minutes
QUICK_SIZES = (1_000, 4_000)
READER = ("hcat-reader", "hcat-reader-dev")


# --------------------------------------------------------------------------- the costs


@dataclass
class Target:
    """One catalog, as the costs reach it."""

    settings: Settings
    catalog: Catalog
    api: str
    http: httpx.Client
    rng: random.Random
    partitions: int = 0
    written: int = 0

    @property
    def url(self) -> str:
        return self.settings.database_url


def _times(call: Callable[[], object], n: int) -> list[float]:
    found = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        found.append(time.perf_counter() - started)
    return found


def _covering(t: Target, n: int) -> list[float]:
    # On SQLite the lookup runs in this thread: timed in its CPU time (the kernel's
    # copies from the page cache included). In wall time the p99 of a 40 us call on the
    # shared 2-core machine is the scheduler's time slice, on either catalog alike;
    # reads from the disk are counted apart (disk_reads, printed per size).
    clock = time.thread_time if t.url.startswith("sqlite") else time.perf_counter
    found = []
    for i in range(n):
        k = t.rng.randrange(t.partitions)
        ds, rg = spec_of(k)
        spec = {"ds": ds, "region": rg} if i % 2 == 0 else {"ds": "19990101", "region": rg}
        started = clock()
        done = t.catalog.find_covering_done(BIG, spec)
        found.append(clock() - started)
        if (done is None) == (i % 2 == 0):
            raise RuntimeError(f"find_covering_done({spec}) answered {done}")
    return found


def _api_done(t: Target, n: int) -> list[float]:
    found = []
    for _ in range(n):
        ds, rg = spec_of(t.rng.randrange(t.partitions))
        started = time.perf_counter()
        answer = t.http.get(f"{t.api}/v1/tables/{BIG}/done", params={"ds": ds, "region": rg})
        found.append(time.perf_counter() - started)
        if answer.status_code != 200:
            raise RuntimeError(f"GET done: {answer.status_code} {answer.text[:200]}")
    return found


def _get(t: Target, path: str, ok: Sequence[int] = (200,)) -> Callable[[], object]:
    def call() -> None:
        answer = t.http.get(t.api + path)
        if answer.status_code not in ok:
            raise RuntimeError(f"GET {path}: {answer.status_code} {answer.text[:200]}")

    return call


def _send(t: Target, n: int) -> list[float]:
    found = []
    for _ in range(n):
        t.written += 1
        spec = {"ds": day(90_000 + t.written), "region": "r000"}
        started = time.perf_counter()
        send_mark_set_done(BIG, spec, settings=t.settings)
        found.append(time.perf_counter() - started)
    return found


def _add(t: Target, n: int) -> list[float]:
    found = []
    for _ in range(n):
        t.written += 1
        ds = day(90_000 + t.written)
        part = NewPartition({"ds": ds, "region": "r001"}, f"/data/scale/big/ds={ds}/region=r001")
        started = time.perf_counter()
        t.catalog.add_partitions(BIG, [part])
        found.append(time.perf_counter() - started)
    return found


def _commit(t: Target, n: int) -> list[float]:
    writes = []
    for _ in range(n):
        t.written += 1
        writes.append([(day(200_000 + t.written), f"r{j:03d}") for j in range(PARTITIONS)])
    return commit_times(t.catalog, BIG, t.settings.home / "warehouse" / "big", writes)


def _catch_up(t: Target) -> None:
    events = t.catalog.catch_up([SMALL])
    if len(events) != SMALL_DONES:
        raise RuntimeError(f"catch-up of {SMALL}: {len(events)} events, not {SMALL_DONES}")


def first_names(tables: int, count: int) -> list[str]:
    """The first ``count`` table names by name in a catalog grown to ``tables``."""
    names = [f"db{n % 100:02d}.t{n:06d}" for n in range(tables)] + [BIG, SMALL]
    return sorted(names, key=lambda name: tuple(name.split(".")))[:count]


def verify(t: Target, tables: int) -> str:
    """The paged answers are the right ones (not timed)."""
    listed = [line.split("\t")[0] for line in cli(t.url, "table", "list", head=20).splitlines()]
    if listed[:20] != first_names(tables, 20):
        raise RuntimeError(f"table list | head -20 listed {listed[:20]}")
    page = t.http.get(f"{t.api}/v1/tables", params={"limit": 100}).json()
    names = [item["name"] for item in page["tables"]]
    if names != first_names(tables, 100) or page["next"] != names[-1]:
        raise RuntimeError(f"GET /v1/tables?limit=100: {names[:5]}... next {page['next']}")
    lines = cli(t.url, "partitions", "list", BIG, head=20).splitlines()
    wanted = ["ds={}/region={}".format(*spec_of(n)) for n in range(20)]
    if [line.split("\t")[0] for line in lines[:20]] != wanted:
        raise RuntimeError(f"partitions list | head -20 listed {lines[:3]}...")
    shown = json.loads(cli(t.url, "table", "show", BIG, "-o", "json"))
    if shown["table"] != BIG:
        raise RuntimeError(f"table show {BIG}: {shown}")
    return "table list | head -20, GET /v1/tables?limit=100, partitions list | head -20, table show"


@dataclass(frozen=True)
class Cost:
    name: str
    statistic: str  # "p99" or "median"
    measure: Callable[[Target, bool], list[float]]
    # > 1: a round alternates the catalogs this many times, each a --quick measure (a
    # few calls), pooled: calls of both catalogs then meet the same load, where 9 calls
    # in a row of one catalog could all fall in another process's burst
    slices: int = 1


def _repeat(
    call: Callable[[Target], object], n: int, quick_n: int
) -> Callable[[Target, bool], list[float]]:
    return lambda t, quick: _times(lambda: call(t), quick_n if quick else n)


COSTS = (
    Cost("find_covering_done", "p99", lambda t, q: _covering(t, 50 if q else 1000), 20),
    Cost("API GET .../done", "p99", lambda t, q: _api_done(t, 30 if q else 500), 17),
    Cost(
        "table list | head -20",
        "median",
        _repeat(lambda t: cli(t.url, "table", "list", head=20), 9, 1),
        9,
    ),
    Cost(
        "GET /v1/tables?limit=100",
        "median",
        _repeat(lambda t: _get(t, "/v1/tables?limit=100")(), 15, 1),
        15,
    ),
    Cost(
        "partitions list | head -20",
        "median",
        _repeat(lambda t: cli(t.url, "partitions", "list", BIG, head=20), 9, 1),
        9,
    ),
    Cost("table show", "median", _repeat(lambda t: cli(t.url, "table", "show", BIG), 9, 1), 9),
    Cost("status", "median", _repeat(lambda t: cli(t.url, "status"), 9, 1), 9),
    Cost("GET / (status page)", "median", _repeat(lambda t: _get(t, "/")(), 9, 1), 9),
    Cost("GET /metrics", "median", _repeat(lambda t: _get(t, "/metrics")(), 15, 1), 15),
    Cost("GET /readyz", "median", _repeat(lambda t: _get(t, "/readyz", (200, 503))(), 15, 1), 15),
    Cost("send_mark_set_done", "median", lambda t, q: _send(t, 3 if q else 50), 17),
    Cost("partitions add (one)", "median", lambda t, q: _add(t, 3 if q else 50), 17),
    Cost("catch-up of 1,000 dones", "median", _repeat(_catch_up, 9, 1), 9),
    Cost(
        f"write_partitions commit ({PARTITIONS} partitions)",
        "median",
        lambda t, q: _commit(t, 2 if q else 15),
    ),
)


def statistic(values: list[float], which: str) -> float:
    return percentile(values, 99) if which == "p99" else statistics.median(values)


# --------------------------------------------------------------------------- a backend


@dataclass
class Curve:
    cost: Cost
    sizes: list[int] = field(default_factory=list)
    grown: list[float] = field(default_factory=list)  # median of the rounds' statistic
    base: list[float] = field(default_factory=list)

    def ratio(self, i: int) -> float:
        return self.grown[i] / self.base[i] if self.base[i] else math.nan

    def row(self, metric: str, rounds: int | None = None) -> Row:
        """The figure at the largest size so far beside the smallest's, in ms."""
        return Row(
            metric,
            self.grown[-1] * 1000,
            self.base[-1] * 1000,
            unit="ms",
            target=("<=", FLAT),
            check="ratio",
            digits=2,
            rounds=rounds,
        )

    def exponent(self) -> float:
        # on the ratios to the smallest, measured in the same rounds: the machine's load
        # drifts over a long run and moves both catalogs' figures alike
        xs = [math.log(s) for s in self.sizes]
        ys = [math.log(max(self.ratio(i), 1e-9)) for i in range(len(self.sizes))]
        if len(xs) < 2:
            return math.nan
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        den = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def run_backend(
    backend: str,
    urls: tuple[str, str],
    workdir: Path,
    broker_url: str,
    sizes: Sequence[int],
    rounds: int,
    quick: bool,
    costs: Sequence[Cost] = COSTS,
) -> list[Curve]:
    settings = {
        role: make_settings(workdir / f"{backend}-{role}", broker_url, url)
        for role, url in zip(("base", "grown"), urls, strict=True)
    }
    state = {role: prepare(s) for role, s in settings.items()}
    seconds = grow(state["base"], sizes[0])
    log(f"{backend}: base catalog at {sizes[0]:,} in {seconds:.1f} s")
    servers = {role: serve(workdir, s, f"{backend}-{role}") for role, s in settings.items()}
    curves = [Curve(cost) for cost in costs]
    targets: dict[str, Target] = {}
    try:
        for role, s in settings.items():
            targets[role] = Target(
                s,
                Catalog.open(s),
                servers[role][1],
                httpx.Client(auth=READER, timeout=60),
                random.Random(7),
            )
            targets[role].partitions = sizes[0]
        for size in sizes:
            seconds = grow(state["grown"], size)
            targets["grown"].partitions = size
            warmed = sum(warm(s.database_url) for s in settings.values())
            log(
                f"{backend}: grown catalog at {size:,} ({tables_at(size):,} tables) "
                f"loaded in {seconds:.1f} s, read into the page cache in {warmed:.1f} s; "
                f"{load_text()}"
            )
            read_before = disk_reads()
            checked = verify(targets["grown"], tables_at(size))
            print(f"# {backend} N = {size:,}: checked {checked}", flush=True)
            for curve in curves:
                figures: dict[str, list[float]] = {"base": [], "grown": []}
                if not quick:  # warm both: caches, plans
                    curve.cost.measure(targets["base"], True)
                    curve.cost.measure(targets["grown"], True)
                for _ in range(rounds):
                    values: dict[str, list[float]] = {"base": [], "grown": []}
                    for _ in range(1 if quick else curve.cost.slices):
                        for role in ("base", "grown"):
                            values[role] += curve.cost.measure(
                                targets[role], quick or curve.cost.slices > 1
                            )
                    for role in ("base", "grown"):
                        figures[role].append(statistic(values[role], curve.cost.statistic))
                curve.sizes.append(size)
                curve.base.append(statistics.median(figures["base"]))
                curve.grown.append(statistics.median(figures["grown"]))
            print_table(
                f"{backend}, N = {size:,} partitions and retained dones in {BIG}, "
                f"{tables_at(size):,} tables and topics: grown catalog vs the smallest",
                [c.row(f"{c.cost.name} ({c.cost.statistic})", rounds) for c in curves],
                [
                    f"reference: the same operation on the catalog kept at {sizes[0]:,}, "
                    f"rounds alternating; {load_text()}",
                    "read from the disk by this process during the rounds (the SQLite "
                    f"costs run in it): {(disk_reads() - read_before) / 2**20:.1f} MiB",
                ],
            )
    finally:
        for t in targets.values():
            t.http.close()
            t.catalog.close()
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
            if proc.poll() is None:
                proc.kill()
    return curves


def summary(backend: str, curves: list[Curve]) -> None:
    sizes = curves[0].sizes
    rows = []
    for c in curves:
        at = ", ".join(f"{g * 1000:.2f}" for g in c.grown)
        ratios = ", ".join(f"{c.ratio(i):.2f}" for i in range(len(sizes)))
        rows.append(
            c.row(
                f"{c.cost.name} ({c.cost.statistic}) ms at each N: {at}; ratios {ratios}; "
                f"k = {c.exponent():.3f}"
            )
        )
    print_table(
        f"{backend}: how each cost grows, N = {', '.join(f'{s:,}' for s in sizes)} "
        "(flat: <= 1.5 x the smallest at the largest N)",
        rows,
        ["k: the fitted exponent, cost / smallest's ~ N^k (0: flat, 1: linear)"],
    )


def chart(path: Path, results: dict[str, list[Curve]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        2, len(results), figsize=(7 * len(results), 11), squeeze=False, sharex="col"
    )
    colours = plt.get_cmap("tab20").colors  # type: ignore[attr-defined]  # a ListedColormap
    for column, (backend, curves) in enumerate(results.items()):
        top, bottom = axes[0][column], axes[1][column]
        for i, c in enumerate(curves):
            style = {
                "marker": "osD^v<>"[i % 7],
                "linestyle": "-" if i % 2 == 0 else "--",
                "color": colours[i % len(colours)],
                "label": f"{c.cost.name} ({c.cost.statistic})",
            }
            top.plot(c.sizes, [g * 1000 for g in c.grown], **style)
            bottom.plot(c.sizes, [c.ratio(n) for n in range(len(c.sizes))], **style)
        bottom.axhline(FLAT, color="grey", linestyle=":", label=f"flat: {FLAT} x the smallest")
        for ax in (top, bottom):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
        top.set_ylabel("ms (p99 or median call)")
        top.set_title(f"hcat-notify: cost against catalog size, {backend}")
        top.legend(fontsize=7)
        bottom.set_ylabel("cost / the same at the smallest size, same rounds")
        bottom.set_xlabel("N (partitions and retained dones in one table; tables = N/100)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"# chart: {path}")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", help="comma-separated N, e.g. 10000,100000,1000000 (SQLite)")
    p.add_argument(
        "--postgresql-sizes", help="the same for PostgreSQL (default: up to 10^6; --quick: --sizes)"
    )
    p.add_argument("--backends", default="sqlite,postgresql", help="sqlite, postgresql or both")
    p.add_argument(
        "--postgresql-admin-url",
        help="a running PostgreSQL server's admin URL: two databases are created there "
        "(and dropped at the end) instead of starting a private cluster",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--costs", help="only the costs whose name contains one of these (comma-separated)"
    )
    p.add_argument("--chart", type=Path, default=None, help="the PNG (default: next to the record)")
    args = p.parse_args()

    def parse(given: str | None, default: Sequence[int]) -> list[int]:
        return [int(float(s)) for s in given.split(",")] if given else list(default)

    sizes = parse(args.sizes, QUICK_SIZES if args.quick else SIZES)
    sizes_of = {
        "sqlite": sizes,
        "postgresql": parse(
            args.postgresql_sizes, sizes if args.quick or args.sizes else POSTGRESQL_SIZES
        ),
    }
    rounds = 1 if args.quick and args.rounds == 3 else args.rounds
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    wanted = [w.strip() for w in (args.costs or "").split(",") if w.strip()]
    costs = [c for c in COSTS if not wanted or any(w in c.name for w in wanted)]
    stop_on_sigterm()
    workdir = Path(tempfile.mkdtemp(prefix="hcat-bench-scale-"))
    print(f"# how cost grows{' (--quick)' if args.quick else ''}: {rounds} rounds")
    print(f"# {machine_line()}")
    # --quick runs without a broker (/readyz then answers 503 at once: a closed port)
    stomp_port, openwire_port = free_ports(2)
    broker = (
        None
        if args.quick
        else Broker(workdir, stomp_port, openwire_port, java_opts=args.broker_java_opts)
    )
    broker_url = f"stomp://{HOST}:{free_port()}" if broker is None else broker.url
    pg_port = free_port()
    own_pg = False
    pg_databases: tuple[URL, tuple[str, ...]] | None = None
    results: dict[str, list[Curve]] = {}
    try:
        if broker is not None:
            broker.start()
        for backend in backends:
            if backend == "sqlite":
                urls = (f"sqlite:///{workdir}/base.db", f"sqlite:///{workdir}/grown.db")
            elif backend == "postgresql":
                if args.postgresql_admin_url is None:
                    postgres(workdir, pg_port, "start")
                    own_pg = True
                server = make_url(
                    args.postgresql_admin_url
                    or f"postgresql+psycopg://postgres@{HOST}:{pg_port}/postgres"
                )
                names = tuple(f"scale_{role}_{uuid.uuid4().hex[:8]}" for role in ("base", "grown"))
                pg_databases = (server, names)
                with _admin(server) as conn:
                    for name in names:
                        conn.execute(text(f"CREATE DATABASE {name}"))
                urls = tuple(  # type: ignore[assignment]
                    server.set(database=name).render_as_string(hide_password=False)
                    for name in names
                )
            else:
                raise SystemExit(f"unknown backend {backend!r}")
            at = sizes_of[backend]
            print(f"# {backend}: {urls[1]} grown, {urls[0]} kept at {at[0]:,}; sizes {at}")
            results[backend] = run_backend(
                backend, urls, workdir, broker_url, at, rounds, args.quick, costs
            )
            summary(backend, results[backend])
            for path in workdir.glob("*.db*"):  # the SQLite catalogs: gigabytes at 10^7
                path.unlink()
    finally:
        if broker is not None:
            broker.stop()
        if own_pg:
            postgres(workdir, pg_port, "destroy")
        elif pg_databases is not None:
            with _admin(pg_databases[0]) as conn:
                for name in pg_databases[1]:
                    conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        drop_workdir(workdir, keep=args.keep)
    if results:
        where = args.chart or (
            (args.results if not args.no_results else Path(tempfile.gettempdir())) / "scale.png"
        )
        chart(where, results)
    footer()


if __name__ == "__main__":
    run_main(main)
