"""Completeness over HTTP: the expectation (rule) routes, the sets report, ``done`` with
``min_generation``, the event feed's SET_RULE, and :class:`ApiClient`'s matching methods
(docs/completeness.md)."""

from __future__ import annotations

import json

import httpx
import pytest

from hcat_notify.api.client import ApiClient
from hcat_notify.errors import InvalidInputError, InvalidRuleError
from hcat_notify.store import Catalog, NewPartition
from tests.integration.api.support import READER, WRITER

pytestmark = pytest.mark.integration

RULE = {"set": ["datestamp"], "parts": {"region": "us,eu"}}


def _add(catalog: Catalog, table: str, region: str, day: str = "20261126") -> None:
    values = {"datestamp": day, "region": region}
    location = f"/data/{table.replace('.', '/')}/datestamp={day}/region={region}"
    catalog.add_partitions(table, [NewPartition(values, location, 1, 10)])


def test_the_rule_is_put_read_announced_and_removed_by_writers_only(
    api, writer: httpx.Client, reader: httpx.Client, api_catalog: Catalog, table: str
):
    path = f"/v1/tables/{table}/expectation"
    absent = reader.get(path)
    assert absent.status_code == 404
    assert absent.json()["type"] == "urn:hcat-notify:problem:no-rule"
    assert absent.json()["error"] == "InvalidInputError"  # every problem names one
    assert reader.put(path, json=RULE).status_code == 403
    put = writer.put(path, json={**RULE, "quietSeconds": 600})
    assert put.status_code == 200, put.text
    assert put.json()["version"] == 1
    assert put.json()["principal"] == WRITER[0]
    assert put.json()["describe"] == "--set datestamp --parts region=us,eu --quiet 600s"
    shown = reader.get(path).json()
    assert (shown["version"], shown["rule"]["parts"]) == (1, {"region": "us,eu"})
    assert reader.get(f"/v1/tables/{table}").json()["ruleVersion"] == 1
    feed = reader.get("/v1/events", params={"table": table, "cursor": "1"})
    events = feed.json()["events"]
    announced = [event for event in events if event["event"] == "SET_RULE"]
    assert [event["body"]["ruleVersion"] for event in announced] == [1]
    removed = writer.delete(path)
    assert removed.status_code == 200, removed.text
    assert (removed.json()["version"], removed.json()["rule"]) == (2, None)
    assert reader.get(path).status_code == 404
    assert writer.delete(path).status_code == 400  # no rule to remove


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"set": ["region"], "minPartitions": 2}, "not the table's leading keys"),
        ({"set": ["datestamp"], "parts": {"region": "b..a"}}, "neither integers nor dates"),
        ({"set": ["datestamp"]}, "exactly one of"),
        ({"set": ["datestamp"], "minPartitions": 2, "deadline": "region+1d"}, "not a key"),
    ],
)
def test_a_bad_rule_is_one_problem_and_writes_nothing(
    writer: httpx.Client, unchanged, table: str, body, message
):
    refused = writer.put(f"/v1/tables/{table}/expectation", json=body)
    assert refused.status_code == 400
    problem = refused.json()
    assert problem["error"] == "InvalidRuleError"
    assert message in problem["detail"]
    assert "\n" not in problem["detail"]


def test_sets_report_done_by_generation_and_the_client(
    api, reader: httpx.Client, api_catalog: Catalog, table: str
):
    with ApiClient(api.url, auth=WRITER) as client:
        assert client.sets.expect(table, RULE) == 1
        with pytest.raises(InvalidRuleError, match="not a partition key"):
            client.sets.expect(table, {"set": ["datestamp"], "parts": {"hour": "00..23"}})
        record = client.sets.rule(table)
        assert record is not None
        assert record.rule is not None
        assert record.rule.parts == (("region", "us,eu"),)
    _add(api_catalog, table, "us")
    sets = reader.get(f"/v1/tables/{table}/sets", params={"datestamp": "20261126"})
    assert sets.status_code == 200, sets.text
    [report] = sets.json()["sets"]
    assert (report["set"], report["state"], report["expected"]) == ("datestamp=20261126", "open", 2)
    assert report["missing"] == ["datestamp=20261126/region=eu"]
    assert report["done"] is None
    _add(api_catalog, table, "eu")
    done = f"/v1/tables/{table}/done"
    later = reader.get(done, params={"datestamp": "20261126", "min_generation": 2})
    assert later.status_code == 404
    first = reader.get(done, params={"datestamp": "20261126", "min_generation": 1})
    assert first.status_code == 200, first.text
    assert (first.json()["generation"], first.json()["reason"]) == (1, "rule")
    bad = reader.get(done, params={"datestamp": "20261126", "min_generation": 0})
    assert bad.status_code == 400
    assert "min_generation" in bad.json()["detail"]
    with ApiClient(api.url, auth=READER) as client:
        report_of = client.sets.state(table, {"datestamp": "20261126"})
        assert (report_of.complete, report_of.done_generation, report_of.done_reason) == (
            True,
            1,
            "rule",
        )
        assert [item.spec.to_path() for item in client.sets.list(table)] == ["datestamp=20261126"]
        with pytest.raises(InvalidInputError, match="is not a set of"):
            client.sets.state(table, {"datestamp": "20261126", "region": "us"})
        assert client.find_covering_done(table, {"datestamp": "20261126"}, min_generation=2) is None
        found = client.find_covering_done(table, {"datestamp": "20261126"}, min_generation=1)
        assert found is not None
        assert (found.generation, found.reason) == (1, "rule")


def test_completeness_from_the_shell_reads_through_the_api(
    api, api_catalog: Catalog, table: str, monkeypatch, capsys, tmp_path
):
    from hcat_notify.cli import main

    api_catalog.sets.expect(table, RULE)
    _add(api_catalog, table, "eu")
    monkeypatch.setenv("HCAT_NOTIFY_API_URL", api.url)
    monkeypatch.setenv("HCAT_NOTIFY_CONSUMER_USER", READER[0])
    monkeypatch.setenv("HCAT_NOTIFY_CONSUMER_PASSWORD", READER[1])
    # No database there: only the API can answer.
    monkeypatch.setenv("HCAT_NOTIFY_DB_URL", f"sqlite:///{tmp_path / 'none.db'}")
    code = main(["-o", "json", "completeness", table, "datestamp=20261126"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert (report["state"], report["missing"]) == ("open", ["datestamp=20261126/region=us"])
