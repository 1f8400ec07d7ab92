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
