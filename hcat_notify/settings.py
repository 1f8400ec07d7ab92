"""One settings object, layered: file → environment → explicit arguments.

The file is TOML (``hcat-notify.toml``): its path comes from ``HCAT_NOTIFY_CONFIG``, else
``<home>/hcat-notify.toml`` is read if it exists. Environment variables are
``HCAT_NOTIFY_<FIELD>`` (e.g. ``HCAT_NOTIFY_DB_URL``). Arguments given to
:func:`load_settings` win over both. Nothing is read at import time.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from hcat_notify.errors import ConfigError

__all__ = [
    "DEFAULT_BROKER_URL",
    "DEFAULT_CONSUMER_PASSWORD",
    "DEFAULT_CONSUMER_USER",
    "DEFAULT_HOME",
    "DEFAULT_PUBLISHER_PASSWORD",
    "DEFAULT_PUBLISHER_USER",
    "DEFAULT_TOPIC_PREFIX",
    "BrokerAddress",
    "Settings",
    "TopicStrategy",
    "load_settings",
]

ENV_PREFIX = "HCAT_NOTIFY_"
CONFIG_ENV = "HCAT_NOTIFY_CONFIG"
CONFIG_FILE_NAME = "hcat-notify.toml"

DEFAULT_HOME = "~/.hcat-notify"
DEFAULT_BROKER_URL = "stomp://127.0.0.1:61613"
# Dev-only credentials of deploy/activemq/activemq.xml; real ones come from config.
DEFAULT_PUBLISHER_USER = "hcat-publisher"
DEFAULT_PUBLISHER_PASSWORD = "hcat-publisher-dev"  # noqa: S105 - documented dev default
DEFAULT_CONSUMER_USER = "hcat-reader"
DEFAULT_CONSUMER_PASSWORD = "hcat-reader-dev"  # noqa: S105 - documented dev default
DEFAULT_TOPIC_PREFIX = "hcat"

# The TOML file of the load_settings() call in progress; a context variable keeps
# concurrent loads (threads) from seeing each other's file.
_TOML_PATH: ContextVar[Path | None] = ContextVar("hcat_notify_toml_path", default=None)


class TopicStrategy(StrEnum):
    """How tables map to topics (Hive's conventions)."""

    TABLE = "table"  # <prefix>.<db>.<table>
    DATABASE = "database"  # <prefix>.<db>
    SINGLE = "single"  # <prefix>


@dataclass(frozen=True)
class BrokerAddress:
    """One ``stomp://host:port`` entry of the broker URL."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"stomp://{self.host}:{self.port}"


def _parse_broker_url(url: str) -> tuple[BrokerAddress, ...]:
    addresses = []
    for raw in url.split(","):
        part = raw.strip()
        parsed = urlsplit(part)
        if parsed.scheme != "stomp" or not parsed.hostname:
            raise ValueError(f"broker URL {part!r} is not of the form stomp://host:port")
        try:
            port = parsed.port or 61613
        except ValueError:
            raise ValueError(f"broker URL {part!r} has an invalid port") from None
        addresses.append(BrokerAddress(parsed.hostname, port))
    return tuple(addresses)


class Settings(BaseSettings):
    """Everything hcat-notify needs to know about its deployment.

    Build it with :func:`load_settings`; the object is immutable.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", validate_default=True
    )

    home: Path = Field(default=Path(DEFAULT_HOME), description="data directory")
    db_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite file in the data dir"
    )
    broker_url: str = DEFAULT_BROKER_URL
    broker_user: str = DEFAULT_PUBLISHER_USER
    broker_password: str = DEFAULT_PUBLISHER_PASSWORD
    consumer_user: str = DEFAULT_CONSUMER_USER
    consumer_password: str = DEFAULT_CONSUMER_PASSWORD
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    topic_strategy: TopicStrategy = TopicStrategy.TABLE
    broker_timeout: float = Field(default=10.0, gt=0, description="seconds per broker wait")
    server_name: str | None = Field(
        default=None, description="'server' field of messages; default: host name"
    )

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator("broker_url", mode="after")
    @classmethod
    def _check_broker_url(cls, value: str) -> str:
        _parse_broker_url(value)
        return value

    @field_validator("topic_prefix", mode="after")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        from hcat_notify.topics import validate_topic_name

        return validate_topic_name(value)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_path = _TOML_PATH.get()
        if toml_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)

    @property
    def database_url(self) -> str:
        """The catalog database URL: configured, or a SQLite file in the data dir."""
        if self.db_url:
            return self.db_url
        return f"sqlite:///{self.home / 'catalog.db'}"

    @property
    def broker_addresses(self) -> tuple[BrokerAddress, ...]:
        """The broker URL's hosts, in failover order."""
        return _parse_broker_url(self.broker_url)


def _config_path(explicit: Path | None, overrides: dict[str, Any]) -> Path | None:
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"config file {explicit} does not exist")
        return explicit
    named = os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} (from {CONFIG_ENV}) does not exist")
        return path
    home = overrides.get("home") or os.environ.get(f"{ENV_PREFIX}HOME") or DEFAULT_HOME
    candidate = Path(home).expanduser() / CONFIG_FILE_NAME
    return candidate if candidate.is_file() else None


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "settings"
        message = str(item["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {message}")
    return "invalid settings: " + "; ".join(problems)


def load_settings(*, config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Build settings from the TOML file, the environment and ``overrides``.

    Args:
        config_file: TOML file to read; default ``$HCAT_NOTIFY_CONFIG``, else
            ``<home>/hcat-notify.toml`` when it exists.
        **overrides: field values that win over file and environment (``None`` values are
            ignored, so CLI options can be passed through unconditionally).

    Returns:
        The immutable :class:`Settings`.

    Raises:
        ConfigError: the file is missing or not TOML, or a value is invalid.
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    path = _config_path(Path(config_file) if config_file is not None else None, given)
    token = _TOML_PATH.set(path)
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc
    except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    finally:
        _TOML_PATH.reset(token)
