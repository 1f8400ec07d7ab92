"""The maintenance tests' catalog: a SQLite file of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from hcat_notify.config import load_settings


@pytest.fixture
def settings(tmp_path: Path):
    return load_settings(home=tmp_path / "home", db_url=f"sqlite:///{tmp_path / 'catalog.db'}")
