"""One settings object, layered: file → environment → explicit arguments.

The file is TOML (``hcat-notify.toml``): its path comes from ``HCAT_NOTIFY_CONFIG``, else
``<home>/hcat-notify.toml`` is read if it exists. Environment variables are
``HCAT_NOTIFY_<FIELD>`` (e.g. ``HCAT_NOTIFY_DB_URL``). Arguments given to
:func:`load_settings` win over both. Nothing is read at import time.

The loader is plain Python (a frozen dataclass and a converter per field type) rather
than pydantic-settings: importing that costs more than every short command of the
command line may take in all (see docs/architecture.md, "Start-up time").
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hcat_notify.durations import parse_duration
from hcat_notify.errors import ConfigError, InvalidIdentifierError, InvalidInputError
from hcat_notify.model.cloudevents import validate_source
from hcat_notify.model.principals import Principal, Role, parse_principals
from hcat_notify.model.topics import (
    DEFAULT_TOPIC_PREFIX,
    MAX_BUCKETS,
    TopicStrategy,
    validate_topic_name,
)

__all__ = [
    "DEFAULT_API_HOST",
    "DEFAULT_API_PORT",
    "DEFAULT_API_PRINCIPALS",
    "DEFAULT_BROKER_URL",
    "DEFAULT_CLOUDEVENTS_SOURCE_PREFIX",
    "DEFAULT_CONSUMER_PASSWORD",
    "DEFAULT_CONSUMER_USER",
    "DEFAULT_HOME",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_OUTBOX_RETENTION",
    "DEFAULT_PUBLISHER_PASSWORD",
    "DEFAULT_PUBLISHER_USER",
    "DEFAULT_TOPIC_PREFIX",
    "DEFAULT_WAREHOUSE_DIR",
    "KEEP_FOREVER",
    "BrokerAddress",
    "Settings",
    "TopicStrategy",
    "load_settings",
    "parse_api_urls",
    "parse_broker_url",
]

ENV_PREFIX = "HCAT_NOTIFY_"
CONFIG_ENV = "HCAT_NOTIFY_CONFIG"
CONFIG_FILE_NAME = "hcat-notify.toml"

DEFAULT_HOME = "~/.hcat-notify"
DEFAULT_WAREHOUSE_DIR = "warehouse"
"""The default warehouse root, under the home (``~/.hcat-notify/warehouse``)."""
DEFAULT_BROKER_PORT = 61613
DEFAULT_BROKER_URL = f"stomp://127.0.0.1:{DEFAULT_BROKER_PORT}"
# Dev-only credentials of deploy/activemq/activemq.xml; real ones come from config.
DEFAULT_PUBLISHER_USER = "hcat-publisher"
DEFAULT_PUBLISHER_PASSWORD = "hcat-publisher-dev"  # noqa: S105 - documented dev default
DEFAULT_CONSUMER_USER = "hcat-reader"
DEFAULT_CONSUMER_PASSWORD = "hcat-reader-dev"  # noqa: S105 - documented dev default
DEFAULT_BROKER_TIMEOUT = 10.0
DEFAULT_API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8080
DEFAULT_API_TIMEOUT = 10.0
# The broker's dev pairs may use the API too (the writer writes); their secrets are public
# (deploy/activemq/activemq.xml), so their hashes need no more than the fewest iterations.
DEFAULT_API_PRINCIPALS = (
    Principal(
        DEFAULT_PUBLISHER_USER,
        Role.WRITER,
        "pbkdf2_sha256$10000$53d40414ce7e3ade2163c4c22cf7f54b$"
        "0aa86e5afe009975937a66d3aea1d9565574a9b6c8bfcd331fa0746a88506fa4",
    ),
    Principal(
        DEFAULT_CONSUMER_USER,
        Role.READER,
        "pbkdf2_sha256$10000$95a1090e73c1bacf7acea1326a39d0da$"
        "90a40513087e647bf6e533714a3ae6c55a0598ae7dd906ab784a5bdb1e43ebe5",
    ),
)
# Keys of a TOML table [NAME] stand for the flat key NAME_KEY: [api] port = 8080 is
# api_port = 8080, and [api.principals] is api_principals.
_TOML_SECTIONS = ("api",)
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024
"""The largest message body a batched announcement may make (``max_message_bytes``)."""
MIN_MAX_MESSAGE_BYTES = 4096
DEFAULT_WEBHOOK_TIMEOUT = 10.0
DEFAULT_WEBHOOK_MAX_AGE = 24 * 3600.0
"""Seconds a webhook's failing events are retried before they are parked."""
DEFAULT_WEBHOOK_ROTATION_OVERLAP = 24 * 3600.0
DEFAULT_OUTBOX_RETENTION = "7d"
"""How long outbox events are kept at least (``outbox_retention``): the default retention
of a table's dones, so that a consumer that was away as long as a late subscriber may be
still catches up by cursor (docs/operations.md, "The outbox's retention")."""
KEEP_FOREVER = "forever"
"""The ``outbox_retention`` that keeps every event (the outbox is never pruned)."""
DEFAULT_CLOUDEVENTS_SOURCE_PREFIX = "urn:hcat-notify:"
"""The default CloudEvents ``source`` is this plus the topic prefix (``urn:hcat-notify:hcat``):
the same for every process of a catalog, and different for two catalogs on one broker,
which must have different prefixes anyway."""


@dataclass(frozen=True)
class BrokerAddress:
    """One ``stomp://host:port`` entry of the broker URL."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"stomp://{host}:{self.port}"


def parse_broker_url(url: str) -> tuple[BrokerAddress, ...]:
    """The addresses of a ``stomp://host:port[,stomp://host:port...]`` URL, in order.

    Every entry must be well formed: a list with one bad entry is refused as a whole
    rather than run with fewer brokers than the operator configured. (An entry that is
    well formed but unreachable is skipped when connecting.)

    Raises:
        ValueError: naming the entry: not ``stomp://host[:port]``, an invalid port,
            empty, credentials in it, a path, listed twice, or a JMS ``failover:`` URL.
    """
    if url.strip().lower().startswith("failover:"):
        raise ValueError(
            f"broker URL {url!r} is a JMS failover URL (for OpenWire clients such as "
            "Oozie); hcat-notify takes the brokers' STOMP addresses, "
            "stomp://host:port,stomp://host:port, and fails over by itself"
        )
    entries = url.split(",")
    addresses: list[BrokerAddress] = []
    for number, raw in enumerate(entries, 1):
        part = raw.strip()
        where = f" (entry {number} of {len(entries)})" if len(entries) > 1 else ""
        if not part:
            raise ValueError(f"broker URL {url!r} has an empty entry{where}")
        parsed = urlsplit(part)
        if parsed.scheme != "stomp" or not parsed.hostname:
            raise ValueError(f"broker URL {part!r}{where} is not of the form stomp://host:port")
        if parsed.username is not None or parsed.password is not None:
            shown = f"stomp://***@{parsed.netloc.rpartition('@')[2]}"
            raise ValueError(
                f"broker URL {shown!r}{where} carries credentials; "
                "set broker_user and broker_password instead"
            )
        try:
            port = parsed.port
        except ValueError:
            port = 0
        if port == 0:
            raise ValueError(f"broker URL {part!r}{where} has an invalid port") from None
        if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
            raise ValueError(f"broker URL {part!r}{where} has a path; expected stomp://host:port")
        address = BrokerAddress(parsed.hostname, port or DEFAULT_BROKER_PORT)
        if address in addresses:
            raise ValueError(f"broker URL {url!r} names {address} twice{where}")
        addresses.append(address)
    return tuple(addresses)


def parse_api_urls(value: str) -> tuple[str, ...]:
    """The ``http(s)://host[:port][/prefix]`` URLs of a comma-separated list, in order.

    Raises:
        ValueError: an entry is not an http or https URL with a host.
    """
    urls = []
    for raw in value.split(","):
        part = raw.strip()
        parsed = urlsplit(part)
        try:
            parsed.port  # noqa: B018 - raises on a malformed port
        except ValueError:
            raise ValueError(f"API URL {part!r} has an invalid port") from None
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"API URL {part!r} is not of the form http(s)://host:port")
        if parsed.query or parsed.fragment or parsed.username:
            raise ValueError(f"API URL {part!r} may not carry a query or credentials")
        urls.append(part.rstrip("/"))
    return tuple(urls)


def _checked_api_url(value: str) -> str:
    parse_api_urls(value)
    return value


def _port(value: int) -> int:
    if not 0 <= value <= 65_535:
        raise ValueError(f"must be a TCP port (0 to 65535), not {value}")
    return value


def _workers(value: int) -> int:
    if not 1 <= value <= 64:
        raise ValueError(f"must be between 1 and 64, not {value}")
    return value


def _positive(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive, finite number, not {value!r}")
    return value


def _checked_broker_url(value: str) -> str:
    parse_broker_url(value)
    return value


def _checked_prefix(value: str) -> str:
    try:
        return validate_topic_name(value)
    except InvalidIdentifierError as exc:
        raise ValueError(str(exc)) from None


def _checked_source(value: str) -> str:
    try:
        return validate_source(value)
    except InvalidInputError as exc:
        raise ValueError(str(exc)) from None


def _bucket_count(value: int) -> int:
    if not 1 <= value <= MAX_BUCKETS:
        raise ValueError(f"must be between 1 and {MAX_BUCKETS}, not {value}")
    return value


def _message_cap(value: int) -> int:
    if value < MIN_MAX_MESSAGE_BYTES:
        raise ValueError(f"must be at least {MIN_MAX_MESSAGE_BYTES} bytes, not {value}")
    return value


def _warehouse_roots(value: tuple[str, ...], what: str = "warehouse root") -> tuple[str, ...]:
    roots = []
    for raw in value:
        root = raw.strip().rstrip("/") if raw.strip() != "/" else "/"
        if not root:
            raise ValueError(f"a {what} is empty")
        parts = urlsplit(root) if "://" in root else None
        path = parts.path if parts is not None else root
        if parts is None and not root.startswith(("/", "~")):
            raise ValueError(f"{what} {raw!r} is not an absolute path or a URI")
        if ".." in path.split("/"):
            raise ValueError(f"{what} {raw!r} has a '..' segment")
        if parts is None or parts.scheme == "file":
            root = os.path.abspath(os.path.expanduser(path))
        roots.append(root)
    return tuple(dict.fromkeys(roots))


def _api_external_roots(value: tuple[str, ...]) -> tuple[str, ...]:
    return _warehouse_roots(tuple(raw for raw in value if raw.strip()), "API external root")


def _webhook_hosts(value: tuple[str, ...]) -> tuple[str, ...]:
    hosts = tuple(host.strip().lower().strip("[]") for host in value if host.strip())
    for host in hosts:
        if any(char in host for char in "/@ ") or not host.isprintable():
            raise ValueError(f"webhook host {host!r} is not a host name or address")
    return hosts


def _outbox_retention(value: str) -> str:
    if value.strip().lower() == KEEP_FOREVER:
        return KEEP_FOREVER
    try:
        parse_duration(value)
    except InvalidInputError as exc:
        raise ValueError(f"{exc} (or {KEEP_FOREVER!r})") from None
    return value.strip()


def _check(func: Callable[[Any], Any]) -> dict[str, Any]:
    return {"check": func}


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything hcat-notify needs to know about its deployment.

    Build it with :func:`load_settings`; the object is immutable (and hashable).
    """

    home: Path = Path(DEFAULT_HOME)
    db_url: str | None = None
    broker_url: str = field(default=DEFAULT_BROKER_URL, metadata=_check(_checked_broker_url))
    broker_user: str = DEFAULT_PUBLISHER_USER
    broker_password: str = field(default=DEFAULT_PUBLISHER_PASSWORD, repr=False)
    consumer_user: str = DEFAULT_CONSUMER_USER
    consumer_password: str = field(default=DEFAULT_CONSUMER_PASSWORD, repr=False)
    topic_prefix: str = field(default=DEFAULT_TOPIC_PREFIX, metadata=_check(_checked_prefix))
    topic_strategy: TopicStrategy = TopicStrategy.TABLE
    broker_timeout: float = field(default=DEFAULT_BROKER_TIMEOUT, metadata=_check(_positive))
    server_name: str | None = None
    relay_buckets: int | None = field(default=None, metadata=_check(_bucket_count))
    api_host: str = DEFAULT_API_HOST
    api_port: int = field(default=DEFAULT_API_PORT, metadata=_check(_port))
    api_workers: int = field(default=1, metadata=_check(_workers))
    api_url: str | None = field(default=None, metadata=_check(_checked_api_url))
    api_timeout: float = field(default=DEFAULT_API_TIMEOUT, metadata=_check(_positive))
    api_principals: tuple[Principal, ...] = field(default=DEFAULT_API_PRINCIPALS, repr=False)
    max_message_bytes: int = field(default=DEFAULT_MAX_MESSAGE_BYTES, metadata=_check(_message_cap))
    warehouse_roots: tuple[str, ...] = field(default=(), metadata=_check(_warehouse_roots))
    api_external_roots: tuple[str, ...] = field(default=(), metadata=_check(_api_external_roots))
    """Directories outside the warehouse roots where the HTTP API may register locations
    too (external tables' data); the command line is not bound by them."""
    cloudevents_source: str | None = field(default=None, metadata=_check(_checked_source))
    """The ``source`` of the CloudEvents this catalog's events become (a URI)."""
    db_auto_upgrade: bool = False
    """Let writers migrate a catalog that is not a SQLite file (PostgreSQL is migrated by
    ``hcat-notify db upgrade`` otherwise: docs/operations.md)."""
    webhook_allow: tuple[str, ...] = field(default=(), metadata=_check(_webhook_hosts))
    """Hosts a webhook may reach over plain ``http://`` (HTTPS is always allowed)."""
    webhook_key: str | None = field(default=None, repr=False)
    """A Fernet key (``cryptography``) that encrypts webhook secrets at rest."""
    webhook_timeout: float = field(default=DEFAULT_WEBHOOK_TIMEOUT, metadata=_check(_positive))
    """Seconds for each webhook request (connect, send, answer)."""
    webhook_max_age: float = field(default=DEFAULT_WEBHOOK_MAX_AGE, metadata=_check(_positive))
    """Seconds a webhook's events are retried before they are parked."""
    webhook_rotation_overlap: float = field(
        default=DEFAULT_WEBHOOK_ROTATION_OVERLAP, metadata=_check(_positive)
    )
    """Seconds the previous secret still signs after ``webhooks rotate-secret``."""
    outbox_retention: str = field(
        default=DEFAULT_OUTBOX_RETENTION, metadata=_check(_outbox_retention)
    )
    """How long the outbox keeps an event at least: a duration (``7d``, ``12h``) or
    ``forever``; ``hcat-notify sweep`` prunes older events nobody still needs."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home).expanduser())

    @property
    def database_url(self) -> str:
        """The catalog database URL: configured, or a SQLite file in the data dir."""
        if self.db_url:
            return self.db_url
        return f"sqlite:///{self.home / 'catalog.db'}"

    @property
    def outbox_retention_period(self) -> timedelta | None:
        """:attr:`outbox_retention` as a period (None: ``forever``)."""
        if self.outbox_retention == KEEP_FOREVER:
            return None
        return parse_duration(self.outbox_retention)

    @property
    def warehouse(self) -> tuple[str, ...]:
        """The warehouse roots: configured, or ``<home>/warehouse``
        (:mod:`hcat_notify.warehouse`)."""
        if self.warehouse_roots:
            return self.warehouse_roots
        return (os.path.abspath(self.home / DEFAULT_WAREHOUSE_DIR),)

    @property
    def event_source(self) -> str:
        """The CloudEvents ``source``: configured, or ``urn:hcat-notify:<topic prefix>``."""
        return self.cloudevents_source or DEFAULT_CLOUDEVENTS_SOURCE_PREFIX + self.topic_prefix

    @property
    def broker_addresses(self) -> tuple[BrokerAddress, ...]:
        """The broker URL's hosts, in failover order."""
        return parse_broker_url(self.broker_url)

    @property
    def api_urls(self) -> tuple[str, ...]:
        """The HTTP API's instances a client fails over between (empty: use the database)."""
        return parse_api_urls(self.api_url) if self.api_url else ()


@functools.cache
def _fields() -> dict[str, tuple[dataclasses.Field[Any], Any]]:
    hints = typing.get_type_hints(Settings)
    return {item.name: (item, hints[item.name]) for item in dataclasses.fields(Settings)}


def _convert(kind: Any, value: Any) -> Any:
    """``value`` (from TOML, the environment or an argument) as a value of ``kind``."""
    options = typing.get_args(kind)
    if options and type(None) in options:  # X | None
        if value is None:
            return None
        (kind,) = [option for option in options if option is not type(None)]
    if kind is Path:
        if not isinstance(value, str | Path):
            raise ValueError(f"expected a path, not {type(value).__name__}")
        if isinstance(value, str) and not value.strip():
            # Path("") is the current directory: a catalog would land wherever the
            # command happens to run.
            raise ValueError(f"is empty; leave it unset for the default {DEFAULT_HOME}")
        return Path(value).expanduser()
    if isinstance(kind, type) and issubclass(kind, Enum):
        try:
            return kind(str(value).lower() if isinstance(value, str) else value)
        except ValueError:
            choices = ", ".join(repr(member.value) for member in kind)
            raise ValueError(f"{value!r} is not one of {choices}") from None
    if kind is bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower() if isinstance(value, str | int) else None
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{value!r} is not true or false")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"expected a number, not {type(value).__name__}")
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a number") from None
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"expected a whole number, not {type(value).__name__}")
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a whole number") from None
    if kind == tuple[Principal, ...]:
        return parse_principals(value)
    if kind == tuple[str, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ValueError("expected a list of strings, or one comma-separated string")
        return tuple(items)
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, not {type(value).__name__}")
        return value
    raise TypeError(f"no converter for settings of type {kind!r}")  # pragma: no cover


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc


def _flatten(from_file: Mapping[str, Any], known: Mapping[str, Any]) -> dict[str, Any]:
    """The file's keys as flat setting names: ``[api] port`` is ``api_port``."""
    flat: dict[str, Any] = {}
    for key, value in from_file.items():
        if key in _TOML_SECTIONS and isinstance(value, Mapping):
            for inner, item in value.items():
                name = f"{key}_{inner}"
                if name not in known:
                    name = f"{key}.{inner}"  # reported as unknown under its dotted name
                if name in flat or name in from_file:
                    raise ConfigError(f"invalid settings: {name} is given twice")
                flat[name] = item
        else:
            if key in flat:
                raise ConfigError(f"invalid settings: {key} is given twice")
            flat[key] = value
    return flat


def _config_path(explicit: Path | None, overrides: Mapping[str, Any]) -> Path | None:
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
        ConfigError: the file is missing or not TOML, a key is unknown, or a value is
            invalid; the message names every problem and where the value came from.
    """
    known = _fields()
    given = {key: value for key, value in overrides.items() if value is not None}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigError(f"invalid settings: unknown setting(s) {', '.join(unknown)}")
    path = _config_path(Path(config_file) if config_file is not None else None, given)
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if path is not None:
        from_file = _flatten(_read_toml(path), known)
        extra = sorted(set(from_file) - set(known))
        if extra:
            raise ConfigError(
                f"invalid settings: {', '.join(extra)}: unknown key(s) in config file {path}"
            )
        layers.append((f"config file {path}", from_file))
    from_env = {
        name: os.environ[f"{ENV_PREFIX}{name.upper()}"]
        for name in known
        if f"{ENV_PREFIX}{name.upper()}" in os.environ
    }
    layers.append(("environment", from_env))
    layers.append(("arguments", given))
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, (spec, kind) in known.items():
        chosen = [(source, layer[name]) for source, layer in layers if name in layer]
        if not chosen:
            continue
        source, raw = chosen[-1]
        try:
            value = _convert(kind, raw)
            check = spec.metadata.get("check")
            values[name] = check(value) if check is not None and value is not None else value
        except ValueError as exc:
            where = "" if source == "arguments" else f" (from {source})"
            problems.append(f"{name}: {exc}{where}")
    if problems:
        raise ConfigError("invalid settings: " + "; ".join(problems))
    return Settings(**values)
