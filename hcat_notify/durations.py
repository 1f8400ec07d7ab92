"""Durations as people write them: ``7d``, ``12h``, ``1d12h`` (a table's retention, the
outbox's retention)."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from hcat_notify.errors import InvalidInputError

__all__ = ["format_duration", "parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """Parse ``7d``, ``12h``, ``30m``, ``45s``, ``2w`` (combinations like ``1d12h`` too).

    Raises:
        InvalidInputError: anything else, a zero duration, or one longer than
            ``timedelta`` can hold.
    """
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not compact or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise InvalidInputError(f"invalid duration {text!r}: use e.g. 7d, 12h, 30m or 45s")
    seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    if not math.isfinite(seconds) or seconds > timedelta.max.total_seconds():
        raise InvalidInputError(f"duration {text!r} is too long")
    if seconds <= 0:
        raise InvalidInputError(f"duration {text!r} must be positive")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """``7d``, ``12h``, ``1d12h``, ``90s``: the form :func:`parse_duration` reads back.

    Whole weeks are shown as days (``14d``), which is how retention is usually given;
    fractions of a second are shown with up to three decimals.
    """
    seconds = value.total_seconds()
    if seconds <= 0:
        return "0s"
    parts = []
    whole = int(seconds)
    for unit in ("d", "h", "m"):
        count, whole = divmod(whole, _UNIT_SECONDS[unit])
        if count:
            parts.append(f"{count}{unit}")
    fraction = round(seconds - int(seconds), 3)
    if whole or fraction or not parts:
        number = whole + fraction
        parts.append(f"{number:g}s" if fraction else f"{whole}s")
    return "".join(parts)
