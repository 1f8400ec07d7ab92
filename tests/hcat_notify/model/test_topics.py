"""Topic names: three strategies, the table-property override, destinations."""

from __future__ import annotations

import pytest

from hcat_notify.config import TopicStrategy
from hcat_notify.errors import InvalidIdentifierError
from hcat_notify.model.names import TableName
from hcat_notify.model.topics import TOPIC_NAME_PROPERTY, destination_for, resolve_topic

CLICKS = TableName.parse("Web.Clicks")


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (TopicStrategy.TABLE, "hcat.web.clicks"),
        (TopicStrategy.DATABASE, "hcat.web"),
        (TopicStrategy.SINGLE, "hcat"),
    ],
)
def test_strategies(strategy, expected):
    assert resolve_topic(CLICKS, prefix="hcat", strategy=strategy) == expected


def test_prefix_is_lower_cased():
    assert (
        resolve_topic(CLICKS, prefix="Prod.HCAT", strategy=TopicStrategy.TABLE)
        == "prod.hcat.web.clicks"
    )


def test_table_property_overrides_every_strategy():
    props = {TOPIC_NAME_PROPERTY: "Team.Clicks-Feed"}
    for strategy in TopicStrategy:
        assert (
            resolve_topic(CLICKS, prefix="hcat", strategy=strategy, properties=props)
            == "team.clicks-feed"
        )


def test_destination():
    assert destination_for("hcat.web.clicks") == "/topic/hcat.web.clicks"


@pytest.mark.parametrize("bad", ["hcat.>", "hcat.*", "a/b", "a b", "a..b", ".a", "a.", " "])
def test_invalid_topic_names(bad):
    with pytest.raises(InvalidIdentifierError, match="invalid topic name"):
        resolve_topic(
            CLICKS,
            prefix="hcat",
            strategy=TopicStrategy.TABLE,
            properties={TOPIC_NAME_PROPERTY: bad},
        )
    with pytest.raises(InvalidIdentifierError, match="invalid topic name"):
        resolve_topic(CLICKS, prefix=bad, strategy=TopicStrategy.SINGLE)
    with pytest.raises(InvalidIdentifierError, match="invalid topic name"):
        destination_for(bad)
