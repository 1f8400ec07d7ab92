"""Helpers for tests against a real Airflow: its commands as processes in a private
``AIRFLOW_HOME`` (own SQLite metadata database), and what that database recorded."""

from __future__ import annotations

import configparser
import os
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hcat_notify.config import Settings
from tests.integration.delivery import cli_env

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
REPO_DIR = Path(__file__).resolve().parents[3]
EXAMPLES = REPO_DIR / "examples" / "airflow"
TEST_DAGS = Path(__file__).resolve().parent / "dags"


@dataclass(frozen=True)
class AirflowHome:
    """A private Airflow installation: its home, metadata database and DAGs folder."""

    home: Path
    dags: Path

    @property
    def database(self) -> Path:
        return self.home / "airflow.db"

    def env(self, settings: Settings | None = None, **extra: str) -> dict[str, str]:
        """The environment of an Airflow command (and of hcat-notify inside it)."""
        env = cli_env(settings) if settings is not None else dict(os.environ)
        env = {k: v for k, v in env.items() if not k.startswith("AIRFLOW")}
        env.update(
            AIRFLOW_HOME=str(self.home),
            AIRFLOW__CORE__DAGS_FOLDER=str(self.dags),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{self.database}",
            # The examples and test DAGs import hcat_notify from this checkout.
            PYTHONPATH=str(REPO_DIR),
            **extra,
        )
        return env

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.database, timeout=30)) as db:
            return db.execute(sql, args).fetchall()

    def task_states(self, dag_id: str) -> dict[str, str]:
        """Each task's final state in the DAG's (only) run."""
        rows = self.query("SELECT task_id, state FROM task_instance WHERE dag_id = ?", dag_id)
        return {task: state for task, state in rows}

    def transitions(self, dag_id: str, task_id: str) -> list[str]:
        """The states Airflow's audit log recorded for a task, in order."""
        rows = self.query(
            "SELECT event FROM log WHERE dag_id = ? AND task_id = ? ORDER BY id", dag_id, task_id
        )
        return [event for (event,) in rows]

    def triggers(self) -> list[tuple[str, str]]:
        """Every trigger row: (classpath, serialized kwargs, decrypted if Airflow
        encrypted them with its Fernet key)."""
        rows = self.query("SELECT classpath, kwargs FROM trigger ORDER BY id")
        return [(classpath, self._decrypt(kwargs)) for classpath, kwargs in rows]

    def _decrypt(self, stored: str) -> str:
        if stored.startswith("{"):
            return stored
        from cryptography.fernet import Fernet

        config = configparser.ConfigParser(interpolation=None)
        config.read(self.home / "airflow.cfg")
        key = config.get("core", "fernet_key")
        return Fernet(key.encode()).decrypt(stored.encode()).decode()


class AirflowProcess:
    """An ``airflow ...`` command in the background; its output (stdout and stderr
    together) is kept and can be awaited line by line."""

    def __init__(self, home: AirflowHome, env: Mapping[str, str], *args: str) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [AIRFLOW, *args],
            env=dict(env),
            cwd=home.home,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._output: list[str] = []
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        self._reader = threading.Thread(target=self._read, args=(stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: Any) -> None:
        for line in stdout:
            self._output.append(line)
            self._lines.put(line)

    @property
    def output(self) -> str:
        return "".join(self._output)

    def wait_for_line(self, text: str, timeout: float = 240) -> str:
        """The first line (from now on) containing ``text``; fails the test if the
        process ends or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None and self._lines.empty():
                    break
                continue
            if text in line:
                return line
        raise AssertionError(
            f"no line with {text!r} from airflow {self.args}:\n{self.output[-4000:]}"
        )

    def finish(self, timeout: float = 300) -> int:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        self._reader.join(timeout=30)
        return self.proc.returncode

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM, then SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        self._reader.join(timeout=30)


def run_airflow(home: AirflowHome, env: Mapping[str, str], *args: str, timeout: float = 300) -> str:
    """Run an Airflow command to completion; its output. Fails the test on a non-zero exit."""
    done = subprocess.run(
        [AIRFLOW, *args],
        env=dict(env),
        cwd=home.home,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"airflow {args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout + done.stderr
