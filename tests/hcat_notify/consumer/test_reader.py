"""open_reader: the one choice between the HTTP API and the catalog database."""

from __future__ import annotations

from pathlib import Path

import pytest

from hcat_notify.api.client import ApiClient
from hcat_notify.config import Settings
from hcat_notify.consumer import open_reader
from hcat_notify.errors import StoreUnavailableError
from hcat_notify.store.catalog import Catalog


def test_a_reader_of_a_missing_catalog_gets_one_clear_error_and_creates_nothing(
    tmp_path: Path,
):
    settings = Settings(home=tmp_path)
    with pytest.raises(StoreUnavailableError):
        open_reader(settings)
    assert list(tmp_path.iterdir()) == []


def test_the_api_is_read_when_named_unless_a_durable_subscriber_needs_the_database(
    tmp_path: Path,
):
    settings = Settings(home=tmp_path, api_url="http://a:8080,http://b:8080")
    Catalog.open(settings).close()  # a writer creates the catalog
    with open_reader(settings) as reader:
        assert isinstance(reader, ApiClient)
        assert reader.urls == ("http://a:8080", "http://b:8080")
    with open_reader(settings, durable=True) as reader:
        assert isinstance(reader, Catalog)
    with open_reader(Settings(home=tmp_path), api_url="http://c:8080") as reader:
        assert isinstance(reader, ApiClient)
        assert reader.urls == ("http://c:8080",)
