"""Every repository path the documentation names exists (and the check tells a path from
an example: it is run on small texts as well as on the real pages)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_paths import Repository, documentation, missing_paths, named_paths

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def repo() -> Repository:
    return Repository(ROOT)


def _names(repo: Repository, text: str) -> list[str]:
    return [named.text for named in named_paths(text, "page.md", repo)]


def test_every_path_the_documentation_names_exists(repo: Repository) -> None:
    pages = documentation(ROOT)
    assert ROOT / "docs" / "architecture.md" in pages
    missing = missing_paths(repo, pages)
    assert missing == [], "named but missing:\n" + "\n".join(map(str, missing))


def test_the_documentation_points_at_nothing_outside_the_repository() -> None:
    for page in documentation(ROOT):
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text, page
        for outside in ("DESIGN.md", "STYLE.md"):
            assert outside not in text, (page, outside)


def test_a_package_relative_name_is_a_path_and_a_missing_one_is_found(repo: Repository) -> None:
    text = (
        "The store keeps leases in `store/leases.py` beside `store/tx.py`;\n"
        "see [the layout](docs/nowhere.md) and `leases.py`.\n"
    )
    assert _names(repo, text) == ["store/leases.py", "store/tx.py", "docs/nowhere.md", "leases.py"]
    page = ROOT / "docs" / "page.md"  # not written: only where its links start matters
    missing = [
        named.text
        for named in named_paths(text, "docs/page.md", repo)
        if not repo.exists(named, page)
    ]
    assert missing == ["store/leases.py", "docs/nowhere.md", "leases.py"]


def test_a_name_leading_out_of_the_repository_is_missing(repo: Repository) -> None:
    text = "The brief is `../shared/DESIGN.md`; the API is [here](../docs/api.md).\n"
    assert _names(repo, text) == ["../docs/api.md", "../shared/DESIGN.md"]
    readme, page = ROOT / "README.md", ROOT / "docs" / "page.md"
    from_readme = named_paths(text, "README.md", repo)
    assert [repo.exists(named, readme) for named in from_readme] == [False, False]
    from_docs = named_paths(text, "docs/page.md", repo)
    assert [repo.exists(named, page) for named in from_docs] == [True, False]


def test_example_locations_are_not_paths(repo: Repository) -> None:
    text = (
        "Register `/data/clicks` or `hdfs://nn:8020/warehouse/clicks`, `s3://bucket/x.py`,\n"
        "`file:///w/t`, `har://file-localhost/w/t/_hcat_archive.har`, `k=v/...`,\n"
        "`<table>/_hcat_compacted/`, `region=us%2Feast`, `URI/_hcat_export.json`,\n"
        "`/v1/tables/{table}/done`, `~/.hcat-notify/catalog.db`, `stomp.py`.\n"
        "```bash\nhcat-notify partitions add web.clicks datestamp=1 --location /data/clicks\n"
        "curl http://127.0.0.1:8080/v1/tables\n```\n"
        "[Hive](https://hive.apache.org/docs/x.md) and [below](#events).\n"
    )
    assert _names(repo, text) == []


def test_names_in_code_blocks_links_and_pytest_ids_are_paths(repo: Repository) -> None:
    text = (
        "```bash\nbash deploy/local/test.sh -m 'not integration'\n```\n"
        "Run `tests/test_layout.py::test_the_source_tree_keeps_the_layout_rules`;\n"
        "read [the API](docs/api.md#errors) and `relay/`.\n"
    )
    assert _names(repo, text) == [
        "deploy/local/test.sh",
        "tests/test_layout.py",
        "docs/api.md#errors",
        "relay/",
    ]
    page = ROOT / "README.md"
    assert all(repo.exists(named, page) for named in named_paths(text, "README.md", repo))
