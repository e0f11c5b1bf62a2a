"""Tables that read at 80 columns: a compact box, short headers, long cells folded, never cut.

Every command's table is built here (:func:`table`): text columns (recordings, routes, descriptions) fold onto
further lines where the width runs out, number and word columns keep their width, and a header is one or two
short words a line, so no header is cut to ``reco…`` at 80 columns or in a pipe (the console is 80 columns wide
when piped, or ``$COLUMNS``). ``--json`` carries everything at full length. tests/test_tables_80.py checks it.
"""
from __future__ import annotations

from typing import Sequence

from rich import box
from rich.table import Table
from rich.text import Text

TEXT, NUM, WORD = "text", "num", "word"  # folds; right-aligned, whole; left-aligned, whole


def table(title: str | None, columns: Sequence[tuple[str, str]], *, show_header: bool = True) -> Table:
    """A rich Table: ``columns`` are (header, kind) with kind TEXT, NUM or WORD; a header may hold a newline."""
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, show_header=show_header,
              title_justify="left", collapse_padding=True)
    for header, kind in columns:  # a Text: the console escapes a str's newline (cli/common.py, SafeConsole)
        t.add_column(Text(header), justify="right" if kind == NUM else "left", overflow="fold", no_wrap=kind != TEXT)
    return t


def cell_style(result: str) -> str | None:
    """The style of a result cell: FAIL / FINDING bold red, INCONCLUSIVE / no power yellow (no colour when
    NO_COLOR is set: rich honours it)."""
    if result in ("FAIL", "FINDING", "FAILED"):
        return "bold red"
    if result in ("INCONCLUSIVE", "no power", "not testable", "refused"):
        return "yellow"
    return None
