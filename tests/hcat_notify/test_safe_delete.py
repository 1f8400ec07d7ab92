"""hcat_notify.safe_delete: a local tree is deleted only when reached from its base
without a link, and only if it is the directory the caller checked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hcat_notify.errors import UnsafeDeleteError
from hcat_notify.safe_delete import identity_of, remove_tree


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    base, victim = tmp_path / "base", tmp_path / "victim"
    (base / "a" / "t").mkdir(parents=True)
    (base / "a" / "t" / "f").write_text("x")
    (victim / "t").mkdir(parents=True)
    (victim / "t" / "precious").write_text("keep me")
    return base, victim


def test_a_link_on_the_way_is_refused_and_nothing_is_deleted(tmp_path: Path):
    base, victim = _tree(tmp_path)
    (base / "a").rename(base / "a-moved")
    (base / "a").symlink_to(victim)
    with pytest.raises(UnsafeDeleteError, match=f"^{base}/a is a symbolic link; nothing"):
        remove_tree(str(base / "a" / "t"), [str(base)])
    assert (victim / "t" / "precious").exists()


def test_the_last_component_a_link_is_refused(tmp_path: Path):
    base, victim = _tree(tmp_path)
    (base / "link").symlink_to(victim / "t")
    with pytest.raises(UnsafeDeleteError, match="is a symbolic link"):
        remove_tree(str(base / "link"), [str(base)])
    assert (victim / "t" / "precious").exists()


def test_a_directory_replaced_after_the_check_is_refused(tmp_path: Path):
    base, _ = _tree(tmp_path)
    target = base / "a" / "t"
    checked = identity_of(str(target))
    target.rename(base / "a" / "old")
    target.mkdir()
    with pytest.raises(UnsafeDeleteError, match="is not the directory that was checked"):
        remove_tree(str(target), [str(base)], expected=checked)
    assert target.exists()


def test_outside_every_base_is_refused(tmp_path: Path):
    base, victim = _tree(tmp_path)
    for path in (victim / "t", base):  # a base itself is not strictly inside it
        with pytest.raises(UnsafeDeleteError, match="is not inside"):
            remove_tree(str(path), [str(base)])
    assert (victim / "t" / "precious").exists()


def test_a_clean_tree_is_deleted_links_inside_it_but_not_their_targets(tmp_path: Path):
    base, victim = _tree(tmp_path)
    (base / "a" / "t" / "out").symlink_to(victim)
    target = base / "a" / "t"
    assert remove_tree(str(target), [str(base)], expected=identity_of(str(target)))
    assert not target.exists()
    assert (victim / "t" / "precious").exists()
    assert not remove_tree(str(target), [str(base)])  # nothing there: False
    assert os.listdir(base / "a") == []


def test_a_base_may_be_a_link_the_innermost_base_is_used(tmp_path: Path):
    base, _ = _tree(tmp_path)
    (tmp_path / "disk" / "inner" / "t").mkdir(parents=True)
    (base / "inner").symlink_to(tmp_path / "disk" / "inner")  # a root the operator linked
    assert remove_tree(str(base / "inner" / "t"), [str(base), str(base / "inner")])
    assert not (tmp_path / "disk" / "inner" / "t").exists()
