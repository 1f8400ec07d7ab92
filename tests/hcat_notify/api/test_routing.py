"""The strict body parser and the media-type check of the API's routes."""

from __future__ import annotations

import pytest
from starlette.exceptions import HTTPException

from hcat_notify.api.routing import check_media_type, parse_json
from hcat_notify.errors import InvalidInputError


def test_parse_json_takes_json():
    assert parse_json('{"spec": {"d": "été"}, "n": [1, 2.5]}'.encode()) == {
        "spec": {"d": "été"},
        "n": [1, 2.5],
    }


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"d": "\xff"}', "not UTF-8 (byte 0xff at offset 7)"),
        (b'{"k": "a", "k": "b"}', "key 'k' appears more than once"),
        (b'{"a": {"k": 1, "k": 1}}', "key 'k' appears more than once"),
        (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
        (b"1" * 41, "41 characters (at most 40)"),
        (b"1e999", "out of range"),
        (b"-Infinity", "-Infinity is not JSON"),
    ],
)
def test_parse_json_refuses(body: bytes, words: str):
    with pytest.raises(InvalidInputError, match="malformed request") as caught:
        parse_json(body)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        'application/json; charset="UTF8"',
        "application/merge-patch+json",
    ],
)
def test_json_media_types_pass(content_type: str):
    check_media_type(content_type)


@pytest.mark.parametrize(
    ("content_type", "words"),
    [
        (None, "names no Content-Type"),
        ("application/x-www-form-urlencoded", "not application/x-www-form-urlencoded"),
        ("text/plain", "not text/plain"),
        ("application/json; charset=latin-1", "not charset latin-1"),
    ],
)
def test_other_media_types_are_415(content_type: str | None, words: str):
    with pytest.raises(HTTPException) as caught:
        check_media_type(content_type)
    assert caught.value.status_code == 415
    assert words in caught.value.detail
    assert "application/json" in caught.value.detail
