"""What the scale benchmarks run their costs through: ``hcat-notify`` in this process (as
``| head -N`` reads it), and a real ``hcat-notify serve`` on a catalog."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from _support import HOST, free_port

from hcat_notify.cli import main as cli_main
from hcat_notify.config import Settings

__all__ = ["cli", "serve"]


class _Head(io.StringIO):
    """A stdout that breaks after ``lines`` lines, as ``| head -N`` does."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.lines = lines
        self.broke = False

    def write(self, s: str) -> int:
        if self.getvalue().count("\n") >= self.lines:
            self.broke = True
            raise BrokenPipeError
        return super().write(s)


def cli(url: str, *args: str, head: int | None = None) -> str:
    """``hcat-notify --db-url URL ARGS`` in this process (``| head -N`` with ``head``)."""
    out = _Head(head) if head is not None else io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["--db-url", url, *args])
    # A real ``| head`` ends the command with 141; this stand-in is no pipe the command
    # can ask, so it says "broken pipe" and exits 2 (hcat_notify.cli's root group)
    broke = isinstance(out, _Head) and out.broke and code == 2
    if code not in (0, 141) and not broke:
        raise RuntimeError(f"hcat-notify {' '.join(args)} exited {code}: {out.getvalue()[-500:]}")
    return out.getvalue()


def serve(workdir: Path, settings: Settings, name: str) -> tuple[subprocess.Popen[bytes], str]:
    """A real ``hcat-notify serve`` on the catalog (one worker)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env.update(
        HCAT_NOTIFY_HOME=str(workdir),
        HCAT_NOTIFY_DB_URL=settings.database_url,
        HCAT_NOTIFY_BROKER_URL=settings.broker_url,
        HCAT_NOTIFY_WAREHOUSE_ROOTS=f"{workdir},/data",
    )
    out = (workdir / f"serve-{name}.log").open("wb")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("hcat-notify")), "serve", "--port", str(port)],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"serve did not start: {(workdir / f'serve-{name}.log').read_text()}")
