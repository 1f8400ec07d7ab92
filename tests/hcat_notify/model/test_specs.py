"""Unit tests for hcat_notify.model.specs: escaping, parsing, canonical form, covering, tables."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hcat_notify.errors import (
    InvalidIdentifierError,
    InvalidInputError,
    InvalidSpecError,
    UnknownPartitionKeyError,
)
from hcat_notify.model.specs import (
    DEFAULT_PARTITION_NAME,
    MAX_COVERING_KEYS,
    PartitionSpec,
    escape_path_name,
    partition_path,
    unescape_path_name,
)

# The set Spark's ExternalCatalogUtils.charToEscape holds on non-Windows hosts.
ESCAPED_CHARS = [chr(c) for c in range(1, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^")


# ---------------------------------------------------------------- escaping


@pytest.mark.parametrize("char", ESCAPED_CHARS, ids=lambda c: f"U+{ord(c):04X}")
def test_every_char_in_the_set_is_escaped_as_uppercase_hex(char: str) -> None:
    escaped = escape_path_name(char)
    assert escaped == f"%{ord(char):02X}"
    assert re.fullmatch(r"%[0-9A-F]{2}", escaped)
    assert unescape_path_name(escaped) == char


def test_no_other_ascii_or_latin1_char_is_escaped() -> None:
    kept = [chr(c) for c in range(1, 0x300) if chr(c) not in ESCAPED_CHARS]
    for char in kept:
        assert escape_path_name(char) == char, f"U+{ord(char):04X}"


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("a/b", "a%2Fb"),
        ("%", "%25"),
        ("50%", "50%25"),
        ("x=y", "x%3Dy"),
        ("line\nbreak", "line%0Abreak"),
        ("cr\r\ttab", "cr%0D%09tab"),
        ("spa ce", "spa ce"),
        ("ünïcødé", "ünïcødé"),
        ("日本", "日本"),
        ("🎉", "🎉"),
        ("<>|~!@$&()+,;`", "<>|~!@$&()+,;`"),
        ("http://h:1/p?q#f", "http%3A%2F%2Fh%3A1%2Fp%3Fq%23f"),
        ("\"'", "%22%27"),
        ("#*?:[]{}^\\", "%23%2A%3F%3A%5B%5D%7B}%5E%5C"),
        ("}", "}"),  # Spark escapes '{' but not '}'
        ("", ""),
    ],
)
def test_escape_examples(raw: str, escaped: str) -> None:
    assert escape_path_name(raw) == escaped
    assert unescape_path_name(escaped) == raw


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        ("%2f", "/"),  # lower-case hex is accepted, as in Spark
        ("%", "%"),
        ("100%", "100%"),
        ("%4", "%4"),
        ("%zz", "%zz"),
        ("%G1", "%G1"),
        ("%+1", "%+1"),  # int(..., 16) would accept '+1'; Spark does not
        ("% 1", "% 1"),
        ("%%41", "%A"),
        ("%%", "%%"),
        ("%25%32%46", "%2F"),  # decoded once, not recursively
        ("%C3%A9", "\xc3\xa9"),  # per UTF-16 unit, not UTF-8 bytes
        ("%٣٣", "%٣٣"),  # non-ASCII digits are not hex digits
    ],
)
def test_unescape_keeps_percent_not_followed_by_two_hex_digits(text: str, raw: str) -> None:
    assert unescape_path_name(text) == raw


def test_nul_is_rejected_by_escape_and_unescape() -> None:
    with pytest.raises(InvalidSpecError, match="NUL"):
        escape_path_name("a\x00b")
    with pytest.raises(InvalidSpecError, match="NUL"):
        unescape_path_name("a\x00b")
    with pytest.raises(InvalidSpecError, match="%00"):
        unescape_path_name("a%00b")


# ---------------------------------------------------------------- construction


def test_from_mapping_keeps_order_and_normalises() -> None:
    spec = PartitionSpec.from_mapping({"Region": "us", "datestamp": "20110228", "hour": ""})
    assert spec.items == (("region", "us"), ("datestamp", "20110228"), ("hour", None))
    assert spec.keys == ("region", "datestamp", "hour")
    assert spec.values == ("us", "20110228", None)
    assert len(spec) == 3
    assert spec.as_dict() == {"region": "us", "datestamp": "20110228", "hour": None}
    assert list(spec.as_dict()) == ["region", "datestamp", "hour"]
    assert spec.as_strings() == {
        "region": "us",
        "datestamp": "20110228",
        "hour": DEFAULT_PARTITION_NAME,
    }


def test_literal_default_partition_name_means_none() -> None:
    spec = PartitionSpec.from_mapping({"k": DEFAULT_PARTITION_NAME})
    assert spec.values == (None,)
    assert spec == PartitionSpec.from_mapping({"k": None})
    assert spec.to_path() == f"k={DEFAULT_PARTITION_NAME}"


def test_constructor_accepts_pairs_and_is_frozen_and_hashable() -> None:
    spec = PartitionSpec((("a", "1"), ("b", None)))
    assert spec == PartitionSpec([["a", "1"], ["b", None]])  # type: ignore[arg-type]
    assert hash(spec) == hash(PartitionSpec.from_mapping({"a": "1", "b": None}))
    with pytest.raises(AttributeError):
        spec.items = ()  # type: ignore[misc]


@pytest.mark.parametrize("value", [1, 2.5, b"bytes", ["x"], True])
def test_from_mapping_rejects_non_string_values_naming_key_and_type(value: object) -> None:
    with pytest.raises(InvalidSpecError, match=rf"'datestamp'.*{type(value).__name__}"):
        PartitionSpec.from_mapping({"datestamp": value})  # type: ignore[dict-item]


def test_from_mapping_rejects_non_mapping() -> None:
    with pytest.raises(InvalidSpecError, match="mapping"):
        PartitionSpec.from_mapping([("a", "1")])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [
        lambda: PartitionSpec.from_mapping({}),
        lambda: PartitionSpec(()),
        lambda: PartitionSpec.from_args([]),
        lambda: PartitionSpec.parse(""),
    ],
)
def test_empty_spec_is_rejected(make: object) -> None:
    with pytest.raises(InvalidSpecError, match="empty partition spec"):
        make()  # type: ignore[operator]


def test_value_with_nul_is_rejected() -> None:
    with pytest.raises(InvalidSpecError, match=r"'k'.*NUL"):
        PartitionSpec.from_mapping({"k": "a\x00"})
    with pytest.raises(InvalidSpecError, match="NUL"):
        PartitionSpec.from_args(["k=\x00"])
    with pytest.raises(InvalidSpecError, match="%00"):
        PartitionSpec.parse("k=a%00")


def test_value_with_lone_surrogate_is_rejected() -> None:
    with pytest.raises(InvalidSpecError, match="surrogate"):
        PartitionSpec.from_mapping({"k": "a\ud800"})


def test_duplicate_keys_are_rejected() -> None:
    with pytest.raises(InvalidSpecError, match="'a' appears more than once"):
        PartitionSpec((("a", "1"), ("a", "2")))
    with pytest.raises(InvalidSpecError, match="more than once"):
        PartitionSpec.from_mapping({"A": "1", "a": "2"})  # equal after lower-casing
    with pytest.raises(InvalidSpecError, match="more than once"):
        PartitionSpec.parse("a=1/a=2")
    with pytest.raises(InvalidSpecError, match="more than once"):
        PartitionSpec.from_args(["a=1", "a=1"])


@pytest.mark.parametrize(
    "key", ["", "spa ce", "quo'te", 'dq"', "a-b", "a.b", "ü", "a/b", "x" * 129]
)
def test_bad_key_identifiers_are_rejected(key: str) -> None:
    with pytest.raises(InvalidIdentifierError, match="partition key"):
        PartitionSpec.from_mapping({key: "v"})


def test_bad_key_identifier_in_path_and_args() -> None:
    with pytest.raises(InvalidIdentifierError, match="partition key"):
        PartitionSpec.parse("spa ce=1")
    with pytest.raises(InvalidIdentifierError, match="partition key"):
        PartitionSpec.parse("a%2Fb=1")  # escaped '/' decodes into the key
    with pytest.raises(InvalidIdentifierError, match="partition key"):
        PartitionSpec.from_args(["'k'=1"])


def test_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="empty"):
        PartitionSpec(())
    with pytest.raises(InvalidInputError):
        PartitionSpec.parse("nope")


# ---------------------------------------------------------------- parse and format


def test_to_path_and_parse() -> None:
    spec = PartitionSpec.from_mapping({"datestamp": "20110228", "region": "us/east=1"})
    assert spec.to_path() == "datestamp=20110228/region=us%2Feast%3D1"
    assert str(spec) == spec.to_path()
    assert PartitionSpec.parse(spec.to_path()) == spec


def test_parse_default_partition_and_case() -> None:
    spec = PartitionSpec.parse(f"DateStamp=X/region={DEFAULT_PARTITION_NAME}")
    assert spec.items == (("datestamp", "X"), ("region", None))


def test_parse_keeps_a_lone_percent_as_spark_does() -> None:
    assert PartitionSpec.parse("k=100%").values == ("100%",)
    assert PartitionSpec.parse("k=a%2fb").values == ("a/b",)


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/a=1", "empty segment"),
        ("a=1/", "empty segment"),
        ("a=1//b=2", "empty segment"),
        ("/", "empty segment"),
        ("a", "malformed segment"),
        ("a=1/b", "malformed segment"),
        ("a=1=2", "malformed segment"),
        ("=1", "empty key"),
        ("a=", "empty value"),
    ],
)
def test_malformed_paths_are_rejected_quoting_the_input(path: str, problem: str) -> None:
    with pytest.raises(InvalidSpecError, match=re.escape(problem)) as info:
        PartitionSpec.parse(path)
    assert repr(path) in str(info.value)


def test_from_args_splits_at_first_equals_and_keeps_raw_values() -> None:
    spec = PartitionSpec.from_args(
        ["datestamp=2011/02/28", "expr=a=b", "pct=50%", "nl=line\nbreak", "u=日本 🎉", "e="]
    )
    assert spec.as_dict() == {
        "datestamp": "2011/02/28",
        "expr": "a=b",
        "pct": "50%",
        "nl": "line\nbreak",
        "u": "日本 🎉",
        "e": None,
    }
    assert spec.to_path() == (
        "datestamp=2011%2F02%2F28/expr=a%3Db/pct=50%25/nl=line%0Abreak/u=日本 🎉"
        f"/e={DEFAULT_PARTITION_NAME}"
    )
    assert PartitionSpec.parse(spec.to_path()) == spec


@pytest.mark.parametrize("arg", ["datestamp", "", "datestamp:1"])
def test_from_args_rejects_items_without_equals(arg: str) -> None:
    with pytest.raises(InvalidSpecError, match="expected KEY=VALUE"):
        PartitionSpec.from_args([arg])


def test_from_args_rejects_a_bare_string() -> None:
    with pytest.raises(InvalidSpecError, match="not one string"):
        PartitionSpec.from_args("a=1")


def test_partition_path() -> None:
    assert partition_path(["d", "r"], ["1", None]) == f"d=1/r={DEFAULT_PARTITION_NAME}"
    assert partition_path(["d"], ["a/b"]) == "d=a%2Fb"
    with pytest.raises(InvalidSpecError, match="2 partition keys but 1 values"):
        partition_path(["d", "r"], ["1"])


# ---------------------------------------------------------------- canonical form


def test_canonical_sorts_keys_lexically() -> None:
    spec = PartitionSpec.from_mapping({"region": "us", "datestamp": "20110228", "b": "x/y"})
    assert spec.canonical() == "b=x%2Fy/datestamp=20110228/region=us"
    assert spec.sorted().keys == ("b", "datestamp", "region")
    assert spec.sorted() != spec  # equality follows key order
    assert spec.sorted().canonical() == spec.canonical()
    assert spec.to_path() == "region=us/datestamp=20110228/b=x%2Fy"


def test_canonical_sorts_by_key_not_by_escaped_segment() -> None:
    # "a_b" < "ab" as keys ('_' is 0x5F < 'b'); sorting "a=..."-segments must agree.
    spec = PartitionSpec.from_mapping({"ab": "1", "a_b": "2", "a": "3"})
    assert spec.canonical() == "a=3/a_b=2/ab=1"


# ---------------------------------------------------------------- covering


def test_broader_spec_covers_narrower() -> None:
    day = PartitionSpec.from_mapping({"datestamp": "20110228"})
    part = PartitionSpec.from_mapping({"datestamp": "20110228", "region": "us"})
    assert day.covers(part)
    assert not part.covers(day)


def test_equal_specs_cover_each_other_in_any_key_order() -> None:
    a = PartitionSpec.from_mapping({"datestamp": "20110228", "region": "us"})
    b = PartitionSpec.from_mapping({"region": "us", "datestamp": "20110228"})
    assert a.covers(b)
    assert b.covers(a)
    assert a.covers(a)


def test_covers_needs_equal_values_and_shared_keys() -> None:
    part = PartitionSpec.from_mapping({"datestamp": "20110228", "region": "us"})
    assert not PartitionSpec.from_mapping({"datestamp": "20110301"}).covers(part)
    assert not PartitionSpec.from_mapping({"hour": "01"}).covers(part)
    assert not PartitionSpec.from_mapping({"region": "US"}).covers(part)
    assert not PartitionSpec.from_mapping({"region": None}).covers(part)
    with_default = PartitionSpec.from_mapping({"datestamp": "1", "region": None})
    assert PartitionSpec.from_mapping({"region": ""}).covers(with_default)


def test_covering_canonicals() -> None:
    spec = PartitionSpec.from_mapping({"region": "us/east", "datestamp": "20110228"})
    assert spec.covering_canonicals() == [
        "datestamp=20110228",
        "region=us%2Feast",
        "datestamp=20110228/region=us%2Feast",
    ]
    three = PartitionSpec.from_mapping({"c": "3", "b": "2", "a": "1"})
    got = three.covering_canonicals()
    assert len(got) == 7
    assert len(set(got)) == 7
    assert got[-1] == three.canonical()
    for text in got:
        assert PartitionSpec.parse(text).covers(three)
        assert PartitionSpec.parse(text).canonical() == text


def test_covering_canonicals_cap() -> None:
    sixteen = PartitionSpec(tuple((f"k{i:02d}", "v") for i in range(MAX_COVERING_KEYS)))
    assert len(sixteen.covering_canonicals()) == 2**MAX_COVERING_KEYS - 1
    seventeen = PartitionSpec(tuple((f"k{i:02d}", "v") for i in range(MAX_COVERING_KEYS + 1)))
    with pytest.raises(InvalidSpecError, match="17 keys"):
        seventeen.covering_canonicals()


# ---------------------------------------------------------------- for_table

TABLE_KEYS = ["datestamp", "region"]


def test_for_table_reorders_in_table_key_order() -> None:
    spec = PartitionSpec.from_mapping({"region": "us", "datestamp": "1"})
    assert spec.for_table(TABLE_KEYS).keys == ("datestamp", "region")
    assert spec.for_table(["DateStamp", "Region"], partial=False).to_path() == (
        "datestamp=1/region=us"
    )
    partial = PartitionSpec.from_mapping({"region": "us"}).for_table(TABLE_KEYS)
    assert partial.as_dict() == {"region": "us"}


def test_a_done_is_a_prefix_of_the_keys_sorted_for_the_wire() -> None:
    keys = ["datestamp", "region", "hour"]
    done = PartitionSpec.from_mapping({"region": "us", "datestamp": "1"}).for_done(keys)
    assert done.keys == ("datestamp", "region")
    assert PartitionSpec.from_mapping({"region": "us", "hour": "01", "datestamp": "1"}).for_done(
        keys
    ).keys == ("datestamp", "hour", "region")
    with pytest.raises(InvalidSpecError) as info:
        PartitionSpec.from_mapping({"hour": "01", "datestamp": "1"}).for_done(keys, table="w.t")
    assert str(info.value) == (
        "mark-set-done spec 'datestamp=1/hour=01' for table w.t skips the leading partition "
        "key region: a done's spec must be a prefix of its partition keys (datestamp, region, "
        "hour)"
    )
    with pytest.raises(InvalidSpecError, match="partition keys datestamp, region: "):
        PartitionSpec.from_mapping({"hour": "01"}).for_done(keys)


def test_for_table_unknown_key_names_key_table_and_keys() -> None:
    spec = PartitionSpec.from_mapping({"datestamp": "1", "hour": "01"})
    with pytest.raises(UnknownPartitionKeyError) as info:
        spec.for_table(TABLE_KEYS, table="web.clicks")
    message = str(info.value)
    assert "'hour'" in message
    assert "web.clicks" in message
    assert "datestamp, region" in message


def test_for_table_unknown_key_without_table_name_or_keys() -> None:
    spec = PartitionSpec.from_mapping({"hour": "01"})
    with pytest.raises(UnknownPartitionKeyError, match="'hour'"):
        spec.for_table(TABLE_KEYS)
    with pytest.raises(UnknownPartitionKeyError, match="not partitioned"):
        spec.for_table([], table="web.raw")


def test_for_table_missing_key_when_not_partial() -> None:
    spec = PartitionSpec.from_mapping({"datestamp": "1"})
    assert spec.for_table(TABLE_KEYS).keys == ("datestamp",)
    with pytest.raises(InvalidSpecError, match=r"web\.clicks.*missing partition key\(s\) region"):
        spec.for_table(TABLE_KEYS, table="web.clicks", partial=False)


def test_for_table_rejects_bad_table_keys() -> None:
    spec = PartitionSpec.from_mapping({"datestamp": "1"})
    with pytest.raises(InvalidIdentifierError):
        spec.for_table(["date stamp"])
    with pytest.raises(InvalidSpecError, match="not one string"):
        spec.for_table("datestamp")


# ---------------------------------------------------------------- properties

values = st.text(alphabet=st.characters(exclude_characters="\x00", codec="utf-8"), min_size=1)
optional_values = st.none() | values
keys = st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True)
specs = st.lists(
    st.tuples(keys, optional_values), min_size=1, max_size=4, unique_by=lambda kv: kv[0]
)


@given(values)
def test_unescape_inverts_escape(value: str) -> None:
    assert unescape_path_name(escape_path_name(value)) == value


@given(values)
def test_escaped_text_splits_unambiguously(value: str) -> None:
    escaped = escape_path_name(value)
    assert "/" not in escaped
    assert "=" not in escaped
    assert "\n" not in escaped


@given(specs)
def test_parse_inverts_to_path(pairs: list[tuple[str, str | None]]) -> None:
    spec = PartitionSpec(tuple(pairs))
    parsed = PartitionSpec.parse(spec.to_path())
    assert parsed == spec
    assert parsed.as_dict() == {k: (None if v == DEFAULT_PARTITION_NAME else v) for k, v in pairs}


@given(specs)
def test_parse_trusted_equals_parse_on_what_to_path_writes(
    pairs: list[tuple[str, str | None]],
) -> None:
    path = PartitionSpec(tuple(pairs)).to_path()
    trusted = PartitionSpec.parse_trusted(path)
    assert trusted == PartitionSpec.parse(path)
    assert trusted.items == PartitionSpec.parse(path).items
    assert hash(trusted) == hash(PartitionSpec.parse(path))


@given(specs)
def test_from_args_round_trips_raw_values(pairs: list[tuple[str, str | None]]) -> None:
    spec = PartitionSpec(tuple(pairs))
    args = [f"{k}={'' if v is None else v}" for k, v in spec.items]
    assert PartitionSpec.from_args(args) == spec


@given(specs, st.randoms(use_true_random=False))
def test_canonical_is_independent_of_input_order(
    pairs: list[tuple[str, str | None]], rnd: random.Random
) -> None:
    shuffled = list(pairs)
    rnd.shuffle(shuffled)
    a = PartitionSpec(tuple(pairs))
    b = PartitionSpec(tuple(shuffled))
    assert a.canonical() == b.canonical()
    assert a.sorted() == b.sorted()
    assert a.covers(b)
    assert b.covers(a)
    assert PartitionSpec.parse(a.canonical()) == a.sorted()


@given(specs)
def test_every_covering_canonical_covers(pairs: list[tuple[str, str | None]]) -> None:
    spec = PartitionSpec(tuple(pairs))
    canonicals = spec.covering_canonicals()
    assert len(canonicals) == 2 ** len(spec) - 1
    assert spec.canonical() in canonicals
    for text in canonicals:
        assert PartitionSpec.parse(text).covers(spec)
