"""Names of databases, tables and partition keys, validated as Hive validates them."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from hcat_notify.errors import InvalidIdentifierError

__all__ = ["TableName", "validate_identifier"]

# Hive's metastore accepts [A-Za-z0-9_]+ for database, table and column names and stores
# them lower-cased; anything else would break topic names, paths and SQL. Cached: the
# same few keys are validated for every spec a consumer parses.
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")
MAX_IDENTIFIER_LENGTH = 128


@functools.lru_cache(maxsize=4096)
def validate_identifier(name: str, *, what: str = "identifier") -> str:
    """Return ``name`` lower-cased if it is a valid Hive identifier.

    Args:
        name: the database, table or partition-key name to check.
        what: how the error message refers to the name ("table name", ...).

    Raises:
        InvalidIdentifierError: the name is empty, too long, or has characters other
            than letters, digits and underscores.
    """
    if not isinstance(name, str) or not name:
        raise InvalidIdentifierError(f"{what} must not be empty")
    if len(name) > MAX_IDENTIFIER_LENGTH:
        raise InvalidIdentifierError(
            f"{what} {name[:20]!r}... is longer than {MAX_IDENTIFIER_LENGTH} characters"
        )
    if not _IDENTIFIER.fullmatch(name):
        raise InvalidIdentifierError(
            f"invalid {what} {name!r}: use only letters, digits and underscores"
        )
    return name.lower()


@dataclass(frozen=True, order=True)
class TableName:
    """A ``db.table`` name; both parts validated and lower-cased."""

    db: str
    table: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "db", validate_identifier(self.db, what="database name"))
        object.__setattr__(self, "table", validate_identifier(self.table, what="table name"))

    @classmethod
    def parse(cls, text: str) -> TableName:
        """Parse ``db.table``.

        Raises:
            InvalidIdentifierError: not exactly two dot-separated valid identifiers.
        """
        if not isinstance(text, str) or text.count(".") != 1:
            raise InvalidIdentifierError(
                f"malformed table name {text!r}: expected DB.TABLE, e.g. web.clicks"
            )
        db, table = text.split(".")
        return cls(db, table)

    def __str__(self) -> str:
        return f"{self.db}.{self.table}"
