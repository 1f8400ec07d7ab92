"""Bad input a new user typed: one line, a non-zero exit, nothing changed (issue 15)."""

from __future__ import annotations

import json
import os
import sqlite3
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hcat_notify.cli import main


@pytest.fixture
def home(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A data directory with a SQLite catalog holding one table, web.t (keys ds, region)."""
    path = tmp_path / "home"
    code = main(
        [
            "--home",
            str(path),
            "table",
            "create",
            "web.t",
            "--location",
            str(tmp_path / "t"),
            "--partition-keys",
            "ds,region",
        ]
    )
    assert code == 0
    capsys.readouterr()
    return path


def _snapshot(home: Path) -> list[tuple[object, ...]]:
    """Every row of every table of the catalog (the migration table aside)."""
    connection = sqlite3.connect(home / "catalog.db")
    try:
        names = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        rows: list[tuple[object, ...]] = []
        for name in names:
            rows += [(name, *row) for row in connection.execute(f"SELECT * FROM {name}")]
        return rows
    finally:
        connection.close()


def _run(capsys: pytest.CaptureFixture[str], home: Path, *args: str) -> tuple[int, str, str]:
    # An unreachable broker: a closed port on loopback.
    code = main(["--home", str(home), "--broker-url", "stomp://127.0.0.1:1", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code: int, err: str) -> None:
    assert code != 0
    assert err.startswith("hcat-notify: error: "), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # durations: too long for the store, too long for anything, too short, not finite
        (
            [
                "table",
                "create",
                "web.r1",
                "--location",
                "/r1",
                "--partition-keys",
                "ds",
                "--retention",
                "9000000d",
            ],
            "retention must be between 1 second and 36500 days",
        ),
        (
            [
                "table",
                "create",
                "web.r2",
                "--location",
                "/r2",
                "--partition-keys",
                "ds",
                "--retention",
                "99999999999d",
            ],
            "duration '99999999999d' is too long",
        ),
        (
            [
                "table",
                "create",
                "web.r3",
                "--location",
                "/r3",
                "--partition-keys",
                "ds",
                "--retention",
                "0.0001s",
            ],
            "retention must be between 1 second",
        ),
        (["wait", "web.t", "ds=1", "--timeout", "nan"], "positive, finite number of seconds"),
        (["wait", "web.t", "ds=1", "--timeout", "inf"], "positive, finite number of seconds"),
        (["wait", "web.t", "ds=1", "--timeout", "-1"], "positive, finite number of seconds"),
        (["watch", "web.t", "--timeout", "0"], "positive, finite number of seconds"),
        (["watch", "web.t", "--cursor", "99999999999999999999999"], "is too large"),
        (["watch", "web.t", "--cursor", "hcat.web.t"], "expected TOPIC:EVENT_ID"),
        (["watch", "web.t", "--cursor", "1", "--subscriber", "s"], "not both"),
        (["watch", "web.t", "--subscriber", "a b"], "invalid subscriber name"),
        # a topic none of the tables uses; a takeover of no subscriber (review, item 10)
        (
            ["watch", "web.t", "--cursor", "nosuch.topic:3"],
            "the cursor names topic 'nosuch.topic', which none of the tables followed uses "
            "(theirs: hcat.web.t)",
        ),
        (["watch", "web.t", "--takeover"], "--takeover takes a durable subscriber over"),
        (["wait", "web.t", "ds=1", "--takeover"], "name it with --subscriber"),
        # a rule's durations: 0s refused alike
        (
            ["table", "expect", "web.t", "--set", "ds", "--min-partitions", "1", "--quiet", "0s"],
            "quiet period must be between 1 second and 31 days, not '0s'",
        ),
        (
            [
                "table",
                "expect",
                "web.t",
                "--set",
                "ds",
                "--min-partitions",
                "1",
                "--deadline-after",
                "0s",
            ],
            "deadline-after must be between 1 second and 366 days, not '0s'",
        ),
        # event ids: -1 is a bad id, not an unknown option
        (["outbox", "retry", "-1"], "'-1' is not an event id: an event id is a positive integer"),
        (["outbox", "drop", "3", "0"], "'0' is not an event id: an event id is a positive integer"),
        (["webhooks", "replay", "h", "--from-event", "-1"], "'-1' is not an event id"),
        # click's own usage errors, one line too
        (
            [
                "table",
                "create",
                "web.x",
                "--location",
                "/x",
                "--partition-keys",
                "ds",
                "--format",
                "avro",
            ],
            "'avro' is not one of",
        ),
        (["-o", "xml", "table", "list"], "'xml' is not one of"),
        (["watch", "web.t", "--max-messages", "0"], "--max-messages"),
        (["no-such-command"], "No such command 'no-such-command'"),
        (["table", "show"], "Missing argument 'DB.TABLE'"),
        # locations
        (
            ["table", "create", "web.dup", "--location", "{location}", "--partition-keys", "ds"],
            "is already the location of table web.t",
        ),
        (
            ["table", "create", "web.dup", "--location", " ", "--partition-keys", "ds"],
            "needs a location",
        ),
    ],
)
def test_bad_values_are_one_line_and_change_nothing(
    capsys, home: Path, tmp_path: Path, args: list[str], message: str
):
    before = _snapshot(home)
    args = [arg.format(location=tmp_path / "t") for arg in args]
    code, out, err = _run(capsys, home, *args)
    _one_line_error(code, err)
    assert code == 2
    assert out == ""
    assert message in err
    assert _snapshot(home) == before


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "stomp://127.0.0.1:61613,tcp://127.0.0.1:61617",
            "broker URL 'tcp://127.0.0.1:61617' (entry 2 of 2) is not of the form stomp://",
        ),
        ("stomp://127.0.0.1:61613,,stomp://127.0.0.1:61614", "has an empty entry (entry 2 of 3)"),
        ("stomp://127.0.0.1:61613,stomp://127.0.0.1:0", "(entry 2 of 2) has an invalid port"),
        ("failover:(tcp://127.0.0.1:61616,tcp://127.0.0.1:61617)", "is a JMS failover URL"),
    ],
)
def test_a_malformed_broker_list_is_one_line_and_changes_nothing(
    capsys, home: Path, url: str, message: str
):
    before = _snapshot(home)
    for args in (
        ["mark-done", "web.t", "ds=1"],
        ["relay", "--once"],
        ["broker", "check"],
        ["watch", "web.t"],
    ):
        code = main(["--home", str(home), "--broker-url", url, *args])
        out, err = capsys.readouterr()
        _one_line_error(code, err)
        assert code == 2
        assert out == ""
        assert message in err
    assert _snapshot(home) == before


def test_durations_are_shown_as_written(capsys, home: Path, tmp_path: Path):
    assert (
        _run(
            capsys,
            home,
            "table",
            "create",
            "web.h",
            "--location",
            str(tmp_path / "h"),
            "--partition-keys",
            "ds",
            "--retention",
            "1d12h",
        )[0]
        == 0
    )
    code, out, _ = _run(capsys, home, "table", "show", "web.h")
    assert code == 0
    assert "retention       1d12h\n" in out
    assert (
        json.loads(_run(capsys, home, "-o", "json", "table", "show", "web.t")[1])["retention"]
        == "7d"
    )


def test_relative_locations_are_stored_absolute(capsys, home: Path, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for name, location in (("web.rel", "relative/dir/"), ("web.tilde", "~/x")):
        code, _, err = _run(
            capsys, home, "table", "create", name, "--location", location, "--partition-keys", "ds"
        )
        assert code == 0, err
    shown = {
        item["table"]: item["location"]
        for item in json.loads(_run(capsys, home, "-o", "json", "table", "list")[1])
    }
    assert shown["web.rel"] == str(tmp_path / "relative" / "dir")
    assert shown["web.tilde"] == str(tmp_path / "user" / "x")
    code, _, err = _run(
        capsys,
        home,
        "table",
        "create",
        "web.again",
        "--location",
        str(tmp_path / "relative" / "dir"),
        "--partition-keys",
        "ds",
    )
    assert code == 2
    assert "is already the location of table web.rel" in err


def test_a_damaged_catalog_is_one_line(capsys, home: Path):
    catalog = home / "catalog.db"
    connection = sqlite3.connect(catalog)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the main file
    connection.close()
    data = bytearray(catalog.read_bytes())
    page = 4096
    assert len(data) > 3 * page
    data[page:] = os.urandom(len(data) - page)  # damage mid-file, keep the header page
    catalog.write_bytes(bytes(data))
    for args in (
        ["table", "list"],
        ["topic", "web.t"],
        ["table", "show", "web.t"],
        ["mark-done", "web.t", "ds=1"],
    ):
        code, out, err = _run(capsys, home, *args)
        _one_line_error(code, err)
        assert out == ""
        assert "catalog.db" in err


# -- every command, generated bad values ----------------------------------------------

_SAFE = string.ascii_letters + string.digits + "_"
_bad_names = st.one_of(
    st.text(min_size=0, max_size=12).filter(lambda s: s.count(".") != 1 or not s.strip(".")),
    st.builds(
        lambda a, b: f"{a}.{b}",
        st.text(_SAFE, min_size=1, max_size=6),
        st.text(min_size=1, max_size=6).filter(lambda s: any(c not in _SAFE for c in s)),
    ),
).filter(lambda s: not s.startswith("-") and "\x00" not in s)
_bad_specs = st.one_of(
    st.text(_SAFE, min_size=1, max_size=8)
    .filter(lambda s: s not in ("ds", "region"))
    .map(lambda key: f"{key}=1"),  # not a partition key of web.t
    st.text(_SAFE, min_size=1, max_size=8).filter(lambda s: "=" not in s),  # no '='
    st.just("ds=" + "/" * 800),  # too long once escaped
)
_bad_durations = st.one_of(
    st.text(min_size=1, max_size=6).filter(
        lambda s: not s.lstrip("-").replace(".", "", 1).isdigit() and not s.startswith("-")
    ),
    st.sampled_from(["0d", "0s", "nan", "1x", "d", "7", "-3h", "1e999d"]),
)
_bad_numbers = st.sampled_from(["nan", "inf", "-inf", "0", "-1", "abc", "1e999"])

_COMMANDS = st.one_of(
    st.builds(lambda n: ["table", "show", n], _bad_names),
    st.builds(lambda n: ["topic", n], _bad_names),
    st.builds(lambda n: ["partitions", n], _bad_names),
    st.builds(lambda s: ["partitions", "web.t", s], _bad_specs),
    st.builds(lambda s: ["mark-done", "web.t", s], _bad_specs),
    st.builds(lambda n: ["mark-done", n, "ds=1"], _bad_names),
    st.builds(lambda s: ["wait", "web.t", s, "--timeout", "1"], _bad_specs),
    st.builds(lambda t: ["wait", "web.t", "ds=1", "--timeout", t], _bad_numbers),
    st.builds(lambda n: ["watch", n], _bad_names),
    st.builds(lambda t: ["watch", "web.t", "--timeout", t], _bad_numbers),
    st.builds(
        lambda d: [
            "table",
            "create",
            "web.new",
            "--location",
            "/new",
            "--partition-keys",
            "ds",
            "--retention",
            d,
        ],
        _bad_durations,
    ),
    st.builds(
        lambda n: ["table", "create", n, "--location", "/n", "--partition-keys", "ds"], _bad_names
    ),
    st.builds(
        lambda k: ["table", "create", "web.k", "--location", "/k", "--partition-keys", k],
        st.text(min_size=1, max_size=8).filter(
            lambda s: any(c not in _SAFE + "," for c in s) and not s.startswith("-")
        ),
    ),
    st.builds(lambda s: ["compact", "web.t", s, "--dry-run"], _bad_specs),
    st.builds(lambda n: ["compact", n, "--dry-run"], _bad_names),
    st.builds(lambda d: ["compact", "web.t", "--purge", "--older-than", d], _bad_durations),
    st.builds(lambda n: ["recover", n], _bad_names),
    st.builds(lambda i: ["outbox", "retry", i], st.sampled_from(["0", "-1", "x", "99", "1"])),
    st.builds(lambda i: ["outbox", "drop", i], st.sampled_from(["0", "-1", "x", "99", "1"])),
    st.builds(lambda b: ["sweep", "--batch-size", b], _bad_numbers),
    st.builds(
        lambda d: ["sweep", "--max-duty", d],
        _bad_numbers | st.sampled_from(["-0.5", "1.5", "1e-300", "0.001"]),
    ),
    st.builds(lambda b: ["relay", "--batch-size", b], _bad_numbers),
    st.builds(lambda t: ["relay", "--timed-interval", t], _bad_numbers),
    st.just(["broker", "check"]),  # the broker is unreachable
    st.builds(lambda t: ["broker", "check", "--wait", t], _bad_numbers),
    st.builds(lambda n: ["table", "drop", n], _bad_names),
    st.builds(lambda n: ["partitions", "drop", n, "ds=1"], _bad_names),
    st.builds(lambda s: ["partitions", "drop", "web.t", s], _bad_specs),
    st.builds(lambda n: ["partitions", "add", n, "ds=1", "--location", "/nowhere"], _bad_names),
    st.builds(lambda s: ["partitions", "add", "web.t", s, "--location", "/nowhere"], _bad_specs),
    st.builds(lambda n: ["partitions", "discover", n, "--dry-run"], _bad_names),
    st.builds(lambda m: ["status", "--member", m], st.text(_SAFE, min_size=1, max_size=8)),
    st.builds(lambda t: ["status", "--session-timeout", t], _bad_numbers),
    st.builds(
        lambda c: ["watch", "web.t", "--cursor", c, "--timeout", "1"],
        st.sampled_from(["x", "hcat.web.t:", ":1", "hcat.web.t:-1", "a:1,a:2", "*:x", "1e999"]),
    ),
    st.builds(
        lambda n: ["watch", "web.t", "--subscriber", n, "--timeout", "1"],
        st.sampled_from(["", " ", "a b", "x" * 300, "tab\there"]),
    ),
    st.builds(lambda n: ["export", n, "--to", "/tmp/nowhere-export"], _bad_names),
    st.builds(lambda u: ["import", u], st.sampled_from(["/nonexistent/export", "", "::"])),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(args=_COMMANDS)
def test_every_command_with_generated_bad_values(capsys, home: Path, args: list[str]):
    before = _snapshot(home)
    code, out, err = _run(capsys, home, *args)
    _one_line_error(code, err)
    assert out == ""
    assert _snapshot(home) == before


@pytest.mark.parametrize("where", ["option", "environment"])
def test_an_empty_home_is_refused_and_nothing_lands_in_the_cwd(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
):
    monkeypatch.chdir(tmp_path)
    args = ["table", "create", "web.t", "--location", str(tmp_path / "t"), "--partition-keys", "ds"]
    if where == "option":
        code = main(["--home", "", *args])
    else:
        monkeypatch.setenv("HCAT_NOTIFY_HOME", "")
        code = main(args)
    out, err = capsys.readouterr()
    _one_line_error(code, err)
    assert (code, out) == (2, "")
    assert "home: is empty; leave it unset for the default ~/.hcat-notify" in err
    assert list(tmp_path.iterdir()) == []
