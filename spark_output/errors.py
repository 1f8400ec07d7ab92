"""Exceptions raised by spark_output.

SparkOutputError          root of every error spark_output raises on purpose
"""

from __future__ import annotations

__all__ = ["SparkOutputError"]


class SparkOutputError(Exception):
    """Root of every error spark_output raises on purpose."""
