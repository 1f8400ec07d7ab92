"""The values of completeness rules as people write them: durations (``10m``, ``4h``)
and the expected values of a key (``us,eu,apac``, ``00..23``, ``20260101..20260131``,
``2026-01-01..2026-01-31``; docs/completeness.md)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date, datetime, timedelta

from hcat_notify.errors import InvalidRuleError

__all__ = ["as_date", "expression_size", "expression_values", "parse_duration", "parse_parts"]

_DURATION = re.compile(r"(\d{1,9})([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DATE_COMPACT = re.compile(r"\d{8}")
_DATE_DASHED = re.compile(r"\d{4}-\d{2}-\d{2}")
_INTEGER = re.compile(r"-?\d{1,18}")


def parse_duration(text: str | int, *, what: str = "duration") -> int:
    """Seconds of ``10m``, ``4h``, ``1d``, ``1h30m``, ``90s`` or a plain number of seconds.

    Raises:
        InvalidRuleError: anything else, or a negative duration.
    """
    if isinstance(text, bool):
        raise InvalidRuleError(f"{what} {text!r} is not a duration")
    if isinstance(text, int):
        if text < 0:
            raise InvalidRuleError(f"{what} must not be negative, got {text}")
        return text
    given = str(text).strip().lower()
    if re.fullmatch(r"\d{1,9}", given):
        return int(given)
    if not given or _DURATION.sub("", given) != "":
        raise InvalidRuleError(
            f"{what} {text!r} is not a duration (use e.g. 90s, 10m, 4h, 1d or 1h30m)"
        )
    return sum(int(amount) * _UNIT_SECONDS[unit] for amount, unit in _DURATION.findall(given))


def as_date(text: str) -> date | None:
    try:
        if _DATE_COMPACT.fullmatch(text):
            return datetime.strptime(text, "%Y%m%d").date()
        if _DATE_DASHED.fullmatch(text):
            return date.fromisoformat(text)
    except ValueError:
        return None
    return None


def _range_dates(start: str, end: str) -> tuple[date, date] | None:
    """The two ends of a date range (both ``yyyymmdd`` or both ``yyyy-mm-dd``), else None."""
    same_form = (_DATE_COMPACT.fullmatch(start) and _DATE_COMPACT.fullmatch(end)) or (
        _DATE_DASHED.fullmatch(start) and _DATE_DASHED.fullmatch(end)
    )
    first, last = as_date(start), as_date(end)
    if same_form and first is not None and last is not None:
        return first, last
    return None


def _not_a_date(start: str, end: str) -> str | None:
    """The end of a range meant as dates that is not a real date (``20260230`` of
    ``20260230..20260301``), else None. A ``yyyy-mm-dd`` range is meant as dates; a
    ``yyyymmdd`` one when either end is a date (``10000000..10000099`` stays integers)."""
    ends = (start, end)
    if all(_DATE_DASHED.fullmatch(each) for each in ends):
        meant = True
    else:
        compact = all(_DATE_COMPACT.fullmatch(each) for each in ends)
        meant = compact and any(as_date(each) is not None for each in ends)
    if not meant:
        return None
    return next((each for each in ends if as_date(each) is None), None)


def _range_size(key: str, start: str, end: str) -> int:
    bad = _not_a_date(start, end)
    if bad is not None:
        raise InvalidRuleError(f"range {start}..{end} of {key}: {bad} is not a date (no such day)")
    dates = _range_dates(start, end)
    if dates is not None:
        size = (dates[1] - dates[0]).days + 1
    elif _INTEGER.fullmatch(start) and _INTEGER.fullmatch(end):
        size = int(end) - int(start) + 1
    else:
        raise InvalidRuleError(
            f"range {start}..{end} of {key} is neither integers nor dates "
            "(use e.g. 00..23, 20260101..20260131 or 2026-01-01..2026-01-31)"
        )
    if size < 1:
        raise InvalidRuleError(
            f"range {start}..{end} of {key} is empty (its end is before its start)"
        )
    return size


def _range_values(start: str, end: str) -> list[str]:
    dates = _range_dates(start, end)
    if dates is not None:
        first, last = dates
        form = "%Y-%m-%d" if "-" in start else "%Y%m%d"
        return [
            (first + timedelta(days=offset)).strftime(form)
            for offset in range((last - first).days + 1)
        ]
    width = len(start) if len(start) == len(end) else 0  # 00..23: zero-padded to 2
    return [f"{value:0{width}d}" for value in range(int(start), int(end) + 1)]


def _items(key: str, expression: str) -> list[str]:
    items = [item.strip() for item in str(expression).split(",")]
    if not items or any(not item for item in items):
        raise InvalidRuleError(f"expected values of {key} {expression!r} has an empty value")
    return items


def expression_size(key: str, expression: str) -> int:
    size = 0
    for item in _items(key, expression):
        if ".." in item:
            start, _, end = item.partition("..")
            size += _range_size(key, start.strip(), end.strip())
        else:
            size += 1
    return size


def expression_values(key: str, expression: str) -> tuple[str, ...]:
    values: list[str] = []
    for item in _items(key, expression):
        if ".." in item:
            start, _, end = item.partition("..")
            values.extend(_range_values(start.strip(), end.strip()))
        else:
            values.append(item)
    unique = tuple(dict.fromkeys(values))
    if len(unique) != len(values):
        repeated = next(value for value in values if values.count(value) > 1)
        raise InvalidRuleError(f"expected values of {key} name {repeated!r} twice")
    return unique


def parse_parts(args: Sequence[str]) -> dict[str, str]:
    """``["region=us,eu,apac", "hour=00..23"]`` as ``{key: expression}``.

    Raises:
        InvalidRuleError: an argument without ``=``, or a key given twice.
    """
    parts: dict[str, str] = {}
    for arg in args:
        key, sep, expression = str(arg).partition("=")
        key = key.strip()
        if not sep or not key or not expression.strip():
            raise InvalidRuleError(f"expected parts {arg!r} is not KEY=VALUES (e.g. hour=00..23)")
        if key in parts:
            raise InvalidRuleError(f"expected parts name key {key!r} twice")
        parts[key] = expression.strip()
    return parts
