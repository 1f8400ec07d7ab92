"""Whether the process that owns a row (a relay member, a durable subscriber) is gone."""

from __future__ import annotations

import os
import socket

__all__ = ["process_gone"]


def process_gone(host: str, pid: int | str) -> bool:
    """True when ``host:pid`` names a process of this host that no longer runs.

    A process elsewhere, or one we may not signal, counts as running: only its heartbeat
    can tell.
    """
    if host != socket.gethostname() or not str(pid).isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
