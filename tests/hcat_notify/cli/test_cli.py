"""The hcat-notify command line: tables, topics, partitions, db upgrade, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hcat_notify.cli import main, parse_duration
from hcat_notify.config import load_settings
from hcat_notify.errors import InvalidInputError
from hcat_notify.store import Catalog, NewPartition
from hcat_notify.store.engine import head_revision


def _create(run):
    code, out, err = run(
        "table",
        "create",
        "web.clicks",
        "--location",
        "/data/clicks",
        "--partition-keys",
        "datestamp,region",
        "--retention",
        "3d",
    )
    assert (code, err) == (0, "")
    return out


def test_table_create_show_and_topic(run):
    assert _create(run).strip() == "created web.clicks (topic hcat.web.clicks)"
    code, out, _ = run("table", "show", "web.clicks", "--output", "json")
    shown = json.loads(out)
    assert code == 0
    assert shown["partition_keys"] == ["datestamp", "region"]
    assert shown["retention_seconds"] == 3 * 86400
    assert shown["destination"] == "/topic/hcat.web.clicks"
    code, out, _ = run("topic", "web.clicks")
    assert (code, out) == (0, "hcat.web.clicks\n")
    code, out, _ = run("-o", "json", "topic", "web.clicks")
    assert json.loads(out) == {
        "table": "web.clicks",
        "topic": "hcat.web.clicks",
        "destination": "/topic/hcat.web.clicks",
    }


def test_topic_override_from_the_command_line(run):
    code, _, _ = run(
        "table",
        "create",
        "web.views",
        "--location",
        "/v",
        "--partition-keys",
        "ds",
        "--topic",
        "Team.Views",
    )
    assert code == 0
    assert run("topic", "web.views")[1] == "team.views\n"


def test_partitions_listing_and_filters(run, db_url: str, tmp_path: Path):
    _create(run)
    with Catalog.open(load_settings(home=tmp_path, db_url=db_url)) as catalog:
        catalog.add_partitions(
            "web.clicks",
            [
                NewPartition(
                    {"datestamp": "1", "region": r}, f"/data/clicks/datestamp=1/region={r}", 2, 20
                )
                for r in ("us", "a/b")
            ],
        )
    code, out, _ = run("partitions", "web.clicks", "--output", "json")
    assert code == 0
    assert sorted(p["spec"] for p in json.loads(out)) == [
        "datestamp=1/region=a%2Fb",
        "datestamp=1/region=us",
    ]
    code, out, _ = run("partitions", "web.clicks", "region=a/b")
    assert code == 0
    assert out.startswith(
        "datestamp=1/region=a%2Fb\t/data/clicks/datestamp=1/region=a/b\t2 files\t20 bytes"
    )
    assert run("partitions", "web.clicks", "datestamp=2")[1] == "no partitions\n"


def test_db_upgrade_is_idempotent(run):
    code, out, _ = run("db", "upgrade")
    assert code == 0
    assert head_revision() in out
    code, out, _ = run("-o", "json", "db", "upgrade")
    assert json.loads(out)["from"] == json.loads(out)["to"] == head_revision()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["table", "show", "web.nope"], "table web.nope is not registered"),
        (["topic", "webclicks"], "malformed table name 'webclicks'"),
        (["table", "show", "web.cl icks"], "invalid table name 'cl icks'"),
        (["table", "show", 'web."x"'], "invalid table name"),
        (["partitions", "web.clicks", "country=x"], "no partition key 'country'"),
        (["partitions", "web.clicks", "region"], "region"),
        # a spec no done can cover: refused at once, by the rule mark-done follows
        (
            ["wait", "web.clicks", "region=us", "--timeout", "5"],
            "spec 'region=us' for table web.clicks skips the leading partition key datestamp",
        ),
        (["mark-done", "web.clicks", "region=us"], "skips the leading partition key datestamp"),
        (
            ["table", "create", "web.clicks", "--location", "/x", "--partition-keys", "ds"],
            "already registered",
        ),
        (
            ["table", "create", "web.t2", "--location", "/x", "--partition-keys", "ds,"],
            "empty partition key",
        ),
        (
            ["table", "create", "web.t2", "--location", "/x", "--partition-keys", "d s"],
            "invalid partition key 'd s'",
        ),
        (
            [
                "table",
                "create",
                "web.t2",
                "--location",
                "/x",
                "--partition-keys",
                "ds",
                "--retention",
                "week",
            ],
            "invalid duration 'week'",
        ),
    ],
)
def test_user_mistakes_are_one_line_and_change_nothing(run, args, message):
    _create(run)
    before = run("-o", "json", "table", "list")[1]
    code, out, err = run(*args)
    assert code == 2
    assert out == ""
    assert err.startswith("hcat-notify: error: ")
    assert message in err
    assert err.count("\n") == 1
    assert run("-o", "json", "table", "list")[1] == before


def test_unreachable_database_names_the_url(capsys: pytest.CaptureFixture[str]):
    code = main(["--db-url", "postgresql+psycopg://u:pw@127.0.0.1:1/cat", "table", "list"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot connect to database postgresql+psycopg://u:***@127.0.0.1:1/cat" in err
    assert "Traceback" not in err


def test_unreachable_broker_names_the_url(capsys: pytest.CaptureFixture[str]):
    code = main(["--broker-url", "stomp://127.0.0.1:1", "broker", "check"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot connect to broker: stomp://127.0.0.1:1" in err
    assert err.count("\n") == 1


def test_installed_console_script_prints_no_traceback(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env["HCAT_NOTIFY_HOME"] = str(tmp_path)
    script = Path(sys.executable).with_name("hcat-notify")
    result = subprocess.run(
        [str(script), "table", "show", "no.such"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"hcat-notify: error: no catalog at {tmp_path / 'catalog.db'}")
    assert result.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # a reading command creates nothing


def test_reading_command_on_a_missing_home_creates_nothing(tmp_path: Path, capsys):
    home = tmp_path / "nonexistent" / "deep" / "dir"
    for args in (
        ["table", "list"],
        ["topic", "web.t"],
        ["partitions", "web.t"],
        ["status"],
        ["watch", "web.t", "--timeout", "1"],
        ["wait", "web.t", "ds=1", "--timeout", "1"],
        ["subscribers"],
        ["partitions", "discover", "web.t", "--dry-run"],
    ):
        code = main(["--home", str(home), *args])
        err = capsys.readouterr().err
        assert code == 2
        assert err.startswith(f"hcat-notify: error: no catalog at {home / 'catalog.db'}")
    assert not (tmp_path / "nonexistent").exists()


def _user_tables(url: str) -> list[str]:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        return sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_reading_commands_on_an_empty_database_create_nothing(
    run_empty, empty_db_url: str, tmp_path
):
    """An empty database (a new PostgreSQL one, an empty SQLite file) holds no catalog:
    a command that only reads says so and leaves it empty."""
    from hcat_notify.store.engine import redact
    from hcat_notify.store.quick import sqlite_file

    path = sqlite_file(empty_db_url)
    if path is not None:
        path.touch()  # SQLite's empty database: a file of zero bytes
    where = path if path is not None else redact(empty_db_url)
    for args in (
        ["table", "list"],
        ["table", "show", "web.t"],
        ["topic", "web.t"],
        ["partitions", "web.t"],
        ["partitions", "list", "web.t", "ds=1"],
        ["status"],
        ["watch", "web.t", "--timeout", "1"],
        ["wait", "web.t", "ds=1", "--timeout", "1"],
        ["subscribers"],
        ["partitions", "discover", "web.t", "--dry-run"],
        ["export", "web.t", "--to", str(tmp_path / "export")],
    ):
        code, out, err = run_empty(*args)
        assert (code, out) == (2, ""), (args, err)
        assert err.startswith(f"hcat-notify: error: no catalog at {where}: "), (args, err)
        assert err.count("\n") == 1, (args, err)
    assert _user_tables(empty_db_url) == []
    assert not (tmp_path / "export").exists()


WRITERS_THAT_CREATE_NOTHING = [
    ["mark-done", "web.t", "ds=1"],
    ["partitions", "add", "web.t", "ds=1", "--location", "/w/t/ds=1"],
    ["partitions", "drop", "web.t", "ds=1"],
    ["partitions", "discover", "web.t"],
    ["table", "drop", "web.t"],
    ["table", "expect", "web.t", "--remove"],
    ["table", "expect", "web.t", "--set", "ds", "--min-partitions", "1"],
    ["sweep"],
    ["recover"],
    ["webhooks", "add", "h", "https://hooks.example.com/in", "--tables", "web.t"],
    ["webhooks", "remove", "h"],
    ["webhooks", "pause", "h"],
    ["webhooks", "replay", "h", "--from-event", "1"],
    ["subscribers", "--remove", "s"],
    ["outbox", "drop", "--all"],
    ["relay", "--once"],
]


def test_writing_commands_on_an_empty_database_create_nothing(run_empty, empty_db_url: str):
    """Only what a fresh install begins with (``table create``, ``import``, ``db
    upgrade``) creates a catalog: any other writing command pointed at the wrong place
    says so, exit 2, and leaves it empty (no SQLite file, no schema)."""
    from hcat_notify.store.engine import redact
    from hcat_notify.store.quick import sqlite_file

    path = sqlite_file(empty_db_url)
    where = path if path is not None else redact(empty_db_url)
    for args in WRITERS_THAT_CREATE_NOTHING:
        code, out, err = run_empty(*args)
        assert (code, out) == (2, ""), (args, err)
        assert err.startswith(f"hcat-notify: error: no catalog at {where}: "), (args, err)
        assert err.count("\n") == 1, (args, err)
        assert path is None or not path.exists(), args
    assert _user_tables(empty_db_url) == []
    code, _, err = run_empty(
        "table", "create", "web.t", "--location", "/w/t", "--partition-keys", "ds"
    )
    assert code == 0, err  # the first step of a fresh install still creates it
    assert run_empty("mark-done", "web.t", "ds=1")[0] == 0


@pytest.mark.parametrize("given", ["3000000d", "36501d", "0.5s"])
def test_a_retention_out_of_range_is_named_as_given(run_empty, empty_db_url: str, given: str):
    code, out, err = run_empty(
        "table", "create", "web.r", "--location", "/r", "--partition-keys", "ds",
        "--retention", given,
    )  # fmt: skip
    assert (code, out) == (2, "")
    assert err == (
        f"hcat-notify: error: retention must be between 1 second and 36500 days, got {given}\n"
    )
    assert _user_tables(empty_db_url) == []  # refused before the catalog was opened


def test_a_retention_longer_than_the_outbox_s_is_a_warning(run, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HCAT_NOTIFY_OUTBOX_RETENTION", "2d")
    create = ("table", "create", "--partition-keys", "ds", "--retention")
    code, out, err = run(*create, "30d", "web.long", "--location", "/long")
    assert (code, out) == (0, "created web.long (topic hcat.web.long)\n")
    assert err.startswith(
        "hcat-notify: warning: retention 30d is longer than outbox_retention (2d): "
    )
    assert err.count("\n") == 1
    same = run(*create, "2d", "web.same", "--location", "/same")
    assert same == (0, "created web.same (topic hcat.web.same)\n", "")
    monkeypatch.setenv("HCAT_NOTIFY_OUTBOX_RETENTION", "forever")
    assert run(*create, "90d", "web.kept", "--location", "/kept")[::2] == (0, "")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 604800), ("12h", 43200), ("30m", 1800), ("1d12h", 129600), ("2w", 1209600)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "7x", "0d", "-1d"])
def test_parse_duration_rejects(text):
    with pytest.raises(InvalidInputError):
        parse_duration(text)


def test_processes_with_different_prefixes_agree_on_a_tables_topic(tmp_path: Path):
    """The topic is stored when the table is created: a reader's prefix does not matter."""
    script = Path(sys.executable).with_name("hcat-notify")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    env["HCAT_NOTIFY_HOME"] = str(tmp_path)

    def hcat(prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *args],
            env={**env, "HCAT_NOTIFY_TOPIC_PREFIX": prefix},
            capture_output=True,
            text=True,
            check=True,
        )

    hcat(
        "alpha",
        "table",
        "create",
        "web.t",
        "--location",
        str(tmp_path / "warehouse" / "t"),  # under the default root, <home>/warehouse
        "--partition-keys",
        "ds",
    )
    assert hcat("beta", "topic", "web.t").stdout == "alpha.web.t\n"
    assert json.loads(hcat("beta", "-o", "json", "table", "show", "web.t").stdout)["topic"] == (
        "alpha.web.t"
    )
    listed = json.loads(hcat("gamma", "-o", "json", "table", "list").stdout)
    assert [item["topic"] for item in listed] == ["alpha.web.t"]


@pytest.mark.parametrize("where", ["before", "after"])
def test_hash_secret_prints_json_with_output_json(monkeypatch, capsys, where):
    import io

    from hcat_notify.model.principals import verify_secret

    monkeypatch.setattr(sys, "stdin", io.StringIO("s3cret\n"))
    args = ["hash-secret", "--secret-stdin"]
    code = main(["-o", "json", *args] if where == "before" else [*args, "-o", "json"])
    assert code == 0
    assert verify_secret("s3cret", json.loads(capsys.readouterr().out)["hash"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no terminal to ask for the secret on: give it on standard input with --secret-stdin"),
        (["--secret-stdin"], "no secret on standard input (it ended at once)"),
    ],
)
def test_hash_secret_at_the_end_of_input_without_a_terminal_is_one_line(args, message):
    """Not Ctrl-C (130), no GetPassWarning: one line, exit 2."""
    done = subprocess.run(
        [sys.executable, "-m", "hcat_notify.cli", "hash-secret", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"hcat-notify: error: {message}\n"


def test_no_help_shows_sphinx_markup():
    """``--help`` is for users: a docstring's reference markup for the API docs stays
    behind click's ``\\f`` (``table expect --help`` once showed ``:meth:`Catalog.expect```)."""
    import click

    from hcat_notify.cli.root import cli

    def helps(command: click.Command, ctx: click.Context) -> dict[str, str]:
        found = {ctx.command_path: command.get_help(ctx)}
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                found.update(helps(sub, click.Context(sub, info_name=name, parent=ctx)))
        return found

    pages = helps(cli, click.Context(cli, info_name="hcat-notify"))
    assert "hcat-notify table expect" in pages
    for path, text in pages.items():
        for markup in (":meth:", ":func:", ":class:", ":data:", "``"):
            assert markup not in text, (path, text)


def test_a_failing_first_step_leaves_no_catalog_behind(tmp_path: Path, capsys):
    """``table create`` and ``import`` create a catalog at a new home, but one that
    fails removes it again, with the directories made for it."""
    for n, args in enumerate(
        (
            ["import", str(tmp_path / "no-export")],
            ["table", "create", "web.t", "--location", " ", "--partition-keys", "ds"],
            ["table", "create", "web.t", "--location", "/w/t", "--partition-keys", "ds,ds"],
        )
    ):
        # A home each: this process remembers a catalog it saw at the newest revision.
        code = main(["--home", str(tmp_path / "mistyped" / str(n) / "home"), *args])
        out, err = capsys.readouterr()
        assert (code, out) == (2, ""), err
        assert err.count("\n") == 1, err
        assert list(tmp_path.iterdir()) == [], args
    home = tmp_path / "mistyped" / "home"
    create = ["table", "create", "web.t", "--location", "/w/t", "--partition-keys", "ds"]
    assert main(["--home", str(home), *create]) == 0
    # a catalog that was there before stays, whatever fails
    assert main(["--home", str(home), *create]) == 2
    assert main(["--home", str(home), "import", str(tmp_path / "no-export")]) == 2
    assert main(["--home", str(home), "topic", "web.t"]) == 0
    assert capsys.readouterr().out.endswith("hcat.web.t\n")


@pytest.mark.parametrize(
    "args",
    [
        ["table", "list"],
        ["-o", "json", "table", "list"],
        ["partitions", "web.t"],
        ["table", "show", "web.t"],
        ["webhooks", "list"],
        ["--help"],
    ],
)
def test_a_closed_standard_output_ends_quietly_with_141(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, args: list[str]
):
    """``hcat-notify ... | head -1``: the reader went away; every command ends as ``watch``
    does, exit 141, nothing on stderr (click alone would exit 1)."""
    home = ["--home", str(tmp_path / "home")]
    create = ["table", "create", "web.t", "--location", "/w/t", "--partition-keys", "ds"]
    assert main([*home, *create]) == 0
    capsys.readouterr()
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    with open(write, "w") as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        code = main([*home, *args])
        monkeypatch.undo()
    assert code == 141
    assert capsys.readouterr().err == ""
