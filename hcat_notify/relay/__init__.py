"""The relay: publishes the outbox to the broker, in event-id order per topic."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from hcat_notify.relay.config import DEFAULT_LEASE_NAME, RelayConfig
    from hcat_notify.relay.publisher import Relay, RelayStats

__all__ = ["DEFAULT_LEASE_NAME", "Relay", "RelayConfig", "RelayStats"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "DEFAULT_LEASE_NAME": "hcat_notify.relay.config",
        "RelayConfig": "hcat_notify.relay.config",
        "Relay": "hcat_notify.relay.publisher",
        "RelayStats": "hcat_notify.relay.publisher",
    },
)
