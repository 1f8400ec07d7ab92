"""How a relay batches, waits and backs off: its settings and their defaults.

Light to import (no broker, no store), so the command line can show the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from hcat_notify.errors import InvalidInputError

__all__ = ["DEFAULT_LEASE_NAME", "RelayConfig"]

DEFAULT_LEASE_NAME = "outbox"


@dataclass(frozen=True, kw_only=True)
class RelayConfig:
    """How the relay batches, waits and backs off.

    Attributes:
        batch_size: events per STOMP transaction (and per outbox read: bounds memory).
        use_transactions: batch in STOMP transactions with one receipt on COMMIT;
            False sends each event with its own receipt.
        idle_wait: longest sleep between outbox checks when nothing wakes the relay.
        lease_ttl: seconds a relay owns the outbox without renewing.
        backoff_initial: first reconnect delay, doubled per failure (with jitter).
        backoff_max: the longest reconnect delay.
        blocked_topic_retry: seconds before retrying a topic the broker refused.
        max_attempts: refusals of one event by the broker (not outages) after which it
            is parked as undeliverable and the relay goes on without it.
    """

    batch_size: int = 500
    use_transactions: bool = True
    idle_wait: float = 1.0
    lease_ttl: float = 15.0
    backoff_initial: float = 0.2
    backoff_max: float = 10.0
    blocked_topic_retry: float = 30.0
    max_attempts: int = 3

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise InvalidInputError(f"relay batch size must be at least 1, not {self.batch_size}")
        if self.max_attempts < 1:
            raise InvalidInputError(
                f"relay max attempts must be at least 1, not {self.max_attempts}"
            )
