"""The API's settings: host, port, URLs and principals with hashed secrets, from the
settings file's [api] table, the environment and arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from hcat_notify.config import DEFAULT_API_PRINCIPALS, load_settings
from hcat_notify.errors import ConfigError
from hcat_notify.model.principals import (
    Principal,
    Role,
    hash_secret,
    parse_principals,
    verify_secret,
)

FAST = 1_000  # iterations: the tests check the format, not the cost


def test_defaults_are_the_brokers_dev_pairs():
    settings = load_settings()
    assert (settings.api_host, settings.api_port, settings.api_workers) == ("127.0.0.1", 8080, 1)
    assert settings.api_urls == ()
    by_name = {p.name: p for p in settings.api_principals}
    assert by_name["hcat-publisher"].role is Role.WRITER
    assert by_name["hcat-reader"].role is Role.READER
    assert verify_secret("hcat-publisher-dev", by_name["hcat-publisher"].secret_hash)
    assert verify_secret("hcat-reader-dev", by_name["hcat-reader"].secret_hash)
    assert not verify_secret("hcat-reader-dev", by_name["hcat-publisher"].secret_hash)
    assert settings.api_principals == DEFAULT_API_PRINCIPALS
    hash(settings)  # writer.py keys its catalogs by settings


def test_hash_round_trip_and_salt():
    first, second = hash_secret("s3cret", iterations=FAST), hash_secret("s3cret", iterations=FAST)
    assert first != second  # a fresh salt each time
    assert first.startswith("pbkdf2_sha256$1000$")
    assert verify_secret("s3cret", first)
    assert not verify_secret("s3cret ", first)


def test_api_table_in_the_settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    writer, reader = hash_secret("w", iterations=FAST), hash_secret("r", iterations=FAST)
    config = tmp_path / "hcat-notify.toml"
    config.write_text(
        "[api]\n"
        'host = "0.0.0.0"\n'
        "port = 9000\n"
        "workers = 2\n"
        'url = "http://a:9000, https://b:9443/prefix/"\n'
        "[api.principals]\n"
        f'scheduler = {{ role = "reader", secret = "{reader}" }}\n'
        f'etl-job = {{ role = "writer", secret = "{writer}" }}\n'
    )
    monkeypatch.setenv("HCAT_NOTIFY_CONFIG", str(config))
    settings = load_settings()
    assert (settings.api_host, settings.api_port, settings.api_workers) == ("0.0.0.0", 9000, 2)
    assert settings.api_urls == ("http://a:9000", "https://b:9443/prefix")
    assert settings.api_principals == (
        Principal("scheduler", Role.READER, reader),
        Principal("etl-job", Role.WRITER, writer),
    )
    hash(settings)
    monkeypatch.setenv("HCAT_NOTIFY_API_PORT", "9100")  # environment beats the file
    assert load_settings().api_port == 9100
    assert load_settings(api_port=9200).api_port == 9200


def test_principals_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    secret = hash_secret("x", iterations=FAST)
    monkeypatch.setenv("HCAT_NOTIFY_API_PRINCIPALS", f"ops:writer:{secret}, dash:reader:{secret}")
    names = [(p.name, p.role) for p in load_settings().api_principals]
    assert names == [("ops", Role.WRITER), ("dash", Role.READER)]


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[api]\nport = 70000\n", "api_port: must be a TCP port"),
        ('[api]\nurl = "ftp://x"\n', "api_url: API URL 'ftp://x' is not of the form"),
        ('[api]\nurl = "http://u:p@x"\n', "may not carry a query or credentials"),
        ("[api]\nworkers = 0\n", "api_workers: must be between 1 and 64"),
        ('[api]\ncolour = "red"\n', "api.colour: unknown key"),
        ("api_port = 1\n[api]\nport = 2\n", "api_port is given twice"),
        (
            '[api.principals]\nbob = { role = "writer", secret = "hunter2" }\n',
            "principal 'bob': a secret must be stored hashed",
        ),
        (
            '[api.principals]\nbob = { role = "admin", secret = "x" }\n',
            "principal 'bob': role must be reader or writer",
        ),
        ('[api.principals]\nbob = { role = "reader" }\n', "principal 'bob': give both"),
        ('[api.principals]\n"b b" = { role = "reader", secret = "x" }\n', "invalid principal"),
        ("[api]\nprincipals = 3\n", "expected a table of principals"),
    ],
)
def test_bad_api_settings_name_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str, message: str
):
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    monkeypatch.setenv("HCAT_NOTIFY_CONFIG", str(config))
    with pytest.raises(ConfigError, match="invalid settings") as info:
        load_settings()
    assert message in str(info.value)


def test_hash_iterations_are_bounded():
    with pytest.raises(ValueError, match="iterations"):
        parse_principals(
            {"a": {"role": "reader", "secret": "pbkdf2_sha256$10$" + "0" * 32 + "$" + "0" * 64}}
        )


def test_principal_repr_shows_no_hash():
    principal = DEFAULT_API_PRINCIPALS[0]
    assert principal.secret_hash not in repr(principal)
    assert principal.secret_hash not in repr(load_settings())
