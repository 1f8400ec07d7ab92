"""Jittered exponential back-off between reconnect attempts."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """Delays that double from ``initial`` up to ``maximum``, each jittered by ±``jitter``.

    Jitter keeps a fleet of clients that lost the same broker from reconnecting in step.
    """

    initial: float = 0.2
    maximum: float = 10.0
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
