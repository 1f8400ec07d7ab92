"""``hcat-notify serve`` as a real process on a free loopback port, for the API tests."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx

from hcat_notify.config import Settings
from tests.fixtures.ports import free_port
from tests.integration.delivery import CLI, cli_env

READER = ("hcat-reader", "hcat-reader-dev")
WRITER = ("hcat-publisher", "hcat-publisher-dev")
START_TIMEOUT = 60.0


class ApiServer:
    """One ``hcat-notify serve`` process; ``url`` once :meth:`start` returned."""

    def __init__(
        self,
        settings: Settings,
        *args: str,
        log: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._args = args
        self._env = env or {}
        self._log_path = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ApiServer:
        env = {**cli_env(self.settings), **self._env}
        out = open(self._log_path, "wb") if self._log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [CLI, "serve", "--port", str(self.port), *self._args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"hcat-notify serve exited with {self.proc.returncode}: {self.log()}"
                )
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"hcat-notify serve did not answer within {START_TIMEOUT}s: {self.log()}"
        )

    def log(self) -> str:
        return self._log_path.read_text(errors="replace") if self._log_path else ""

    def kill(self) -> None:
        """SIGKILL: no shutdown, connections in flight just break."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int | None:
        """SIGTERM, then wait; its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
