"""A connection's state costs what uvicorn's own does: the protocol's few fields of its
own sit in slots, so that the instance dict stays uvicorn's key-shared one (a long poll
holds its connection, and ten thousand of them their protocols, for a minute; issue 31)."""

from __future__ import annotations

import asyncio
import sys

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from hcat_notify.api.protocol import ApiHttpProtocol


async def _app(scope: object, receive: object, send: object) -> None:
    return None


def test_the_protocol_instance_is_no_larger_than_uvicorns():
    config = Config(_app)
    config.load()
    loop = asyncio.new_event_loop()
    try:
        ours, theirs = (
            cls(config=config, server_state=ServerState(), app_state={}, _loop=loop)
            for cls in (ApiHttpProtocol, HttpToolsProtocol)
        )
        assert sys.getsizeof(ours.__dict__) <= sys.getsizeof(theirs.__dict__)
    finally:
        loop.close()
