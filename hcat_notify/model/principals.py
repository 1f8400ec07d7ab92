"""Who may use the HTTP API: principals, their roles and hashed secrets.

A principal is a name, a role (``reader`` reads; ``writer`` reads and writes) and the
hash of its secret, never the secret itself. Hashes are PBKDF2-HMAC-SHA256 strings,
``pbkdf2_sha256$<iterations>$<salt, hex>$<hash, hex>``, the same shape Django and
others store, so any tool that speaks it can make one; ``hcat-notify hash-secret``
prints one. The settings hold principals as a tuple of :class:`Principal` (hashable,
as the settings must be).

Settings file form (``hcat-notify.toml``)::

    [api.principals]
    hcat-publisher = { role = "writer", secret = "pbkdf2_sha256$600000$..." }
    hcat-reader = { role = "reader", secret = "pbkdf2_sha256$600000$..." }

Environment form (``HCAT_NOTIFY_API_PRINCIPALS``): ``NAME:ROLE:HASH`` entries joined by
commas.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DEFAULT_ITERATIONS",
    "Principal",
    "Role",
    "hash_secret",
    "parse_principals",
    "verify_secret",
]

DEFAULT_ITERATIONS = 600_000
"""PBKDF2-SHA256 iterations of a new hash (OWASP's figure for 2023)."""

_SCHEME = "pbkdf2_sha256"
_MIN_ITERATIONS = 1_000
_MAX_ITERATIONS = 10_000_000
_HASH = re.compile(r"pbkdf2_sha256\$(\d{1,9})\$([0-9a-f]{16,128})\$([0-9a-f]{64})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")


class Role(StrEnum):
    """What a principal may do."""

    READER = "reader"  # every GET
    WRITER = "writer"  # every GET, and the writes (create tables, mark done, ...)

    def allows(self, needed: Role) -> bool:
        """Whether this role may do what ``needed`` may."""
        return self is Role.WRITER or needed is Role.READER


def _check_hash(value: str) -> tuple[int, bytes, bytes]:
    match = _HASH.fullmatch(value)
    if match is None:
        raise ValueError(
            "a secret must be stored hashed, as pbkdf2_sha256$ITERATIONS$SALT$HASH "
            "(hcat-notify hash-secret prints one), not in the clear"
        )
    iterations = int(match.group(1))
    if not _MIN_ITERATIONS <= iterations <= _MAX_ITERATIONS:
        raise ValueError(
            f"a secret hash needs {_MIN_ITERATIONS:,} to {_MAX_ITERATIONS:,} iterations, "
            f"not {iterations:,}"
        )
    return iterations, bytes.fromhex(match.group(2)), bytes.fromhex(match.group(3))


@dataclass(frozen=True)
class Principal:
    """A name allowed to use the API, its role and the hash of its secret.

    Raises:
        ValueError: a malformed name or hash.
    """

    name: str
    role: Role
    secret_hash: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"invalid principal name {self.name!r}: letters, digits and . _ @ - only"
            )
        object.__setattr__(self, "role", Role(self.role))
        _check_hash(self.secret_hash)

    def __repr__(self) -> str:
        return f"Principal({self.name!r}, {self.role.value!r})"


def hash_secret(secret: str, *, iterations: int = DEFAULT_ITERATIONS) -> str:
    """The stored form of ``secret``: PBKDF2-HMAC-SHA256 with a fresh random salt."""
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode("utf-8"), salt, iterations)
    return f"{_SCHEME}${iterations}${salt.hex()}${digest.hex()}"


def verify_secret(secret: str, secret_hash: str) -> bool:
    """Whether ``secret`` hashes to ``secret_hash`` (compared in constant time).

    Costs the hash's iterations (about a quarter of a second at the default): callers
    that check the same credentials often remember the answer.
    """
    iterations, salt, expected = _check_hash(secret_hash)
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode("utf-8"), salt, iterations)
    return hmac.compare_digest(digest, expected)


def _from_mapping(name: str, entry: Any) -> Principal:
    if not isinstance(entry, Mapping):
        raise ValueError(f"principal {name!r}: expected a table with role and secret")
    extra = sorted(set(entry) - {"role", "secret"})
    if extra:
        raise ValueError(f"principal {name!r}: unknown key(s) {', '.join(extra)}")
    if "role" not in entry or "secret" not in entry:
        raise ValueError(f"principal {name!r}: give both role and secret")
    return _principal(name, entry["role"], entry["secret"])


def _principal(name: str, role: Any, secret_hash: Any) -> Principal:
    try:
        checked = Role(role)
    except ValueError:
        raise ValueError(
            f"principal {name!r}: role must be reader or writer, not {role!r}"
        ) from None
    if not isinstance(secret_hash, str):
        raise ValueError(f"principal {name!r}: the secret must be a hash string")
    try:
        return Principal(name, checked, secret_hash)
    except ValueError as exc:
        raise ValueError(f"principal {name!r}: {exc}") from None


def parse_principals(value: Any) -> tuple[Principal, ...]:
    """Principals from the settings file (a table of tables), the environment
    (``NAME:ROLE:HASH,...``) or an argument (principals).

    Raises:
        ValueError: the value names the problem (and the principal).
    """
    found: list[Principal] = []
    if isinstance(value, Mapping):
        found = [_from_mapping(str(name), entry) for name, entry in value.items()]
    elif isinstance(value, str):
        for part in (item.strip() for item in value.split(",")):
            if not part:
                continue
            name, sep, rest = part.partition(":")
            role, sep2, secret_hash = rest.partition(":")
            if not sep or not sep2:
                raise ValueError(f"principal entry {part[:40]!r} is not NAME:ROLE:HASH")
            found.append(_principal(name, role, secret_hash))
    elif isinstance(value, tuple | list) and all(isinstance(item, Principal) for item in value):
        found = list(value)
    else:
        raise ValueError(f"expected a table of principals, not {type(value).__name__}")
    names = [principal.name for principal in found]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"principal(s) given twice: {', '.join(repeated)}")
    return tuple(found)
