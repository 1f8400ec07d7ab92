"""How long polls grow: N concurrent ``GET …/done?wait=`` on one ``hcat-notify serve``.

At each N (default 100, 1,000, 10,000; ``--quick`` 100 and 1,000) and round, a fresh
``hcat-notify serve`` (one worker) on the catalog; N clients (raw HTTP/1.1 on asyncio
connections, in one client process per 5,000, the open-files limit raised) each send
``GET /v1/tables/scale.waits/done?ds=D&region=rNNN&wait=120`` (100 regions: 100 keys,
so 100 shared catalog reads per wake-up) and wait; when the server's long-poll gauge
says all N wait, the benchmark records one MARK_SET_DONE of ``ds=D`` (it covers every
region) and each client notes when its whole answer arrived. Measured:

* fan-out: p99 over the N waiters of (answer arrived - the done's commit returned);
  every waiter must be answered once, 200, with the done's event id (checked, printed);
* memory per waiter: (the server's RSS with N waiting - its RSS idle after a warm-up) / N;
* ``/healthz`` p99 from one client while the N wait (over two shared re-checks),
  against the same on the idle server just before.

The reference, same round, same N clients: the floor (``_waiter_floor.py``), a bare
asyncio server that holds the same N waiting connections and, when told, writes to
each the very bytes the real server answered with: p99 from telling it to each whole
answer arriving. It has no HTTP parsing, framework, catalog or change signal in the
way; what is left is the writes and the clients' own reads on the same cores.
"""

from __future__ import annotations

import base64
import json
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
from _scale_dbs import catalog_urls, raise_open_files, rss_bytes
from _scale_main import backends_of, growth_parser, growth_run, rounds_of, sizes_of
from _scale_report import Series, at_most, at_most_beside, flat, report
from _support import (
    HOST,
    free_port,
    load_text,
    log,
    make_settings,
    percentile,
    run_main,
)
from scale import READER, serve

from hcat_notify.store import Catalog

TABLE = "scale.waits"
PER_CLIENT = 5_000
SIZES = (100, 1_000, 10_000)
QUICK_SIZES = (100, 1_000)
CLIENT = Path(__file__).with_name("_waiter_clients.py")
FLOOR = Path(__file__).with_name("_waiter_floor.py")
XLABEL = "concurrent long polls on one serve instance"


# --------------------------------------------------------------------------- a round


def _healthz_p99(http: httpx.Client, api: str, seconds: float) -> float:
    found = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        if http.get(f"{api}/healthz").status_code != 200:
            raise RuntimeError("/healthz did not answer 200")
        found.append(time.perf_counter() - started)
    return percentile(found, 99)


def _waiting(http: httpx.Client, api: str) -> int:
    for line in http.get(f"{api}/metrics").text.splitlines():
        if line.startswith("hcat_notify_api_long_polls_waiting "):
            return int(float(line.split()[1]))
    return 0


def _start_clients(api: str, n: int, ds: str) -> list[subprocess.Popen[str]]:
    """N long polls on ``api`` from client processes of up to 5,000 each, every one
    sent once this returns."""
    clients = [
        subprocess.Popen(
            [
                *(sys.executable, str(CLIENT), api, TABLE, ds),
                *(str(first), str(min(PER_CLIENT, n - first)), "120"),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for first in range(0, n, PER_CLIENT)
    ]
    for c in clients:
        assert c.stdout is not None
        if c.stdout.readline().strip() != "CONNECTED":
            raise RuntimeError("a client process failed to connect its polls")
    return clients


def _all_waiting(
    http: httpx.Client, api: str, clients: list[subprocess.Popen[str]], n: int
) -> None:
    deadline = time.monotonic() + 120
    while (waiting := _waiting(http, api)) < n:
        ended = [c for c in clients if c.poll() is not None]
        if time.monotonic() > deadline or ended:
            answers = [
                r for c in ended for r in json.loads(c.communicate()[0].strip().splitlines()[-1])
            ]
            raise RuntimeError(
                f"only {waiting} of {n} long polls wait on the server; answered before "
                f"the done: {Counter(str(r[1]) for r in answers).most_common(3)}, e.g. "
                f"{answers[:1]}"
            )
        time.sleep(0.1)


def _answers(clients: list[subprocess.Popen[str]], n: int, event_id: int) -> list[float]:
    """Each client's answers, checked (all N, once, 200, the done's event id): their
    arrival times."""
    results = []
    for c in clients:
        out, _ = c.communicate(timeout=300)
        results += json.loads(out.strip().splitlines()[-1])
    wrong = [r for r in results if r[1] != 200 or r[2] != event_id or r[3] != 0]
    if len(results) != n or wrong:
        raise RuntimeError(
            f"{len(results)} of {n} polls answered, {len(wrong)} wrong: {wrong[:3]} "
            f"(the done is event {event_id})"
        )
    return [r[0] for r in results]


def _kill(clients: list[subprocess.Popen[str]]) -> None:
    for c in clients:
        if c.poll() is None:
            c.kill()


def _raw_answer(api: str, ds: str) -> bytes:
    """The bytes of the server's whole answer to one of the polls (status line, headers,
    body), as it writes them: what the floor sends."""
    host, port = api.removeprefix("http://").split(":")
    token = base64.b64encode(":".join(READER).encode()).decode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"GET /v1/tables/{TABLE}/done?ds={ds}&region=r000 HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Basic {token}\r\n\r\n".encode()
        )
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def one_round(
    backend: str,
    server: tuple[subprocess.Popen[bytes], str],
    catalog: Catalog,
    n: int,
    ds: str,
    health_s: float,
) -> tuple[dict[str, float], int]:
    """Ours: the figures of one round, and the done's event id."""
    proc, api = server
    clients: list[subprocess.Popen[str]] = []
    http = httpx.Client(auth=READER, timeout=60)
    try:
        for _ in range(20):  # warm: imports, the first catalog reads, the watcher thread
            http.get(f"{api}/v1/tables/{TABLE}/done", params={"ds": "0", "region": "r000"})
        http.get(f"{api}/v1/tables/{TABLE}/done", params={"ds": "0", "wait": 0.2})
        health_idle = _healthz_p99(http, api, health_s)
        idle = rss_bytes(proc.pid)
        clients = _start_clients(api, n, ds)
        _all_waiting(http, api, clients, n)
        busy = rss_bytes(proc.pid)
        health_busy = _healthz_p99(http, api, health_s)
        event_id = catalog.mark_set_done(TABLE, {"ds": ds})
        committed = time.monotonic()
        arrived = _answers(clients, n, event_id)
    finally:
        _kill(clients)
        http.close()
    print(
        f"# {backend} N = {n:,}: every waiter answered once, 200, with event {event_id}", flush=True
    )
    latencies = [at - committed for at in arrived]
    figures = {
        "fan-out p99": percentile(latencies, 99) * 1000,
        "fan-out max": max(latencies) * 1000,
        "KiB per waiter": (busy - idle) / n / 1024,
        "healthz busy": health_busy * 1000,
        "healthz idle": health_idle * 1000,
    }
    return figures, event_id


def floor_round(n: int, ds: str, answer: bytes, event_id: int) -> float:
    """The floor (``_waiter_floor.py``): the same N clients wait on a bare asyncio
    server, which is then told to write ``answer`` to each; p99 in ms from telling it
    to each whole answer arriving."""
    floor = subprocess.Popen([sys.executable, str(FLOOR)], stdout=subprocess.PIPE, text=True)
    clients: list[subprocess.Popen[str]] = []
    http = httpx.Client(timeout=60)
    try:
        assert floor.stdout is not None
        port = int(floor.stdout.readline().split()[1])
        api = f"http://{HOST}:{port}"
        clients = _start_clients(api, n, ds)
        _all_waiting(http, api, clients, n)
        with socket.create_connection((HOST, port), timeout=30) as sock:
            told = time.monotonic()
            sock.sendall(
                b"POST /answer HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer)
            )
            arrived = _answers(clients, n, event_id)
    finally:
        _kill(clients)
        http.close()
        floor.kill()
        floor.wait()
    return percentile([at - told for at in arrived], 99) * 1000


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def run_backend(
    backend: str, url: str, workdir: Path, sizes: list[int], rounds: int, quick: bool
) -> list[Series]:
    settings = make_settings(workdir / backend, f"stomp://{HOST}:{free_port()}", url)
    fan_out = Series(
        "done -> all waiters answered, p99 (ref: the floor)", "ms", XLABEL, at_most_beside(100)
    )
    worst = Series("done -> all waiters answered, max", "ms", XLABEL, at_most(1000))
    memory = Series("server memory per waiter", "KiB", XLABEL, at_most(20))
    health = Series("/healthz p99 while they wait (ref: idle)", "ms", XLABEL, flat)
    with Catalog.open(settings) as catalog:
        catalog.create_table(TABLE, location="/data/scale/waits", partition_keys=["ds", "region"])
        day = 0
        server = None
        for n in sizes:
            figures: dict[str, list[float]] = {}
            for _ in range(rounds):
                day += 1
                # a fresh server per round (--quick: one for the run), so that memory
                # an earlier round left behind does not count
                if server is None or not quick:
                    server = serve(workdir, settings, f"waiters-{day}")
                ds = f"{day:08d}"
                try:
                    got, event_id = one_round(
                        backend, server, catalog, n, ds, 0.5 if quick else 4.5
                    )
                    answer = _raw_answer(server[1], ds)
                finally:
                    if not quick or n == sizes[-1]:
                        _stop(server[0])
                got["floor p99"] = floor_round(n, ds, answer, event_id)
                print(f"# {backend} N = {n:,}: the floor answered every waiter once", flush=True)
                for k, v in got.items():
                    figures.setdefault(k, []).append(v)
            med = {k: statistics.median(v) for k, v in figures.items()}
            fan_out.add(n, med["fan-out p99"], med["floor p99"])
            worst.add(n, med["fan-out max"])
            memory.add(n, med["KiB per waiter"])
            health.add(n, med["healthz busy"], med["healthz idle"])
            log(
                f"{backend} N = {n:,}: fan-out p99 {med['fan-out p99']:.1f} ms (best "
                f"{min(figures['fan-out p99']):.1f}; floor {med['floor p99']:.1f}, best "
                f"{min(figures['floor p99']):.1f}), {med['KiB per waiter']:.1f} KiB/waiter,"
                f" /healthz p99 {med['healthz busy']:.1f} ms vs {med['healthz idle']:.1f} idle;"
                f" {load_text()}"
            )
    return [fan_out, worst, memory, health]


def main() -> None:
    p = growth_parser(__doc__, "comma-separated N, e.g. 100,1000,10000", rounds=True)
    args = p.parse_args()
    sizes = sizes_of(args.sizes, args.quick, SIZES, QUICK_SIZES)
    rounds = rounds_of(args)
    raise_open_files(2 * max(sizes) + 1000)
    with growth_run(args, f"how long polls grow: {rounds} rounds", "waiters") as (workdir, panels):
        for backend in backends_of(args):
            with catalog_urls(backend, workdir, ["waiters"], args.postgresql_admin_url) as urls:
                series = run_backend(backend, urls[0], workdir, sizes, rounds, args.quick)
            report(f"{backend}: how long polls grow, N = {sizes}", series, [load_text()])
            panels[f"long polls, {backend}"] = series


if __name__ == "__main__":
    run_main(main)
