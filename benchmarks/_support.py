"""Shared setup for the benchmarks: private broker, temp catalog, tables, reporting.

Every benchmark runs against its own ActiveMQ broker (``deploy/local/activemq.sh`` with a
temporary ``HCAT_NOTIFY_HOME`` and free loopback ports, stopped at the end even on error)
and its own SQLite catalog in a temporary directory (or ``--db-url``).

Every run also appends one JSON line to ``benchmarks/results/<benchmark>.jsonl`` (or
``--results DIR``; ``--no-results`` for none): each table it printed, row by row (ours,
reference, ratio, target, verdict, rounds), with the commit, the date and the load
average at its start and end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import stomp
from sqlalchemy import Engine, create_engine, delete, insert, select

from hcat_notify.config import Settings, load_settings
from hcat_notify.model.names import TableName
from hcat_notify.model.topics import DEFAULT_BUCKETS, topic_bucket
from hcat_notify.model.wire import build_mark_set_done
from hcat_notify.store import Catalog, TableInfo
from hcat_notify.store.event_ids import allocate_event_ids
from hcat_notify.store.models import (
    OutboxRow,
    RetentionRow,
    TableRow,
    TopicProgressRow,
)

REPO_DIR = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_DIR / "benchmarks" / "results"
BROKER_SCRIPT = REPO_DIR / "deploy" / "local" / "activemq.sh"
POSTGRES_SCRIPT = REPO_DIR / "deploy" / "local" / "postgres.sh"
HOST = "127.0.0.1"
PUBLISHER = ("hcat-publisher", "hcat-publisher-dev")
READER = ("hcat-reader", "hcat-reader-dev")


# --------------------------------------------------------------------------- arguments


class _Parser(argparse.ArgumentParser):
    """An argument parser that remembers the run's arguments, for its record."""

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        parsed = super().parse_args(*args, **kwargs)
        _RUN.args = parsed
        return parsed


def parser(description: str) -> argparse.ArgumentParser:
    """The common command line: ``--quick``, ``--db-url``, ``--keep`` and where the run
    is recorded (``--results``, ``--no-results``)."""
    p = _Parser(description=description)
    p.add_argument(
        "--quick", action="store_true", help="scaled-down smoke run (well under a minute)"
    )
    p.add_argument(
        "--db-url",
        default=None,
        help="catalog database (SQLAlchemy URL of an EMPTY, disposable database); "
        "default: a SQLite file in a temporary directory",
    )
    p.add_argument(
        "--keep", action="store_true", help="keep the temporary directory (for inspection)"
    )
    p.add_argument(
        "--broker-java-opts",
        default=None,
        help="JVM options of the private broker (HCAT_NOTIFY_BROKER_JAVA_OPTS); "
        "default: deploy/local/activemq.sh's",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=RESULTS_DIR,
        help="directory of the runs' records, one JSON line per run in <benchmark>.jsonl "
        "(default: benchmarks/results)",
    )
    p.add_argument(
        "--no-results", action="store_true", help="do not record this run (a trial, say)"
    )
    return p


# --------------------------------------------------------------------------- ports, broker


def free_port() -> int:
    """A TCP port on the loopback interface that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@dataclass
class Broker:
    """A private ActiveMQ broker managed by ``deploy/local/activemq.sh``."""

    home: Path
    stomp_port: int
    openwire_port: int
    started: bool = False
    java_opts: str | None = None  # HCAT_NOTIFY_BROKER_JAVA_OPTS; None: the script's

    @property
    def env(self) -> dict[str, str]:
        env = {
            key: value for key, value in os.environ.items() if not key.startswith("HCAT_NOTIFY_")
        }
        env.update(
            HCAT_NOTIFY_HOME=str(self.home),
            HCAT_NOTIFY_BROKER_PORT=str(self.stomp_port),
            HCAT_NOTIFY_OPENWIRE_PORT=str(self.openwire_port),
            HCAT_NOTIFY_BROKER_START_TIMEOUT="90",
            HCAT_NOTIFY_BROKER_STOP_TIMEOUT="20",
        )
        if self.java_opts is not None:
            env["HCAT_NOTIFY_BROKER_JAVA_OPTS"] = self.java_opts
        return env

    @property
    def url(self) -> str:
        return f"stomp://{HOST}:{self.stomp_port}"

    def _script(self, command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(BROKER_SCRIPT), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self) -> None:
        started = time.monotonic()
        result = self._script("start", timeout=150)
        self.started = True  # stop() even if start half-succeeded
        if result.returncode != 0:
            raise RuntimeError(
                f"activemq.sh start failed ({result.returncode}):\n{result.stdout}{result.stderr}"
            )
        log(f"broker up on {self.url} in {time.monotonic() - started:.1f}s")

    def stop(self) -> None:
        if not self.started:
            return
        result = self._script("stop", timeout=90)
        self.started = False
        if result.returncode != 0:
            log(f"WARNING: activemq.sh stop failed: {result.stdout}{result.stderr}")
        else:
            log(result.stdout.strip())

    def status(self) -> str:
        return self._script("status", timeout=30).stdout.strip()

    def pid(self) -> int:
        """The broker's process id (from ``activemq.sh``'s pid file)."""
        return int((self.home / "activemq" / "activemq.pid").read_text().split()[0])


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) a process has used so far, this one by default; NaN
    where ``/proc`` cannot tell (not Linux)."""
    if pid is None:
        return time.process_time()
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres(home: Path, port: int, command: str) -> str:
    """``deploy/local/postgres.sh COMMAND`` for a private cluster under ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env.update(HCAT_NOTIFY_HOME=str(home), HCAT_NOTIFY_PG_PORT=str(port))
    result = subprocess.run(
        ["bash", str(POSTGRES_SCRIPT), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"postgres.sh {command}: {result.stdout}{result.stderr}")
    return result.stdout


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class BenchEnv:
    """What a benchmark runs against."""

    workdir: Path
    broker: Broker
    settings: Settings
    sqlite_path: Path | None  # the catalog file when SQLite, else None

    def catalog(self) -> Catalog:
        return Catalog.open(self.settings)


def _terminate_on_signal(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_sigterm() -> None:
    """Turn SIGTERM into an exception, so that the finally blocks stop the brokers."""
    signal.signal(signal.SIGTERM, _terminate_on_signal)


@contextlib.contextmanager
def bench_env(
    args: argparse.Namespace, name: str, before_broker: Callable[[Path], None] | None = None
) -> Iterator[BenchEnv]:
    """A private broker and catalog for one benchmark run; both go away at the end.
    ``before_broker`` gets the broker's home (``HCAT_NOTIFY_HOME``) before it starts."""
    stop_on_sigterm()
    workdir = Path(tempfile.mkdtemp(prefix=f"hcat-bench-{name}-"))
    stomp_port, openwire_port = free_ports(2)
    broker = Broker(workdir, stomp_port, openwire_port, java_opts=args.broker_java_opts)
    try:
        if before_broker is not None:
            before_broker(workdir)
        broker.start()
        settings = make_settings(workdir, broker.url, args.db_url)
        sqlite_path = None if args.db_url else workdir / "catalog.db"
        yield BenchEnv(workdir, broker, settings, sqlite_path)
    finally:
        broker.stop()
        drop_workdir(workdir, keep=args.keep)


def drop_workdir(workdir: Path, *, keep: bool) -> None:
    """Delete a run's temporary directory, or say where it is kept (``--keep``)."""
    if keep:
        log(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def command_env(settings: Settings) -> dict[str, str]:
    """The environment of an ``hcat-notify`` process on ``settings`` (home, catalog,
    broker, the webhooks' plain-HTTP allow list), none of the caller's own HCAT_NOTIFY_*
    settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env.update(
        HCAT_NOTIFY_HOME=str(settings.home),
        HCAT_NOTIFY_DB_URL=settings.database_url,
        HCAT_NOTIFY_BROKER_URL=settings.broker_url,
        HCAT_NOTIFY_BROKER_USER=settings.broker_user,
        HCAT_NOTIFY_BROKER_PASSWORD=settings.broker_password,
    )
    if settings.webhook_allow:  # each relay checks its own allow list before it sends
        env["HCAT_NOTIFY_WEBHOOK_ALLOW"] = ",".join(settings.webhook_allow)
    return env


def make_settings(home: Path, broker_url: str, db_url: str | None) -> Settings:
    """Settings for the benchmark, independent of the caller's environment and files."""
    for key in [k for k in os.environ if k.startswith("HCAT_NOTIFY_")]:
        del os.environ[key]
    return load_settings(
        home=str(home),
        broker_url=broker_url,
        db_url=db_url,
        broker_user=PUBLISHER[0],
        broker_password=PUBLISHER[1],
        consumer_user=READER[0],
        consumer_password=READER[1],
        server_name="bench.local",
        broker_timeout=30.0,
        # The run's data lives in its temporary directory; some catalogs name made-up
        # locations under /data (never touched on disk).
        warehouse_roots=[str(home), "/data"],
    )


CHUNK = 2_000


def allocate_ids(conn: Any, count: int) -> list[int]:
    """Take ``count`` event ids as Catalog does (counter or sequence), in order."""
    return allocate_event_ids(conn, count)


def table_id(engine: Engine, name: str) -> int:
    parsed = TableName.parse(name)
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(TableRow.id).where(
                    TableRow.db_name == parsed.db, TableRow.table_name == parsed.table
                )
            ).scalar_one()
        )


def insert_chunks(conn: Any, table: Any, rows: Iterator[dict[str, Any]]) -> int:
    total = 0
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= CHUNK:
            conn.execute(insert(table), chunk)
            total += len(chunk)
            chunk = []
    if chunk:
        conn.execute(insert(table), chunk)
        total += len(chunk)
    return total


def bulk_dones(
    url: str,
    info: TableInfo,
    specs: Iterable[Mapping[str, str]],
    *,
    published: bool,
    buckets: int = DEFAULT_BUCKETS,
) -> list[int]:
    """Retained dones of one table, with their outbox events, as mark_set_done writes
    them but in one transaction (setup, not timed); ``published`` records the topic's
    progress past them. Returns the event ids."""
    engine = create_engine(url)
    tid = table_id(engine, str(info.name))
    now = datetime.now(UTC)
    bucket = topic_bucket(info.topic, buckets)
    wanted = [info.spec(spec, partial=True).sorted() for spec in specs]
    try:
        with engine.begin() as conn:
            ids = allocate_ids(conn, len(wanted))

            def retention() -> Iterator[dict[str, Any]]:
                for event_id, spec in zip(ids, wanted, strict=True):
                    yield {
                        "event_id": event_id,
                        "table_id": tid,
                        "spec": spec.to_path(),
                        "spec_json": spec.as_dict(),
                        "created_at": now,
                        "expires_at": now + info.retention,
                    }

            def outbox() -> Iterator[dict[str, Any]]:
                for event_id, spec in zip(ids, wanted, strict=True):
                    message = build_mark_set_done(
                        event_id=event_id,
                        table=info.name,
                        topic=info.topic,
                        spec=spec,
                        timestamp=int(now.timestamp()),
                    )
                    yield {
                        "event_id": event_id,
                        "topic": message.topic,
                        "bucket": bucket,
                        "event_type": message.event_type.value,
                        "table_name": str(info.name),
                        "headers": dict(message.headers),
                        "body": message.body,
                        "created_at": now,
                        "attempts": 0,
                    }

            insert_chunks(conn, RetentionRow.__table__, retention())
            insert_chunks(conn, OutboxRow.__table__, outbox())
            if published and ids:
                conn.execute(delete(TopicProgressRow).where(TopicProgressRow.topic == info.topic))
                conn.execute(
                    insert(TopicProgressRow).values(
                        topic=info.topic,
                        bucket=bucket,
                        last_event_id=ids[-1],
                        epoch=0,
                        updated_at=now.timestamp(),
                    )
                )
        analyze(engine)
        return ids
    finally:
        engine.dispose()


def analyze(engine: Any) -> None:
    """Refresh the planner's statistics after a bulk load, as autovacuum would within a
    minute: the timed reads then run the plans a database in use gets."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("ANALYZE")


def unique_table(prefix: str) -> str:
    """A fresh ``db.table`` name (so a reused --db-url database never collides)."""
    return f"bench.{prefix}_{uuid.uuid4().hex[:8]}"


def create_table(catalog: Catalog, name: str, keys: Sequence[str] = ("datestamp",)) -> None:
    catalog.create_table(name, location=f"/data/{name.replace('.', '/')}", partition_keys=keys)


# --------------------------------------------------------------------------- raw STOMP


class RawListener(stomp.ConnectionListener):  # type: ignore[misc]
    """A stomp.py listener whose waits all have deadlines; never raises."""

    def __init__(self, on_message: Any = None) -> None:
        self.connected = threading.Event()
        self.errors: list[str] = []
        self._receipts: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._on_message = on_message

    def expect(self, receipt: str) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._receipts[receipt] = event
        return event

    def on_connected(self, frame: Any) -> None:
        self.connected.set()

    def on_receipt(self, frame: Any) -> None:
        with self._lock:
            event = self._receipts.pop(frame.headers.get("receipt-id", ""), None)
        if event is not None:
            event.set()

    def on_error(self, frame: Any) -> None:
        self.errors.append(frame.headers.get("message", frame.body or "ERROR"))
        self.connected.set()
        with self._lock:
            waiting = list(self._receipts.values())
        for event in waiting:
            event.set()

    def on_message(self, frame: Any) -> None:
        if self._on_message is not None:
            try:
                self._on_message(frame)
            except Exception as exc:  # noqa: BLE001 - a raising listener kills the receiver
                self.errors.append(f"on_message: {exc!r}")


def raw_connect(
    port: int, user: tuple[str, str], listener: RawListener, timeout: float = 30.0
) -> stomp.Connection12:
    conn = stomp.Connection12([(HOST, port)], heartbeats=(10_000, 10_000))
    conn.set_listener("bench", listener)
    conn.connect(user[0], user[1], wait=False)
    if not listener.connected.wait(timeout) or listener.errors or not conn.is_connected():
        raise RuntimeError(f"raw STOMP connect failed: {listener.errors}")
    return conn


def raw_wait(event: threading.Event, what: str, listener: RawListener, timeout: float) -> None:
    if not event.wait(timeout):
        raise TimeoutError(f"no RECEIPT for {what} within {timeout}s")
    if listener.errors:
        raise RuntimeError(f"broker ERROR during {what}: {listener.errors[0]}")


def raw_close(conn: stomp.Connection12) -> None:
    with contextlib.suppress(Exception):
        if conn.is_connected():
            conn.disconnect()
    with contextlib.suppress(Exception):
        conn.transport.stop()


# --------------------------------------------------------------------------- numbers


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), nearest-rank on the sorted values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def percentiles(values: Sequence[float], ps: Sequence[float] = (50, 90, 99)) -> dict[str, float]:
    result = {f"p{p:g}": percentile(values, p) for p in ps}
    result["max"] = max(values) if values else math.nan
    return result


def fmt(value: float | int | str | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


@dataclass
class Row:
    """One line of a result table.

    ``target`` is ``(op, value)`` with op ``>=``, ``<=`` or ``<``, applied to ``check`` (the ratio
    by default, else ``ours``); None means informational only.
    """

    metric: str
    ours: float | int | str | None
    reference: float | int | str | None = None
    unit: str = ""
    target: tuple[str, float] | None = None
    check: str = "ours"  # "ours" or "ratio"
    ratio_mode: str = "ours/ref"  # or "ref/ours" (for times: reference / ours)
    digits: int = 1
    rounds: int | None = None  # how many rounds the figure was taken from, when known

    def ratio(self) -> float | None:
        if not isinstance(self.ours, int | float) or not isinstance(self.reference, int | float):
            return None
        if self.ratio_mode == "ours/ref":
            return float(self.ours) / self.reference if self.reference else None
        return float(self.reference) / self.ours if self.ours else None

    def verdict(self) -> str:
        if self.target is None:
            return ""
        op, bound = self.target
        value = self.ratio() if self.check == "ratio" else self.ours
        if not isinstance(value, int | float) or math.isnan(value):
            return "MISS"
        ok = {">=": value >= bound, "<=": value <= bound}.get(op, value < bound)
        return "PASS" if ok else "MISS"

    def target_text(self) -> str:
        if self.target is None:
            return ""
        op, bound = self.target
        what = "ratio" if self.check == "ratio" else self.unit or "value"
        return f"{what} {op} {bound:g}"


def ratio_rows(
    metric: str,
    ours: Sequence[float],
    refs: Sequence[float],
    *,
    unit: str,
    target: tuple[str, float],
    higher_is_better: bool,
    digits: int = 1,
    ratio_mode: str = "ours/ref",
) -> list[Row]:
    """Two rows judged on the ratio ours / reference (or reference / ours, ``ratio_mode``
    ``"ref/ours"``): the best round of each, and the medians (rounds alternate ours and
    the reference)."""
    best = max if higher_is_better else min
    common: dict[str, Any] = {
        "unit": unit,
        "target": target,
        "check": "ratio",
        "digits": digits,
        "ratio_mode": ratio_mode,
        "rounds": len(ours),
    }
    return [
        Row(f"{metric}, best", best(ours), best(refs), **common),
        Row("    median", statistics.median(ours), statistics.median(refs), **common),
    ]


def print_table(title: str, rows: Sequence[Row], notes: Sequence[str] = ()) -> None:
    """Print a result table: metric, ours, reference, ratio, target, verdict."""
    header = ["metric", "ours", "reference", "ratio", "unit", "target", "verdict"]
    body = []
    for row in rows:
        ratio = row.ratio()
        body.append(
            [
                row.metric,
                fmt(row.ours, row.digits),
                fmt(row.reference, row.digits),
                "-" if ratio is None else f"{ratio:.2f}",
                row.unit,
                row.target_text(),
                row.verdict(),
            ]
        )
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            parts.append(cell.ljust(widths[i]) if i in (0, 4, 5, 6) else cell.rjust(widths[i]))
        return "  ".join(parts).rstrip()

    print()
    print(f"== {title}")
    print(line(header))
    print(line(["-" * w for w in widths]))
    for cells in body:
        print(line(cells))
    for note in notes:
        print(f"   {note}")
    sys.stdout.flush()
    _RUN.tables.append(
        {"title": title, "rows": [row_record(row) for row in rows], "notes": list(notes)}
    )


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min)"


def machine_line() -> str:
    return (
        f"{platform.node()} | {os.cpu_count()} cpus | Python {platform.python_version()} | "
        f"stomp.py {stomp.__version__} | {dt.datetime.now().strftime('%Y-%m-%d %H:%M')} | "
        f"{load_text()}"
    )


def footer() -> None:
    """The machine's load at the end: other work on the box skews every figure."""
    print(f"# done {dt.datetime.now().strftime('%H:%M:%S')}, {load_text()}")
    sys.stdout.flush()


def header(title: str, args: argparse.Namespace, env: BenchEnv) -> None:
    flags = " (--quick)" if args.quick else ""
    print(f"# {title}{flags}")
    print(f"# {machine_line()}")
    print(
        f"# broker {env.broker.url} (private, {env.workdir}); catalog {env.settings.database_url}"
    )
    sys.stdout.flush()


def run_main(main: Any) -> None:
    """Run a benchmark's main; report errors but always exit 0 (benchmarks do not gate).
    The tables it printed are recorded (``record_run``), also when it failed part-way."""
    _RUN.start()
    complete = False
    try:
        main()
        complete = True
    except KeyboardInterrupt as exc:
        log(f"interrupted: {exc}")
    except Exception:  # noqa: BLE001 - report any failure, exit 0 (benchmarks do not gate)
        import traceback

        traceback.print_exc()
        print("\nBENCHMARK ERROR (see traceback above); exiting 0 anyway", flush=True)
    record_run(complete=complete)
    sys.exit(0)


# --------------------------------------------------------------------------- the record


@dataclass
class _Run:
    """What this process's run has printed so far, and when and how it started."""

    args: argparse.Namespace | None = None
    started: datetime | None = None
    load_start: tuple[float, float, float] | None = None
    tables: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> None:
        self.started = datetime.now(UTC)
        self.load_start = os.getloadavg()


_RUN = _Run()


def _number(value: float | int | str | None) -> float | int | str | None:
    """A figure as JSON holds it (NaN, which JSON lacks, as null)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def row_record(row: Row) -> dict[str, Any]:
    """One row of a table, as the run's record keeps it."""
    ratio = row.ratio()
    return {
        "metric": row.metric.strip(),
        "ours": _number(row.ours),
        "reference": _number(row.reference),
        "ratio": None if ratio is None else round(ratio, 4),
        "unit": row.unit,
        "target": row.target_text() or None,
        "verdict": row.verdict() or None,
        "rounds": row.rounds,
    }


def _git(*args: str) -> str:
    try:
        result = subprocess.run(
            ["git", *args], cwd=REPO_DIR, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def run_record(name: str, *, complete: bool) -> dict[str, Any]:
    """The JSON object one run appends to its benchmark's file."""
    args = _RUN.args
    started = _RUN.started or datetime.now(UTC)
    load_start = _RUN.load_start or os.getloadavg()
    options = (
        {
            key: (str(value) if isinstance(value, Path) else value)
            for key, value in sorted(vars(args).items())
            if key not in {"results", "no_results", "keep"}
        }
        if args is not None
        else {}
    )
    return {
        "benchmark": name,
        "date": started.isoformat(timespec="seconds"),
        "ended": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "--short", "HEAD") or None,
        # the records themselves do not make the tree dirty
        "dirty": bool(
            _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results")
        ),
        "load": {
            "start": [round(x, 2) for x in load_start],
            "end": [round(x, 2) for x in os.getloadavg()],
        },
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "quick": bool(options.get("quick", False)),
        "rounds": options.get("rounds"),
        "options": options,
        "complete": complete,
        "tables": _RUN.tables,
    }


def record_run(*, complete: bool) -> Path | None:
    """Append this run's record to ``<results>/<benchmark>.jsonl``; None when nothing was
    printed or recording is off."""
    args = _RUN.args
    if not _RUN.tables or (args is not None and getattr(args, "no_results", False)):
        return None
    directory = Path(getattr(args, "results", RESULTS_DIR) or RESULTS_DIR)
    name = Path(sys.argv[0]).stem
    path = directory / f"{name}.jsonl"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(run_record(name, complete=complete), ensure_ascii=False) + "\n")
    except OSError as exc:
        log(f"WARNING: could not record the run in {path}: {exc}")
        return None
    log(f"recorded in {path}")
    return path


# --------------------------------------------------------------------------- relay processes

CLI = str(Path(sys.executable).with_name("hcat-notify"))


class Relays:
    """Relay processes of the benchmark; their logs go to files, never to full pipes."""

    def __init__(self, env: BenchEnv, *extra: str) -> None:
        self.env = env
        self.extra = extra  # options of every relay started
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self._count = 0

    def start(self, *extra: str) -> str:
        self._count += 1
        member = f"m{self._count}"
        log_file = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop_all
        self._logs.append(log_file)
        env = command_env(self.env.settings)
        self.processes[member] = subprocess.Popen(
            [CLI, "relay", "--member-id", member, *self.extra, *extra],
            env=env,
            stdout=log_file,
            stderr=log_file,
        )
        return member

    def running(self) -> set[str]:
        return {m for m, p in self.processes.items() if p.poll() is None}

    def logs(self, pattern: str = "") -> dict[str, list[str]]:
        """Each relay's log lines so far (containing ``pattern``), by member id."""
        found: dict[str, list[str]] = {}
        for member, log_file in zip(self.processes, self._logs, strict=True):
            log_file.seek(0)
            lines = log_file.read().decode("utf-8", "replace").splitlines()
            found[member] = [line for line in lines if pattern in line]
            log_file.seek(0, os.SEEK_END)
        return found

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        for log_file in self._logs:
            log_file.close()
