"""Completeness as a shell user meets it, real processes and broker: ``table expect``,
``completeness``, ``wait --min-generation`` ended by a set's second generation, and
``watch`` printing the rule and the dones' generations (docs/completeness.md)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from hcat_notify.config import Settings
from hcat_notify.store import Catalog, NewPartition, TableInfo
from tests.integration.delivery import CliProcess, run_cli

pytestmark = pytest.mark.integration

DAY = "datestamp=20261126"


def _add(catalog: Catalog, table: str, region: str) -> None:
    values = {"datestamp": "20261126", "region": region}
    catalog.add_partitions(
        table, [NewPartition(values, f"/data/clicks/{DAY}/region={region}", 1, 10)]
    )


def test_a_wait_for_generation_two_ends_at_the_sets_change(
    delivery_settings: Settings, delivery_catalog: Catalog, clicks: TableInfo
):
    def hcat(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(delivery_settings, *args)

    table = str(clicks.name)
    expected = hcat("table", "expect", table, "--set", "datestamp", "--parts", "region=us,eu")
    assert expected.returncode == 0, expected.stderr
    _add(delivery_catalog, table, "us")
    incomplete = hcat("-o", "json", "completeness", table, DAY)
    assert incomplete.returncode == 1, incomplete.stderr
    assert json.loads(incomplete.stdout)["missing"] == [f"{DAY}/region=eu"]
    _add(delivery_catalog, table, "eu")  # the last part: done, generation 1
    assert hcat("completeness", table, DAY).returncode == 0
    waiter = CliProcess(
        delivery_settings, "-v", "wait", table, DAY, "--min-generation", "2", "--timeout", "60"
    )
    deadline = time.monotonic() + 30
    while "consumer subscribed" not in waiter.stderr and time.monotonic() < deadline:
        time.sleep(0.1)
    assert waiter.proc.poll() is None, waiter.stderr  # generation 1 does not end it
    _add(delivery_catalog, table, "apac")  # an extra part after the done: generation 2
    assert hcat("relay", "--once").returncode == 0
    code, err = waiter.finish()
    assert code == 0, err
    assert waiter.remaining() == [f"{table} {DAY} (generation >= 2): done\n"]
    watched = hcat("watch", table, "--cursor", "1", "--timeout", "1")
    assert watched.returncode == 0, watched.stderr
    described = [line.split("\t")[1:4:2] for line in watched.stdout.splitlines()]
    assert described == [
        ["SET_RULE", "rule version 1"],
        ["ADD_PARTITION", f"{DAY}/region=us"],
        ["ADD_PARTITION", f"{DAY}/region=eu"],
        ["MARK_SET_DONE", f"{DAY} generation 1 (rule)"],
        ["ADD_PARTITION", f"{DAY}/region=apac"],
        ["MARK_SET_DONE", f"{DAY} generation 2 (changed)"],
    ]
