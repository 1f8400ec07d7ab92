"""The timed verdicts of completeness (quiet periods, deadlines) for a member's buckets,
in a thread of its own, fenced by the buckets' epochs (docs/relay-group.md, "Timed
verdicts")."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hcat_notify.errors import HcatNotifyError
from hcat_notify.relay.background import BackgroundLoop
from hcat_notify.relay.member import Membership
from hcat_notify.store.catalog import Catalog

__all__ = ["PASS_LIMIT", "TimedPass", "TimedStats"]

logger = logging.getLogger(__name__)

MAX_ROUNDS = 100
"""Passes run back to back while more is due, before the thread rests an interval."""
PASS_LIMIT = 100
"""Sets judged per pass (one transaction). On PostgreSQL a pass holds the rows of its
buckets with a set due, which the member's own progress writes wait for: a small pass
keeps that wait short (a set's verdict takes a few milliseconds)."""


@dataclass
class TimedStats:
    """What a member's timed passes have done since it started."""

    passes: int = 0
    evaluated: int = 0
    dones: int = 0
    late: int = 0
    failures: int = 0
    seconds: float = 0.0
    """Wall time spent in passes."""


class TimedPass:
    """Runs the timed pass of one member in the background.

    Args:
        catalog: the catalog (its connection pool is shared with the publisher).
        member: the membership whose buckets (and epochs) the pass covers.
        interval: seconds between passes.
        on_lost: called with buckets a pass found owned by another member now.
    """

    def __init__(
        self,
        catalog: Catalog,
        member: Membership,
        interval: float,
        on_lost: Callable[[Mapping[int, int]], None],
    ) -> None:
        self._catalog = catalog
        self._member = member
        self._on_lost = on_lost
        self._loop = BackgroundLoop(
            f"hcat-relay-timed-{member.member_id}", interval, self._step, on_failure=self._failed
        )
        self.stats = TimedStats()

    @property
    def error(self) -> BaseException | None:
        """What ended the thread (surfaced by the publisher)."""
        return self._loop.error

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        """Stop after the pass under way (its transaction commits or rolls back)."""
        self._loop.stop()

    def run_once(self) -> int:
        """Passes over the owned buckets until nothing more is due (at most
        :data:`MAX_ROUNDS`); the events written."""
        written = 0
        for _ in range(MAX_ROUNDS):
            buckets = {bucket: owned.epoch for bucket, owned in self._member.owned().items()}
            if not buckets or self._loop.stopping:
                break
            started = time.monotonic()
            result = self._catalog.sets.evaluate_due(
                self._member.member_id, buckets, limit=PASS_LIMIT
            )
            self.stats.seconds += time.monotonic() - started
            self.stats.passes += 1
            self.stats.evaluated += result.evaluated
            self.stats.dones += len(result.dones)
            self.stats.late += len(result.late)
            written += len(result.dones) + len(result.late)
            if result.dones or result.late:
                logger.info(
                    "relay timed pass member=%s evaluated=%d done=%s late=%s",
                    self._member.member_id,
                    result.evaluated,
                    list(result.dones),
                    list(result.late),
                )
            if result.lost:
                self._on_lost({bucket: buckets[bucket] for bucket in result.lost})
            if not result.more:
                break
        return written

    def _step(self) -> bool:
        self.run_once()
        return False

    def _failed(self, _exc: HcatNotifyError) -> None:
        self.stats.failures += 1
