"""``hcat-notify webhooks``: bad input refused with one line and nothing written, the
secret printed once, list/show/pause/resume/rotate/replay/remove (issue 30)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

Run = Callable[..., tuple[int, str, str]]
URL = "https://hooks.example.com/in"


@pytest.fixture
def tables(run: Run) -> None:
    for name in ("web.clicks", "sales.orders"):
        code, _, err = run(
            "table", "create", name, "--location", f"/{name}", "--partition-keys", "ds"
        )
        assert code == 0, err


@pytest.mark.usefixtures("tables")
def test_bad_input_is_one_line_and_writes_nothing(run: Run, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HCAT_NOTIFY_WEBHOOK_ALLOW", "localhost")
    code, out, err = run("-o", "json", "webhooks", "add", "ops", URL, "--tables", "web.*")
    assert code == 0, err
    before = run("-o", "json", "webhooks", "list")[1]
    refusals = {
        "bad URL": (("webhooks", "add", "a", "https//nohost", "--tables", "web.*"), "URL"),
        "not http": (("webhooks", "add", "a", "ftp://x.example/", "--tables", "web.*"), "URL"),
        "unknown table": (
            ("webhooks", "add", "a", URL, "--tables", "web.nope"),
            "matches no table",
        ),
        "malformed": (("webhooks", "add", "a", URL, "--tables", "web.c;drop"), "malformed"),
        "duplicate": (("webhooks", "add", "ops", URL, "--tables", "web.*"), "exists already"),
        "kind": (
            ("webhooks", "add", "a", URL, "--tables", "web.*", "--events", "ADD_PARTITON"),
            "unknown event kind 'ADD_PARTITON'",
        ),
        "plain http": (
            ("webhooks", "add", "a", "http://hooks.example.com/in", "--tables", "web.*"),
            "plain HTTP to hooks.example.com is not allowed",
        ),
        "both starts": (
            ("webhooks", "add", "a", URL, "--tables", "web.*", "--from-now", "--from-event", "3"),
            "not both",
        ),
        "format": (
            ("webhooks", "add", "a", URL, "--tables", "web.*", "--format", "cloudevent"),
            "unknown webhook format 'cloudevent' (cloudevents, cloudevents-batch, hive)",
        ),
        "unknown hook": (("webhooks", "show", "nope"), "no webhook named 'nope'"),
        "show after no topic": (
            ("webhooks", "show", "ops", "--after", "bad topic"),
            "invalid topic name 'bad topic'",
        ),
        "replay from 0": (("webhooks", "replay", "ops", "--from-event", "0"), "from-event"),
        "replay beyond the newest": (
            ("webhooks", "replay", "ops", "--from-event", "99999999"),
            "the first event 99999999 is beyond the newest event",
        ),
        "add beyond the newest": (
            ("webhooks", "add", "a", URL, "--tables", "web.*", "--from-event", "99999999"),
            "beyond the newest event",
        ),
    }
    for what, (args, message) in refusals.items():
        code, out, err = run(*args)
        assert code == 2, what
        assert out == "", what
        assert len(err.strip().splitlines()) == 1, (what, err)
        assert message in err, (what, err)
        assert run("-o", "json", "webhooks", "list")[1] == before, what
    # an allowed host may be reached over plain HTTP
    code, _, err = run("webhooks", "add", "local", "http://localhost:9/in", "--tables", "web.*")
    assert code == 0, err


@pytest.mark.usefixtures("tables")
def test_the_secret_is_printed_once(run: Run):
    code, out, err = run(
        "webhooks",
        "add",
        "ops",
        URL,
        "--tables",
        "web.*,sales.orders",
        "--events",
        "MARK_SET_DONE,ADD_PARTITION",
        "--format",
        "hive",
        "--from-event",
        "1",
    )
    assert code == 0, err
    secret = out.strip().splitlines()[-1].split()[-1]
    assert secret.startswith("whsec_")
    _, listed, _ = run("-o", "json", "webhooks", "list")
    (item,) = json.loads(listed)
    assert item["events"] == ["MARK_SET_DONE", "ADD_PARTITION"]
    assert (item["format"], item["state"], item["start_after"]) == ("hive", "active", 0)
    _, shown, _ = run("-o", "json", "webhooks", "show", "ops")
    assert secret not in listed
    assert secret not in shown
    assert "secret" not in json.loads(shown)
    code, out, _ = run("-o", "json", "webhooks", "rotate-secret", "ops")
    rotated = json.loads(out)
    assert rotated["secret"].startswith("whsec_")
    assert rotated["secret"] != secret
    # one moment, under the API's name (rotatingUntil) and the one it had before
    assert rotated["rotating_until"] is not None
    assert rotated["previous_secret_signs_until"] == rotated["rotating_until"]
    shown_after = json.loads(run("-o", "json", "webhooks", "show", "ops")[1])
    assert shown_after["rotating_until"] == rotated["rotating_until"]
    assert json.loads(run("-o", "json", "webhooks", "pause", "ops")[1])["state"] == "paused"
    assert json.loads(run("-o", "json", "webhooks", "resume", "ops")[1])["state"] == "active"
    for day in ("1", "2", "3"):  # events up to 5 at least: none to start from beyond it
        assert run("mark-done", "web.clicks", f"ds={day}")[0] == 0
    code, out, _ = run("webhooks", "replay", "ops", "--from-event", "5")
    assert code == 0
    assert "from event 5" in out
    assert json.loads(run("-o", "json", "webhooks", "show", "ops")[1])["start_after"] == 4
    assert run("webhooks", "retry", "ops")[1].strip() == "no parked topics"
    assert run("webhooks", "remove", "ops")[0] == 0
    assert run("webhooks", "list")[1].strip() == "no webhooks"


@pytest.mark.usefixtures("tables")
def test_show_says_each_format_and_its_content_type(run: Run):
    assert run("webhooks", "add", "one", URL, "--tables", "web.*")[0] == 0  # the default
    code, _, err = run(
        "webhooks", "add", "many", URL, "--tables", "web.*", "--format", "cloudevents-batch"
    )
    assert code == 0, err
    shown = {
        name: json.loads(run("-o", "json", "webhooks", "show", name)[1]) for name in ("one", "many")
    }
    assert {n: (s["format"], s["content_type"]) for n, s in shown.items()} == {
        "one": ("cloudevents", "application/cloudevents+json"),
        "many": ("cloudevents-batch", "application/cloudevents-batch+json"),
    }
    text = run("webhooks", "show", "one")[1]
    assert "cloudevents (application/cloudevents+json)" in text, text
