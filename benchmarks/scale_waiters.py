"""How long polls grow: N concurrent ``GET …/done?wait=`` on one ``hcat-notify serve``.

At each N (default 100, 1,000, 10,000; ``--quick`` 100 and 1,000) and round, a fresh
``hcat-notify serve`` (one worker) on the catalog; N clients (plain ``epoll`` loops, in
one client process per 5,000, the open-files limit raised: ``_waiter_clients.py``) each
send ``GET /v1/tables/scale.waits/done?ds=D&region=rNNN&wait=120`` (100 regions: 100
keys, so 100 shared catalog reads per wake-up) and wait; when the server's long-poll
gauge says all N wait, the benchmark records one MARK_SET_DONE of ``ds=D`` (it covers
every region). Measured:

* fan-out: p99 over the N waiters of (answer in the waiter's socket - the done's commit
  returned). "In the socket" is the kernel's receive timestamp of the bytes that
  completed the answer (``SO_TIMESTAMPNS``): the answer has reached the waiter, what
  the client process then does is its own. Printed beside it, the old way's figure:
  when the client process read it (``time.monotonic`` as ``epoll`` woke it), which adds
  the clients' own lag. With the timeline: first answer in a socket (the server
  noticing the commit, its covering read, the encoding), p99, last;
* the same, the clients paused (SIGSTOP) from before the done until the server says
  all N are answered (its gauge at 0; the writes end in the loop's turn that takes the
  waiters out): the server alone. The N clients share this machine's two cores with
  the server; awake, every answer written on loopback wakes one of them, and they
  compete for the cores while the server writes, which a server answering schedulers
  on other machines does not pay. A second done (``ds=Dp``) and N new polls per round;
* every waiter must be answered once, 200, with the done's event id (checked, printed);
* memory per waiter: (the server's RSS with N waiting - its RSS idle after a warm-up)
  / N at each size, and the verdict on what one more waiter costs: the least-squares
  slope of that RSS growth over N across the sizes. The average at a size carries the
  server's fixed costs (a first connection's buffers, pools, the arenas the first
  requests touch) spread over N; at 100 waiters they made 22.6 KiB of 12 marginal. The
  worst size's average, the old verdict's figure, is printed beside it;
* ``/healthz`` p99 from one client while the N wait (over two shared re-checks),
  against the same on the idle server just before.

The reference, same round, same N clients, same measure: the floor
(``_waiter_floor.py``), a bare asyncio server that holds the same N waiting connections
and, when told, writes to each the very bytes the real server answered with: p99 from
telling it to each answer in its socket (and read, and with the clients paused). It has
no HTTP parsing, framework, catalog or change signal in the way; what is left is the
writes on the same cores.

Until 2026-11-28 the clients were asyncio protocols (uvloop) and the fan-out was when
each had read its answer; the kernel timestamps and the paused rounds came then (the
``epoll`` client's read figure is printed as the old way's).
"""

from __future__ import annotations

import base64
import json
import math
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
from _scale_dbs import catalog_urls, raise_open_files, rss_bytes
from _scale_main import backends_of, growth_parser, growth_run, rounds_of, sizes_of
from _scale_report import Series, at_most, at_most_beside, flat, report
from _scale_serve import serve
from _support import (
    HOST,
    Row,
    free_port,
    load_text,
    log,
    make_settings,
    percentile,
    run_main,
)
from scale import READER

from hcat_notify.store import Catalog

TABLE = "scale.waits"
PER_CLIENT = 5_000
SIZES = (100, 1_000, 10_000)
QUICK_SIZES = (100, 1_000)
CLIENT = Path(__file__).with_name("_waiter_clients.py")
FLOOR = Path(__file__).with_name("_waiter_floor.py")
XLABEL = "concurrent long polls on one serve instance"
PAUSED = "p"  # the partition value of the polls whose clients are paused while answered


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


def _answers(
    clients: list[subprocess.Popen[str]], n: int, event_id: int
) -> list[tuple[float, float]]:
    """Each client's answers, checked (all N, once, 200, the done's event id): when
    each was read (monotonic) and when it arrived in its socket (realtime; NaN from a
    client that does not say)."""
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
    return [(r[0], r[4] if len(r) > 4 and r[4] is not None else math.nan) for r in results]


def _timeline(
    arrived: list[tuple[float, float]], since: float, since_wall: float
) -> dict[str, float]:
    """In ms from ``since`` (monotonic; ``since_wall`` the same instant in realtime):
    the answers' p99 in their sockets (the verdict's), the first and the last in
    their sockets, the p99 as the clients read them."""
    read = [at - since for at, _ in arrived]
    in_socket = [wall - since_wall for _, wall in arrived]
    return {
        "p99": percentile(in_socket, 99) * 1000,
        "first": min(in_socket) * 1000,
        "last": max(in_socket) * 1000,
        "read p99": percentile(read, 99) * 1000,
        "read max": max(read) * 1000,
    }


def _pause(clients: list[subprocess.Popen[str]], stop: bool) -> None:
    """Stop (SIGSTOP) or continue (SIGCONT) the client processes still running."""
    for c in clients:
        if c.poll() is None:
            c.send_signal(signal.SIGSTOP if stop else signal.SIGCONT)


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
) -> tuple[dict[str, float], tuple[int, int]]:
    """Ours: the figures of one round, and its two dones' event ids (the second's
    polls ask for ``ds`` + :data:`PAUSED`; their clients are paused while the server
    answers them)."""
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
        committed, committed_wall = time.monotonic(), time.time()
        arrived = _answers(clients, n, event_id)
        # again, the clients paused while the server answers
        clients = _start_clients(api, n, ds + PAUSED)
        _all_waiting(http, api, clients, n)
        _pause(clients, True)
        paused_id = catalog.mark_set_done(TABLE, {"ds": ds + PAUSED})
        paused_at, paused_wall = time.monotonic(), time.time()
        # Asked only once it should be over (a request to the server meanwhile would
        # be served between its read and its writes); answered in the loop's turn
        # that took them out of the gauge.
        time.sleep(0.5 + n / 10_000)
        while _waiting(http, api):
            time.sleep(0.1)
        _pause(clients, False)
        paused = _answers(clients, n, paused_id)
    finally:
        _kill(clients)
        http.close()
    print(
        f"# {backend} N = {n:,}: every waiter answered once, 200, with event {event_id}", flush=True
    )
    timeline = _timeline(arrived, committed, committed_wall)
    figures = {f"fan-out {k}": v for k, v in timeline.items()}
    paused_p99 = _timeline(paused, paused_at, paused_wall)["p99"]
    figures["fan-out paused p99"] = paused_p99
    figures |= {
        "KiB per waiter": (busy - idle) / n / 1024,
        "healthz busy": health_busy * 1000,
        "healthz idle": health_idle * 1000,
    }
    return figures, (event_id, paused_id)


def floor_round(
    n: int, ds: str, answer: bytes, event_id: int, *, paused: bool = False
) -> dict[str, float]:
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
            if paused:
                _pause(clients, True)
            told, told_wall = time.monotonic(), time.time()
            sock.sendall(
                b"POST /answer HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer)
            )
            if paused:
                sock.recv(1024)  # its 204: every answer written
                _pause(clients, False)
            arrived = _answers(clients, n, event_id)
    finally:
        _kill(clients)
        http.close()
        floor.kill()
        floor.wait()
    return _timeline(arrived, told, told_wall)


def marginal_kib(sizes: list[int], per_waiter: list[float]) -> float:
    """What one more waiter costs: the least-squares slope of the RSS growth
    (``per_waiter[i] * sizes[i]``) over N."""
    growth = [v * n for v, n in zip(per_waiter, sizes, strict=True)]
    mean_n, mean_g = statistics.fmean(sizes), statistics.fmean(growth)
    den = sum((n - mean_n) ** 2 for n in sizes)
    return sum((n - mean_n) * (g - mean_g) for n, g in zip(sizes, growth, strict=True)) / den


def _marginal(bound: float) -> Callable[[Series], Row]:
    """The verdict on memory per waiter: the fitted marginal cost (one size: its
    average), with each size's average and the worst of them (the old verdict's
    figure) in the row's text."""

    def verdict(series: Series) -> Row:
        sizes, values = series.sizes, series.values
        slope = marginal_kib(sizes, values) if len(sizes) > 1 else values[0]
        averages = ", ".join(f"{v:.1f}" for v in values)
        return Row(
            f"{series.name} at {', '.join(f'{n:,}' for n in sizes)}: {averages} KiB (the "
            f"worst, the old verdict's figure: {max(values):.1f}); one more waiter (the "
            f"slope of RSS growth over N): {slope:.1f} KiB",
            slope,
            None,
            unit="KiB",
            target=("<=", bound),
            digits=3,
        )

    return verdict


def _steps(med: dict[str, float], who: str) -> str:
    """One path's timeline, medians of the rounds."""
    return (
        f"first in a socket {med[f'{who} first']:.1f}, p99 {med[f'{who} p99']:.1f}, last "
        f"{med[f'{who} last']:.1f}; read p99 {med[f'{who} read p99']:.1f}, last "
        f"{med[f'{who} read max']:.1f} ms"
    )


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
        "done -> answers in the waiters' sockets, p99 (ref: the floor)",
        "ms",
        XLABEL,
        at_most_beside(100),
    )
    read = Series(
        "done -> answers read by the clients, p99 (the old way; ref: the floor)",
        "ms",
        XLABEL,
        at_most_beside(100),
    )
    alone = Series(
        "done -> answers in the waiters' sockets, the clients paused, p99 (ref: the floor)",
        "ms",
        XLABEL,
        at_most_beside(100),
    )
    worst = Series("done -> answers in the waiters' sockets, max", "ms", XLABEL, at_most(1000))
    memory = Series(
        "server memory per waiter: (RSS waiting - RSS idle) / N", "KiB", XLABEL, _marginal(20)
    )
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
                    got, (event_id, paused_id) = one_round(
                        backend, server, catalog, n, ds, 0.5 if quick else 4.5
                    )
                    answer = _raw_answer(server[1], ds)
                    paused_answer = _raw_answer(server[1], ds + PAUSED)
                finally:
                    if not quick or n == sizes[-1]:
                        _stop(server[0])
                floor = floor_round(n, ds, answer, event_id)
                got |= {f"floor {k}": v for k, v in floor.items()}
                floor = floor_round(n, ds + PAUSED, paused_answer, paused_id, paused=True)
                got["floor paused p99"] = floor["p99"]
                print(f"# {backend} N = {n:,}: the floor answered every waiter once", flush=True)
                for k, v in got.items():
                    figures.setdefault(k, []).append(v)
            med = {k: statistics.median(v) for k, v in figures.items()}
            fan_out.add(n, med["fan-out p99"], med["floor p99"])
            read.add(n, med["fan-out read p99"], med["floor read p99"])
            alone.add(n, med["fan-out paused p99"], med["floor paused p99"])
            worst.add(n, med["fan-out last"])
            memory.add(n, med["KiB per waiter"])
            health.add(n, med["healthz busy"], med["healthz idle"])
            log(
                f"{backend} N = {n:,}: in the sockets p99 {med['fan-out p99']:.1f} ms (best "
                f"{min(figures['fan-out p99']):.1f}; floor {med['floor p99']:.1f}, best "
                f"{min(figures['floor p99']):.1f}); {_steps(med, 'fan-out')}; the floor: "
                f"{_steps(med, 'floor')}; the clients paused: p99 {med['fan-out paused p99']:.1f}"
                f" ms, the floor {med['floor paused p99']:.1f}; {med['KiB per waiter']:.1f} KiB"
                " per waiter,"
                f" /healthz p99 {med['healthz busy']:.1f} ms vs {med['healthz idle']:.1f} idle;"
                f" {load_text()}"
            )
    return [fan_out, read, alone, worst, memory, health]


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
