"""The layout rules (docs/contributing.md, "Layout rules") hold for the source tree (and
the check catches each breach: it is run on small trees that break one rule each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layout import LINE_CAP, check_layout

ROOT = Path(__file__).resolve().parent.parent


def test_the_source_tree_keeps_the_layout_rules() -> None:
    layout = check_layout(ROOT)
    assert len(layout.modules) > 100  # the packages were found
    assert layout.cycles == []
    assert layout.back_edges == []
    assert layout.private_imports == []
    assert layout.oversized == []
    assert layout.deferred_imports == []
    assert layout.migration_imports == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for relative, text in {
        "hcat_notify/__init__.py": "",
        "spark_output/__init__.py": "",
        **files,
    }.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_an_import_cycle_is_found_even_inside_a_function(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "hcat_notify/a.py": "from hcat_notify.b import thing\n",
            "hcat_notify/b.py": "def f():\n    from hcat_notify import a\n    return a\n",
        },
    )
    assert check_layout(root).cycles == [["hcat_notify.a", "hcat_notify.b"]]


def test_type_checking_imports_and_package_reexports_are_no_cycle(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "hcat_notify/__init__.py": "from hcat_notify.a import thing\n",
            "hcat_notify/a.py": (
                "from typing import TYPE_CHECKING\n"
                "import hcat_notify\n"
                "if TYPE_CHECKING:\n    from hcat_notify.b import other\n"
                "thing = 1\n"
            ),
            "hcat_notify/b.py": "from hcat_notify.a import thing\nother = thing\n",
        },
    )
    assert check_layout(root).cycles == []


def test_hcat_notify_importing_spark_output_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "hcat_notify/a.py": "def f():\n    import spark_output.w\n",
            "spark_output/w.py": "from hcat_notify import a\n",
        },
    )
    assert check_layout(root).back_edges == [("hcat_notify.a", "spark_output.w")]


@pytest.mark.parametrize(
    "statement",
    ["from hcat_notify.b import _helper", "from .b import _helper as helper"],
)
def test_a_private_name_from_another_module_is_found(tmp_path: Path, statement: str) -> None:
    root = _tree(
        tmp_path,
        {
            "hcat_notify/a.py": statement + "\n",
            "hcat_notify/b.py": "def _helper():\n    pass\n",
        },
    )
    assert check_layout(root).private_imports == [("hcat_notify.a", "hcat_notify.b._helper")]


def test_a_module_over_the_cap_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "spark_output/long.py": "x = 1\n" * (LINE_CAP + 1),
            "spark_output/short.py": "x = 1\n" * LINE_CAP,
        },
    )
    assert check_layout(root).oversized == [("spark_output.long", LINE_CAP + 1)]


def test_an_import_inside_a_function_that_dodges_import_order_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            # b loads errors anyway: deferring it in a function gains nothing.
            "hcat_notify/errors.py": "class E(Exception): ...\n",
            "hcat_notify/b.py": (
                "from hcat_notify.errors import E\n"
                "def f():\n    from hcat_notify.errors import E as F\n    return F\n"
            ),
            # d imports c at module level: c importing d in a function dodges a cycle.
            "hcat_notify/c.py": "def g():\n    from hcat_notify import d\n    return d\n",
            "hcat_notify/d.py": "from hcat_notify import c\n",
            # A deferral that keeps a module from loading is allowed.
            "hcat_notify/heavy.py": "import json\n",
            "hcat_notify/light.py": (
                "def h():\n    from hcat_notify import heavy\n    return heavy\n"
            ),
        },
    )
    assert check_layout(root).deferred_imports == [
        ("hcat_notify.b", "hcat_notify.errors"),
        ("hcat_notify.c", "hcat_notify.d"),
    ]


def test_a_migration_importing_live_code_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "hcat_notify/model.py": "X = 1\n",
            "hcat_notify/migrations/__init__.py": "",
            "hcat_notify/migrations/frozen.py": "X = 1\n",
            "hcat_notify/migrations/versions/0001_a.py": (
                "from hcat_notify.migrations.frozen import X\n"
            ),
            "hcat_notify/migrations/versions/0002_b.py": "from hcat_notify.model import X\n",
        },
    )
    assert check_layout(root).migration_imports == [
        ("hcat_notify.migrations.versions.0002_b", "hcat_notify.model")
    ]
