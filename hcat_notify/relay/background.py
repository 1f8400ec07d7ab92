"""A member's background pass: a thread that runs a step every interval (at once again
while the step says more is waiting), survives the database's hiccups, and stops after
the step under way. The timed verdicts and webhook delivery are such passes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from hcat_notify.errors import HcatNotifyError

__all__ = ["BackgroundLoop"]

logger = logging.getLogger(__name__)


class BackgroundLoop:
    """Runs ``step`` in a thread of its own every ``interval`` seconds.

    Args:
        name: the thread's name (and the logs').
        interval: seconds between steps.
        step: one pass; returns True when more is waiting (run again at once).
        on_failure: told of each failed step.

    A step that raises :class:`HcatNotifyError` (the database hiccuped) is counted in
    :attr:`failures` and tried again after the interval; anything else ends the thread
    and is kept in :attr:`error` for the relay to raise.
    """

    def __init__(
        self,
        name: str,
        interval: float,
        step: Callable[[], bool],
        *,
        on_failure: Callable[[HcatNotifyError], None] | None = None,
    ) -> None:
        self._name = name
        self._on_failure = on_failure
        self._interval = interval
        self._step = step
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0
        self.error: BaseException | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run the next step now rather than after the interval."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the step under way."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        try:
            more = False
            while not self._stop.is_set():
                if not more:
                    self._wake.wait(self._interval)
                    self._wake.clear()
                    if self._stop.is_set():
                        break
                try:
                    more = self._step()
                except HcatNotifyError as exc:  # the database hiccuped: next interval
                    self.failures += 1
                    more = False
                    if self._on_failure is not None:
                        self._on_failure(exc)
                    logger.warning("%s failed: %s", self._name, exc)
        except BaseException as exc:  # surfaced by the relay
            self.error = exc
            logger.exception("%s thread failed", self._name)
