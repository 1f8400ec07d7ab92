"""A durable subscriber's hold on its name: the claim, the heartbeat that keeps it, the
watermarks moved as notifications are handled, and the release."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from hcat_notify.errors import HcatNotifyError, SubscriberTakenOverError
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.subscriptions import (
    FLOOR_KEY,
    RETAINED_KEY,
    SUBSCRIBER_TIMEOUT,
    this_process,
)

__all__ = ["DurableClaim"]

logger = logging.getLogger(__name__)


class DurableClaim:
    """The subscriber ``name`` in ``catalog``, held by this process.

    Args:
        catalog: the catalog database that keeps the subscriber.
        name: the subscriber's name (validated).
        stop: the consumer's stop event: the heartbeat ends with it, and sets it when
            another process took the name over.
        takeover: take the name over from a live owner.
    """

    def __init__(
        self, catalog: Catalog, name: str, stop: threading.Event, *, takeover: bool
    ) -> None:
        self._catalog = catalog
        self.name = name
        self.owner = this_process()
        self._stop = stop
        self._takeover = takeover
        self._heartbeat: threading.Thread | None = None
        self.taken_over: BaseException | None = None

    @property
    def held(self) -> bool:
        """Claimed and not released yet."""
        return self._heartbeat is not None

    def claim(self, tables: Mapping[str, str]) -> tuple[dict[str, int], int | None, bool]:
        """Claim the name, following ``tables`` (each with its topic: what the sweep holds
        for it), and start the heartbeat; the stored watermarks, floor (where a catch-up
        starts for quiet topics; None before the first start) and whether the retained
        dones up to the floor are not all handed out yet.

        Raises:
            SubscriberInUseError: another live process holds the name.
        """
        info = self._catalog.subscriptions.claim(
            self.name, self.owner, takeover=self._takeover, tables=tables
        )
        self._heartbeat = threading.Thread(
            target=self._beat, name=f"hcat-subscriber-{self.name}", daemon=True
        )
        self._heartbeat.start()
        return info.stored()

    def _beat(self) -> None:
        while not self._stop.wait(SUBSCRIBER_TIMEOUT / 4):
            try:
                self._catalog.subscriptions.heartbeat(self.name, self.owner)
            except SubscriberTakenOverError as exc:
                self.taken_over = exc
                self._stop.set()
                return
            except HcatNotifyError as exc:  # the database hiccuped: beat again soon
                logger.warning("consumer heartbeat failed subscriber=%s: %s", self.name, exc)

    def advance(self, watermarks: Mapping[str, int]) -> None:
        """Move the stored watermarks of the topics in ``watermarks``."""
        self._catalog.subscriptions.advance(self.name, self.owner, watermarks)

    def record_start(self, floor: int) -> None:
        """A start without a past at ``floor``: a restart before :meth:`record_floor`
        hands out the rest of the retained dones up to it, then the events after it."""
        self._catalog.subscriptions.advance(
            self.name, self.owner, {FLOOR_KEY: floor, RETAINED_KEY: 0}
        )

    def record_floor(self, floor: int, watermarks: Mapping[str, int]) -> None:
        """The first catch-up is handled: a restart catches up by cursor from ``floor``,
        for every topic (``watermarks`` below it are raised to it, in the same write)."""
        raised = {topic: floor for topic, mark in watermarks.items() if mark < floor}
        self._catalog.subscriptions.advance(
            self.name, self.owner, {**raised, FLOOR_KEY: floor, RETAINED_KEY: floor}
        )

    def release(self, handled: Mapping[str, int] | None) -> None:
        """Stop the heartbeat (the stop event must be set) and, unless taken over, record
        ``handled`` and give the name up, so a restart needs no takeover."""
        if self._heartbeat is None:
            return
        self._heartbeat.join(10)
        self._heartbeat = None
        if self.taken_over is not None:
            return
        try:
            if handled:
                self.advance(handled)
            self._catalog.subscriptions.release(self.name, self.owner)
        except HcatNotifyError as exc:
            logger.warning("consumer could not release %s: %s", self.name, exc)
