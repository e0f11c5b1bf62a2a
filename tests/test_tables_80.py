"""Every command's tables read at 80 columns (issue 56 item 6): no table line longer than 80 characters and no
header cut to ``reco…``; long cells (recording paths, routes, descriptions) fold instead. Piped output is 80
columns wide (or $COLUMNS), where it was 160. In-process runs on tiny recordings; one subprocess checks the pipe."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import main_inproc

REPO = Path(__file__).resolve().parents[1]
PLAIN = str(REPO / "fixtures" / "synthetic-plain")
MIXED = str(REPO / "fixtures" / "real-mixed")
FOUNDING = str(REPO / "fixtures" / "synthetic-founding")
RULE = "─"
BOX = lambda c: c == " " or 0x2500 <= ord(c) <= 0x257F  # noqa: E731  (box-drawing characters)

COMMANDS = {
    "run": ["run", PLAIN, MIXED, FOUNDING, "--impl", "greedy-only"],
    "inspect": ["inspect", MIXED, PLAIN],
    "impls": ["impls"],
    "verify": ["verify", PLAIN, "--impl", "reference", "--trials", "4", "--steps", "0", "-q"],
    "audit": ["audit", MIXED, "--all-tests"],
    "bench": ["bench", PLAIN, "--impl", "reference", "--vs", "greedy-only", "--repeats", "1", "--warmup", "0", "-q"],
}


def render(table) -> list[str]:
    """A rich Table as the console prints it at 80 columns."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=80, no_color=True, highlight=False, markup=False, emoji=False).print(table)
    return buf.getvalue().splitlines()


@pytest.fixture()
def printed_tables(monkeypatch):
    """The tables the commands print (rendered at 80 columns), caught at ``out.print``."""
    from rich.table import Table

    from replay_harness.cli.common import out

    caught: list[list[str]] = []
    real = out.print

    def spy(*objects, **kw):
        for o in objects:
            if isinstance(o, Table):
                caught.append(render(o))
        return real(*objects, **kw)

    monkeypatch.setattr(out, "print", spy)
    return caught


@pytest.mark.parametrize("name", list(COMMANDS))
def test_tables_fit_80_columns(name, printed_tables):
    code, out, err = main_inproc(*COMMANDS[name], NO_COLOR="1")
    assert code in (0, 1, 4), err   # 4: inconclusive (verify at 4 trials) still prints its table
    assert printed_tables, out
    for lines in printed_tables:
        long = [line for line in lines if len(line) > 80]
        assert not long, "\n".join(lines)
        rules = [i for i, line in enumerate(lines) if line.strip() and all(BOX(c) for c in line.strip())]
        head = lines[:rules[1] if len(rules) > 1 and rules[0] == 1 else rules[0]] if rules else []
        assert not [h for h in head if "…" in h], "\n".join(lines)   # a header cut to "reco…"


def test_piped_output_is_80_columns_or_COLUMNS():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    r = subprocess.run([sys.executable, "-m", "replay_harness.cli", "inspect", MIXED], capture_output=True,
                       text=True, env={**env, "NO_COLOR": "1"}, timeout=120)
    assert max(len(line) for line in r.stdout.splitlines()) == 80, r.stdout        # was 160 when piped
    r = subprocess.run([sys.executable, "-m", "replay_harness.cli", "inspect", MIXED], capture_output=True,
                       text=True, env={**env, "NO_COLOR": "1", "COLUMNS": "60"}, timeout=120)
    assert max(len(line) for line in r.stdout.splitlines()) <= 60, r.stdout
