"""Names of databases, tables and partition keys, validated as Hive validates them."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from hcat_notify.errors import InvalidIdentifierError

__all__ = [
    "MAX_JOB_ID_LENGTH",
    "TableName",
    "staging_entry_id",
    "validate_identifier",
    "validate_job_id",
]

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


MAX_JOB_ID_LENGTH = 120
"""A job id names its staging and trash directories, and its journal entries (the staging
one is ``<job id>.staging``, within the column's 128 characters)."""
_JOB_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:+-]{{0,{MAX_JOB_ID_LENGTH - 1}}}")


_STAGING_ENTRY = ".staging"


def staging_entry_id(job_id: str) -> str:
    """The id of the journal entry that records ``job_id``'s staging while the job fills
    it itself (``spark_output``'s ``PartitionCommitter.journal_staging``)."""
    return f"{job_id}{_STAGING_ENTRY}"


def validate_job_id(job_id: str, *, entry: bool = False) -> str:
    """Return ``job_id`` if it is a valid job id: one path component (never ``.``, ``..``
    or anything with a ``/``), as it names the job's staging and trash directories.
    ``entry``: a journal entry's id, which may be a job id's :func:`staging_entry_id`.

    Raises:
        InvalidIdentifierError: naming the id: empty, too long, or characters other than
            letters, digits and ``. _ : + -``, not starting with a letter or digit, or
            ending with ``.staging`` (what :func:`staging_entry_id` appends).
    """
    job = job_id.removesuffix(_STAGING_ENTRY) if entry and isinstance(job_id, str) else job_id
    if isinstance(job, str) and job.endswith(_STAGING_ENTRY):
        raise InvalidIdentifierError(
            f"invalid job id {job_id!r}: a job id may not end with {_STAGING_ENTRY!r} (the "
            "journal names a job's staging entry so); nothing was written"
        )
    if not isinstance(job, str) or not _JOB_ID.fullmatch(job):
        raise InvalidIdentifierError(
            f"invalid job id {job_id!r}: use 1 to {MAX_JOB_ID_LENGTH} letters, digits and "
            "'._:+-', starting with a letter or digit (it names the job's staging "
            "directory); nothing was written"
        )
    return job_id


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
