"""STOMP 1.2 SEND frames encoded as bytes, for writing many in one socket write.

stomp.py encodes and writes each frame on its own (merging header dicts, calling every
listener, taking the socket lock and making a system call per frame); a transaction's
SENDs need none of that per frame, so the connection encodes them here and writes them
in large chunks through stomp.py's transport.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

__all__ = ["CHUNK_BYTES", "PreparedSends", "SendEncoder", "encode_send", "escape", "send_chunks"]

Outgoing = tuple[str, str, Mapping[str, str]]
"""A message to SEND: ``(destination, body, headers)``."""

CHUNK_BYTES = 64 * 1024
"""Frames are written in chunks of about this size, each ending on a frame boundary."""

_SPECIAL = re.compile(r"[\\\r\n:]")
_ESCAPES = str.maketrans({"\\": "\\\\", "\r": "\\r", "\n": "\\n", ":": "\\c"})


def escape(value: str) -> str:
    """A header name or value escaped as STOMP 1.2 requires outside CONNECT frames."""
    return value.translate(_ESCAPES) if _SPECIAL.search(value) else value


class SendEncoder:
    """Encodes SEND frames that all carry the same ``fixed`` headers (which win over a
    message's own of the same name), rendered once instead of once per frame."""

    def __init__(self, fixed: Mapping[str, str]) -> None:
        self._fixed_names = frozenset(fixed)
        self._fixed_lines = "".join(
            [f"{escape(name)}:{escape(value)}\n" for name, value in fixed.items()]
        )
        self._destinations: dict[str, str] = {}

    def encode(self, destination: str, body: str, headers: Mapping[str, str]) -> bytes:
        """One SEND frame: ``destination``, ``content-length`` of the UTF-8 ``body``, the
        message's ``headers``, then the fixed ones."""
        if not self._fixed_names.isdisjoint(headers):
            headers = {k: v for k, v in headers.items() if k not in self._fixed_names}
        lines = "".join([f"{name}:{value}\n" for name, value in headers.items()])
        count = len(headers)
        # One ':' and one '\n' per line, no '\\' or '\r': nothing needed escaping (the usual
        # case, told by four scans of the joined lines instead of a search per header).
        if not (
            lines.count(":") == count
            and lines.count("\n") == count
            and "\\" not in lines
            and "\r" not in lines
        ):
            lines = "".join(
                [f"{escape(name)}:{escape(value)}\n" for name, value in headers.items()]
            )
        target = self._destinations.get(destination)
        if target is None:
            target = self._destinations[destination] = escape(destination)
        head = f"SEND\ndestination:{target}\ncontent-length:"
        if body.isascii():  # as many bytes as characters: encode the frame at once
            return f"{head}{len(body)}\n{lines}{self._fixed_lines}\n{body}\0".encode()
        payload = body.encode()
        return b"".join(
            (f"{head}{len(payload)}\n{lines}{self._fixed_lines}\n".encode(), payload, b"\0")
        )


def encode_send(destination: str, body: str, headers: Mapping[str, str]) -> bytes:
    """One SEND frame: ``destination``, ``content-length`` of the UTF-8 ``body``, then
    ``headers``."""
    return SendEncoder({}).encode(destination, body, headers)


@dataclass(frozen=True)
class PreparedSends:
    """The SEND frames of one transaction, encoded before it begins (while the broker
    stores the one before): its id, the messages, and the frames in chunks."""

    transaction: str
    messages: tuple[Outgoing, ...]
    chunks: tuple[bytes, ...]


def send_chunks(
    messages: Iterable[Outgoing],
    fixed: Mapping[str, str],
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[bytes]:
    """SEND frames for ``(destination, body, headers)``, each with the ``fixed`` headers
    (which win over a message's own of the same name), joined into chunks of about
    ``chunk_bytes`` that end on frame boundaries."""
    encode = SendEncoder(fixed).encode
    pending: list[bytes] = []
    size = 0
    for destination, body, headers in messages:
        frame = encode(destination, body, headers)
        pending.append(frame)
        size += len(frame)
        if size >= chunk_bytes:
            yield b"".join(pending)
            pending, size = [], 0
    if pending:
        yield b"".join(pending)
