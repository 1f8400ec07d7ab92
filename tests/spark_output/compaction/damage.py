"""Damage done to compaction's output before it is verified, through the named steps of
the merge (:func:`~spark_output.compaction.merge.rewrite`) and of the archive
(:func:`~spark_output.compaction.har.partition.pack`), patched while a ``with`` block
runs."""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.fs as pafs
import pytest

from spark_output.compaction import merge
from spark_output.compaction.har import partition as har_partition
from spark_output.compaction.har.writer import HarInfo
from spark_output.compaction.merge import Rewritten

Damage = Callable[[pafs.FileSystem, str], None]
"""Changes the file at a path, in place."""


@contextlib.contextmanager
def damaged_merges(damage: Damage) -> Iterator[None]:
    """``damage(fs, path)`` runs on each file a merge wrote, before verification."""
    rewrite = merge.rewrite

    def rewrite_then_damage(fs: pafs.FileSystem, *args: Any, **kwargs: Any) -> Rewritten:
        rewritten = rewrite(fs, *args, **kwargs)
        for path in rewritten.temp_paths:
            damage(fs, path)
        return rewritten

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(merge, "rewrite", rewrite_then_damage)
        yield


@contextlib.contextmanager
def damaged_archives(damage: Damage) -> Iterator[None]:
    """``damage(fs, path)`` runs on each part file of an archive, before verification."""
    pack = har_partition.pack

    def pack_then_damage(fs: pafs.FileSystem, *args: Any, **kwargs: Any) -> HarInfo:
        info = pack(fs, *args, **kwargs)
        for part in info.parts:
            damage(fs, posixpath.join(info.archive_dir, part))
        return info

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(har_partition, "pack", pack_then_damage)
        yield
