"""``GET /metrics``: the deployment's state and this server's requests, for Prometheus.

Two kinds of figures:

* read from the catalog at each scrape (a custom collector, so any instance reports the
  same): the outbox backlog and the age of its oldest unpublished event, parked events,
  the last event id, the relay members with their buckets and publish rates, unassigned
  buckets, each durable subscriber's lag, and each webhook's state, failing and parked
  topics and delivered position;
* counted by this server: requests by method, route template and status, their
  latency, and the long polls waiting now.

With ``--workers N`` the request figures of the worker processes are summed through
prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, which
``hcat-notify serve`` sets up).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hcat_notify.errors import HcatNotifyError
from hcat_notify.store.catalog import Catalog

__all__ = ["MULTIPROC_ENV", "ApiMetrics", "CatalogCollector", "RequestMetrics"]

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0)
DONE_LATENCY_BUCKETS = (0.0, 1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0)
"""Seconds from a set's last change to its done (0: the write that completed it)."""


def _gauge(name: str, documentation: str, value: float | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class CatalogCollector(Collector):
    """The deployment's state, read from the catalog when Prometheus scrapes."""

    def __init__(self, catalog: Callable[[], Catalog]) -> None:
        self._catalog = catalog

    def collect(self) -> Iterable[Metric]:
        try:
            return list(self._read(self._catalog()))
        except HcatNotifyError as exc:
            logger.warning("metrics: cannot read the catalog: %s", exc)
            return [_gauge("hcat_notify_catalog_up", "1 if the catalog could be read.", 0)]

    def _read(self, catalog: Catalog) -> Iterator[Metric]:
        backlog, oldest = catalog.outbox.backlog()
        yield _gauge("hcat_notify_catalog_up", "1 if the catalog could be read.", 1)
        yield _gauge(
            "hcat_notify_outbox_backlog_events", "Events in the outbox not yet published.", backlog
        )
        age = 0.0 if oldest is None else (datetime.now(UTC) - oldest).total_seconds()
        yield _gauge(
            "hcat_notify_outbox_oldest_unpublished_seconds",
            "Age of the oldest unpublished event (0 when none).",
            max(age, 0.0),
        )
        yield _gauge(
            "hcat_notify_outbox_parked_events",
            "Events parked as undeliverable.",
            catalog.outbox.parked_count(),
        )
        yield _gauge(
            "hcat_notify_last_event_id",
            "The highest event id at or below which every event is committed.",
            catalog.last_event_id(),
        )
        yield from self._relays(catalog)
        yield from self._subscribers(catalog)
        yield from self._sets(catalog)
        yield from self._webhooks(catalog)

    def _relays(self, catalog: Catalog) -> Iterator[Metric]:
        group = catalog.group.status()
        members = group.live
        owned = group.owners()
        yield _gauge("hcat_notify_relay_members", "Relay members alive.", len(members))
        yield _gauge(
            "hcat_notify_relay_publish_rate_events_per_second",
            "Events per second the live relays published, summed.",
            sum(member.events_per_second for member in members),
        )
        rate = GaugeMetricFamily(
            "hcat_notify_relay_member_events_per_second",
            "Events per second a relay member published.",
            labels=["member"],
        )
        owned_by = GaugeMetricFamily(
            "hcat_notify_relay_member_buckets", "Buckets a relay member owns.", labels=["member"]
        )
        for member in members:
            rate.add_metric([member.member_id], member.events_per_second)
            owned_by.add_metric([member.member_id], len(owned.get(member.member_id, ())))
        yield rate
        yield owned_by
        state = GaugeMetricFamily(
            "hcat_notify_relay_buckets", "Buckets by state.", labels=["state"]
        )
        unassigned = len(group.unassigned)
        state.add_metric(["assigned"], len(group.buckets) - unassigned)
        state.add_metric(["unassigned"], unassigned)
        yield state

    def _subscribers(self, catalog: Catalog) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "hcat_notify_subscriber_lag_events",
            "Events a durable subscriber has not handled yet.",
            labels=["subscriber"],
        )
        behind = catalog.subscriptions.lags(catalog.subscriptions.every())
        for name, topics in behind.items():
            lag.add_metric([name], sum(topics.values()))
        yield lag

    def _webhooks(self, catalog: Catalog) -> Iterator[Metric]:
        """Per webhook (as many series as webhooks: the operators add them): its state,
        its topics failing and parked, the highest event id delivered to it."""
        state = GaugeMetricFamily(
            "hcat_notify_webhook_state",
            "1 for the state a webhook is in (active, paused, disabled).",
            labels=["webhook", "state"],
        )
        failing = GaugeMetricFamily(
            "hcat_notify_webhook_failing_topics",
            "Topics whose next events a webhook's endpoint has not taken yet (retried).",
            labels=["webhook"],
        )
        parked = GaugeMetricFamily(
            "hcat_notify_webhook_parked_topics",
            "Topics parked for a webhook after failing too long (webhooks retry|drop).",
            labels=["webhook"],
        )
        delivered = GaugeMetricFamily(
            "hcat_notify_webhook_delivered_event_id",
            "The highest event id a webhook's endpoint answered 2xx for (its start before).",
            labels=["webhook"],
        )
        # one statement: the counts from the failing and parked rows' partial indexes,
        # the position from the (webhook, position) index, never every topic's row
        for item in catalog.webhooks.figures():
            name = item.info.name
            state.add_metric([name, item.info.state.value.lower()], 1)
            failing.add_metric([name], item.failing)
            parked.add_metric([name], item.parked)
            delivered.add_metric([name], item.delivered)
        yield state
        yield failing
        yield parked
        yield delivered

    def _sets(self, catalog: Catalog) -> Iterator[Metric]:
        figures = catalog.sets.figures(DONE_LATENCY_BUCKETS)
        late = GaugeMetricFamily(
            "hcat_notify_sets_late",
            "Sets of a table past their deadline, incomplete, not done.",
            labels=["table"],
        )
        missing = GaugeMetricFamily(
            "hcat_notify_set_missing_parts",
            "Expected parts missing from a table's sets not done (its last changed 100).",
            labels=["table"],
        )
        for table in sorted(figures.late):
            late.add_metric([table], figures.late[table])
            missing.add_metric([table], figures.missing.get(table, 0))
        yield late
        yield missing
        latency = GaugeHistogramMetricFamily(
            "hcat_notify_set_done_latency_seconds",
            "Of the sets done now whose done came in the last 24 hours: seconds from the "
            "set's last change (its last part) to its done, by the done's reason.",
            labels=["reason"],
        )
        for reason, counts in sorted(figures.done_latency.items()):
            buckets = [
                (str(bound), float(n))
                for bound, n in zip(DONE_LATENCY_BUCKETS, counts.at_most, strict=True)
            ]
            latency.add_metric(
                [reason], [*buckets, ("+Inf", float(counts.count))], gsum_value=counts.total
            )
        yield latency


class ApiMetrics:
    """This server's request counters, and the registry ``/metrics`` renders."""

    def __init__(self, catalog: Callable[[], Catalog]) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created: noise
        self._catalog_collector = CatalogCollector(catalog)
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        # In multiprocess mode the values live in files and are read back at scrape time;
        # registering them here as well would count them twice.
        own = None if self.multiprocess else CollectorRegistry(auto_describe=True)
        self._own = own
        self.requests = Counter(
            "hcat_notify_api_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=own,
        )
        self.latency = Histogram(
            "hcat_notify_api_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template.",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=own,
        )
        self.long_polls = Gauge(
            "hcat_notify_api_long_polls_waiting",
            "Requests waiting in a long poll now (wait=S), summed over the workers.",
            registry=own,
            multiprocess_mode="livesum",
        )

    def render(self) -> tuple[bytes, str]:
        """The text exposition of every figure, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        if self.multiprocess:
            from prometheus_client import multiprocess

            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        else:
            assert self._own is not None
            registry.register(_Forward(self._own))
        registry.register(self._catalog_collector)
        return generate_latest(registry), CONTENT_TYPE_LATEST


class _Forward(Collector):
    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


class RequestMetrics:
    """ASGI middleware: counts each HTTP request and times it, by route template."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "<unmatched>"
            method = scope.get("method", "")
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - started)
