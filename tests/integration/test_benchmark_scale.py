"""``benchmarks/scale.py --quick`` runs to its end on SQLite and PostgreSQL: the paged
commands answer right at every size (the benchmark checks ``table list | head -20``,
``GET /v1/tables?limit=100``, ``partitions list | head -20`` and ``table show`` against
the catalog it loaded, and every ``find_covering_done``, ``…/done`` and catch-up answer),
and it prints each backend's growth table and writes the chart. Its timings are not
judged here: speed belongs to the benchmark's own run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.broker import BrokerInfo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


class _Quick:
    """``benchmarks/SCRIPT --quick`` on both backends, started; :meth:`output` waits for
    it (it must succeed and write its chart)."""

    def __init__(self, script: str, tmp_path: Path, postgres_admin_url: str, *extra: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
        env["PYTHONPATH"] = str(ROOT)
        self.chart = tmp_path / f"{script}.png"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "benchmarks" / script),
                "--quick",
                "--no-results",
                "--chart",
                str(self.chart),
                "--postgresql-admin-url",
                postgres_admin_url,
                *extra,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def output(self) -> str:
        try:
            output, _ = self.proc.communicate(timeout=600)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        assert self.proc.returncode == 0, output[-3000:]
        assert "BENCHMARK ERROR" not in output, output[-3000:]
        assert self.chart.stat().st_size > 10_000
        return output


def test_the_scale_benchmark_runs_quick_on_both_backends(tmp_path: Path, postgres_admin_url: str):
    output = _Quick("scale.py", tmp_path, postgres_admin_url).output()
    for backend in ("sqlite", "postgresql"):
        for size in ("1,000", "4,000"):
            assert (
                f"# {backend} N = {size}: checked table list | head -20, "
                "GET /v1/tables?limit=100, partitions list | head -20, table show"
            ) in output, output[-3000:]
        assert f"== {backend}: how each cost grows" in output, output[-3000:]


def test_the_growth_rows_of_waiters_sweep_subscribers_and_relays_run_quick_on_both_backends(
    tmp_path: Path, postgres_admin_url: str, broker: BrokerInfo
):
    """The scale benchmark's other rows, their ``--quick`` runs side by side (each mostly
    waits):

    * ``scale_waiters.py``: 100, then 1,000 long polls on one real ``hcat-notify serve``,
      one done: every waiter answered once, 200, with that done's event id;
    * ``scale_sweep.py``: ``hcat-notify sweep`` of 1,000, then 4,000 expired rows while a
      writer writes: every expired row gone, every live and every written one kept; then
      4, then 8 simulated days of steady writes swept daily: the outbox's rows within
      the retention's days of writes, nothing held back (a durable subscriber of other
      tables beside);
    * ``scale_subscribers.py``: 10, then 100 durable subscribers, each 100 events behind
      on each of 10 topics: the lag read for every one is 1,000, and ``hcat-notify
      subscribers`` lists them all;
    * ``scale_webhooks.py``: 10 webhooks x 300, then 3,000 topics each: ``/metrics``
      counts each webhook's failing and parked topics and gives its position, ``webhooks
      show`` and ``GET /v1/webhooks/{name}?limit=100`` their first page and its next,
      ``status`` the parked pairs counted; ``relay --once`` on the session's broker
      delivers 20 dones to every webhook;
    * ``scale_relay.py`` on the session's broker: ``relay --once`` against 1,000, then
      4,000 topics publishes every pending event; in-process relay members joining and
      leaving (1, 2, 4, 2) settle with every bucket owned, balanced.

    (Each benchmark checks these itself and fails otherwise; the lines say it did.)"""
    runs = {
        name: _Quick(f"scale_{name}.py", tmp_path, postgres_admin_url)
        for name in ("waiters", "sweep", "subscribers")
    }
    runs["webhooks"] = _Quick(
        "scale_webhooks.py", tmp_path, postgres_admin_url, "--broker-url", broker.url
    )
    runs["relay"] = _Quick(
        "scale_relay.py", tmp_path, postgres_admin_url, "--broker-url", broker.url
    )
    out = {name: run.output() for name, run in runs.items()}
    for backend in ("sqlite", "postgresql"):
        for size in ("100", "1,000"):
            wanted = f"# {backend} N = {size}: every waiter answered once, 200, with event"
            assert wanted in out["waiters"], out["waiters"][-3000:]
        for size in ("1,000", "4,000"):
            wanted = f"# {backend} M = {size}: every expired row swept, every live one kept"
            assert wanted in out["sweep"], out["sweep"][-3000:]
        for size in ("10", "100"):
            wanted = f"# {backend} S = {size}: every subscriber 1,000 events behind"
            assert wanted in out["subscribers"], out["subscribers"][-3000:]
        for size in ("1,000", "4,000"):
            assert f"# {backend} T = {size}: every event published" in out["relay"]
        for size, parked in (("300", 0), ("3,000", 30)):
            wanted = f"# {backend} T = {size}: checked /metrics failing"
            assert wanted in out["webhooks"], out["webhooks"][-3000:]
            assert f"status's {parked} parked pairs counted" in out["webhooks"]
            wanted = f"# {backend} T = {size}: relay --once delivered every done to every webhook"
            assert wanted in out["webhooks"], out["webhooks"][-3000:]
        assert f"== {backend}: how the webhooks' overviews grow" in out["webhooks"]
        for members, each in (("1", "256-256"), ("2", "128-128"), ("4", "64-64")):
            wanted = f"# {backend} {members} member(s): settled, every bucket owned, {each} each"
            assert wanted in out["relay"], out["relay"][-3000:]
        assert f"== {backend}: how long polls grow" in out["waiters"]
        assert f"== {backend}: how sweep grows" in out["sweep"]
        for days in ("4", "8"):
            # two days of 500, and the done of each that the durable subscriber handled
            wanted = f"# {backend} outbox D = {days}: 1,002 rows of "
            assert wanted in out["sweep"], out["sweep"][-3000:]
        assert f"== {backend}: how the outbox grows" in out["sweep"]
        assert f"== {backend}: how durable subscribers grow" in out["subscribers"]
