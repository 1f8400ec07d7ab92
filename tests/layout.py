"""The project's layout rules (docs/contributing.md), read from the source (nothing is
imported): import cycles, ``hcat_notify`` importing ``spark_output``, private names
imported across modules, and modules over the line cap. Used by ``tests/test_layout.py``
on the real tree and on small trees built to break each rule."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("hcat_notify", "spark_output")
LINE_CAP = 700


@dataclass
class Layout:
    """What the rules found (every list empty: the layout holds)."""

    modules: dict[str, Path] = field(default_factory=dict)
    cycles: list[list[str]] = field(default_factory=list)
    back_edges: list[tuple[str, str]] = field(default_factory=list)
    private_imports: list[tuple[str, str]] = field(default_factory=list)
    oversized: list[tuple[str, int]] = field(default_factory=list)
    deferred_imports: list[tuple[str, str]] = field(default_factory=list)
    """(module, module it imports inside a function) where the import dodges import order:
    the importer loads that module anyway when it is imported, or it imports the
    importer back (a cycle). A deferred import that keeps a heavy module from loading
    (a command's implementation, pyarrow behind a client) is allowed."""
    migration_imports: list[tuple[str, str]] = field(default_factory=list)
    """(migration, live module it imports): migrations use only hcat_notify.migrations."""


def _modules(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if "migrations" in relative.parts:
                continue
            parts = list(relative.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, package: str) -> Iterator[tuple[str, list[str]]]:
    """(module named, names taken from it) of every import, at any depth, outside
    ``if TYPE_CHECKING:`` blocks."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _type_checking(child.test):
            for node in child.orelse:
                yield from _imports(node, package)
            continue
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield alias.name, []
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                parts = package.split(".")
                up = parts[: len(parts) - (child.level - 1)]
                base = ".".join([*up, base] if base else up)
            yield base, [alias.name for alias in child.names]
        yield from _imports(child, package)


def _top_level_imports(tree: ast.AST, package: str) -> Iterator[tuple[str, list[str]]]:
    """The imports that run when the module is imported: module level and class bodies,
    not function bodies, not ``if TYPE_CHECKING:`` blocks."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(child, ast.If) and _type_checking(child.test):
            for node in child.orelse:
                yield from _top_level_imports(node, package)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield from _imports(ast.Module(body=[child], type_ignores=[]), package)
            continue
        yield from _top_level_imports(child, package)


def _deferred_imports(tree: ast.AST, package: str) -> Iterator[tuple[str, list[str]]]:
    """The imports inside function bodies (lazy package exports, ``__getattr__``, aside)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name != "__getattr__":
            for statement in node.body:
                yield from _imports(ast.Module(body=[statement], type_ignores=[]), package)


def _closure(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        for target in edges.get(name, ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _migration_imports(root: Path) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in sorted((root / "hcat_notify" / "migrations").rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        for imported, _ in _imports(ast.parse(path.read_text(encoding="utf-8")), name):
            live = imported.startswith(PACKAGES) and not imported.startswith(
                "hcat_notify.migrations"
            )
            if live:
                found.append((name, imported))
    return found


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def check_layout(root: Path, line_cap: int = LINE_CAP) -> Layout:
    """Apply the rules to the packages under ``root``."""
    layout = Layout(modules=_modules(root))
    modules = layout.modules

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def targets_of(imports: Iterator[tuple[str, list[str]]], name: str) -> set[str]:
        found: set[str] = set()
        for imported, names in imports:
            for taken in names:
                submodule = resolve(f"{imported}.{taken}")
                if submodule is not None and submodule != resolve(imported):
                    found.add(submodule)
            owner = resolve(imported)
            if owner is not None:
                found.add(owner)
        found.discard(name)
        return found

    def parents(name: str) -> set[str]:
        parts = name.split(".")
        return {".".join(parts[:end]) for end in range(1, len(parts))} & set(modules)

    top: dict[str, set[str]] = {}
    deferred: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        top[name] = targets_of(_top_level_imports(tree, package), name) | parents(name)
        deferred[name] = targets_of(_deferred_imports(tree, package), name)
    for name in sorted(modules):
        loaded = _closure(name, top)
        for target in sorted(deferred[name]):
            # A package's lazy exports load on first use: only a plain module counts as
            # loaded anyway.
            plain = modules[target].name != "__init__.py"
            if (plain and target in loaded) or name in _closure(target, top):
                layout.deferred_imports.append((name, target))
    layout.migration_imports = _migration_imports(root)

    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > line_cap:
            layout.oversized.append((name, lines))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for imported, names in _imports(ast.parse(source), package):
            targets: set[str] = set()
            for taken in names:
                submodule = resolve(f"{imported}.{taken}")
                if submodule is not None and submodule != resolve(imported):
                    targets.add(submodule)
                elif taken.startswith("_") and not taken.startswith("__"):
                    owner = resolve(imported)
                    if owner is not None and owner != name:
                        layout.private_imports.append((name, f"{imported}.{taken}"))
            if not names or len(targets) < len(names):
                owner = resolve(imported)
                if owner is not None:
                    targets.add(owner)
            targets.discard(name)
            edges[name] |= targets
            if name.startswith("hcat_notify"):
                layout.back_edges.extend(
                    (name, target)
                    for target in sorted(targets)
                    if target.startswith("spark_output")
                )
    for component in _strongly_connected(edges):
        # A package's __init__ re-exporting its own submodules is not a cycle that
        # matters: only components with two or more plain modules are.
        plains = [member for member in component if modules[member].name != "__init__.py"]
        if len(plains) > 1 or len(plains) == len(component):
            layout.cycles.append(component)
    return layout
