"""``/metrics`` for completeness: sets late, missing parts of the sets not done, the
done latency histogram (issue 28)."""

from __future__ import annotations

import httpx
import pytest

from hcat_notify.store import Catalog
from tests.integration.api.sets import sets_of_every_kind

pytestmark = pytest.mark.integration


def _value(text: str, prefix: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(prefix + " ")]
    return float(line.split()[-1])


def test_metrics_count_late_sets_missing_parts_and_done_latency(
    anonymous: httpx.Client, new_table, api_catalog: Catalog
):
    name = new_table()
    sets_of_every_kind(api_catalog, name)
    text = anonymous.get("/metrics").text
    assert _value(text, f'hcat_notify_sets_late{{table="{name}"}}') == 1
    # 20260103 misses eu and apac, 20260104 misses apac
    assert _value(text, f'hcat_notify_set_missing_parts{{table="{name}"}}') == 3
    # two sets done now, by the writes that completed them (the first done, then the
    # one of generation 2): no wait after their last part
    rule = 'hcat_notify_set_done_latency_seconds_gcount{reason="rule"}'
    changed = 'hcat_notify_set_done_latency_seconds_gcount{reason="changed"}'
    assert _value(text, rule) >= 1
    assert _value(text, changed) >= 1
    assert _value(text, 'hcat_notify_set_done_latency_seconds_bucket{le="0.0",reason="rule"}') >= 1
    assert "# TYPE hcat_notify_set_done_latency_seconds histogram" in text
