"""Which topics a consumer subscribes to, and where the broker filters them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hcat_notify.model.events import HEADER_TABLE
from hcat_notify.model.names import TableName
from hcat_notify.store.records import TableInfo

__all__ = ["Subscription", "plan_subscriptions"]


@dataclass
class Subscription:
    """One topic and the followed tables it carries."""

    topic: str
    tables: list[TableName] = field(default_factory=list)
    # True when the topic also carries other tables: filter on the broker.
    shared: bool = False

    def selector(self) -> str | None:
        if not self.shared:
            return None
        names = ", ".join(f"'{table}'" for table in self.tables)
        return f"{HEADER_TABLE} IN ({names})"


def plan_subscriptions(
    topics: Mapping[TableName, str], all_tables: Sequence[TableInfo]
) -> list[Subscription]:
    """One subscription per topic of the followed tables (``topics``: each table's
    topic), shared where the topic carries other tables of ``all_tables`` too."""
    by_topic: dict[str, Subscription] = {}
    for name, topic in topics.items():
        by_topic.setdefault(topic, Subscription(topic)).tables.append(name)
    # A per-database or single topic carries other tables too, and so may a topic named
    # by an override: filter on the broker there. The consumer filters again, so
    # correctness does not depend on the selector.
    for subscription in by_topic.values():
        others = any(t.topic == subscription.topic and t.name not in topics for t in all_tables)
        own = all(
            subscription.topic.endswith(f".{name.db}.{name.table}") for name in subscription.tables
        )
        subscription.shared = others or not own or len(subscription.tables) > 1
    return list(by_topic.values())
