"""The commit plan: what a write journals before it moves anything.

Recovery reads it back, possibly in another process and another release, so it is a
typed value with an explicit JSON form (:meth:`CommitPlan.to_json`,
:meth:`CommitPlan.from_json`) that stays readable across versions.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from hcat_notify import AnnounceMode

__all__ = ["CommitPlan", "FileMove", "MoveKind", "Owner", "PartitionMove"]


class MoveKind(StrEnum):
    """How a staged partition is moved into place."""

    DIR = "dir"
    """Swap the whole directory (overwrite, archives): readers see old or new."""
    FILES = "files"
    """Move file by file (append), so a concurrent append to the partition never collides
    (a new partition's directory may be renamed whole: :attr:`PartitionMove.whole_dir`)."""


@dataclass(frozen=True)
class FileMove:
    """One file of a :attr:`MoveKind.FILES` move."""

    source: str
    target: str


@dataclass(frozen=True)
class PartitionMove:
    """How one staged partition is published.

    Attributes:
        spec: the partition's path spec (``k1=v1/k2=v2``, escaped).
        staged: the staged directory (filesystem path).
        final: the partition's directory once published.
        file_count: data files published (for an archive, the files inside it).
        bytes: their bytes.
        kind: directory swap or file moves.
        archived: the directory holds a Hadoop Archive.
        location: the registered location when it is not ``final`` (a ``har://`` URI).
        trash: with :attr:`MoveKind.DIR`, where the replaced directory is moved.
        staged_inode: with :attr:`MoveKind.DIR` on a local filesystem, the staged
            directory's inode (a rename keeps it): the move, its undo and recovery's
            "done" act only on that directory (None in plans of earlier releases).
        new_dir: with :attr:`MoveKind.FILES`, ``final`` did not exist before.
        whole_dir: with :attr:`MoveKind.FILES` and ``new_dir``: when ``final`` still does
            not exist at move time, the staged directory is renamed to it in one step
            (every file then lands at its target all the same); else file by file.
        files: with :attr:`MoveKind.FILES`, the files to move.
        added: for a partition that exists already, the names of the files the write puts
            in it (its INSERT message lists them).
    """

    spec: str
    staged: str
    final: str
    file_count: int
    bytes: int
    kind: MoveKind
    archived: bool = False
    location: str | None = None
    trash: str | None = None
    staged_inode: int | None = None
    new_dir: bool = False
    whole_dir: bool = False
    files: tuple[FileMove, ...] = ()
    added: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "spec": self.spec,
            "staged": self.staged,
            "final": self.final,
            "file_count": self.file_count,
            "bytes": self.bytes,
            "archived": self.archived,
            "kind": self.kind.value,
        }
        if self.location is not None:
            data["location"] = self.location
        if self.added:
            data["added"] = list(self.added)
        if self.kind is MoveKind.DIR:
            data["trash"] = self.trash
            if self.staged_inode is not None:
                data["staged_inode"] = self.staged_inode
        else:
            data["new_dir"] = self.new_dir
            if self.whole_dir:
                data["whole_dir"] = True
            data["files"] = [[move.source, move.target] for move in self.files]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionMove:
        """Read :meth:`to_json`'s form back.

        Raises:
            KeyError: a required field is missing; ValueError: an unknown kind.
        """
        return cls(
            spec=str(data["spec"]),
            staged=str(data["staged"]),
            final=str(data["final"]),
            file_count=int(data["file_count"]),
            bytes=int(data["bytes"]),
            kind=MoveKind(data["kind"]),
            archived=bool(data.get("archived", False)),
            location=data.get("location"),
            trash=data.get("trash"),
            staged_inode=None if data.get("staged_inode") is None else int(data["staged_inode"]),
            new_dir=bool(data.get("new_dir", False)),
            whole_dir=bool(data.get("whole_dir", False)),
            files=tuple(FileMove(str(s), str(t)) for s, t in data.get("files", [])),
            added=tuple(str(name) for name in data.get("added", ())),
        )


@dataclass(frozen=True)
class Owner:
    """The process that journalled a write (recovery leaves live writers alone)."""

    host: str
    pid: int

    @classmethod
    def current(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid())


@dataclass(frozen=True)
class CommitPlan:
    """Everything recovery needs to finish or undo a write.

    Attributes:
        owner: the writing process.
        staging: the job's staging directory (filesystem path).
        trash: where the job moves the directories an overwrite replaces.
        table_path: the table's root on its filesystem.
        table_uri: the table's location string.
        partitions: one move per partition, in spec order.
        mark_set_done: the partial spec announced with the commit, if any.
        announce: ``partition`` or ``write`` when the writer chose one (None: the table's).
        stages_for: set on the entry a job journals before it puts files in its staging
            directory itself (an import copies them): the job id whose staging this is.
            Such an entry moves nothing; recovery removes the staging unless that job
            journalled its own plan since (which then owns it).
    """

    owner: Owner
    staging: str
    trash: str
    table_path: str
    table_uri: str
    partitions: tuple[PartitionMove, ...]
    mark_set_done: Mapping[str, str | None] | None = None
    announce: AnnounceMode | None = None
    stages_for: str | None = None

    @property
    def specs(self) -> list[str]:
        """The partitions this write claims (path specs)."""
        return [move.spec for move in self.partitions]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "owner": {"host": self.owner.host, "pid": self.owner.pid},
            "staging": self.staging,
            "trash": self.trash,
            "table_path": self.table_path,
            "table_uri": self.table_uri,
            "partitions": [move.to_json() for move in self.partitions],
            "mark_set_done": dict(self.mark_set_done) if self.mark_set_done is not None else None,
            "announce": self.announce,
        }
        if self.stages_for is not None:
            data["stages_for"] = self.stages_for
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CommitPlan:
        """Read :meth:`to_json`'s form back (also plans journalled by earlier releases).

        Raises:
            KeyError: a required field is missing; ValueError: a field has a bad value.
        """
        owner = data.get("owner") or {}
        return cls(
            owner=Owner(str(owner.get("host", "")), int(owner.get("pid", -1))),
            staging=str(data["staging"]),
            trash=str(data["trash"]),
            table_path=str(data["table_path"]),
            table_uri=str(data.get("table_uri") or data["table_path"]),
            partitions=tuple(PartitionMove.from_json(item) for item in data["partitions"]),
            mark_set_done=data.get("mark_set_done"),
            announce=None if data.get("announce") is None else AnnounceMode(data["announce"]),
            stages_for=data.get("stages_for"),
        )
