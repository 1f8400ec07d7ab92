"""The status page's completeness grids: for each table with a rule, its recent sets
(rows) by expected parts (columns), each cell present, missing, late or done, with the
set's state and generation; bounded (docs/completeness.md)."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from hcat_notify.errors import HcatNotifyError
from hcat_notify.model.completeness import SetState, expected_parts
from hcat_notify.store.catalog import Catalog
from hcat_notify.store.records import TableInfo
from hcat_notify.store.set_records import SetReport

__all__ = ["GRID_PARTS", "GRID_SETS", "GRID_TABLES", "Grid", "read_grids", "render_grids"]

GRID_SETS = 7
"""Sets per grid, the newest."""
GRID_PARTS = 48
"""Part columns per grid; more are counted in a ``+k more`` column."""
GRID_TABLES = 20
"""Tables with a rule shown (the first by name)."""

GRID_STYLE = """
.grid td.cell { width: 1.1em; text-align: center; padding: 0.1em; }
.grid th.part { writing-mode: vertical-rl; font-weight: normal; font-size: 0.8em; }
.present { background: #cfe8cf; } .done { background: #4a9a4a; color: #fff; }
.missing { background: #eee; color: #999; } .late { background: #d9534f; color: #fff; }
"""
_MARK = {"present": "+", "done": "✓", "missing": "·", "late": "!"}


@dataclass(frozen=True)
class Grid:
    """One table's recent sets and the parts its rule expects."""

    table: TableInfo
    sets: list[SetReport]
    parts: list[str]
    """Part columns (paths below the set), at most :data:`GRID_PARTS`."""
    more: int
    """Parts not shown."""


def _below(report: SetReport, path: str) -> str:
    return path[len(report.spec.to_path()) + 1 :]


def read_grids(catalog: Catalog, tables: list[TableInfo]) -> list[Grid]:
    """The grids of the tables with a rule among ``tables``."""
    grids = []
    for table in [t for t in tables if t.rule_version is not None][:GRID_TABLES]:
        try:
            record = catalog.sets.rule(table.name)
            if record is None or record.rule is None:
                continue
            sets = catalog.sets.list(table.name, limit=GRID_SETS)
        except HcatNotifyError:  # dropped or changed meanwhile
            continue
        expected = expected_parts(record.rule)
        if expected is None:  # like the previous set, or a count: what the sets show
            seen = {_below(r, path) for r in sets for path in (*r.present, *r.missing)}
            expected = tuple(sorted(seen))
        grids.append(
            Grid(table, sets, list(expected[:GRID_PARTS]), max(0, len(expected) - GRID_PARTS))
        )
    return grids


def _cell(report: SetReport, part: str, present: set[str]) -> str:
    if part in present:
        kind = "done" if report.state is SetState.DONE else "present"
    elif report.state is SetState.LATE or report.late_by is not None:
        kind = "late"
    else:
        kind = "missing"
    return f'<td class="cell {kind}" title="{escape(part)}: {kind}">{_MARK[kind]}</td>'


def _row(report: SetReport, parts: list[str]) -> str:
    present = {_below(report, path) for path in report.present}
    state = "-" if report.state is None else report.state.value
    mark = f" g{report.generation}" if report.generation > 1 else ""
    counts = f"{len(report.present)}/{report.expected if report.expected is not None else '?'}"
    head = (
        f'<th class="set">{escape(report.spec.canonical())}</th>'
        f'<td class="state {escape(state)}">{escape(state)}{escape(mark)}</td>'
        f"<td>{escape(counts)}</td>"
    )
    cells = "".join(_cell(report, part, present) for part in parts)
    return f"<tr>{head}{cells}</tr>"


def render_grids(grids: list[Grid]) -> str:
    """The grids as HTML (nothing when no table has a rule)."""
    if not grids:
        return ""
    out = [
        "<h2>Completeness</h2>",
        '<p class="muted">newest sets first; + present, ✓ done, · missing, ! late; '
        "g<i>n</i>: generation <i>n</i></p>",
    ]
    for grid in grids:
        name = escape(str(grid.table.name))
        head = "".join(f'<th class="part" title="{escape(p)}">{escape(p)}</th>' for p in grid.parts)
        if grid.more:
            head += f'<th class="more">+{grid.more} more</th>'
        rows = "".join(_row(report, grid.parts) for report in grid.sets)
        body = rows or '<tr><td class="muted" colspan="3">no set yet</td></tr>'
        out.append(
            f'<h3>{name}</h3><table class="grid" data-table="{name}"><thead><tr>'
            f"<th>set</th><th>state</th><th>parts</th>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>"
        )
    return "\n".join(out)
