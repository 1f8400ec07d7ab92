"""The bulk SEND frames are the frames stomp.py itself would write."""

from __future__ import annotations

import pytest
import stomp
from stomp import utils

from hcat_notify.broker.frames import encode_send, escape, send_chunks

TRICKY = {
    "HCAT_SERVER_URL": "thrift://metastore:9083",
    "HCAT_PARTITION": "dt=2026-11-26/path=a\\b",
    "X_LINES": "one\ntwo\r\nthree",
    "X_UNICODE": "größe 日本",
}
FIXED = {
    "amq-msg-type": "text",
    "persistent": "true",
    "transaction": "tx-1",
}


class _Capture:
    """A stand-in for stomp.py's socket transport: keeps the bytes it is asked to send."""

    def __init__(self, transport: object) -> None:
        self.sent: list[bytes] = []
        transport.send = self.sent.append  # type: ignore[attr-defined]


def _stomp_bytes(destination: str, body: str, headers: dict[str, str]) -> bytes:
    conn = stomp.Connection12([("127.0.0.1", 1)])
    capture = _Capture(conn.transport)
    conn.send(destination, body, headers={**headers, **FIXED})
    (frame,) = capture.sent
    return frame


def _parsed(frame: bytes) -> tuple[str, dict[str, str], bytes]:
    assert frame.endswith(b"\0")
    parsed = utils.parse_frame(frame[:-1])
    # stomp.py's parser decodes the body as UTF-8 text when it can; compare bytes.
    body = parsed.body if isinstance(parsed.body, bytes) else parsed.body.encode()
    return parsed.cmd, parsed.headers, body


PLAIN = {"HCAT_EVENT": "MARK_SET_DONE", "HCAT_EVENT_ID": "7", "HCAT_SPEC": "ds=2026-11-26"}


@pytest.mark.parametrize("headers", [TRICKY, PLAIN], ids=["escaped", "nothing-to-escape"])
def test_frames_parse_as_stomp_py_s_own(headers):
    body = '{"partition": "größe"}'
    ours = encode_send("/topic/hcat.db.tbl", body, {**headers, **FIXED})
    theirs = _stomp_bytes("/topic/hcat.db.tbl", body, headers)
    assert _parsed(ours) == _parsed(theirs)
    assert _parsed(ours)[1]["HCAT_EVENT_ID" if headers is PLAIN else "X_LINES"] == (
        "7" if headers is PLAIN else "one\ntwo\r\nthree"
    )


def test_a_frame_parses_to_what_stomp_py_would_have_sent():
    body = '{"partition": "größe", "nul": "a\\u0000b"}'
    ours = encode_send("/topic/hcat.db.tbl", body, {**TRICKY, **FIXED})
    theirs = _stomp_bytes("/topic/hcat.db.tbl", body, TRICKY)
    assert _parsed(ours) == _parsed(theirs)
    cmd, headers, payload = _parsed(ours)
    assert cmd == "SEND"
    assert headers["content-length"] == str(len(body.encode()))
    assert headers["HCAT_SERVER_URL"] == "thrift://metastore:9083"  # unescaped again
    assert headers["X_LINES"] == "one\ntwo\r\nthree"
    assert payload == body.encode()


def test_escape_follows_stomp_1_2():
    assert escape("plain") == "plain"
    assert escape("a:b\\c\nd\re") == "a\\cb\\\\c\\nd\\re"


def test_header_names_are_escaped_too():
    # STOMP 1.2 escapes names as well as values (stomp.py escapes values only).
    _, headers, _ = _parsed(encode_send("/topic/t", "{}", {"a:b": "c:d"}))
    assert headers["a:b"] == "c:d"


def test_fixed_headers_win_and_reserved_names_are_shadowed():
    frame = next(
        send_chunks([("/topic/t", "{}", {"persistent": "false", "destination": "x"})], FIXED)
    )
    _, headers, _ = _parsed(frame)
    # stomp.py's parser keeps the first of repeated headers, as STOMP 1.2 says.
    assert headers["persistent"] == "true"
    assert headers["destination"] == "/topic/t"


def test_chunks_end_on_frame_boundaries_and_keep_every_frame_in_order():
    messages = [(f"/topic/t{i}", f'{{"i": {i}}}', {"HCAT_EVENT_ID": str(i)}) for i in range(500)]
    chunks = list(send_chunks(messages, FIXED, chunk_bytes=4096))
    assert len(chunks) > 1
    frames = [f + b"\0" for chunk in chunks for f in chunk.split(b"\0") if f]
    assert all(chunk.endswith(b"\0") for chunk in chunks)
    ids = [_parsed(f)[1]["HCAT_EVENT_ID"] for f in frames]
    assert ids == [str(i) for i in range(500)]
    assert b"".join(chunks) == b"".join(encode_send(d, b, {**h, **FIXED}) for d, b, h in messages)


def test_no_messages_no_chunks():
    assert list(send_chunks([], FIXED)) == []


@pytest.mark.parametrize("body", ['{"a": 1}', '{"a": "größe 日本"}'], ids=["ascii", "utf-8"])
def test_content_length_counts_the_body_s_bytes_whatever_the_headers_hold(body):
    headers = {"X_UNICODE": "größe 日本", "HCAT_EVENT_ID": "1"}
    frame = next(send_chunks([("/topic/t", body, headers)], FIXED))
    _, parsed, payload = _parsed(frame)
    assert parsed["content-length"] == str(len(body.encode())) == str(len(payload))
    assert parsed["X_UNICODE"] == "größe 日本"
    assert _parsed(frame) == _parsed(_stomp_bytes("/topic/t", body, headers))
