"""The HTTP API: the server of ``hcat-notify serve`` and a client of it.

:func:`create_app` (:mod:`hcat_notify.api.app`, needs the ``[api]`` extra: FastAPI,
uvicorn, prometheus-client) builds the ASGI application; :class:`ApiClient`
(:mod:`hcat_notify.api.client`, needs httpx) reads the catalog through it and fails
over between instances. Names load on first use, so importing this package costs
nothing. The design is in docs/api.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from hcat_notify.api.app import create_app
    from hcat_notify.api.client import ApiClient

__all__ = ["ApiClient", "create_app"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {"ApiClient": "hcat_notify.api.client", "create_app": "hcat_notify.api.app"},
)
