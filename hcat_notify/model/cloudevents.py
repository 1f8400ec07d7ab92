"""Wire messages as CloudEvents 1.0, structured and batch JSON modes
(docs/architecture.md, "CloudEvents").

A plain dict builder: the format is small, and the ``cloudevents`` SDK (which the tests
parse our output with) would cost every relay and API process an import for nothing.
``data`` is the Hive body unchanged, so Hive's ``JSONMessageDeserializer`` reads it as it
reads the broker's message body.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from operator import itemgetter
from typing import Any, Protocol

from hcat_notify.errors import InvalidInputError
from hcat_notify.model.cursor import MAX_EVENT_ID
from hcat_notify.model.events import HEADER_SPEC, HEADER_TABLE, EventType
from hcat_notify.model.wire import Message

__all__ = [
    "CLOUDEVENTS_BATCH_JSON",
    "CLOUDEVENTS_JSON",
    "DATA_CONTENT_TYPE",
    "SEQUENCE_WIDTH",
    "SPEC_VERSION",
    "TYPE_PREFIX",
    "WireEvent",
    "dump_batch",
    "dump_cloudevent",
    "event_type_name",
    "extension_name",
    "sequence_of",
    "subject_of",
    "to_cloudevent",
    "validate_source",
]

CLOUDEVENTS_JSON = "application/cloudevents+json"
"""The content type of one event in structured mode."""
CLOUDEVENTS_BATCH_JSON = "application/cloudevents-batch+json"
"""The content type of a JSON array of events (batch mode)."""
SPEC_VERSION = "1.0"
DATA_CONTENT_TYPE = "application/json"
TYPE_PREFIX = "org.apache.hive.hcatalog."
"""``type`` is this plus the kind in lower case: ``org.apache.hive.hcatalog.add_partition``."""

SEQUENCE_WIDTH = len(str(MAX_EVENT_ID))
"""Digits of ``sequence`` (19): the largest event id the catalog holds, so that every id,
zero-padded, sorts lexically in numeric order."""


class WireEvent(Protocol):
    """What an event's CloudEvent is made of: a :class:`Message`, or an outbox event as
    read (a relay's batch builds no message of each)."""

    @property
    def event_id(self) -> int: ...

    @property
    def event_type(self) -> EventType: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def body(self) -> str: ...


_EXTENSION_NAME = re.compile(r"[a-z0-9]{1,20}")
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))
_MAX_SOURCE = 2048


def event_type_name(kind: EventType) -> str:
    """The CloudEvents ``type`` of a kind: ``org.apache.hive.hcatalog.mark_set_done``."""
    return TYPE_PREFIX + kind.value.lower()


@lru_cache(maxsize=256)  # a handful of header names, once per event each
def extension_name(header: str) -> str | None:
    """The extension attribute a header travels as: lower case, underscores dropped
    (``HCAT_SET_GENERATION`` -> ``hcatsetgeneration``); None when that is not a valid
    CloudEvents extension name (lower-case letters and digits, at most 20)."""
    name = header.replace("_", "").lower()
    return name if _EXTENSION_NAME.fullmatch(name) else None


def sequence_of(event_id: int) -> str:
    """``sequence``: the event id zero-padded to :data:`SEQUENCE_WIDTH` digits.

    Raises:
        InvalidInputError: the id is negative or larger than the catalog can hold.
    """
    if not 0 <= event_id <= MAX_EVENT_ID:
        raise InvalidInputError(f"event id {event_id} is out of range 0..{MAX_EVENT_ID}")
    return str(event_id).zfill(SEQUENCE_WIDTH)


def subject_of(headers: Mapping[str, str]) -> str:
    """``subject``: ``db.table``, then ``/`` and the spec when there is one
    (``web.clicks/datestamp=20110228``). The first ``/`` ends the table: names have none."""
    table = headers.get(HEADER_TABLE, "")
    spec = headers.get(HEADER_SPEC, "")
    return f"{table}/{spec}" if spec else table


def validate_source(source: str) -> str:
    """A CloudEvents ``source`` (a non-empty URI-reference) as given.

    Raises:
        InvalidInputError: empty, too long, or with spaces or control characters.
    """
    if not source:
        raise InvalidInputError("CloudEvents source is empty; give a URI such as urn:hcat:prod")
    if len(source) > _MAX_SOURCE:
        raise InvalidInputError(f"CloudEvents source is longer than {_MAX_SOURCE} characters")
    if any(char.isspace() or ord(char) < 0x20 or ord(char) == 0x7F for char in source):
        raise InvalidInputError(
            f"CloudEvents source {source!r} has spaces or control characters; give a URI"
        )
    return source


def _time_of(body: Mapping[str, Any], event_id: int) -> str:
    stamp = body.get("timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        raise InvalidInputError(f"event {event_id} has no numeric timestamp in its body")
    return _iso_time(stamp)


@lru_cache(maxsize=1024)  # the events of a batch mostly share their second
def _iso_time(stamp: float) -> str:
    moment = datetime.fromtimestamp(stamp, UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _attributes(message: Message, body: Mapping[str, Any], source: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "specversion": SPEC_VERSION,
        "id": str(message.event_id),
        "source": source,
        "type": event_type_name(message.event_type),
        "subject": subject_of(message.headers),
        "time": _time_of(body, message.event_id),
        "sequence": sequence_of(message.event_id),
        "datacontenttype": DATA_CONTENT_TYPE,
    }
    for header, value in message.headers.items():
        name = extension_name(header)
        # Empty values (HCAT_SPEC of a table event) stay out: an absent attribute says it.
        if name is not None and value and name not in attributes:
            attributes[name] = value
    return attributes


def to_cloudevent(message: Message, *, source: str) -> dict[str, Any]:
    """The message as a CloudEvent in structured mode, as a JSON object.

    Args:
        message: the wire message.
        source: the catalog's URI (``cloudevents_source`` of the settings).

    Returns:
        The context attributes, the ``hcat*`` extensions, and ``data``: the body parsed.

    Raises:
        InvalidInputError: the source is not a URI-reference, or the body has no
            timestamp.
    """
    validate_source(source)
    body = message.body_json()
    event = _attributes(message, body, source)
    event["data"] = body
    return event


_TIMESTAMP = re.compile(r'"timestamp":(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)[,}]')


def _time_text(message: WireEvent) -> str:
    """``time`` of a message: from the body's text when the key occurs once (our bodies
    are compact JSON), else from the body parsed."""
    found = _TIMESTAMP.findall(message.body)
    if len(found) == 1:
        return _time_of_text(found[0])
    return _time_of(json.loads(message.body), message.event_id)


@lru_cache(maxsize=1024)  # the events of a batch mostly share their second
def _time_of_text(text: str) -> str:
    return _iso_time(float(text) if "." in text or "e" in text.lower() else int(text))


@lru_cache(maxsize=64)
def _lead(source: str, kind: EventType) -> tuple[str, str]:
    """The attributes every event of ``kind`` from ``source`` starts with, encoded: the
    text before the id, and after it."""
    after = f'","source":{_string(source)},"type":"{event_type_name(kind)}"'
    return f'{{"specversion":"{SPEC_VERSION}","id":"', after


def _dump(message: WireEvent, source: str) -> str:
    # Encoded as _ENCODER would encode _attributes() (same keys in the same order, the
    # same escaping), without building the dict, nor parsing the body for its time: one
    # %-format of a template made once per (source, kind, headers), where every
    # extension has a value (the usual case), else attribute by attribute.
    event_id = message.event_id
    headers = message.headers
    names = tuple(headers)
    template: _Template | None
    try:
        template = _TEMPLATES[(source, message.event_type, names)]
    except KeyError:
        template = _template(source, message.event_type, names)
    if template is not None:
        text, values_of, subject = template
        values = values_of(headers)
        if all(values) and 0 <= event_id <= MAX_EVENT_ID:
            return text % (
                event_id,
                _string(subject(values)),
                _time_text(message),
                event_id,
                *map(_string, values),
                message.body,
            )
    before, after = _lead(source, message.event_type)
    parts = [
        before,
        str(event_id),
        after,
        ',"subject":',
        _string(subject_of(headers)),
        ',"time":"',
        _time_text(message),
        '","sequence":"',
        sequence_of(event_id),
        f'","datacontenttype":"{DATA_CONTENT_TYPE}"',
    ]
    plan = _extensions(tuple(headers))
    if plan is None:  # two headers would make one extension: the first with a value wins
        taken = set(_FIXED)
        for header, value in headers.items():
            name = extension_name(header)
            if name is not None and value and name not in taken:
                taken.add(name)
                parts += (',"', name, '":', _string(value))
    else:
        for header, prefix in plan:
            value = headers[header]
            if value:
                parts += (prefix, _string(value))
    # The body's own text goes in as it is (it is compact ASCII JSON already): byte for
    # byte what the broker carries, and no second serialisation.
    parts += (',"data":', message.body, "}")
    return "".join(parts)


_Template = tuple[str, Callable[[Mapping[str, str]], tuple[str, ...]], Callable[..., str]]
_TEMPLATES: dict[tuple[str, EventType, tuple[str, ...]], _Template | None] = {}
"""(source, kind, header names) -> :func:`_template` (a handful of keys; looked up in a
plain dict: an ``lru_cache`` of three arguments costs a third of the event)."""


def _template(source: str, kind: EventType, headers: tuple[str, ...]) -> _Template | None:
    """The text of every event of ``kind`` from ``source`` whose headers are ``headers``
    (names, in order) and all have a value, as a %-format of the id, the encoded subject,
    the time, the id again (zero-padded), each extension's encoded value, then the body;
    the headers that travel as extensions (a getter of their values, as a tuple); and
    the subject of those values. None when two headers would make one extension name
    (then which travels depends on the values). Kept in :data:`_TEMPLATES`."""
    plan = _extensions(headers)
    found: _Template | None = None
    if plan is not None and plan:
        before, after = _lead(source, kind)
        text = "".join(
            (
                before.replace("%", "%%"),
                "%d",
                after.replace("%", "%%"),
                ',"subject":%s,"time":"%s","sequence":"%0',
                str(SEQUENCE_WIDTH),
                f'd","datacontenttype":"{DATA_CONTENT_TYPE}"',
                *(prefix + "%s" for _, prefix in plan),
                ',"data":%s}',
            )
        )
        names = [header for header, _ in plan]
        getter = itemgetter(*names) if len(names) > 1 else _one(names[0])
        found = (text, getter, _subject_of(names))
    if len(_TEMPLATES) >= 256:
        _TEMPLATES.clear()
    _TEMPLATES[(source, kind, headers)] = found
    return found


def _one(header: str) -> Callable[[Mapping[str, str]], tuple[str, ...]]:
    return lambda headers: (headers[header],)


def _subject_of(names: list[str]) -> Callable[..., str]:
    """The subject from the extensions' values (all non-empty), as :func:`subject_of`."""
    table = names.index(HEADER_TABLE) if HEADER_TABLE in names else None
    spec = names.index(HEADER_SPEC) if HEADER_SPEC in names else None
    if spec is None:
        return (lambda values: "") if table is None else (lambda values: values[table])
    if table is None:
        return lambda values: "/" + values[spec]
    return lambda values: f"{values[table]}/{values[spec]}"


_FIXED = frozenset(
    ("specversion", "id", "source", "type", "subject", "time", "sequence", "datacontenttype")
)


@lru_cache(maxsize=256)  # the headers of a kind come in one order: a handful of tuples
def _extensions(headers: tuple[str, ...]) -> tuple[tuple[str, str], ...] | None:
    """The headers that travel as extensions, each with the encoded text before its
    value (``,"hcattable":``), in order; None when two would make one name (then which
    one travels depends on the values)."""
    plan = []
    names: set[str] = set()
    for header in headers:
        name = extension_name(header)
        if name is None or name in _FIXED:
            continue
        if name in names:
            return None
        names.add(name)
        plan.append((header, f',"{name}":'))
    return tuple(plan)


_string: Callable[[str], str] = json.encoder.encode_basestring_ascii


def dump_cloudevent(message: WireEvent, *, source: str) -> bytes:
    """The message as one structured-mode CloudEvent (:data:`CLOUDEVENTS_JSON`), UTF-8.

    Raises:
        InvalidInputError: as :func:`to_cloudevent`.
    """
    validate_source(source)
    return _dump(message, source).encode()


def dump_batch(messages: Sequence[WireEvent], *, source: str) -> bytes:
    """The messages as a batch-mode JSON array (:data:`CLOUDEVENTS_BATCH_JSON`), UTF-8,
    in the order given (an empty sequence makes ``[]``).

    Raises:
        InvalidInputError: as :func:`to_cloudevent`.
    """
    validate_source(source)
    return ("[" + ",".join(_dump(message, source) for message in messages) + "]").encode()
