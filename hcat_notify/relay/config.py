"""How a relay batches, waits, heartbeats and backs off: its settings and their defaults.

Light to import (no broker, no store), so the command line can show the defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from hcat_notify.broker.backoff import DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX
from hcat_notify.errors import InvalidInputError

__all__ = ["RelayConfig"]


@dataclass(frozen=True, kw_only=True)
class RelayConfig:
    """How the relay batches, waits, heartbeats and backs off.

    Attributes:
        batch_size: events per STOMP transaction (and per outbox read: bounds memory).
        use_transactions: batch in STOMP transactions with one receipt on COMMIT;
            False sends each event with its own receipt.
        idle_wait: longest sleep between outbox checks when nothing wakes the relay.
        heartbeat_interval: seconds between a member's heartbeats (and the
            controller's rounds).
        session_timeout: a member whose heartbeat is older than this, by the
            database's clock, is dead; its buckets move. Also the controller's lease.
        min_move_interval: seconds a bucket stays with its owner after a move, unless
            the owner dies.
        backoff_initial: first reconnect delay, doubled per failure (with jitter).
        backoff_max: the longest reconnect delay.
        blocked_topic_retry: seconds before retrying a topic the broker refused.
        max_attempts: refusals of one event by the broker (not outages) after which it
            is parked as undeliverable and the relay goes on without it.
        timed_interval: seconds between the member's timed passes over the sets of its
            buckets (completeness: quiet periods and deadlines are judged at most this
            late).
        webhook_interval: seconds between the member's webhook passes (a pass that
            finds more runs again at once, and each finished request wakes it).
        webhook_workers: requests to webhook endpoints under way at once (each webhook
            gets at most half of them, one that failed in the last minute or has not
            answered yet one: a dead endpoint holds no more).
        webhook_batch: events per webhook job: one CloudEvents batch, or that many Hive
            requests in a row before their progress is recorded.
        freeze_heap: the relay owns its process (the ``relay`` command does): when it
            joins, move every object alive then out of the cyclic garbage collector's
            reach (``gc.freeze``), so that the full collections its stream of pages sets
            off do not scan the process's start-up objects again and again.
    """

    batch_size: int = 500
    use_transactions: bool = True
    idle_wait: float = 1.0
    heartbeat_interval: float = 1.0
    session_timeout: float = 3.0
    min_move_interval: float = 30.0
    backoff_initial: float = DEFAULT_BACKOFF_INITIAL
    backoff_max: float = DEFAULT_BACKOFF_MAX
    blocked_topic_retry: float = 30.0
    max_attempts: int = 3
    timed_interval: float = 1.0
    webhook_interval: float = 0.25
    webhook_workers: int = 8
    webhook_batch: int = 100
    freeze_heap: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise InvalidInputError(f"relay batch size must be at least 1, not {self.batch_size}")
        for name in ("webhook_workers", "webhook_batch"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"relay {name} must be at least 1")
        if self.max_attempts < 1:
            raise InvalidInputError(
                f"relay max attempts must be at least 1, not {self.max_attempts}"
            )
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, float) and not (math.isfinite(value) and value > 0):
                raise InvalidInputError(f"relay {item.name} must be a positive number of seconds")
        if self.session_timeout <= self.heartbeat_interval:
            raise InvalidInputError(
                f"the session timeout ({self.session_timeout:g} s) must be longer than the "
                f"heartbeat interval ({self.heartbeat_interval:g} s)"
            )
