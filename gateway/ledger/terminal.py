"""How the reports meet a terminal (`plumbline report cost|health|shadow`): tables that fit its
width (rich folds and wraps each column rather than running past the edge), lines wrapped to
it, and small values written so that they still say something (three significant digits,
never `0.0000` for money that was spent).

The width is the terminal's (`COLUMNS` first, then the terminal's own size); written to a file
or a pipe, the report keeps the width it asks for (`wide`).
"""

from __future__ import annotations

import io
import math
import shutil
from collections.abc import Collection, Iterable, Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

DASH = "–"


def width(wide: int) -> int:
    """The terminal's columns (`COLUMNS`, else its size), else `wide`."""
    return shutil.get_terminal_size((wide, 24)).columns


def render(
    title: str,
    heads: Sequence[str],
    rows: Sequence[Sequence[str]],
    lines: Iterable[str] = (),
    *,
    left: Collection[str] = (),
    wide: int = 160,
) -> str:
    """A table of `rows` under `heads` (the `left` ones left-aligned, the rest right), then
    `lines`, as text no wider than the terminal. A table too wide for it is written one record
    at a time instead (a heading of its first cells, then each column's name and value), so a
    narrow terminal still reads whole numbers rather than columns folded to slivers."""
    console = Console(
        file=io.StringIO(), width=width(wide), color_system=None, force_terminal=False
    )
    table = Table(title=title, title_justify="left")
    for name in heads:
        table.add_column(name, justify="left" if name in left else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    if _fits(heads, rows, console.width):
        console.print(table)
    else:
        console.print(title, overflow="fold", markup=False, highlight=False)
        for row in rows:
            console.print(_record(heads, row, left), markup=False, highlight=False)
    for line in lines:
        console.print(line, overflow="fold", markup=False, highlight=False)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _fits(heads: Sequence[str], rows: Sequence[Sequence[str]], columns: int) -> bool:
    """Whether every value fits its column whole (headers may wrap at their spaces): each
    column as wide as its widest value or header word, plus the borders and padding."""
    need = 1
    for i, head in enumerate(heads):
        words = max(cell_len(w) for w in head.split())
        need += max([words, *(cell_len(r[i]) for r in rows)]) + 3
    return need <= columns


def _record(heads: Sequence[str], row: Sequence[str], left: Collection[str]) -> Table:
    """One row of a table as a two-column table: its leading text cells as the title."""
    named = [v for h, v in zip(heads, row, strict=False) if h in left][:2]
    record = Table(title=" · ".join(named), title_justify="left", box=box.SIMPLE, show_header=False)
    record.add_column("what", overflow="fold", style="bold")
    record.add_column("value", overflow="fold")
    for head, value in zip(heads, row, strict=False):
        if value not in named:
            record.add_row(head, value)
    return record


def significant(value: float | None, digits: int = 3, least: int = 2) -> str:
    """`value` with at least `least` decimals and `digits` significant ones when it is smaller
    (0.000123 rather than 0.00), without an exponent; a dash for none."""
    if value is None:
        return DASH
    if value == 0 or not math.isfinite(value):
        return f"{value:.{least}f}"
    decimals = max(least, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def usd(value: float | None) -> str:
    """Dollars: four decimals, or three significant digits below a cent (0.0000123)."""
    return significant(value, 3, 4)


def hours(value: float) -> str:
    """Hours: two decimals, or the first significant digits of a small one (0.001 h)."""
    text = significant(value, 2, 2)
    if "." in text and 0 < value < 0.1:
        text = text.rstrip("0").rstrip(".")
    return text


def cheaper(ratio: float | None) -> str:
    """API ÷ node said as which side costs how many times the other."""
    if ratio is None or ratio <= 0:
        return DASH
    if ratio >= 1:
        return f"API costs {ratio:#.3g}× the node"
    return f"node costs {1 / ratio:#.3g}× the API"
