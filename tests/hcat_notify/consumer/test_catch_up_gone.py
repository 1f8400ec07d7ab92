"""A consumer's catch-up by cursor below what the outbox's retention deleted raises the
package's error naming where history is complete, never hands out a gap (issue 31)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hcat_notify.config import Settings
from hcat_notify.consumer.catchup import CatchUp
from hcat_notify.errors import HcatNotifyError, HistoryGoneError
from hcat_notify.model.cursor import Cursor
from hcat_notify.model.names import TableName
from hcat_notify.store import Catalog
from tests.fixtures.published import publish

TOPIC = "hcat.web.clicks"


def test_a_catch_up_below_the_pruned_mark_raises_history_gone(settings: Settings):
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with Catalog.open(settings) as opened:
        past = Catalog(opened._engine, settings, clock=lambda: start)
        past.create_table(
            "web.clicks", location="/c", partition_keys=["ds"], retention=timedelta(hours=1)
        )
        ids = [past.mark_set_done("web.clicks", {"ds": str(n)}) for n in range(3)]
        publish(past, TOPIC, ids[1])
        assert opened.outbox.sweep(timedelta(days=1)).deleted == 2
        catch_up = CatchUp(opened, [TableName.parse("web.clicks")])
        with pytest.raises(HistoryGoneError) as raised:
            catch_up.begin(Cursor({TOPIC: ids[0]}))
        assert isinstance(raised.value, HcatNotifyError)
        assert raised.value.oldest == ids[1]
        catch_up.begin(Cursor({TOPIC: ids[1]}))
        assert [event.event_id for event in catch_up.page] == [ids[2]]
