"""HTTP Basic authentication against the configured principals.

A principal's secret is stored hashed (PBKDF2, :mod:`hcat_notify.model.principals`),
which makes checking it cost a quarter of a second by design. Each process remembers the
credentials it has checked — keyed by an HMAC of the header under a key of its own, so
the memory holds no password — and answers a known pair with one dictionary lookup. A
refused pair is remembered too, so a client retrying wrong credentials in a loop costs a
lookup, not a hash. Anonymous requests get 401 with ``WWW-Authenticate: Basic``; a
reader asking to write gets 403.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPBasic, HTTPBasicCredentials
from starlette.concurrency import run_in_threadpool

from hcat_notify.model.principals import Principal, Role, verify_secret

__all__ = [
    "BASIC_SECURITY",
    "REALM",
    "Authenticator",
    "authorize",
    "require_reader",
    "require_writer",
]

REALM = "hcat-notify"
_REMEMBERED = 4096  # checked credential pairs kept per process, each way

_basic = HTTPBasic(realm=REALM, auto_error=False, description="A configured API principal.")
BASIC_SECURITY: dict[str, list[dict[str, list[str]]]] = {"security": [{"HTTPBasic": []}]}
"""``openapi_extra`` of a route that calls :func:`authorize` itself."""


class Authenticator:
    """Checks Basic credentials against ``principals``; remembers the answers."""

    def __init__(self, principals: Sequence[Principal]) -> None:
        self._principals = {principal.name: principal for principal in principals}
        self._key = secrets.token_bytes(32)
        self._accepted: dict[bytes, Principal] = {}
        self._refused: set[bytes] = set()

    def _fingerprint(self, user: str, password: str) -> bytes:
        pair = f"{user}\x00{password}".encode("utf-8", "surrogatepass")
        return hmac.new(self._key, pair, hashlib.sha256).digest()

    def _check(self, user: str, password: str) -> Principal | None:
        principal = self._principals.get(user)
        if principal is None:
            return None
        return principal if verify_secret(password, principal.secret_hash) else None

    async def principal(self, user: str, password: str) -> Principal | None:
        """The principal these credentials name, or None."""
        key = self._fingerprint(user, password)
        known = self._accepted.get(key)
        if known is not None:
            return known
        if key in self._refused:
            return None
        found = await run_in_threadpool(self._check, user, password)
        remembered = self._accepted if found is not None else self._refused
        if len(remembered) >= _REMEMBERED:
            remembered.clear()
        if found is not None:
            self._accepted[key] = found
        else:
            self._refused.add(key)
        return found


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail, headers={"WWW-Authenticate": f'Basic realm="{REALM}"'})


async def _authenticate(
    request: Request, credentials: HTTPBasicCredentials | None, needed: Role
) -> Principal:
    if credentials is None:
        raise _unauthorized("authentication required: HTTP Basic with an API principal")
    authenticator: Authenticator = request.app.state.hcat.authenticator
    principal = await authenticator.principal(credentials.username, credentials.password)
    if principal is None:
        raise _unauthorized("unknown principal or wrong secret")
    if not principal.role.allows(needed):
        raise HTTPException(
            403, f"principal {principal.name!r} is a {principal.role.value}; this needs a writer"
        )
    return principal


async def authorize(request: Request, needed: Role) -> Principal:
    """What :func:`require_reader` / :func:`require_writer` check, called by a route
    itself instead of as a dependency (FastAPI's dependency solving costs a hot route
    more than the check); declare :data:`BASIC_SECURITY` in its ``openapi_extra``."""
    return await _authenticate(request, await _basic(request), needed)


Credentials = Annotated[HTTPBasicCredentials | None, Depends(_basic)]


async def require_reader(request: Request, credentials: Credentials) -> Principal:
    """Dependency: any principal (reader or writer)."""
    return await _authenticate(request, credentials, Role.READER)


async def require_writer(request: Request, credentials: Credentials) -> Principal:
    """Dependency: a writer principal."""
    return await _authenticate(request, credentials, Role.WRITER)
