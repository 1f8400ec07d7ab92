"""STOMP 1.2 SEND frames encoded as bytes, for writing many in one socket write.

stomp.py encodes and writes each frame on its own (merging header dicts, calling every
listener, taking the socket lock and making a system call per frame); a transaction's
SENDs need none of that per frame, so the connection encodes them here and writes them
in large chunks through stomp.py's transport.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping

__all__ = ["CHUNK_BYTES", "encode_send", "escape", "send_chunks"]

CHUNK_BYTES = 64 * 1024
"""Frames are written in chunks of about this size, each ending on a frame boundary."""

_SPECIAL = re.compile(r"[\\\r\n:]")
_ESCAPES = str.maketrans({"\\": "\\\\", "\r": "\\r", "\n": "\\n", ":": "\\c"})


def escape(value: str) -> str:
    """A header name or value escaped as STOMP 1.2 requires outside CONNECT frames."""
    return value.translate(_ESCAPES) if _SPECIAL.search(value) else value


def encode_send(destination: str, body: str, headers: Mapping[str, str]) -> bytes:
    """One SEND frame: ``destination``, ``content-length`` of the UTF-8 ``body``, then
    ``headers`` (a header also named here is shadowed: in STOMP 1.2 the first wins)."""
    payload = body.encode()
    if _SPECIAL.search("".join(headers)) or _SPECIAL.search("".join(headers.values())):
        lines = "".join([f"{escape(name)}:{escape(value)}\n" for name, value in headers.items()])
    else:  # nothing to escape (the usual case): one search each instead of one per header
        lines = "".join([f"{name}:{value}\n" for name, value in headers.items()])
    head = f"SEND\ndestination:{escape(destination)}\ncontent-length:{len(payload)}\n{lines}\n"
    return b"".join((head.encode(), payload, b"\0"))


def send_chunks(
    messages: Iterable[tuple[str, str, Mapping[str, str]]],
    fixed: Mapping[str, str],
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[bytes]:
    """SEND frames for ``(destination, body, headers)``, each with the ``fixed`` headers
    (which win over a message's own of the same name), joined into chunks of about
    ``chunk_bytes`` that end on frame boundaries."""
    pending: list[bytes] = []
    size = 0
    for destination, body, headers in messages:
        frame = encode_send(destination, body, {**headers, **fixed})
        pending.append(frame)
        size += len(frame)
        if size >= chunk_bytes:
            yield b"".join(pending)
            pending, size = [], 0
    if pending:
        yield b"".join(pending)
