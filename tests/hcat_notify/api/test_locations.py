"""Where the HTTP API may register a location: the ``api_external_roots`` setting, and
:func:`hcat_notify.api.locations.check_api_location` (inside a warehouse root or an API
external root, symlinks resolved; the same refusal whether the directory exists)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hcat_notify.api.locations import check_api_location
from hcat_notify.config import Settings, load_settings
from hcat_notify.errors import ConfigError, InvalidInputError, LocationOutsideWarehouseError


def test_api_external_roots_from_the_environment_a_file_and_arguments_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    assert load_settings().api_external_roots == ()
    monkeypatch.setenv("HCAT_NOTIFY_API_EXTERNAL_ROOTS", "/data/ext/, s3://bucket/landing,")
    assert load_settings().api_external_roots == ("/data/ext", "s3://bucket/landing")
    monkeypatch.setenv("HCAT_NOTIFY_API_EXTERNAL_ROOTS", "")
    assert load_settings().api_external_roots == ()
    monkeypatch.delenv("HCAT_NOTIFY_API_EXTERNAL_ROOTS")
    config = tmp_path / "hcat-notify.toml"
    config.write_text('[api]\nexternal_roots = ["/srv/landing"]\n')
    assert load_settings(config_file=config).api_external_roots == ("/srv/landing",)
    for value, problem in (("relative/dir", "is not an absolute path or a URI"),
                           ("/w/../etc", "has a '..' segment")):  # fmt: skip
        with pytest.raises(ConfigError, match="api_external_roots") as caught:
            load_settings(api_external_roots=["/ok", value])
        assert f"API external root {value!r} {problem}" in str(caught.value)


@pytest.fixture
def places(tmp_path: Path) -> tuple[Settings, Path, Path]:
    """Settings with a narrow warehouse root and one API external root (both exist)."""
    warehouse, external = tmp_path / "warehouse", tmp_path / "landing"
    warehouse.mkdir()
    external.mkdir()
    settings = load_settings(
        home=tmp_path / "home", warehouse_roots=[str(warehouse)], api_external_roots=[str(external)]
    )
    return settings, warehouse, external


def test_inside_a_warehouse_root_or_an_api_external_root_is_allowed(
    places: tuple[Settings, Path, Path],
):
    settings, warehouse, external = places
    for location in (f"{warehouse}/t", f"file://{warehouse}/t/ds=1", f"{external}/t/ds=1"):
        check_api_location(settings, location, what="location")
    check_api_location(settings, f"{external}/t/", what="location of table a.b", table=True)


def test_outside_is_one_refusal_whether_the_directory_exists_or_not(
    places: tuple[Settings, Path, Path], tmp_path: Path
):
    settings, warehouse, external = places
    there = tmp_path / "etc" / "ssl"
    there.mkdir(parents=True)
    (there / "cert.pem").write_bytes(b"x" * 10)
    answers = []
    for location in (str(there), str(tmp_path / "etc" / "nonexistent")):
        with pytest.raises(LocationOutsideWarehouseError) as caught:
            check_api_location(settings, location, what="location")
        answers.append(str(caught.value).replace(location, "<location>"))
    assert answers[0] == answers[1]
    assert "is outside the warehouse roots" in answers[0]
    assert f"API's external roots ({external})" in answers[0]
    for location in (str(warehouse), str(external), "hdfs://nn/landing/t"):
        with pytest.raises(LocationOutsideWarehouseError):  # a root itself is not inside it
            check_api_location(settings, location, what="location")


def test_a_symlink_out_of_an_allowed_place_is_refused(
    places: tuple[Settings, Path, Path], tmp_path: Path
):
    settings, _, external = places
    outside = tmp_path / "secrets"
    outside.mkdir()
    (external / "link").symlink_to(outside)
    with pytest.raises(LocationOutsideWarehouseError, match="is outside the warehouse roots"):
        check_api_location(settings, f"{external}/link", what="location")


@pytest.mark.parametrize(
    ("location", "problem"),
    [("x/y", "is a relative path"), ("{external}/../etc", "has a '..' segment"), ("/", "root")],
)
def test_a_malformed_location_is_refused_by_its_shape(
    places: tuple[Settings, Path, Path], location: str, problem: str
):
    settings, _, external = places
    with pytest.raises(InvalidInputError, match=problem):
        check_api_location(settings, location.format(external=external), what="location")
