"""The schema revision this version of hcat-notify reads and writes."""

from __future__ import annotations

__all__ = ["SCHEMA_REVISION"]

SCHEMA_REVISION = "0023"
"""The newest migration shipped (a test checks it against Alembic's head)."""
