"""How a cost grows, as the scale benchmarks report it: figures at geometric sizes, the
ratio to the smallest size (same run), the fitted exponent (cost ~ size^k) and a
verdict per row; the curves as panels of the chart next to the record."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from _support import Row, print_table

FLAT = 1.5


def fitted_exponent(sizes: Sequence[float], ratios: Sequence[float]) -> float:
    """k of cost / smallest's ~ size^k: least squares of log(ratio) on log(size)."""
    if len(sizes) < 2:
        return math.nan
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(r, 1e-9)) for r in ratios]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else math.nan


def _summary(series: Series) -> str:
    sizes = ", ".join(f"{s:,}" for s in series.sizes)
    figures = ", ".join(f"{v:,.3g}" for v in series.values)
    ratios = ", ".join(f"{series.ratio(i):.2f}" for i in range(len(series.values)))
    return (
        f"{series.name} at {sizes}: {figures} {series.unit}; ratios {ratios}; "
        f"k = {series.exponent():.3f}"
    )


def flat(series: Series) -> Row:
    """At most :data:`FLAT` x the reference at the largest size (for rates: the
    reference over the figure)."""
    return Row(
        _summary(series),
        series.values[-1],
        series.reference(-1),
        unit=series.unit,
        target=("<=", FLAT),
        check="ratio",
        ratio_mode="ref/ours" if series.higher_is_better else "ours/ref",
        digits=3,
    )


def at_most(bound: float) -> Callable[[Series], Row]:
    """Every size's figure at most ``bound`` (in the series' unit): the row shows the
    largest figure."""

    def verdict(series: Series) -> Row:
        return Row(
            _summary(series),
            max(series.values),
            None,
            unit=series.unit,
            target=("<=", bound),
            digits=3,
        )

    return verdict


def at_most_beside(bound: float) -> Callable[[Series], Row]:
    """As :func:`at_most`, with the reference measured beside the largest figure (a
    floor, same rounds) and the ratio to it shown; the verdict is on the figure."""

    def verdict(series: Series) -> Row:
        worst = max(range(len(series.values)), key=series.values.__getitem__)
        return Row(
            _summary(series) + " (ratios: ours / the floor)",
            series.values[worst],
            series.reference(worst),
            unit=series.unit,
            target=("<=", bound),
            digits=3,
        )

    return verdict


def linear(series: Series) -> Row:
    """Grows no faster than the size: the fitted exponent (the row's figure) at most
    1.15."""
    return Row(_summary(series), series.exponent(), None, unit="k", target=("<=", 1.15), digits=3)


@dataclass
class Series:
    """One cost at each size; ``base`` is the same cost at the smallest size (or without
    the load), measured in the same rounds, when there is such a reference."""

    name: str
    unit: str
    xlabel: str
    verdict: Callable[[Series], Row] = flat
    higher_is_better: bool = False
    log_x: bool = True
    sizes: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, size: int, value: float, base: float | None = None) -> None:
        self.sizes.append(size)
        self.values.append(value)
        if base is not None:
            self.base.append(base)

    def ratio(self, i: int) -> float:
        """The figure at size i over the reference: ``base[i]`` when there is one, else
        the figure at the smallest size."""
        ref = self.reference(i)
        return self.values[i] / ref if ref else math.nan

    def reference(self, i: int) -> float:
        return self.base[i] if self.base else self.values[0]

    def exponent(self) -> float:
        return fitted_exponent(self.sizes, [self.ratio(i) for i in range(len(self.sizes))])


def report(title: str, series: Sequence[Series], notes: Sequence[str] = ()) -> None:
    """Print one table: per cost its figures at every size, ratios, fitted exponent and
    the verdict of its rule."""
    print_table(
        title,
        [s.verdict(s) for s in series if s.values],
        [
            *notes,
            *(n for s in series for n in s.notes),
            "ratios: each size's figure over its reference (the smallest size's, or the "
            "same without the load); k: the fitted exponent, ratio ~ size^k (0: flat, 1: "
            "linear)",
        ],
    )


def draw(axes: Any, series: Sequence[Series], title: str) -> None:
    """Two stacked panels: the figures, and the ratios to the reference."""
    import matplotlib.pyplot as plt

    top, bottom = axes
    colours = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]  # a ListedColormap
    for i, s in enumerate(series):
        if not s.values:
            continue
        style = {
            "marker": "osD^v<>"[i % 7],
            "color": colours[i % len(colours)],
            "label": f"{s.name} ({s.unit})",
        }
        # log scales: a zero (no excess moves, say) is left out
        shown = [(x, v, s.ratio(n)) for n, (x, v) in enumerate(zip(s.sizes, s.values, strict=True))]
        top.plot([x for x, v, _ in shown if v > 0], [v for _, v, _ in shown if v > 0], **style)
        bottom.plot([x for x, _, r in shown if r > 0], [r for _, _, r in shown if r > 0], **style)
    bottom.axhline(FLAT, color="grey", linestyle=":", label=f"flat: {FLAT} x")
    for ax in (top, bottom):
        ax.set_xscale("log" if all(s.log_x for s in series) else "linear")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    top.set_title(title)
    bottom.set_ylabel("figure / its reference")
    bottom.set_xlabel(series[0].xlabel if series else "")


def chart(path: Any, panels: dict[str, Sequence[Series]]) -> None:
    """One column of two panels per title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(panels), figsize=(7 * len(panels), 11), squeeze=False)
    for column, (title, series) in enumerate(panels.items()):
        draw((axes[0][column], axes[1][column]), series, title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"# chart: {path}")
