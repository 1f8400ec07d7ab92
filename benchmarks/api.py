"""HTTP API: "is this spec done?" under load, beside the same app's trivial endpoint.

A real ``hcat-notify serve`` process (one worker) on a SQLite catalog in a temporary
directory, with 1,000 retained mark-set-dones. Load: 32 concurrent clients, each a
keep-alive HTTP/1.1 connection sending its next request as soon as the answer came
(closed loop), for 30 s per run (5 s with ``--quick``):

* ours: ``GET /v1/tables/bench.t/done?datestamp=D&region=R`` (HTTP Basic, covered: 200);
* reference (the framework's floor): ``GET /healthz`` of the same app, same clients.

Runs alternate (floor, ours, floor, ours, ...) for at least 3 rounds; each figure is
reported as best and median over the rounds. Targets: p99 <= 10 ms and requests/s
>= 0.5 of the floor's. The load generator (asyncio, raw sockets) runs on the same two
cores as the server: the load average is printed at start and end.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from _support import (
    HOST,
    Row,
    drop_workdir,
    footer,
    free_port,
    load_text,
    log,
    machine_line,
    parser,
    percentile,
    print_table,
    run_main,
)

from hcat_notify.config import load_settings
from hcat_notify.store import Catalog

CLIENTS = 32
SECONDS = 30.0
QUICK_SECONDS = 5.0
ROUNDS = 3
TABLE = "bench.t"
DONES = 1_000
READER = ("hcat-reader", "hcat-reader-dev")
TARGET_P99_MS = 10.0
TARGET_RATIO = 0.5


@dataclass
class Run:
    latencies: list[float]
    seconds: float
    errors: int

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds

    def ms(self, p: float) -> float:
        return percentile(self.latencies, p) * 1000


async def _client(request: bytes, stop: float, latencies: list[float], errors: list[int]) -> None:
    reader, writer = await asyncio.open_connection(HOST, _PORT)
    try:
        while time.perf_counter() < stop:
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if status != 200:
                errors[0] += 1
    finally:
        writer.close()


async def _load(path: str, seconds: float) -> Run:
    token = base64.b64encode(":".join(READER).encode()).decode()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {HOST}:{_PORT}\r\nAuthorization: Basic {token}\r\n\r\n"
    ).encode()
    latencies: list[float] = []
    errors = [0]
    started = time.perf_counter()
    stop = started + seconds
    await asyncio.gather(*(_client(request, stop, latencies, errors) for _ in range(CLIENTS)))
    return Run(latencies, time.perf_counter() - started, errors[0])


_PORT = 0


def _serve(workdir: Path, db_url: str | None) -> tuple[subprocess.Popen[bytes], str]:
    global _PORT
    _PORT = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env["HCAT_NOTIFY_HOME"] = str(workdir)
    env["HCAT_NOTIFY_WAREHOUSE_ROOTS"] = str(workdir)
    if db_url:
        env["HCAT_NOTIFY_DB_URL"] = db_url
    cli = str(Path(sys.executable).with_name("hcat-notify"))
    log_file = (workdir / "serve.log").open("wb")
    proc = subprocess.Popen(
        [cli, "serve", "--port", str(_PORT)], env=env, stdout=log_file, stderr=subprocess.STDOUT
    )
    url = f"http://{HOST}:{_PORT}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"hcat-notify serve did not start: {(workdir / 'serve.log').read_text()}")


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    seconds = QUICK_SECONDS if args.quick else SECONDS
    workdir = Path(tempfile.mkdtemp(prefix="hcat-bench-api-"))
    settings = load_settings(home=str(workdir), db_url=args.db_url, warehouse_roots=[str(workdir)])
    print(f"# HTTP API: GET .../done vs GET /healthz{' (--quick)' if args.quick else ''}")
    print(f"# {machine_line()}")
    print(f"# catalog {settings.database_url}; {CLIENTS} clients, {seconds:g} s per run")
    with Catalog.open(settings) as catalog:
        catalog.create_table(
            TABLE, location=str(workdir / "t"), partition_keys=["datestamp", "region"]
        )
        for day in range(DONES):
            catalog.mark_set_done(TABLE, {"datestamp": f"2011{day:04d}"})
    proc, url = _serve(workdir, args.db_url)
    done_path = f"/v1/tables/{TABLE}/done?datestamp=2011{DONES // 2:04d}&region=us"
    check = httpx.get(url + done_path, auth=READER, timeout=10)
    assert check.status_code == 200, check.text
    runs: dict[str, list[Run]] = {"floor": [], "done": []}
    try:
        asyncio.run(_load(done_path, 1.0))  # warm up: first-auth hash, caches, pool
        for round_ in range(ROUNDS):
            for name, path in (("floor", "/healthz"), ("done", done_path)):
                run = asyncio.run(_load(path, seconds))
                runs[name].append(run)
                log(
                    f"round {round_ + 1} {name}: {run.rps:,.0f} req/s, p50 {run.ms(50):.2f} ms, "
                    f"p99 {run.ms(99):.2f} ms, {run.errors} errors; {load_text()}"
                )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        drop_workdir(workdir, keep=args.keep)

    def best(name: str, value: Callable[[Run], float]) -> float:
        values = [value(run) for run in runs[name]]
        return max(values) if value is _rps else min(values)

    def median(name: str, value: Callable[[Run], float]) -> float:
        return float(statistics.median(value(run) for run in runs[name]))

    rows = []
    for label, pick in (("best", best), ("median", median)):
        floor_rps, done_rps = pick("floor", _rps), pick("done", _rps)
        rows += [
            Row(
                f"GET done requests/s, {label}",
                done_rps,
                floor_rps,
                "req/s",
                target=(">=", TARGET_RATIO),
                check="ratio",
                digits=0,
            ),
            Row(f"GET done p50, {label}", pick("done", _p50), pick("floor", _p50), "ms", digits=2),
            Row(
                f"GET done p99, {label}",
                pick("done", _p99),
                pick("floor", _p99),
                "ms",
                target=("<", TARGET_P99_MS + 1e-9),
                digits=2,
            ),
        ]
    errors = sum(run.errors for values in runs.values() for run in values)
    notes = [
        f"reference: GET /healthz of the same server; {ROUNDS} rounds alternating, "
        f"{CLIENTS} closed-loop keep-alive clients, {seconds:g} s each; {errors} non-200 answers",
        "per round (floor | done): "
        + "; ".join(
            f"{f.rps:,.0f} | {d.rps:,.0f} req/s, p99 {f.ms(99):.1f} | {d.ms(99):.1f} ms"
            for f, d in zip(runs["floor"], runs["done"], strict=True)
        ),
    ]
    print_table("GET /v1/tables/{table}/done under load (ratio: ours / floor)", rows, notes)
    footer()


def _rps(run: Run) -> float:
    return run.rps


def _p50(run: Run) -> float:
    return run.ms(50)


def _p99(run: Run) -> float:
    return run.ms(99)


if __name__ == "__main__":
    run_main(main)
