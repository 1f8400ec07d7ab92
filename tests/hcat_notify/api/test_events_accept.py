"""Which ``Accept`` headers get the event feed as a CloudEvents batch."""

from __future__ import annotations

import pytest

from hcat_notify.api.routes.events import prefers_cloudevents

BATCH = "application/cloudevents-batch+json"


@pytest.mark.parametrize(
    ("accept", "batch"),
    [
        (None, False),
        ("", False),
        ("application/json", False),
        ("*/*", False),
        ("application/*", False),
        ("application/cloudevents+json", False),  # one event: the feed is a list
        (BATCH, True),
        (BATCH.upper(), True),
        (f"{BATCH}, application/json", True),
        (f"application/json, {BATCH}", True),  # equal q: the one named for it wins
        (f"{BATCH};q=0.5, application/json", False),
        (f"{BATCH};q=0.9, application/*;q=0.5", True),
        (f"{BATCH};q=0.9, */*", False),  # */* covers application/json at q=1
        (f"{BATCH};q=0", False),
        (f"{BATCH};q=oops", False),
        (f"{BATCH} ; q=0.8 , application/json;q=0.7", True),
    ],
)
def test_only_a_named_preferred_batch_gets_cloudevents(accept, batch):
    assert prefers_cloudevents(accept) is batch
