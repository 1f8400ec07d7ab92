"""A relay's part in the group: heartbeats, the controller's duty, its buckets.

It runs in a thread of its own, so that a batch waiting on a slow broker never delays a
heartbeat (a member whose heartbeat is older than the session timeout, by the database's
clock, is dead and loses its buckets). Every ownership change is logged once, with the
old and new owner and epoch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hcat_notify.errors import HcatNotifyError, InvalidInputError
from hcat_notify.relay.assignment import (
    BucketState,
    bucket_loads,
    group_forming,
    plan_assignment,
)
from hcat_notify.relay.config import RelayConfig
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.change_feed import OutboxWaiter, outbox_waiter
from hcat_notify.store.group import BucketInfo, MemberInfo, MemberReport, Ownership
from hcat_notify.store.tx import RELAY_CHANNEL

__all__ = ["Membership", "ranges"]

logger = logging.getLogger(__name__)

MIN_ROUND_GAP = 0.05
"""Seconds between two rounds woken by the database (a busy catalog wakes us a lot)."""


def ranges(numbers: list[int]) -> str:
    """``0-3,7,9-10`` for ``[0, 1, 2, 3, 7, 9, 10]`` (sorted input)."""
    parts: list[str] = []
    start = previous = None
    for number in numbers:
        if previous is not None and number == previous + 1:
            previous = number
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = number
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(parts)


@dataclass
class _Controller:
    epoch: int
    renew_at: float  # monotonic


_JOINED: set[tuple[str, str]] = set()
"""(catalog URL, member id) of the members of this process that joined and did not leave."""
_JOINED_LOCK = threading.Lock()


class Membership:
    """Keeps one member alive in the group and tells the publisher what it owns.

    Args:
        catalog: the catalog (its connection pool is shared with the publisher).
        config: intervals and timeouts.
        member_id: this member's id (``host:pid`` by default).
        report: returns the load the member reports at each heartbeat.
    """

    def __init__(
        self,
        catalog: Catalog,
        config: RelayConfig,
        member_id: str,
        report: Callable[[], MemberReport],
    ) -> None:
        self._catalog = catalog
        self._config = config
        self.member_id = member_id
        self._report = report
        self._lock = threading.Lock()
        self._owned: dict[int, Ownership] = {}
        self._changed = threading.Event()  # the owned set changed since last asked
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._controller: _Controller | None = None
        self._shed_at = 0.0  # database clock of the last round that moved load
        self._forming_logged = False
        self.alone = False  # no other member may join (relay --once): never wait for them
        self.error: BaseException | None = None
        self.refreshed_at = 0.0  # monotonic time ownership was last read

    def refresh(self) -> None:
        """Read this member's buckets now (the publisher, after a long silence)."""
        self._refresh()

    # -- what the publisher asks ---------------------------------------------------------

    def owned(self) -> dict[int, Ownership]:
        """The buckets this member owns, as last read from the catalog."""
        with self._lock:
            return dict(self._owned)

    def changed(self) -> bool:
        """Whether the owned set changed since the last call."""
        if self._changed.is_set():
            self._changed.clear()
            return True
        return False

    def wait_changed(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the owned set to change (without clearing it)."""
        return self._changed.wait(timeout)

    def changed_pending(self) -> bool:
        """Whether the owned set changed since last asked (without clearing it)."""
        return self._changed.is_set()

    def lose(self, fenced: Mapping[int, int]) -> None:
        """A fenced write found these buckets (bucket: the epoch it wrote at) no longer
        this member's at that epoch. A bucket read since at a newer epoch is kept: the
        write was stale, not the ownership."""
        with self._lock:
            for bucket, epoch in fenced.items():
                held = self._owned.get(bucket)
                if held is not None and held.epoch <= epoch:
                    gone = self._owned.pop(bucket)
                    logger.warning(
                        "relay bucket lost bucket=%d member=%s epoch=%d (fenced: owned by "
                        "another member now)",
                        bucket,
                        self.member_id,
                        gone.epoch,
                    )
        self._changed.set()

    @property
    def is_controller(self) -> bool:
        return self._controller is not None

    # -- lifecycle -----------------------------------------------------------------------

    def join(self) -> None:
        """Register the member (first heartbeat) and start the thread.

        Raises:
            InvalidInputError: another process, or another relay of this one that has not
                left (not closed), runs under this member id: fencing tells members
                apart by id, so two with one id would share every bucket.
        """
        key = (self._catalog.settings.database_url, self.member_id)
        with _JOINED_LOCK:
            if key in _JOINED:
                raise InvalidInputError(
                    f"relay member id {self.member_id!r} is in use by another relay of this "
                    "process: close that one first (Relay.close, or use it in a with "
                    "block), or give each its own member id"
                )
            _JOINED.add(key)
        try:
            self._catalog.group.join(self._report(), session_timeout=self._config.session_timeout)
        except BaseException:
            self._unregister()
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"hcat-relay-member-{self.member_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop heartbeating (the member stays registered until :meth:`leave`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def _unregister(self) -> None:
        with _JOINED_LOCK:
            _JOINED.discard((self._catalog.settings.database_url, self.member_id))

    def leave(self) -> None:
        """Leave the group: hand the buckets over (at once if this member controls the
        group), resign the controller role, delete the member row."""
        try:
            self._leave()
        finally:
            self._unregister()

    def _leave(self) -> None:
        self.stop()
        if self._controller is not None:
            try:
                self._control(leaving=True)
            except HcatNotifyError as exc:  # the others take over after the timeout
                logger.warning("relay could not hand its buckets over: %s", exc)
        released = self._catalog.group.leave(self.member_id)
        if released:
            logger.info(
                "relay released buckets member=%s buckets=%d", self.member_id, len(released)
            )
        with self._lock:
            self._owned = {}
        self._controller = None

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        waiter: OutboxWaiter | None = None
        next_beat = 0.0
        seen_version = -1
        try:
            waiter = outbox_waiter(self._catalog.settings.database_url, (RELAY_CHANNEL,))
            while not self._stop.is_set():
                now = time.monotonic()
                try:
                    beat = now >= next_beat
                    if beat:
                        self._catalog.group.heartbeat(
                            self._report(), session_timeout=self._config.session_timeout
                        )
                        next_beat = now + self._config.heartbeat_interval
                    # A full round on every beat (deaths are a matter of time), and when
                    # the group changed: a cheap read tells, whatever woke us (on SQLite
                    # any commit does, the outbox's included).
                    current = self._catalog.group.version()
                    if beat or current != seen_version:
                        seen_version = current
                        self._control()
                        self._refresh()
                except HcatNotifyError as exc:  # the database hiccuped: try next round
                    logger.warning("relay member round failed member=%s: %s", self.member_id, exc)
                until = time.monotonic() + max(
                    0.01, min(next_beat - time.monotonic(), self._config.heartbeat_interval)
                )
                # short slices, so that stop() (a SIGTERM handoff) is honoured at once
                while not self._stop.is_set() and time.monotonic() < until:
                    if waiter.wait(min(MIN_ROUND_GAP, until - time.monotonic())):
                        self._stop.wait(MIN_ROUND_GAP)  # let a burst of commits settle
                        break
        except BaseException as exc:  # surfaced by the publisher
            self.error = exc
            logger.exception("relay member thread failed member=%s", self.member_id)
        finally:
            if waiter is not None:
                waiter.close()

    def _refresh(self) -> None:
        owned = self._catalog.group.owned(self.member_id)
        self.refreshed_at = time.monotonic()
        with self._lock:
            before = self._owned
            if owned == before:
                return
            self._owned = owned
        gained = sorted(set(owned) - set(before))
        if gained:
            logger.info(
                "relay buckets acquired member=%s count=%d buckets=%s epochs=%s",
                self.member_id,
                len(gained),
                ranges(gained),
                ranges(sorted({owned[b].epoch for b in gained})),
            )
        lost = sorted(set(before) - set(owned))
        if lost:
            logger.info(
                "relay buckets given up member=%s count=%d buckets=%s",
                self.member_id,
                len(lost),
                ranges(lost),
            )
        self._changed.set()

    def _control(self, *, leaving: bool = False) -> None:
        """One round of the controller's duty, if this member is (or becomes) it."""
        ttl = self._config.session_timeout
        now = time.monotonic()
        if self._controller is None or now >= self._controller.renew_at:
            info = self._catalog.group.info()
            if info.controller_alive and info.controller_id != self.member_id:
                if self._controller is not None:
                    logger.warning(
                        "relay controller lost member=%s epoch=%d: %s controls the group now",
                        self.member_id,
                        self._controller.epoch,
                        info.controller_id,
                    )
                self._controller = None
                return
            epoch = self._catalog.group.claim_controller(self.member_id, ttl)
            if epoch is None:
                if self._controller is not None:
                    logger.warning("relay controller deposed member=%s", self.member_id)
                self._controller = None
                return
            if self._controller is None or self._controller.epoch != epoch:
                logger.info(
                    "relay controller taken member=%s epoch=%d (was %s)",
                    self.member_id,
                    epoch,
                    info.controller_id or "none",
                )
            self._controller = _Controller(epoch, now + ttl / 3)
        self._assign(self._controller.epoch, leaving=leaving)

    def _forming(
        self, now: float, buckets: Sequence[BucketInfo], live: Sequence[MemberInfo]
    ) -> bool:
        """Whether to hold a new group's first assignment (see ``group_forming``); never
        for a member that is alone by design (``relay --once``)."""
        waiting = not self.alone and group_forming(
            any(b.owner is not None for b in buckets),
            [m.started_at for m in live],
            now=now,
            grace=self._config.heartbeat_interval,
            limit=self._config.session_timeout,
        )
        if waiting and not self._forming_logged:
            logger.info(
                "relay group forming: the first assignment waits up to %g s for members "
                "to join (member=%s, %d joined)",
                self._config.heartbeat_interval,
                self.member_id,
                len(live),
            )
        self._forming_logged = waiting
        return waiting

    def _assign(self, epoch: int, *, leaving: bool) -> None:
        group = self._catalog.group
        status = group.status()  # each member alive or not by its own session timeout
        info, members, buckets = status.info, status.members, status.buckets
        live = [
            m.member_id
            for m in status.live
            if not m.leaving and not (leaving and m.member_id == self.member_id)
        ]
        dead = [m.member_id for m in status.silent]
        if self._forming(info.now, buckets, [m for m in members if m.member_id in live]):
            return
        loads = bucket_loads(m.bucket_loads for m in members)
        states = [
            BucketState(
                b.bucket,
                b.owner,
                b.rebalanced_at,  # adoptions do not pin a bucket; balancing moves do
                loads.get(b.bucket, 0.0),
            )
            for b in buckets
        ]
        interval = self._config.min_move_interval
        balance_load = info.now - self._shed_at >= interval
        changes = plan_assignment(
            states, live, now=info.now, min_move_interval=interval, balance_load=balance_load
        )
        if changes:
            rebalanced = [b.bucket for b in buckets if b.bucket in changes and b.owner in live]
            if not group.assign(self.member_id, epoch, changes, rebalanced):
                logger.warning(
                    "relay controller deposed before its assignment member=%s epoch=%d: "
                    "nothing changed",
                    self.member_id,
                    epoch,
                )
                self._controller = None
                return
            if rebalanced and balance_load:  # the cooldown starts with a written move
                self._shed_at = info.now
            owners = {b.bucket: b.owner for b in buckets}
            moves: dict[tuple[str | None, str], list[int]] = {}
            for bucket, owner in sorted(changes.items()):
                moves.setdefault((owners[bucket], owner), []).append(bucket)
            for (old, new), moved in sorted(moves.items(), key=lambda item: item[1][0]):
                # once per change: each bucket's epoch went up by one with it
                logger.info(
                    "relay buckets moved from=%s to=%s count=%d buckets=%s "
                    "epoch=+1 controller_epoch=%d",
                    old or "none",
                    new,
                    len(moved),
                    ranges(moved),
                    epoch,
                )
        gone = [
            member
            for member in dead
            if not any(b.owner == member and b.bucket not in changes for b in buckets)
        ]
        if gone:
            group.forget(gone)
            logger.info("relay members removed (no heartbeat for their session timeout): %s", gone)
