"""Tables that read at 80 columns and never break a word: a compact box, short headers, text wrapped at spaces.

Every command's table is built here (:func:`table`): text columns (recordings, routes, descriptions) wrap onto
further lines at spaces where the width runs out; number and word columns keep their width; a header is one or
two short words a line, so no header is cut to ``reco…``. The width is the terminal's, ``$COLUMNS``, or 80 when
stdout is a pipe (a CI log), but it is a target for the wrapping of text, not a limit that cuts names: no cell
is ever folded inside a word (a recording path, an impl name such as ``greedy-at-temperature``, a route), and
a table whose longest words do not fit the width is printed wider than it instead, so a name stays whole for
``grep`` and for the reader (:class:`WholeWordTable`). ``--json`` carries everything at full length.
tests/test_tables_80.py and tests/test_cli_output.py check it.
"""
from __future__ import annotations

from typing import Any, Sequence

from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

TEXT, NUM, WORD = "text", "num", "word"  # wraps at spaces; right-aligned, whole; left-aligned, whole
UNLIMITED = 1 << 20  # measuring width: a cell's words measured whole, never clamped to the console


class WholeWordTable(Table):
    """A rich Table whose column widths never go below a cell's longest word (a TEXT column) or its whole text
    (a WORD or NUM column). rich's own layout shrinks every column evenly as a last resort, so a path folds
    mid-word at 80 columns; here the widest wrappable columns give up their width first, down to their
    longest word, and what still does not fit widens the table past the console width. The title's longest
    word sets a floor too (the title is the recording's path in `replay inspect`)."""

    def _calculate_column_widths(self, console: Any, options: Any) -> list[int]:
        wide = options.update_width(UNLIMITED)
        ranges = [self._measure_column(console, wide, column) for column in self.columns]
        widths = [r.maximum or 1 for r in ranges]
        floors = [r.maximum if column.no_wrap else r.minimum or 1 for r, column in zip(ranges, self.columns)]
        excess = sum(widths) - options.max_width
        while excess > 0:
            shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
        title = self.title.plain if isinstance(self.title, Text) else str(self.title or "")
        title_floor = max((cell_len(word) for word in title.split()), default=0) - self._extra_width
        if widths and sum(widths) < title_floor:
            widths[-1] += title_floor - sum(widths)
        return widths


def table(title: str | None, columns: Sequence[tuple[str, str]], *, show_header: bool = True) -> Table:
    """A :class:`WholeWordTable`: ``columns`` are (header, kind) with kind TEXT, NUM or WORD; a header may hold a
    newline."""
    t = WholeWordTable(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, show_header=show_header,
                       title_justify="left", collapse_padding=True)
    for header, kind in columns:  # a Text: the console escapes a str's newline (cli/common.py, SafeConsole)
        t.add_column(Text(header), justify="right" if kind == NUM else "left", overflow="fold", no_wrap=kind != TEXT)
    return t


def cell_style(result: str) -> str | None:
    """The style of a result cell: FAIL / FINDING bold red, INCONCLUSIVE / no power yellow (no colour when
    NO_COLOR is set: rich honours it)."""
    if result in ("FAIL", "FINDING", "FAILED"):
        return "bold red"
    if result in ("INCONCLUSIVE", "no power", "not testable", "refused", "n/a"):
        return "yellow"
    return None
