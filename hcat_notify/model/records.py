"""A base for read-only records whose fields are set at once and some decoded late."""

from __future__ import annotations

from typing import Any, ClassVar, Self

__all__ = ["ReadOnlyRecord"]


class ReadOnlyRecord:
    """Read-only after construction; equal when of the same kind with equal fields.

    A subclass names its fields in ``FIELDS`` (read with ``getattr``, so a field may be a
    property that decodes a stored value on first read) and sets them by assigning the
    instance dict at once (:meth:`trusted`, or ``_fill`` in ``__init__``): one call, where
    a frozen dataclass makes one per field, and the relay and catch-up build 100,000s.
    """

    FIELDS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def trusted(cls, values: dict[str, Any]) -> Self:
        """A record of values the catalog wrote itself, unchecked: ``values`` becomes its
        instance dict as it is (the stored names, for fields decoded late)."""
        record = object.__new__(cls)
        record._fill(values)
        return record

    def _fill(self, values: dict[str, Any]) -> None:
        object.__setattr__(self, "__dict__", values)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a {type(self).__name__} is read-only (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a {type(self).__name__} is read-only (cannot delete {name!r})")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, ReadOnlyRecord)
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # records hold mappings

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{type(self).__name__}({shown})"
