"""Lazy re-exports for package ``__init__`` modules (PEP 562).

A package names what it exports and where each name lives; a name's module is imported
the first time the name is used. ``import hcat_notify`` then loads neither SQLAlchemy nor
stomp.py, and a Spark executor unpickling a ``spark_output`` function pays only for what
that function uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, namespace: dict[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` that import names on first use.

    Args:
        package: the package's ``__name__``.
        namespace: the package's ``globals()``; a loaded name is cached there.
        where: exported name -> the module that defines it.

    Returns:
        The pair to assign to the package's ``__getattr__`` and ``__dir__``.
    """

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(where))

    return getattr_, dir_
