"""Java's encodings that the HAR index depends on: ``URLEncoder``/``URLDecoder`` and
``String.hashCode`` (through which ``HarFileSystem`` orders and finds index entries)."""

from __future__ import annotations

from urllib.parse import unquote_plus

__all__ = ["har_hash", "java_string_hash", "java_url_decode", "java_url_encode"]

_JAVA_URL_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")


def java_url_encode(text: str) -> str:
    """``java.net.URLEncoder.encode(text, "UTF-8")``.

    Letters, digits and ``.-*_`` stay; a space becomes ``+``; every other UTF-8 byte
    becomes ``%XX`` with upper-case hex (``~`` too, unlike Python's ``quote_plus``).
    """
    out: list[str] = []
    for byte in text.encode("utf-8"):
        if byte in _JAVA_URL_SAFE:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def java_url_decode(text: str) -> str:
    """``java.net.URLDecoder.decode(text, "UTF-8")``: ``+`` is a space, ``%XX`` a byte."""
    return unquote_plus(text, encoding="utf-8", errors="strict")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units, 32-bit signed overflow)."""
    data = text.encode("utf-16-be", errors="surrogatepass")
    value = 0
    for i in range(0, len(data), 2):
        value = (31 * value + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def har_hash(path: str) -> int:
    """``HarFileSystem.getHarHash``: ``path.toString().hashCode() & 0x7fffffff``.

    ``path`` must be the normalized archive path (``/`` or ``/a/b``), as Hadoop's ``Path``
    prints it.
    """
    return java_string_hash(path) & 0x7FFFFFFF
