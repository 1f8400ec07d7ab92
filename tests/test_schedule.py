"""The parallel workers' order (tests/fixtures/schedule.py): units of work, their
estimated cost, and the record they are estimated from."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.fixtures.schedule import Recorder, estimated, read_record, unit_of

API = "tests/integration/api/test_done.py"


def test_each_test_is_a_unit_except_modules_with_a_server_of_their_own():
    assert unit_of("tests/a/test_x.py::test_one[sqlite]") == "tests/a/test_x.py::test_one[sqlite]"
    assert unit_of(f"{API}::test_wait[postgresql]") == API
    assert unit_of("tests/test_docs.py::test_links") == "tests/test_docs.py"


def test_a_unit_costs_its_recorded_tests_and_an_unrecorded_one_its_modules_median():
    record = {"tests/m.py::a": 1.0, "tests/m.py::b": 3.0, "tests/m.py::c": 8.0, f"{API}::x": 2.0}
    costs = estimated(["tests/m.py::a", "tests/m.py::new", f"{API}::x", f"{API}::y"], record)
    assert costs == {"tests/m.py::a": 1.0, "tests/m.py::new": 3.0, API: 4.0}
    assert estimated(["tests/other.py::t"], record) == {"tests/other.py::t": 2.5}


def test_the_recorder_writes_what_the_scheduler_reads(tmp_path: Path):
    recorder = Recorder(tmp_path / "durations.json")
    for nodeid, duration, keywords in [
        ("tests/s.py::spark_test", 4.0, {"spark": 1}),
        ("tests/s.py::spark_test", 1.5, {"spark": 1}),
        ("tests/a.py::dag", 7.25, {"airflow": 1}),
        ("tests/u.py::unit", 0.01, {}),
    ]:
        report = SimpleNamespace(nodeid=nodeid, duration=duration, keywords=keywords)
        recorder.pytest_runtest_logreport(report)  # type: ignore[arg-type]
    recorder.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))  # type: ignore[arg-type]

    seconds, kinds = read_record(tmp_path / "durations.json")
    assert seconds == {
        "tests/s.py::spark_test": 5.5,
        "tests/a.py::dag": 7.25,
        "tests/u.py::unit": 0.01,
    }
    assert kinds == {"tests/s.py::spark_test": "spark", "tests/a.py::dag": "airflow"}


def test_no_record_means_no_estimates_yet(tmp_path: Path):
    assert read_record(tmp_path / "missing.json") == ({}, {})
