"""Sets of every kind on one table with a completeness rule, for the status page and
metrics tests: done, done again (generation 2), late, open."""

from __future__ import annotations

import time

from hcat_notify.model.topics import topic_bucket
from hcat_notify.store import Catalog, NewPartition
from hcat_notify.store.group import MemberReport

REGIONS = ("us", "eu", "apac")


def _add(catalog: Catalog, name: str, day: str, *regions: str) -> None:
    catalog.add_partitions(
        name,
        [NewPartition({"datestamp": day, "region": region}, f"/d/{name}") for region in regions],
    )


def sets_of_every_kind(catalog: Catalog, name: str) -> None:
    """On ``name`` (keys datestamp, region): 20260101 done; 20260102 done at generation 2
    (an extra part after its first done); 20260103 late (missing eu, apac); 20260104 open
    (missing apac). The deadline's verdict is given by a timed pass run as the owner of
    the table's bucket, two hours ahead."""
    catalog.expect(
        name, set_keys="datestamp", parts=["region=" + ",".join(REGIONS)], deadline_after="1h"
    )
    _add(catalog, name, "20260101", *REGIONS)
    _add(catalog, name, "20260102", *REGIONS)
    _add(catalog, name, "20260102", "xx")
    _add(catalog, name, "20260103", "us")
    member = f"grid-{name}"
    catalog.group.join(MemberReport(member, "here", 1), session_timeout=600)
    controller = catalog.group.claim_controller(member, ttl=600)
    assert controller is not None
    bucket = topic_bucket(catalog.get_table(name).topic, len(catalog.group.buckets()))
    assert catalog.group.assign(member, controller, {bucket: member})
    owned = {bucket: catalog.group.owned(member)[bucket].epoch}
    assert len(catalog.sets.evaluate_due(member, owned, now=time.time() + 7200).late) == 1
    catalog.group.leave(member)
    _add(catalog, name, "20260104", "us", "eu")
