"""hcat_notify.safe_move: a local move reaches both parents from a trusted base without a
link, never moves a link, and moves a directory only if it is the one expected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hcat_notify.errors import UnsafeMoveError
from hcat_notify.safe_move import move_below, remove_empty_below, stat_below


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    base, victim = tmp_path / "base", tmp_path / "victim"
    (base / "stage" / "p=1").mkdir(parents=True)
    (base / "stage" / "p=1" / "f").write_text("new")
    (victim / "p=1").mkdir(parents=True)
    (victim / "p=1" / "precious").write_text("keep me")
    return base, victim


def _victim_unchanged(victim: Path) -> None:
    assert sorted(os.listdir(victim)) == ["p=1"]
    assert os.listdir(victim / "p=1") == ["precious"]


def test_a_move_creates_the_targets_parents_below_the_base(tmp_path: Path):
    base, _ = _tree(tmp_path)
    inode = os.stat(base / "stage" / "p=1").st_ino
    move_below(str(base / "stage" / "p=1"), str(base / "g=1" / "p=1"), [str(base)], inode=inode)
    assert (base / "g=1" / "p=1" / "f").read_text() == "new"
    assert not (base / "stage" / "p=1").exists()


@pytest.mark.parametrize("side", ["source", "target"])
def test_a_link_on_the_way_is_refused_and_nothing_moves(tmp_path: Path, side: str):
    base, victim = _tree(tmp_path)
    (base / "g=1").symlink_to(victim)
    source, target = base / "stage" / "p=1", base / "g=1" / "p=1"
    if side == "source":
        source, target = target, base / "trash" / "p=1"
    with pytest.raises(UnsafeMoveError, match=f"^{base}/g=1 is a symbolic link; nothing is moved"):
        move_below(str(source), str(target), [str(base)])
    _victim_unchanged(victim)
    assert (base / "stage" / "p=1" / "f").read_text() == "new"
    assert not (base / "trash").exists()


def test_a_source_that_is_a_link_is_not_moved(tmp_path: Path):
    base, victim = _tree(tmp_path)
    (base / "stage" / "p=2").symlink_to(victim / "p=1")
    with pytest.raises(UnsafeMoveError, match="p=2 is a symbolic link"):
        move_below(str(base / "stage" / "p=2"), str(base / "p=2"), [str(base)])
    assert (base / "stage" / "p=2").is_symlink()
    assert not (base / "p=2").exists()


def test_a_directory_that_is_not_the_one_staged_is_not_moved(tmp_path: Path):
    base, _ = _tree(tmp_path)
    staged = base / "stage" / "p=1"
    inode = os.stat(staged).st_ino
    staged.rename(base / "elsewhere")
    staged.mkdir()  # another directory at the staged path
    with pytest.raises(UnsafeMoveError, match="is not the directory this job staged"):
        move_below(str(staged), str(base / "p=1"), [str(base)], inode=inode)
    assert not (base / "p=1").exists()


@pytest.mark.parametrize(
    ("path", "why"),
    [("{tmp}/other/p=1", "is not inside"), ("{base}/stage/../../victim/p=1", "'..' component")],
)
def test_a_path_outside_the_bases_is_refused(tmp_path: Path, path: str, why: str):
    base, victim = _tree(tmp_path)
    (tmp_path / "other" / "p=1").mkdir(parents=True)
    source = path.format(tmp=tmp_path, base=base)
    with pytest.raises(UnsafeMoveError, match=why):
        move_below(source, str(base / "p=1"), [str(base)])
    _victim_unchanged(victim)


def test_the_outermost_base_is_where_the_descent_starts(tmp_path: Path):
    # a table's location (trusted) inside a root: the root is the base, so the table's
    # own directory replaced by a link is refused too
    base, victim = _tree(tmp_path)
    table = base / "t"
    table.symlink_to(victim)
    with pytest.raises(UnsafeMoveError, match=f"^{table} is a symbolic link"):
        move_below(str(table / "p=1"), str(base / "stage" / "x"), [str(table), str(base)])
    _victim_unchanged(victim)


def test_stat_and_rmdir_below_never_follow_a_link(tmp_path: Path):
    base, victim = _tree(tmp_path)
    (victim / "empty").mkdir()
    (base / "g=1").symlink_to(victim)
    assert stat_below(str(base / "missing" / "x"), [str(base)]) is None
    with pytest.raises(UnsafeMoveError, match="g=1 is a symbolic link"):
        stat_below(str(base / "g=1" / "empty"), [str(base)])
    with pytest.raises(UnsafeMoveError, match="g=1 is a symbolic link"):
        remove_empty_below(str(base / "g=1" / "empty"), [str(base)])
    assert (victim / "empty").is_dir()
    (base / "empty").mkdir()
    assert remove_empty_below(str(base / "empty"), [str(base)])
    assert not remove_empty_below(str(base / "stage"), [str(base)])
