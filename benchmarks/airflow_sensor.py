"""How soon an Airflow sensor task succeeds once a day is marked done (issue 14).

Ours: ``HcatMarkSetDoneSensor`` (deferrable) in ``airflow dags test``: the task checks
the catalog, defers, its trigger subscribes; then this process calls
``send_mark_set_done`` and the clock starts when it returns. It stops at the sensor
task's ``end_date`` in Airflow's metadata database (its success). A relay process
(``hcat-notify relay``) publishes; the broker is private. Context: the moment the
trigger fired (its log line), i.e. before Airflow resumed the task.

Reference, same run, same catalog: what users have today — a poke sensor
(``PythonSensor`` at Airflow's default ``poke_interval`` of 60 s) that checks the same
retention table with ``Catalog.find_covering_done``. The done is sent at a random moment
(uniform over one poke interval, seeded) after its first poke, since a done does not
arrive in step with the pokes.

Target (issue 14): median < 1 s for ours, over 5 rounds (2 with ``--quick``).
"""

from __future__ import annotations

import json
import os
import queue
import random
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

from _support import (
    REPO_DIR,
    Row,
    bench_env,
    create_table,
    fmt,
    footer,
    header,
    log,
    parser,
    print_table,
    run_main,
    unique_table,
)

from hcat_notify.store import Catalog
from hcat_notify.writer import send_mark_set_done

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
CLI = str(Path(sys.executable).with_name("hcat-notify"))
POKE_INTERVAL = 60.0  # Airflow's default

DAGS = """
from datetime import datetime, timedelta

from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import DAG, Param

from hcat_notify.airflow import HcatMarkSetDoneSensor

PARAMS = {"table": Param("db.t", type="string"), "day": Param("20110101", type="string")}

with DAG("bench_hcat", schedule=None, start_date=datetime(2011, 1, 1), params=PARAMS):
    HcatMarkSetDoneSensor(
        task_id="wait",
        table="{{ params.table }}",
        spec={"datestamp": "{{ params.day }}"},
        timeout=timedelta(minutes=10),
    )


def _covered(table, day):
    from hcat_notify.config import load_settings
    from hcat_notify.store import Catalog

    with Catalog.open(load_settings(), upgrade=False, create=False) as catalog:
        return catalog.find_covering_done(table, {"datestamp": day}) is not None


with DAG("bench_poke", schedule=None, start_date=datetime(2011, 1, 1), params=PARAMS):
    PythonSensor(
        task_id="wait",
        python_callable=_covered,
        op_args=["{{ params.table }}", "{{ params.day }}"],
        poke_interval=%(poke)s,
        timeout=timedelta(minutes=10),
    )
"""


class DagTest:
    """``airflow dags test`` in the background; its output lines can be awaited."""

    def __init__(self, env: dict[str, str], dag_id: str, day: str, conf: dict[str, str]) -> None:
        logical_date = f"{day[:4]}-{day[4:6]}-{day[6:]}"
        self.proc = subprocess.Popen(
            [AIRFLOW, "dags", "test", dag_id, logical_date, "-c", json.dumps(conf)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=self._read, args=(stdout,), daemon=True).start()

    def _read(self, stdout: object) -> None:
        for line in stdout:  # type: ignore[attr-defined]
            self.output.append(line)
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if text in line:
                return line
        tail = "".join(self.output[-40:])
        raise RuntimeError(f"airflow dags test never logged {text!r}:\n{tail}")

    def finish(self, timeout: float = 900) -> None:
        code = self.proc.wait(timeout=timeout)
        if code != 0:
            raise RuntimeError("airflow dags test failed:\n" + "".join(self.output[-40:]))


def _log_time(line: str) -> float:
    """The epoch time of a structlog line (``2026-11-23T19:48:10.015790Z [info ...``)."""
    stamp = line.split()[0].rstrip("Z")
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def _ended(database: Path, dag_id: str) -> float:
    """The end (success) of the sensor task of the DAG's latest run, as Airflow recorded
    it, in epoch seconds."""
    with closing(sqlite3.connect(database)) as db:
        rows = db.execute(
            "SELECT ti.state, ti.end_date FROM task_instance ti JOIN dag_run dr "
            "ON dr.run_id = ti.run_id AND dr.dag_id = ti.dag_id "
            "WHERE ti.dag_id = ? AND ti.task_id = 'wait' ORDER BY dr.id DESC LIMIT 1",
            (dag_id,),
        ).fetchall()
    [(state, end)] = rows
    if state != "success":
        raise RuntimeError(f"{dag_id}: the sensor ended {state}")
    return datetime.fromisoformat(end).replace(tzinfo=UTC).timestamp()


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    rounds = 2 if args.quick else 5
    phases = random.Random(14)
    with bench_env(args, "airflow") as env:
        header("Airflow sensor: done -> sensor task success", args, env)
        table = unique_table("af")
        with Catalog.open(env.settings) as catalog:
            create_table(catalog, table)
        home = env.workdir / "airflow"
        dags = home / "dags"
        dags.mkdir(parents=True)
        (dags / "bench.py").write_text(DAGS % {"poke": POKE_INTERVAL})
        hcat_env = {k: v for k, v in os.environ.items() if not k.startswith(("HCAT", "AIRFLOW"))}
        hcat_env.update(
            HCAT_NOTIFY_HOME=str(env.settings.home),
            HCAT_NOTIFY_DB_URL=env.settings.database_url,
            HCAT_NOTIFY_BROKER_URL=env.settings.broker_url,
        )
        airflow_env = dict(
            hcat_env,
            AIRFLOW_HOME=str(home),
            AIRFLOW__CORE__DAGS_FOLDER=str(dags),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
            PYTHONPATH=str(REPO_DIR),
        )
        subprocess.run([AIRFLOW, "db", "migrate"], env=airflow_env, check=True, capture_output=True)
        relay = subprocess.Popen(
            [CLI, "relay"], env=hcat_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        ours: list[float] = []
        fired: list[float] = []
        poke: list[float] = []
        delays: list[float] = []
        try:
            for index in range(rounds):
                # Ours: wait until the trigger subscribed, then mark the day done.
                day = f"2011{index + 1:02d}01"
                run = DagTest(airflow_env, "bench_hcat", day, {"table": table, "day": day})
                run.wait_for("hcat wait subscribed")
                send_mark_set_done(table, {"datestamp": day}, settings=env.settings)
                sent = time.time()
                fired_line = run.wait_for("hcat trigger fired")
                run.finish()
                ours.append(_ended(home / "airflow.db", "bench_hcat") - sent)
                fired.append(_log_time(fired_line) - sent)
                log(f"round {index + 1}: ours {ours[-1]:.3f} s (trigger fired {fired[-1]:.3f} s)")

                # Reference: the poke sensor; the done comes at a random phase.
                day = f"2012{index + 1:02d}01"
                run = DagTest(airflow_env, "bench_poke", day, {"table": table, "day": day})
                run.wait_for("Poking callable")
                delay = phases.uniform(0, POKE_INTERVAL)
                delays.append(delay)
                time.sleep(delay)
                send_mark_set_done(table, {"datestamp": day}, settings=env.settings)
                sent = time.time()
                run.finish()
                poke.append(_ended(home / "airflow.db", "bench_poke") - sent)
                log(f"round {index + 1}: poke sensor {poke[-1]:.3f} s (sent {delay:.1f} s in)")
        finally:
            relay.terminate()
            relay.wait(timeout=60)
        median_poke = statistics.median(poke)
        rows = [
            Row(
                "done -> sensor success, median",
                statistics.median(ours),
                median_poke,
                unit="s",
                target=("<", 1.0),
                digits=3,
            ),
            Row("done -> sensor success, best", min(ours), min(poke), unit="s", digits=3),
            Row(
                "done -> trigger fired, median (context)",
                statistics.median(fired),
                unit="s",
                digits=3,
            ),
        ]
        notes = [
            f"ours over {rounds} rounds: " + ", ".join(fmt(v, 3) for v in ours) + " s",
            f"poke sensor (poke_interval {POKE_INTERVAL:.0f} s) over {rounds} rounds: "
            + ", ".join(fmt(v, 1) for v in poke)
            + " s; done sent "
            + ", ".join(fmt(v, 1) for v in delays)
            + " s after its first poke",
            "ours ends at the sensor task's end_date in Airflow's metadata database",
        ]
        print_table(
            "time from send_mark_set_done returning to the sensor task's success "
            "(ratio: ours / poke sensor)",
            rows,
            notes,
        )
        footer()


if __name__ == "__main__":
    run_main(main)
