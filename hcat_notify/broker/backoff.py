"""Jittered exponential back-off between reconnect attempts."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["DEFAULT_BACKOFF_INITIAL", "DEFAULT_BACKOFF_MAX", "Backoff"]

DEFAULT_BACKOFF_INITIAL = 0.1
# The cap bounds how long after a failed-over slave opens its ports a client finds it
# (half the cap on average). A refused TCP connection costs a broker next to nothing, so
# two attempts a second are cheap even for many clients; a cap of 10 s would add up to
# 10 s to every failover.
DEFAULT_BACKOFF_MAX = 0.5


@dataclass
class Backoff:
    """Delays that double from ``initial`` up to ``maximum``, each jittered by ±``jitter``.

    Jitter keeps a fleet of clients that lost the same broker from reconnecting in step.
    """

    initial: float = DEFAULT_BACKOFF_INITIAL
    maximum: float = DEFAULT_BACKOFF_MAX
    jitter: float = 0.2
    _current: float = field(init=False, repr=False, default=0.0)

    def __post_init__(self) -> None:
        self._current = self.initial

    def next_delay(self) -> float:
        """The delay before the next attempt; the one after will be twice as long."""
        delay = min(self._current, self.maximum)
        self._current = min(self._current * 2, self.maximum)
        return delay * random.uniform(1 - self.jitter, 1 + self.jitter)

    def reset(self) -> None:
        """After a success: start again from ``initial``."""
        self._current = self.initial
