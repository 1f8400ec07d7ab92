"""CPU per event of a measured run, split: the client's process, the broker's, and of the
broker's its garbage collector's threads (``/proc``; Linux)."""

from __future__ import annotations

import collections
import contextlib
import os
import statistics
from collections.abc import Iterator

from _support import cpu_seconds


def gc_cpu_seconds(pid: int) -> float:
    """CPU seconds the JVM ``pid``'s garbage collector threads (HotSpot's ``GC Thread#N``
    and ``G1 ...`` threads, which live as long as the JVM) have used so far."""
    total = 0.0
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/task/{task}/stat", encoding="ascii") as f:
                    stat = f.read()
                name = stat[stat.index("(") + 1 : stat.rindex(")")]
                if name.startswith(("GC Thread", "G1 ")):
                    fields = stat.rsplit(")", 1)[1].split()
                    total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class CpuMeter:
    """CPU per event of one measured run: the client's process, the broker's, and of
    the broker's the garbage collector's (``/proc``), each a list over the rounds."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.spent: dict[str, list[float]] = collections.defaultdict(list)

    @contextlib.contextmanager
    def measure(self, name: str, client_pid: int | None = None) -> Iterator[None]:
        """Count what the run inside the block costs as ``name`` (``client_pid``: the
        client's process; this one by default)."""
        client, broker = cpu_seconds(client_pid), cpu_seconds(self.broker_pid)
        gc = gc_cpu_seconds(self.broker_pid)
        yield
        self.spent[f"{name} client"].append(cpu_seconds(client_pid) - client)
        self.spent[f"{name} broker"].append(cpu_seconds(self.broker_pid) - broker)
        self.spent[f"{name} gc"].append(gc_cpu_seconds(self.broker_pid) - gc)

    def per_event(self, key: str, events: int, skip: int = 0) -> float:
        """Median over the rounds (after the first ``skip``) of ``key``'s CPU per event,
        in µs."""
        return statistics.median(self.spent[key][skip:]) / events * 1e6
