"""Repository paths named in the documentation, and which of them do not exist. Used by
``tests/test_docs.py`` on README.md, docs/, tests/README.md and benchmarks/README.md,
and on small texts built to show what counts as a path.

What counts as a path (nothing else is checked, so prose and examples are free):

* a link target (``[text](target)``), relative to the page (``#anchor`` dropped); links
  with a scheme (``https:``, ``mailto:``) and bare anchors are not paths;
* a backticked name starting with ``../``, relative to the page: it must stay inside the
  repository (``../shared/DESIGN.md`` from the README does not);
* a name inside backticks or a fenced code block (one whitespace-separated token,
  stripped of quotes and punctuation) that either
  - contains a ``/`` and starts with an entry of the repository's root (``hcat_notify/``,
    ``docs/``, ``deploy/``...) or with a directory of a package (``store/leases.py``
    is ``hcat_notify/store/leases.py``; ``commit/moves.py`` is ``spark_output/commit/...``),
    resolved against the root and then each package; or
  - has no ``/`` and one of the source and documentation extensions (``.py``, ``.md``,
    ``.sh``, ...): a file of that name must exist somewhere in the repository.

Never a path: anything absolute (``/data/clicks``), with a scheme (``hdfs://nn/w``,
``s3://b/k``, ``file:///w``), with a placeholder or pattern (``<table>/x``, ``{id}``,
``*``, ``...``), or whose first segment the repository does not have (``k=v/...``,
``URI/_hcat_export.json``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("hcat_notify", "spark_output")
SOURCE_SUFFIXES = (".py", ".md", ".sh", ".toml", ".xml", ".service", ".mount", ".properties")
"""Bare names with these suffixes name repository files. Run-time files such as
``_hcat_export.json`` or ``catalog.db`` are outside the list on purpose."""
NOT_PATHS = {"stomp.py"}
"""Names with a source suffix that are not files: the STOMP client library."""
SKIPPED_DIRS = {
    ".git",
    ".venv",
    ".data",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "node_modules",
}

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_PLACEHOLDER = re.compile(r"[<>{}*$|]|\.\.\.|…|\[|\]")
_STRIP = "\"'`()[],;:!?"


@dataclass(frozen=True)
class Named:
    """A path a page names: the text as written and the line it is on."""

    page: str
    line: int
    text: str
    link: bool  # relative to the page (a link target, or a backticked ``../x``)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


class Repository:
    """What the repository holds: its root entries, its packages' directories, the names
    of its files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.top = {p.name for p in root.iterdir() if p.name not in SKIPPED_DIRS}
        self.package_dirs = {
            p.name
            for package in PACKAGES
            if (root / package).is_dir()
            for p in (root / package).iterdir()
            if p.is_dir() and p.name not in SKIPPED_DIRS
        }
        self.file_names = {p.name for p in self._files()}

    def _files(self) -> Iterator[Path]:
        stack = [self.root]
        while stack:
            for path in stack.pop().iterdir():
                if path.is_dir():
                    if path.name not in SKIPPED_DIRS:
                        stack.append(path)
                else:
                    yield path

    def recognises(self, token: str) -> bool:
        """Whether a backticked token names a repository path (see the module's rules)."""
        if token.startswith((".ci/", "./")):
            token = token.removeprefix("./")
        elif not token or token.startswith(("/", "~", "-", ".")):
            return False
        if _SCHEME.match(token) or _PLACEHOLDER.search(token) or "=" in token:
            return False
        if "/" not in token:
            return token.endswith(SOURCE_SUFFIXES) and token not in NOT_PATHS
        first = token.split("/", 1)[0]
        return first in self.top or first in self.package_dirs

    def exists(self, named: Named, page: Path) -> bool:
        text = named.text.split("#", 1)[0]
        if named.link:
            target = (page.parent / text).resolve()
            inside = target.is_relative_to(self.root.resolve())
            return not text or (inside and target.exists())
        if "/" not in text:
            return text in self.file_names
        text = text.rstrip("/")
        bases = [self.root, *(self.root / package for package in PACKAGES)]
        return any((base / text).exists() for base in bases)


def _tokens(span: str) -> Iterator[str]:
    for raw in span.split():
        token = raw.split("::", 1)[0].strip(_STRIP).rstrip(".")  # a pytest node id's file
        if token:
            yield token


def named_paths(text: str, page: str, repo: Repository) -> list[Named]:
    """Every repository path the page's text names, in order."""
    found: list[Named] = []

    def line_of(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    for match in _LINK.finditer(text):
        target = match.group(1)
        if _SCHEME.match(target) or target.startswith("#"):
            continue
        found.append(Named(page, line_of(match.start(1)), target, link=True))
    fenced = [(m.start(), m.end()) for m in _FENCE.finditer(text)]
    spans: list[tuple[int, str]] = [(start, text[start:end]) for start, end in fenced]
    spans += [
        (m.start(1), m.group(1))
        for m in _INLINE.finditer(text)
        if not any(start <= m.start() < end for start, end in fenced)
    ]
    for start, span in spans:
        for token in _tokens(span):
            up = token.startswith("../")
            if up or repo.recognises(token):
                offset = text.find(token, start)
                found.append(Named(page, line_of(offset), token, link=up))
    return sorted(found, key=lambda n: (n.line, n.text))


def missing_paths(repo: Repository, pages: list[Path]) -> list[Named]:
    """The paths the pages name that the repository does not have."""
    missing: list[Named] = []
    for page in pages:
        inside = page.is_relative_to(repo.root)
        relative = page.relative_to(repo.root).as_posix() if inside else page.name
        for named in named_paths(page.read_text(encoding="utf-8"), relative, repo):
            if not repo.exists(named, page):
                missing.append(named)
    return missing


def documentation(root: Path) -> list[Path]:
    """The pages a newcomer reads: the README, docs/, and the READMEs of the tests, the
    benchmarks and the examples."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    pages += [root / "tests" / "README.md", root / "benchmarks" / "README.md"]
    pages += sorted((root / "examples").glob("*/README.md"))
    return [page for page in pages if page.exists()]
