"""The README's first Quickstart command, `bash deploy/local/demo.sh`, run to its end.

On a warm machine (the packages and the virtualenv are there: the test command installed
them) with a home and ports of its own, so that it shares nothing with the other tests.
The purge-and-fresh-clone check of the install steps is done by hand (tests/README.md).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.ports import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "deploy" / "local" / "demo.sh"
ACTIVEMQ = ROOT / "deploy" / "local" / "activemq.sh"


def _demo_env(home: Path) -> dict[str, str]:
    stomp_port, openwire_port = free_port(), free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("HCAT_NOTIFY_")}
    env.update(
        HCAT_NOTIFY_HOME=str(home),
        HCAT_NOTIFY_BROKER_PORT=str(stomp_port),
        HCAT_NOTIFY_OPENWIRE_PORT=str(openwire_port),
    )
    return env


def test_the_demo_runs_to_its_end_and_the_watcher_gets_every_message(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    env = _demo_env(home)
    try:
        done = subprocess.run(
            ["bash", str(DEMO)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        subprocess.run(["bash", str(ACTIVEMQ), "stop"], env=env, capture_output=True, timeout=120)
    out = done.stdout
    assert done.returncode == 0, (
        f"demo exited {done.returncode}\n{out[-3000:]}\n{done.stderr[-3000:]}"
    )
    assert "48 ADD_PARTITION and 1 MARK_SET_DONE messages" in out
    datestamp = re.search(r"datestamp=(\d{14})", out)
    assert datestamp is not None
    assert f"demo.clicks datestamp={datestamp.group(1)}/region=us-00: done" in out
    assert "   ... 48 partitions" in out
    assert "== done" in out
