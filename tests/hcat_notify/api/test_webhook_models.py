"""The API's webhook models: a topic's delivery as JSON (camel case, times ISO 8601 UTC)."""

from __future__ import annotations

from hcat_notify.api.webhook_models import WebhookTopicModel
from hcat_notify.store.webhooks import WebhookTopic


def test_a_topics_delivery_as_json():
    topic = WebhookTopic(3, "hcat.web.clicks", 7, 41, 2, 86400.0, 0.0, "HTTP 500", None)
    assert WebhookTopicModel.of(topic).model_dump(mode="json", by_alias=True) == {
        "topic": "hcat.web.clicks",
        "lastEventId": 41,
        "attempts": 2,
        "retryAt": "1970-01-02T00:00:00Z",
        "failingSince": "1970-01-01T00:00:00Z",
        "lastError": "HTTP 500",
        "parkedAt": None,
    }
