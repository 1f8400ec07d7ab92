"""Settings: file → environment → explicit arguments, nothing read at import time."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hcat_notify.config import BrokerAddress, TopicStrategy, load_settings
from hcat_notify.errors import ConfigError


def test_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("HCAT_NOTIFY_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = load_settings()
    assert settings.home == tmp_path / ".hcat-notify"
    assert settings.database_url == f"sqlite:///{tmp_path / '.hcat-notify' / 'catalog.db'}"
    assert settings.broker_addresses == (BrokerAddress("127.0.0.1", 61613),)
    assert (settings.broker_user, settings.broker_password) == (
        "hcat-publisher",
        "hcat-publisher-dev",
    )
    assert (settings.consumer_user, settings.consumer_password) == (
        "hcat-reader",
        "hcat-reader-dev",
    )
    assert settings.topic_prefix == "hcat"
    assert settings.topic_strategy is TopicStrategy.TABLE


def test_file_then_environment_then_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    config = tmp_path / "conf.toml"
    config.write_text(
        'topic_prefix = "fromfile"\n'
        'topic_strategy = "single"\n'
        'broker_user = "file-user"\n'
        'db_url = "sqlite:///file.db"\n'
    )
    monkeypatch.setenv("HCAT_NOTIFY_CONFIG", str(config))
    monkeypatch.setenv("HCAT_NOTIFY_TOPIC_STRATEGY", "database")
    monkeypatch.setenv("HCAT_NOTIFY_BROKER_USER", "env-user")
    settings = load_settings(broker_user="arg-user")
    assert settings.topic_prefix == "fromfile"  # only the file sets it
    assert settings.topic_strategy is TopicStrategy.DATABASE  # env beats file
    assert settings.broker_user == "arg-user"  # argument beats env
    assert settings.db_url == "sqlite:///file.db"


def test_config_file_in_home_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "hcat-notify.toml").write_text('topic_prefix = "homefile"\n')
    monkeypatch.setenv("HCAT_NOTIFY_HOME", str(home))
    assert load_settings().topic_prefix == "homefile"


def test_environment_is_read_at_call_time_not_import_time():
    script = (
        "import os, hcat_notify, hcat_notify.cli, hcat_notify.config as s\n"
        "os.environ['HCAT_NOTIFY_TOPIC_PREFIX'] = 'late'\n"
        "print(s.load_settings().topic_prefix)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCAT_NOTIFY_")}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "late"


def test_failover_broker_url():
    settings = load_settings(broker_url="stomp://a:1, stomp://b:2")
    assert settings.broker_addresses == (BrokerAddress("a", 1), BrokerAddress("b", 2))


def test_broker_url_defaults_the_port_and_brackets_ipv6():
    settings = load_settings(broker_url="stomp://a,stomp://[::1]:61614")
    assert settings.broker_addresses == (BrokerAddress("a", 61613), BrokerAddress("::1", 61614))
    assert [str(a) for a in settings.broker_addresses] == [
        "stomp://a:61613",
        "stomp://[::1]:61614",
    ]


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("stomp://a:1,,stomp://b:2", r"has an empty entry \(entry 2 of 3\)"),
        ("stomp://a:1,", r"has an empty entry \(entry 2 of 2\)"),
        ("stomp://a:1,tcp://b:2", r"'tcp://b:2' \(entry 2 of 2\) is not of the form stomp://"),
        ("stomp://a:1,stomp://b:0", r"'stomp://b:0' \(entry 2 of 2\) has an invalid port"),
        ("stomp://a:70000", r"'stomp://a:70000' has an invalid port"),
        ("stomp://a:1,stomp://a:1", r"names stomp://a:1 twice \(entry 2 of 2\)"),
        ("stomp://a,stomp://a:61613", r"names stomp://a:61613 twice"),
        ("stomp://a:1/queue", r"has a path"),
        ("failover:(tcp://a:61616,tcp://b:61617)", r"is a JMS failover URL .*stomp://host:port"),
    ],
)
def test_a_malformed_entry_refuses_the_whole_broker_list(url: str, match: str):
    with pytest.raises(ConfigError, match=match) as info:
        load_settings(broker_url=url)
    assert "\n" not in str(info.value)


def test_credentials_in_the_broker_url_are_refused_without_echoing_them():
    with pytest.raises(ConfigError, match=r"'stomp://\*\*\*@b:2' \(entry 2 of 2\) carries") as info:
        load_settings(broker_url="stomp://a:1,stomp://user:s3cret@b:2")
    assert "s3cret" not in str(info.value)
    assert "broker_user and broker_password" in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"broker_url": "http://x:1"},
            "broker_url: broker URL 'http://x:1' is not of the form stomp://host:port",
        ),
        ({"broker_url": "stomp://x:notaport"}, "invalid port"),
        ({"topic_strategy": "per-partition"}, "topic_strategy"),
        ({"topic_prefix": "hcat/x"}, "invalid topic name"),
        ({"broker_timeout": 0}, "broker_timeout"),
        ({"cloudevents_source": "urn:a b"}, "cloudevents_source: CloudEvents source"),
        ({"home": ""}, "home: is empty; leave it unset for the default ~/.hcat-notify"),
        ({"home": " "}, "home: is empty"),
    ],
)
def test_invalid_values_give_one_clear_error(overrides, match):
    with pytest.raises(ConfigError, match=match) as info:
        load_settings(**overrides)
    assert "\n" not in str(info.value)


def test_cloudevents_source_defaults_to_the_topic_prefix(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("HCAT_NOTIFY_CLOUDEVENTS_SOURCE", raising=False)
    assert load_settings().event_source == "urn:hcat-notify:hcat"
    assert load_settings(topic_prefix="prod").event_source == "urn:hcat-notify:prod"
    monkeypatch.setenv("HCAT_NOTIFY_CLOUDEVENTS_SOURCE", "https://hcat.example.com")
    assert load_settings(topic_prefix="prod").event_source == "https://hcat.example.com"


def test_unknown_key_in_file_is_an_error(tmp_path: Path):
    config = tmp_path / "c.toml"
    config.write_text('brokr_url = "stomp://x:1"\n')
    with pytest.raises(ConfigError, match="brokr_url"):
        load_settings(config_file=config)


def test_missing_or_broken_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HCAT_NOTIFY_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match=r"nope\.toml .*does not exist"):
        load_settings()
    broken = tmp_path / "broken.toml"
    broken.write_text("this is = = not toml")
    with pytest.raises(ConfigError, match=r"cannot read config file .*broken\.toml"):
        load_settings(config_file=broken)


def test_settings_are_immutable():
    settings = load_settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.topic_prefix = "x"  # type: ignore[misc]


def test_the_production_example_lists_both_brokers_of_the_pair():
    example = Path(__file__).resolve().parents[2] / "deploy" / "production" / "hcat-notify.toml"
    settings = load_settings(config_file=example)
    assert [str(a) for a in settings.broker_addresses] == [
        "stomp://broker-a.example.com:61613",
        "stomp://broker-b.example.com:61613",
    ]


def test_an_empty_home_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch):
    """``HCAT_NOTIFY_HOME=`` would put the catalog in whatever directory a command runs
    in (``Path("")`` is ``.``): refused, naming where it came from."""
    monkeypatch.setenv("HCAT_NOTIFY_HOME", "")
    with pytest.raises(ConfigError, match=r"home: is empty; .* \(from environment\)"):
        load_settings()
