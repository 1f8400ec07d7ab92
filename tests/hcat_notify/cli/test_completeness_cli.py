"""``hcat-notify table expect``, ``table show``'s rule, ``completeness`` and ``wait
--min-generation`` (in this process; SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hcat_notify.config import load_settings
from hcat_notify.store import Catalog, NewPartition

DAY = "datestamp=20991231"  # its deadline (next day, 06:00) lies ahead whenever this runs


def _create(run) -> None:
    code, _, err = run(
        "table",
        "create",
        "web.clicks",
        "--external",
        "--location",
        "/data/clicks",
        "--partition-keys",
        "datestamp,region,hour",
    )
    assert (code, err) == (0, "")


def _add(db_url: str, tmp_path: Path, *parts: tuple[str, str]) -> None:
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        for region, hour in parts:
            values = {"datestamp": "20991231", "region": region, "hour": hour}
            location = f"/data/clicks/{DAY}/region={region}/hour={hour}"
            catalog.add_partitions("web.clicks", [NewPartition(values, location, 1, 10)])


def test_expect_show_completeness_and_wait_by_generation(run, db_url: str, tmp_path: Path):
    _create(run)
    code, out, err = run(
        "table",
        "expect",
        "web.clicks",
        "--set",
        "datestamp",
        "--parts",
        "region=us,eu",
        "hour=00..01",
        "--deadline",
        "datestamp+1d 06:00",
    )
    described = "--set datestamp --parts region=us,eu hour=00..01 --deadline 'datestamp+1d 06:00'"
    assert (code, err) == (0, "")
    assert out == f"rule of web.clicks is version 1: {described} --on-deadline late\n"
    code, out, _ = run("table", "show", "web.clicks")
    assert code == 0
    assert f"rule            version 1: {described}" in out
    code, out, _ = run("table", "show", "web.clicks", "-o", "json")
    shown = json.loads(out)
    assert shown["rule_version"] == 1
    assert shown["rule"]["rule"]["parts"] == {"region": "us,eu", "hour": "00..01"}

    _add(db_url, tmp_path, ("us", "00"), ("us", "01"), ("eu", "00"))
    code, out, _ = run("completeness", "web.clicks", DAY)
    assert code == 1
    lines = out.splitlines()
    assert lines[2:7] == [
        "state     open, generation 1",
        "expected  4",
        "present   3",
        "missing   1",
        "done      not yet",
    ]
    assert lines[7] == "deadline  2100-01-01T06:00:00+00:00"
    assert lines[-1] == f"  missing {DAY}/region=eu/hour=01"

    _add(db_url, tmp_path, ("eu", "01"))
    code, out, _ = run("-o", "json", "completeness", "web.clicks", DAY)
    report = json.loads(out)
    assert code == 0
    assert (report["state"], report["complete"], report["missing"]) == ("done", True, [])
    assert (report["expected"], report["present_count"]) == (4, 4)
    assert report["done"]["generation"] == 1
    assert report["done"]["reason"] == "rule"
    assert report["rule"]["version"] == 1
    # A done of generation 1 is retained: a wait for it needs no broker.
    code, out, _ = run("wait", "web.clicks", DAY, "--min-generation", "1", "--timeout", "1")
    assert (code, out) == (0, f"web.clicks {DAY} (generation >= 1): done\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "region", "--min-partitions", "3"], "not the table's leading keys"),
        (["--set", "datestamp", "--parts", "region=us"], "hour missing"),
        (["--set", "datestamp", "--parts", "region=us", "hour=23..00"], "is empty"),
        (
            ["--set", "datestamp", "--parts", "region=us", "hour=20260230..20260301"],
            "range 20260230..20260301 of hour: 20260230 is not a date",
        ),
        (["--set", "datestamp", "--parts", "region=us", "hour=0..999999"], "100,000"),
        (["--set", "datestamp", "--min-partitions", "2", "--like-previous"], "exactly one"),
        (["--set", "datestamp", "--min-partitions", "2", "--quiet", "soon"], "not a duration"),
        (["--set", "datestamp", "--min-partitions", "2", "--deadline", "hour+1d"], "not a key"),
        (["--set", "datestamp", "--min-partitions", "2", "--on-deadline", "x"], "on-deadline"),
        (["--min-partitions", "2"], "--set"),
        (["--set", "datestamp", "hour=00"], "unexpected argument"),
        (["--remove", "--set", "datestamp"], "--remove takes no other option"),
        (["--remove"], "has no completeness rule"),
    ],
)
def test_a_bad_rule_is_one_line_and_writes_nothing(run, args, message):
    _create(run)
    code, out, err = run("table", "expect", "web.clicks", *args)
    assert (code, out) == (2, "")
    assert err.startswith("hcat-notify: error: ")
    assert message in err
    assert err.count("\n") == 1
    code, out, _ = run("table", "show", "web.clicks", "-o", "json")
    assert (json.loads(out)["rule_version"], json.loads(out)["rule"]) == (None, None)


def test_remove_and_completeness_of_a_table_without_a_rule(run):
    _create(run)
    expected = run("table", "expect", "web.clicks", "--set", "datestamp", "--min-partitions", "2")
    assert expected[0] == 0
    code, out, err = run("-o", "json", "table", "expect", "web.clicks", "--remove")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"table": "web.clicks", "version": 2, "rule": None}
    code, out, _ = run("table", "show", "web.clicks", "-o", "json")
    assert json.loads(out)["rule"] is None
    code, out, err = run("completeness", "web.clicks", DAY)
    assert (code, out) == (2, "")
    assert err == "hcat-notify: error: table web.clicks has no completeness rule\n"
