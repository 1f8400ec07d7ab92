"""hcat-notify mark-done, relay, watch, wait, status and sweep as a shell user runs them."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from datetime import timedelta

import pytest

from hcat_notify.config import Settings
from hcat_notify.model.changes import AnnounceMode
from hcat_notify.store import Catalog, NewPartition, TableInfo
from tests.integration.delivery import CLI, CliProcess, changes, cli_env, run_cli
from tests.wire import validate_message

pytestmark = pytest.mark.integration


@pytest.fixture
def hcat(delivery_settings: Settings):
    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run_cli(delivery_settings, *args, timeout=timeout)

    return run


def test_mark_done_succeeds_while_the_broker_is_down(delivery_settings, clicks: TableInfo, hcat):
    env_settings = dataclasses.replace(delivery_settings, broker_url="stomp://127.0.0.1:1")
    result = subprocess.run(
        [CLI, "-o", "json", "mark-done", str(clicks.name), "region=us", "datestamp=20110228"],
        env=cli_env(env_settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "table": str(clicks.name),
        "spec": "datestamp=20110228/region=us",
        "event_id": 2,  # 1 is the table's CREATE_TABLE
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["mark-done", "web.nope", "datestamp=1"], "table web.nope is not registered"),
        (["mark-done", "{table}", "country=x"], "no partition key 'country'"),
        (["mark-done", "{table}"], "empty partition spec"),
        (["mark-done", "{table}", "datestamp"], "datestamp"),
        (["wait", "{table}", "hour=1", "--timeout", "1"], "no partition key 'hour'"),
        (["watch", "web.nope"], "table web.nope is not registered"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    delivery_catalog: Catalog, clicks: TableInfo, hcat, args, message
):
    result = hcat(*[arg.format(table=clicks.name) for arg in args])
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("hcat-notify: error: ")
    assert message in result.stderr
    assert result.stderr.count("\n") == 1
    assert changes(delivery_catalog) == []
    assert delivery_catalog.retained_dones([clicks.name]) == []


def test_a_done_must_name_a_prefix_of_the_tables_keys(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo, hcat, tmp_path
):
    """``region=us`` on keys (datestamp, region) would cover region us of every day, the
    days not written yet too: the command line and every Python path refuse it alike."""
    import hcat_notify
    from hcat_notify.errors import InvalidSpecError
    from spark_output import register_partitions, send_mark_set_done

    table = str(clicks.name)
    message = (
        f"mark-set-done spec 'region=us' for table {table} skips the leading partition key "
        "datestamp: a done's spec must be a prefix of its partition keys (datestamp, region)"
    )
    refused = hcat("mark-done", table, "region=us")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == f"hcat-notify: error: {message}\n"
    landed = tmp_path / "landed"
    landed.mkdir()
    (landed / "part-00000.parquet").write_bytes(b"x")
    locations = {"datestamp=1/region=us": str(landed)}
    for record in (
        lambda: delivery_catalog.mark_set_done(table, {"region": "us"}),
        lambda: send_mark_set_done(table, {"region": "us"}, settings=delivery_settings),
        lambda: hcat_notify.register_partitions(
            delivery_catalog, table, locations, mark_set_done={"region": "us"}
        ),
        lambda: register_partitions(
            table, locations, mark_set_done={"region": "us"}, settings=delivery_settings
        ),
    ):
        with pytest.raises(InvalidSpecError) as caught:
            record()
        assert str(caught.value) == message
    assert changes(delivery_catalog) == []
    assert delivery_catalog.retained_dones([table]) == []
    assert delivery_catalog.list_partitions(table) == []
    # A prefix is a done, and it covers its own day only.
    assert hcat("mark-done", table, "region=us", "datestamp=20110228").returncode == 0
    assert hcat("mark-done", table, "datestamp=20110301").returncode == 0
    covered = hcat("wait", table, "datestamp=20110301", "region=us", "--timeout", "1")
    assert covered.returncode == 0, covered.stderr
    later = hcat("wait", table, "datestamp=20990101", "region=us", "--timeout", "1")
    assert later.returncode == 1, later.stderr


def test_watch_prints_catch_up_then_live_as_json_lines(delivery_settings, clicks: TableInfo, hcat):
    assert hcat("mark-done", str(clicks.name), "datestamp=1").returncode == 0
    watch = CliProcess(
        delivery_settings,
        "watch",
        str(clicks.name),
        "--json",
        "--max-messages",
        "2",
        "--timeout",
        "60",
    )
    first = json.loads(watch.next())
    assert (first["event_id"], first["source"], first["event"]) == (2, "retained", "MARK_SET_DONE")
    assert hcat("mark-done", str(clicks.name), "datestamp=2", "region=eu").returncode == 0
    relay = hcat("relay", "--once")
    assert relay.returncode == 0, relay.stderr
    assert relay.stdout.strip() == "published 2 events"
    second = json.loads(watch.next())
    code, err = watch.finish()
    assert code == 0, err
    assert (second["event_id"], second["source"], second["spec"]) == (
        3,
        "live",
        "datestamp=2/region=eu",
    )
    assert second["headers"]["HCAT_EVENT"] == "MARK_SET_DONE"
    validate_message(second["headers"], json.dumps(second["body"]))


def test_global_json_output_applies_to_watch(clicks: TableInfo, hcat):
    hcat("mark-done", str(clicks.name), "datestamp=7")
    for args in (["-o", "json", "watch"], ["watch", "-o", "json"]):
        result = hcat(*args, str(clicks.name), "--timeout", "1")
        assert result.returncode == 0, result.stderr
        (line,) = result.stdout.splitlines()
        assert json.loads(line)["spec"] == "datestamp=7"


def test_watch_into_a_closed_pipe_ends_quietly(delivery_settings, clicks: TableInfo, hcat):
    """``watch ... | head -1``: the reader goes away; watch ends at its next line, quietly,
    with the shell's exit status for SIGPIPE."""
    hcat("mark-done", str(clicks.name), "datestamp=1")
    pipeline = subprocess.Popen(
        [
            "bash",
            "-c",
            f'"{CLI}" watch {clicks.name} --timeout 60 | head -1; echo "status=${{PIPESTATUS[0]}}"',
        ],
        env=cli_env(delivery_settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert pipeline.stdout is not None
    # head printed watch's first line (subscribed, caught up): it exits now
    printed = pipeline.stdout.readline()
    for n in range(2, 5):  # the next lines arrive live and find the pipe closed
        hcat("mark-done", str(clicks.name), f"datestamp={n}")
    assert hcat("relay", "--once").returncode == 0
    out, err = pipeline.communicate(timeout=60)
    first = f"2\tMARK_SET_DONE\t{clicks.name}\tdatestamp=1\t(retained)"
    assert [printed.rstrip("\n"), *out.splitlines()] == [first, "status=141"]
    assert err == ""


def test_watch_on_a_quiet_table_ends_when_its_reader_goes(
    delivery_settings, clicks: TableInfo, hcat
):
    """``watch ... | head -1`` with nothing more to come: watch notices that head has
    gone while it waits, not at a next line that may never arrive, and exits 141."""
    hcat("mark-done", str(clicks.name), "datestamp=1")
    pipeline = subprocess.Popen(
        [
            "bash",
            "-c",
            f'"{CLI}" watch {clicks.name} | head -1; echo "status=${{PIPESTATUS[0]}}"',
        ],
        env=cli_env(delivery_settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, to end it if watch hangs
    )
    try:
        # Within a second is the promise; the deadline is generous for a busy machine.
        out, err = pipeline.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(pipeline.pid, signal.SIGKILL)
        pipeline.communicate()
        pytest.fail("watch still ran 20 s after head, its reader, had gone")
    first = f"2\tMARK_SET_DONE\t{clicks.name}\tdatestamp=1\t(retained)"
    assert out.splitlines() == [first, "status=141"]
    assert err == ""


def test_interrupted_wait_exits_130(delivery_settings, clicks: TableInfo):
    waiter = CliProcess(delivery_settings, "-v", "wait", str(clicks.name), "datestamp=1")
    deadline = time.monotonic() + 30
    while "consumer subscribed" not in waiter.stderr and time.monotonic() < deadline:
        time.sleep(0.1)
    waiter.proc.send_signal(signal.SIGINT)
    code, err = waiter.finish(timeout=30)
    assert code == 130
    assert err.splitlines()[-1] == "hcat-notify: error: interrupted"
    assert "Traceback" not in err


def test_watch_text_lines_and_idle_timeout(delivery_settings, clicks: TableInfo, hcat):
    hcat("mark-done", str(clicks.name), "datestamp=7")
    result = hcat("watch", str(clicks.name), "--timeout", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"2\tMARK_SET_DONE\t{clicks.name}\tdatestamp=7\t(retained)\n"


def test_wait_exits_zero_when_covered_and_one_on_timeout(
    delivery_settings, clicks: TableInfo, hcat
):
    table = str(clicks.name)
    missing = hcat("wait", table, "datestamp=1", "region=us", "--timeout", "1")
    assert missing.returncode == 1
    assert "not done after 1s" in missing.stdout
    waiter = CliProcess(
        delivery_settings,
        "-o",
        "json",
        "wait",
        table,
        "region=us",
        "datestamp=1",
        "--timeout",
        "60",
    )
    relay = CliProcess(delivery_settings, "relay")
    try:
        assert hcat("mark-done", table, "datestamp=1").returncode == 0  # broader: covers it
        code, err = waiter.finish()
        assert code == 0, err
        assert json.loads("".join(waiter.remaining()))["done"] is True
    finally:
        relay.proc.terminate()
        relay.finish()
    # Already retained: answered from the catalog at once, even with the broker gone.
    again = hcat("--broker-url", "stomp://127.0.0.1:1", "wait", table, "datestamp=1", "region=eu")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"{table} datestamp=1/region=eu: done"


def test_status_and_sweep(delivery_settings, delivery_catalog: Catalog, clicks: TableInfo, hcat):
    hcat("mark-done", str(clicks.name), "datestamp=1")
    status = json.loads(hcat("-o", "json", "status").stdout)
    assert status["backlog"] == 1
    assert status["oldest_unpublished_age_seconds"] >= 0
    assert list(status["last_publish_by_topic"]) == ["hcat"]  # the table's CREATE_TABLE
    assert hcat("relay", "--once").returncode == 0
    status = json.loads(hcat("-o", "json", "status").stdout)
    assert status["backlog"] == 0
    assert sorted(status["last_publish_by_topic"]) == sorted(["hcat", clicks.topic])
    text = hcat("status").stdout
    assert "outbox backlog: 0 event(s)" in text
    assert f"last publish {clicks.topic}:" in text

    short = delivery_catalog.create_table(
        f"{clicks.name.db}.short",
        location="/s",
        partition_keys=["ds"],
        retention=timedelta(seconds=1),
    )
    for n in range(5):
        delivery_catalog.mark_set_done(short.name, {"ds": str(n)})
    time.sleep(1.2)
    assert delivery_catalog.retained_dones([short.name]) == []  # expired: not returned
    swept = hcat("-o", "json", "sweep", "--batch-size", "2", "--max-duty", "0.5")
    assert json.loads(swept.stdout) == {
        "removed": 5,
        # the outbox's events are younger than its retention: nothing of it goes
        "outbox": {
            "deleted": 0,
            "held_back": 0,
            "held_by": {},
            "held_by_kind": {},
            "retention": "7d",
        },
    }
    assert len(delivery_catalog.retained_dones([clicks.name])) == 1  # unexpired kept


def test_wait_on_a_table_dropped_while_waiting_exits_2_in_one_line(
    delivery_settings, delivery_catalog: Catalog, clicks: TableInfo, hcat
):
    table = str(clicks.name)
    waiter = CliProcess(delivery_settings, "-v", "wait", table, "datestamp=1", "--timeout", "120")
    deadline = time.monotonic() + 30
    while "consumer subscribed" not in waiter.stderr and time.monotonic() < deadline:
        time.sleep(0.1)
    drop = delivery_catalog.tables.drop(clicks.name).event_ids[-1]
    assert hcat("relay", "--once").returncode == 0
    code, err = waiter.finish(timeout=60)
    assert code == 2
    # over the broker ("... while waiting for datestamp=1"), or from the catalog if the
    # drop came before the consumer's check
    assert err.splitlines()[-1].startswith(
        f"hcat-notify: error: table {table} was dropped (event {drop})"
    )
    # on a table dropped before: at once
    again = hcat("wait", table, "datestamp=1", "--timeout", "120")
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr == f"hcat-notify: error: table {table} was dropped (event {drop})\n"


def test_watch_shows_batches_and_table_events_then_ends_on_a_dropped_table(
    delivery_catalog: Catalog, clicks: TableInfo, hcat
):
    table = str(clicks.name)
    spread = [{"datestamp": d, "region": "a"} for d in ("1", "2", "3")]
    (batch,) = delivery_catalog.partitions.register(
        clicks.name, [NewPartition(s, "/w", 1, 1) for s in spread], announce=AnnounceMode.WRITE
    ).event_ids
    drop = delivery_catalog.tables.drop(clicks.name).event_ids[-1]
    gone = f"hcat-notify: error: table {table} was dropped (event {drop})\n"
    # A watcher with a past from before the drop: what it missed, then the drop ends it.
    text = hcat("watch", table, "--cursor", "*:0", "--timeout", "5")
    assert text.returncode == 2
    assert text.stdout.splitlines() == [
        f"{batch}\tADD_PARTITION\t{table}\t3 partitions\t(registry)",
        f"{drop}\tDROP_TABLE\t{table}\t-\t(registry)",
    ]
    assert text.stderr == gone
    as_json = hcat("watch", table, "--json", "--cursor", "*:0", "--timeout", "5")
    assert as_json.returncode == 2
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(n["event"], n["spec"]) for n in lines] == [
        ("ADD_PARTITION", None),
        ("DROP_TABLE", None),
    ]
    assert lines[0]["partitions"] == [f"datestamp={d}/region=a" for d in ("1", "2", "3")]
    assert lines[1]["partitions"] == []
    assert f"{clicks.topic}:{drop}" in lines[1]["cursor"]
    assert as_json.stderr == gone
    # Its past is up to date, or it has none: the drop, at once.
    for past in (["--cursor", f"*:{drop}"], []):
        result = hcat("watch", table, *past, "--timeout", "5")
        assert (result.returncode, result.stdout, result.stderr) == (2, "", gone)
