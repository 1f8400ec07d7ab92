"""Partition specs: ``k1=v1/k2=v2`` paths, escaped exactly as Hive and Spark escape them.

A :class:`PartitionSpec` is an ordered list of ``(key, value)`` pairs. Keys are Hive
identifiers (validated, lower-cased); a value is a string, or ``None`` for Hive's default
partition (written ``__HIVE_DEFAULT_PARTITION__``; an empty string means the same).

Two string forms matter on the wire and on disk:

* :meth:`PartitionSpec.to_path` -- ``k1=v1/k2=v2`` in the spec's own order (the table's key
  order after :meth:`PartitionSpec.for_table`); this is the partition's directory.
* :meth:`PartitionSpec.canonical` -- the same with keys sorted lexically; this is the
  ``spec`` of a ``MARK_SET_DONE`` message, so consumers can compare strings directly.

Keys and values are escaped with :func:`escape_path_name`, a port of Spark's
``ExternalCatalogUtils.escapePathName`` (itself a copy of Hive's ``FileUtils``), so the
directories we name are read back by Spark (and Hive) as the values we meant, and
:meth:`PartitionSpec.parse` reads back directories that Spark wrote.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hcat_notify.errors import InvalidSpecError, UnknownPartitionKeyError
from hcat_notify.model.names import validate_identifier

__all__ = [
    "DEFAULT_PARTITION_NAME",
    "MAX_COVERING_KEYS",
    "MAX_NAME_BYTES",
    "MAX_SPEC_LENGTH",
    "PartitionSpec",
    "escape_path_name",
    "partition_path",
    "unescape_path_name",
]

DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"
"""Directory value Hive and Spark use for a null (or empty) partition value."""

MAX_COVERING_KEYS = 16
"""Most keys :meth:`PartitionSpec.covering_canonicals` accepts (2**16 - 1 subsets)."""

MAX_SPEC_LENGTH = 767
"""Characters of a spec's escaped path form: Hive's metastore stores a partition name in
767 (``PARTITIONS.PART_NAME``)."""

MAX_NAME_BYTES = 255
"""UTF-8 bytes of one escaped ``key=value`` directory name (``NAME_MAX`` on Linux, HDFS's
default ``dfs.namenode.fs-limits.max-component-length``)."""

# Spark's ExternalCatalogUtils.charToEscape on non-Windows hosts: the control characters
# U+0001..U+001F, U+007F and the characters special in paths, URIs or globs.
_CHARS_TO_ESCAPE = frozenset(
    [chr(c) for c in range(0x01, 0x20)]
    + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f", "{", "[", "]", "^"]
)
_ESCAPE_TABLE = {ord(c): f"%{ord(c):02X}" for c in _CHARS_TO_ESCAPE}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_NUL = "\x00"


def _describe(text: str, limit: int = 80) -> str:
    """Quote ``text`` for an error message, shortened if it is long."""
    if len(text) > limit:
        return repr(text[:limit]) + f"... ({len(text)} characters)"
    return repr(text)


def escape_path_name(value: str) -> str:
    """Escape a partition key or value for use as (part of) a directory name.

    Exactly Spark's ``ExternalCatalogUtils.escapePathName`` on non-Windows hosts: each
    of U+0001..U+001F, ``"``, ``#``, ``%``, ``'``, ``*``, ``/``, ``:``, ``=``, ``?``,
    ``\\``, U+007F, ``{``, ``[``, ``]`` and ``^`` becomes ``%`` followed by two upper-case
    hex digits; every other character (space and all non-ASCII included) is kept.

    Args:
        value: the raw key or value.

    Returns:
        The escaped text; it contains no ``/`` and no ``=``.

    Raises:
        InvalidSpecError: ``value`` contains U+0000, which no path can hold.
    """
    if _NUL in value:
        raise InvalidSpecError(
            f"partition value {_describe(value)} contains a NUL character (U+0000), "
            "which cannot appear in a path"
        )
    return value.translate(_ESCAPE_TABLE)


def unescape_path_name(text: str) -> str:
    """Undo :func:`escape_path_name`.

    Exactly Spark's ``ExternalCatalogUtils.unescapePathName``: ``%XX``, where ``XX`` are
    two hex digits of either case, becomes the character with that code; a ``%`` not
    followed by two hex digits is kept literally.

    Args:
        text: an escaped key or value, e.g. one ``=``-separated half of a directory name.

    Returns:
        The raw key or value.

    Raises:
        InvalidSpecError: ``text`` contains U+0000, or ``%00`` which decodes to it.
    """
    if _NUL in text:
        raise InvalidSpecError(
            f"escaped path name {_describe(text)} contains a NUL character (U+0000)"
        )
    if "%" not in text:
        return text
    out: list[str] = []
    start = 0
    i = text.find("%")
    while i != -1:
        hex_pair = text[i + 1 : i + 3]
        if len(hex_pair) == 2 and hex_pair[0] in _HEX_DIGITS and hex_pair[1] in _HEX_DIGITS:
            code = int(hex_pair, 16)
            if code == 0:
                raise InvalidSpecError(
                    f"escaped path name {_describe(text)} contains %00, a NUL character, "
                    "which cannot appear in a partition value"
                )
            out.append(text[start:i])
            out.append(chr(code))
            start = i + 3
        i = text.find("%", i + 1 if start <= i else start)
    out.append(text[start:])
    return "".join(out)


def _normalise_value(key: str, value: object) -> str | None:
    """Check one partition value and map the spellings of the default partition to None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidSpecError(
            f"value of partition key {key!r} must be a string or None, "
            f"not {type(value).__name__} ({value!r})"
        )
    if value in ("", DEFAULT_PARTITION_NAME):
        return None
    if _NUL in value:
        raise InvalidSpecError(
            f"value of partition key {key!r} contains a NUL character (U+0000), "
            "which cannot appear in a path"
        )
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidSpecError(
            f"value of partition key {key!r} is not valid unicode "
            f"(lone surrogate at position {exc.start})"
        ) from exc
    return value


def _format_item(key: str, value: str | None) -> str:
    escaped = DEFAULT_PARTITION_NAME if value is None else escape_path_name(value)
    return f"{escape_path_name(key)}={escaped}"


def _of_valid(items: tuple[tuple[str, str | None], ...]) -> PartitionSpec:
    """A spec of items that are valid already (another spec's, reordered or cut; a
    path the catalog wrote): the checks of ``PartitionSpec.__post_init__`` skipped."""
    spec = object.__new__(PartitionSpec)
    object.__setattr__(spec, "items", items)
    return spec


def _partition_keys(keys: Sequence[str]) -> tuple[str, ...]:
    """A table's partition keys, each checked (and lower-cased); once per process for
    the same keys."""
    try:
        return _checked_keys(tuple(keys))
    except TypeError:  # an unhashable key: not a name, as the check will say
        return tuple(validate_identifier(k, what="partition key") for k in keys)


@functools.lru_cache(maxsize=1024)
def _checked_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(validate_identifier(k, what="partition key") for k in keys)


@functools.lru_cache(maxsize=65_536)
def _trusted_item(segment: str) -> tuple[str, str | None]:
    """``(key, value)`` of one ``key=value`` segment written by :meth:`PartitionSpec.to_path`.

    Cached: a catch-up reads the same segments (``datestamp=...``, ``region=...``) over
    and over in different combinations.
    """
    raw_key, _, raw_value = segment.partition("=")
    key = unescape_path_name(raw_key) if "%" in raw_key else raw_key
    if raw_value == DEFAULT_PARTITION_NAME:
        return key, None
    return key, unescape_path_name(raw_value) if "%" in raw_value else raw_value


@dataclass(frozen=True)
class PartitionSpec:
    """An ordered partition spec: ``(key, value)`` pairs, value ``None`` = default partition.

    Construct it with :meth:`from_mapping`, :meth:`parse` or :meth:`from_args`, or
    directly from pairs. Keys are validated and lower-cased; an empty-string value (or the
    literal ``__HIVE_DEFAULT_PARTITION__``) becomes ``None``. Equality and hashing follow
    the key order; compare :meth:`canonical` strings (or use :meth:`sorted`) to ignore it.

    Attributes:
        items: the normalised ``(key, value)`` pairs, in order.

    Raises:
        InvalidSpecError: the spec is empty, repeats a key, or a value is not a string
            or None, or contains U+0000 or a lone surrogate.
        InvalidIdentifierError: a key is not a valid Hive identifier.
    """

    items: tuple[tuple[str, str | None], ...]

    def __post_init__(self) -> None:
        raw: object = self.items
        if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
            raise InvalidSpecError(
                f"partition spec items must be (key, value) pairs, not {type(raw).__name__}"
            )
        normalised: list[tuple[str, str | None]] = []
        seen: set[str] = set()
        for pair in raw:
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise InvalidSpecError(f"partition spec item {pair!r} is not a (key, value) pair")
            raw_key, raw_value = pair
            key = validate_identifier(raw_key, what="partition key")
            if key in seen:
                raise InvalidSpecError(f"partition key {key!r} appears more than once")
            seen.add(key)
            normalised.append((key, _normalise_value(key, raw_value)))
        if not normalised:
            raise InvalidSpecError("empty partition spec: give at least one KEY=VALUE")
        object.__setattr__(self, "items", tuple(normalised))

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, str | None]) -> PartitionSpec:
        """Build a spec from a mapping, keeping its iteration order.

        Args:
            mapping: partition key to raw (unescaped) value, or None for the default
                partition.

        Returns:
            The spec.

        Raises:
            InvalidSpecError: the mapping is empty or not a mapping, a value is not a str
                or None, or keys collide after lower-casing.
            InvalidIdentifierError: a key is not a valid Hive identifier.
        """
        if not isinstance(mapping, Mapping):
            raise InvalidSpecError(
                f"partition spec must be a mapping of key to value, not {type(mapping).__name__}"
            )
        return cls(tuple(mapping.items()))

    @classmethod
    def parse(cls, path: str) -> PartitionSpec:
        """Parse the path form ``k1=v1/k2=v2`` (escaped keys and values).

        ``__HIVE_DEFAULT_PARTITION__`` as a value means None.

        Args:
            path: a partition path relative to the table location, e.g.
                ``datestamp=20110228/region=us``.

        Returns:
            The spec, in the path's key order.

        Raises:
            InvalidSpecError: the path is empty, has an empty segment (leading, trailing
                or double ``/``), a segment without exactly one ``=``, an empty key or
                value, or a repeated key.
            InvalidIdentifierError: a key is not a valid Hive identifier.
        """
        if not isinstance(path, str):
            raise InvalidSpecError(f"partition path must be a string, not {type(path).__name__}")
        if not path:
            raise InvalidSpecError("empty partition spec: expected a path like KEY=VALUE/...")
        pairs: list[tuple[str, str | None]] = []
        where = f"in partition path {_describe(path)}"
        for segment in path.split("/"):
            if not segment:
                raise InvalidSpecError(
                    f"empty segment {where}: no leading, trailing or doubled '/' allowed"
                )
            if segment.count("=") != 1:
                raise InvalidSpecError(
                    f"malformed segment {_describe(segment)} {where}: expected KEY=VALUE "
                    "with exactly one '=' (an '=' inside a value is escaped as %3D)"
                )
            raw_key, raw_value = segment.split("=")
            if not raw_key:
                raise InvalidSpecError(f"empty key in segment {_describe(segment)} {where}")
            if not raw_value:
                raise InvalidSpecError(
                    f"empty value in segment {_describe(segment)} {where}: "
                    f"the default partition is written {DEFAULT_PARTITION_NAME}"
                )
            key = validate_identifier(unescape_path_name(raw_key), what="partition key")
            value = None if raw_value == DEFAULT_PARTITION_NAME else unescape_path_name(raw_value)
            pairs.append((key, value))
        return cls(tuple(pairs))

    @classmethod
    def parse_written(cls, path: str) -> PartitionSpec:
        """:meth:`parse` ``path``, which must also be the spec's path as :meth:`to_path`
        writes it (a claim naming a directory: no other spelling of the same spec).

        Raises:
            InvalidSpecError: as :meth:`parse`, or ``path`` is not written so (naming
                how it is).
        """
        spec = cls.parse(path)
        written = spec.to_path()
        if written != path:
            raise InvalidSpecError(
                f"{_describe(path)} is not a partition's path spec as written ({written})"
            )
        return spec

    @classmethod
    def parse_trusted(cls, path: str) -> PartitionSpec:
        """Parse a path that :meth:`to_path` of a valid spec wrote, without checking it.

        For specs read back from the catalog's own rows (the consumer's catch-up reads
        100,000s of them); anything from outside goes through :meth:`parse`. The result
        equals ``parse(path)`` for every path ``to_path`` produces.
        """
        return _of_valid(tuple(map(_trusted_item, path.split("/"))))

    @classmethod
    def from_args(cls, args: Sequence[str]) -> PartitionSpec:
        """Build a spec from command-line items ``KEY=VALUE`` (raw, unescaped).

        Each item is split at its first ``=``; the value may contain anything else
        (``/``, ``=``, ``%``, newlines, non-ASCII). An empty value means the default
        partition.

        Args:
            args: the items, e.g. ``["datestamp=20110228", "region=us/east"]``.

        Returns:
            The spec, in argument order.

        Raises:
            InvalidSpecError: no items, an item without ``=``, or a repeated key.
            InvalidIdentifierError: a key is not a valid Hive identifier.
        """
        if isinstance(args, str):
            raise InvalidSpecError(
                f"partition args must be a sequence of KEY=VALUE strings, not one string "
                f"{_describe(args)}"
            )
        pairs: list[tuple[str, str | None]] = []
        for arg in args:
            if not isinstance(arg, str) or "=" not in arg:
                raise InvalidSpecError(
                    f"malformed partition item {arg!r}: expected KEY=VALUE, e.g. datestamp=20110228"
                )
            key, value = arg.split("=", 1)
            pairs.append((key, value))
        return cls(tuple(pairs))

    # ------------------------------------------------------------------ views

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys, in order."""
        return tuple(key for key, _ in self.items)

    @property
    def values(self) -> tuple[str | None, ...]:
        """The raw values (None = default partition), in key order."""
        return tuple(value for _, value in self.items)

    def as_dict(self) -> dict[str, str | None]:
        """Return the spec as an ordered dict of key to raw value (None = default)."""
        return dict(self.items)

    def as_strings(self) -> dict[str, str]:
        """Return key to raw value with None spelled ``__HIVE_DEFAULT_PARTITION__``.

        This is the ``partitionSpec`` / ``partitions`` form of message bodies.
        """
        return {k: DEFAULT_PARTITION_NAME if v is None else v for k, v in self.items}

    def to_path(self) -> str:
        """Return ``k1=v1/k2=v2`` in this spec's key order, keys and values escaped."""
        # Computed once per spec (a commit asks for each partition's path several times);
        # kept outside the fields, so equality, hashing and repr are unchanged.
        path: str | None = self.__dict__.get("_path")
        if path is None:
            path = "/".join(_format_item(key, value) for key, value in self.items)
            self.__dict__["_path"] = path
        return path

    def sorted(self) -> PartitionSpec:
        """Return the same spec with keys in lexical order."""
        return _of_valid(tuple(sorted(self.items, key=lambda item: item[0])))

    def canonical(self) -> str:
        """Return the canonical string: :meth:`to_path` of :meth:`sorted`.

        This is the ``spec`` field and ``HCAT_SPEC`` header of ``MARK_SET_DONE``.
        """
        return self.sorted().to_path()

    def __len__(self) -> int:
        return len(self.items)

    def __str__(self) -> str:
        return self.to_path()

    # ------------------------------------------------------------------ relations

    def covers(self, other: PartitionSpec) -> bool:
        """Whether a done for this spec covers ``other``.

        True when every ``(key, value)`` of this spec is also in ``other``: a done for
        ``datestamp=X`` covers ``datestamp=X/region=us``; equal specs cover each other.
        Key order does not matter.

        Args:
            other: the (usually narrower) spec to test.

        Returns:
            True if this spec's items are a subset of ``other``'s.
        """
        return set(self.items) <= set(other.items)

    def covering_canonicals(self) -> list[str]:
        """Canonical strings of every spec whose done would cover this one.

        These are the non-empty subsets of this spec's items (the spec itself
        included), each in canonical form, ordered by size and then lexically by key.
        A store looks up a covering done with ``spec IN (...)``.

        Returns:
            ``2**len(self) - 1`` canonical strings.

        Raises:
            InvalidSpecError: the spec has more than :data:`MAX_COVERING_KEYS` keys.
        """
        if len(self.items) > MAX_COVERING_KEYS:
            raise InvalidSpecError(
                f"partition spec has {len(self.items)} keys; covering specs are computed "
                f"for at most {MAX_COVERING_KEYS}"
            )
        formatted = [_format_item(k, v) for k, v in sorted(self.items, key=lambda i: i[0])]
        return [
            "/".join(subset)
            for size in range(1, len(formatted) + 1)
            for subset in itertools.combinations(formatted, size)
        ]

    def for_table(
        self, partition_keys: Sequence[str], *, table: str = "", partial: bool = True
    ) -> PartitionSpec:
        """Check this spec against a table's partition keys and put it in their order.

        Args:
            partition_keys: the table's partition keys, in table order.
            table: the table's name, used in error messages only.
            partial: allow a subset of the keys (as a mark-set-done may); when False,
                every partition key must be given (as for a partition).

        Returns:
            The spec reordered in table key order.

        Raises:
            UnknownPartitionKeyError: the spec names a key the table does not have.
            InvalidSpecError: ``partial`` is False and keys are missing.
            InvalidIdentifierError: one of ``partition_keys`` is malformed.
        """
        if isinstance(partition_keys, str):
            raise InvalidSpecError(
                f"partition_keys must be a sequence of key names, not one string {partition_keys!r}"
            )
        table_keys = _partition_keys(partition_keys)
        of_table = f"table {table}" if table else "the table"
        mine = self.as_dict()
        unknown = [key for key in mine if key not in table_keys]
        if unknown:
            names = ", ".join(repr(k) for k in unknown)
            noun = "partition key" if len(unknown) == 1 else "partition keys"
            if table_keys:
                has = f"its partition keys are {', '.join(table_keys)}"
            else:
                has = "it is not partitioned"
            raise UnknownPartitionKeyError(f"{of_table} has no {noun} {names}; {has}")
        if not partial:
            missing = [key for key in table_keys if key not in mine]
            if missing:
                raise InvalidSpecError(
                    f"partition spec {self.to_path()!r} for {of_table} is missing "
                    f"partition key(s) {', '.join(missing)}; a full spec needs "
                    f"{', '.join(table_keys)}"
                )
        ordered = _of_valid(tuple((key, mine[key]) for key in table_keys if key in mine))
        return ordered.check_limits()

    def for_done(self, partition_keys: Sequence[str], *, table: str = "") -> PartitionSpec:
        """Check this spec as a mark-set-done's; return it in the wire's (sorted) form.

        A done's spec is a non-empty prefix of the table's keys in key order, as
        HCatalog's partial specs are: ``datestamp=X`` on keys ``datestamp, region``
        covers every region of day X. One that skips a leading key (``region=us``
        alone) would cover ``region=us`` of every day, those not written yet too, so
        it is refused. Every path that records a done goes through here.

        Args:
            partition_keys: the table's partition keys, in table order.
            table: the table's name, used in error messages only.

        Returns:
            The spec with keys in lexical order (``MARK_SET_DONE``'s ``spec``).

        Raises:
            UnknownPartitionKeyError: the spec names a key the table does not have.
            InvalidSpecError: the spec skips a leading key (the message names it).
        """
        return self._prefix_of(partition_keys, table, "mark-set-done spec").sorted()

    def for_covering(self, partition_keys: Sequence[str], *, table: str = "") -> PartitionSpec:
        """Check this spec as one a done is looked up for (``wait``, ``GET .../done``,
        :meth:`Catalog.find_covering_done`); return it in table key order.

        The rule of :meth:`for_done`: a done covers a spec when the done's spec is a
        prefix of it, so a spec that skips a leading key (``region=us`` alone) could
        never be covered and a wait for it would only time out; it is refused at once.

        Raises:
            UnknownPartitionKeyError: the spec names a key the table does not have.
            InvalidSpecError: the spec skips a leading key (the message names it).
        """
        return self._prefix_of(partition_keys, table, "spec")

    def _prefix_of(self, partition_keys: Sequence[str], table: str, what: str) -> PartitionSpec:
        """This spec in table key order, refused unless it is a prefix of the keys."""
        ordered = self.for_table(partition_keys, table=table, partial=True)
        table_keys = _partition_keys(partition_keys)
        given = ordered.keys
        if given != table_keys[: len(given)]:
            leading = table_keys[: table_keys.index(given[-1])]
            missing = [key for key in leading if key not in given]
            of_table = f"table {table}" if table else "the table"
            noun = "key" if len(missing) == 1 else "keys"
            raise InvalidSpecError(
                f"{what} {ordered.to_path()!r} for {of_table} skips the leading "
                f"partition {noun} {', '.join(missing)}: a done's spec must be a prefix of "
                f"its partition keys ({', '.join(table_keys)})"
            )
        return ordered

    def check_limits(self) -> PartitionSpec:
        """Check that this spec fits where it goes: directory names, Hive, broker headers.

        The path form (escaped, as on disk and in ``HCAT_SPEC``) may have at most
        :data:`MAX_SPEC_LENGTH` characters, the size of Hive's ``PART_NAME`` column, which
        also keeps the header far below the broker's limit; each ``key=value`` directory
        name at most :data:`MAX_NAME_BYTES` bytes of UTF-8, what Linux filesystems and
        HDFS accept in one path component.

        Returns:
            This spec.

        Raises:
            InvalidSpecError: a limit is exceeded; nothing may be written with it.
        """
        path = self.to_path()
        if len(path) > MAX_SPEC_LENGTH:
            raise InvalidSpecError(
                f"partition spec {_describe(path, 40)} is {len(path)} characters long once "
                f"escaped; at most {MAX_SPEC_LENGTH} fit Hive's metastore and the message headers"
            )
        for segment in path.split("/"):
            size = len(segment.encode("utf-8"))
            if size > MAX_NAME_BYTES:
                raise InvalidSpecError(
                    f"partition directory name {_describe(segment, 40)} is {size} bytes long "
                    f"once escaped; a path component may have at most {MAX_NAME_BYTES}"
                )
        return self


def partition_path(keys: Sequence[str], values: Sequence[str | None]) -> str:
    """Return the escaped directory path ``k1=v1/k2=v2`` for parallel keys and values.

    Args:
        keys: partition keys, in table order.
        values: raw values (None or "" = default partition), one per key.

    Returns:
        The partition path, e.g. ``datestamp=20110228/region=us%2Feast``.

    Raises:
        InvalidSpecError: lengths differ, or any check of :class:`PartitionSpec` fails.
        InvalidIdentifierError: a key is not a valid Hive identifier.
    """
    if len(keys) != len(values):
        raise InvalidSpecError(f"got {len(keys)} partition keys but {len(values)} values")
    return PartitionSpec(tuple(zip(keys, values, strict=True))).to_path()
