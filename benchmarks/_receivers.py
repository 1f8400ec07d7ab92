"""Webhook receivers on loopback for the benchmarks, in a process of their own
(``tests/fixtures/webhook_receiver.py``): a healthy one answering 200 (each webhook a
path of it) and one that hangs."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["Receivers"]


class Receivers:
    """The receivers, in a process of their own (``tests/fixtures/webhook_receiver.py``):
    a thread here reads the arrivals it reports, path -> event id -> when the first
    request that carried it arrived (monotonic, the clock of every process here)."""

    def __init__(self) -> None:
        root = Path(__file__).resolve().parents[1]
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.fixtures.webhook_receiver"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        url, self.dead_url = self._process.stdout.readline().split()
        self._base = url.rsplit("/", 1)[0]
        self._lock = threading.Lock()
        self._arrived: dict[str, dict[int, float]] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def url(self, name: str) -> str:
        """The URL of endpoint ``name`` (a path of the healthy receiver)."""
        return f"{self._base}/hook/{name}"

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            at, path, ids = line.split()
            when = float(at)
            with self._lock:
                seen = self._arrived.setdefault(path, {})
                for event_id in ids.split(","):
                    seen.setdefault(int(event_id), when)

    def count(self, name: str) -> int:
        """How many events have reached endpoint ``name``."""
        with self._lock:
            return len(self._arrived.get(f"/hook/{name}", ()))

    def arrived(self, name: str) -> dict[int, float]:
        """Event id -> when it first reached endpoint ``name``."""
        with self._lock:
            return dict(self._arrived.get(f"/hook/{name}", {}))

    def clear(self) -> None:
        with self._lock:
            self._arrived.clear()

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(30)
        self._reader.join(10)
