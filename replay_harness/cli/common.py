"""What every `replay` command shares: the consoles, the progress bar, JSON output and the option types.

Each option that several commands take is declared here once, as an ``Annotated`` type (the pattern of
the ``hf`` CLI's ``_cli_utils.py``); a command writes ``nan: NanOpt = "error"``. Where commands word an
option's help differently (``--device``, ``--impl``, ``--impl-arg``), a factory takes the wording and
keeps the flag, the type and the shared part of the text here. Only the standard library, typer and
rich are imported, so ``replay`` starts fast; commands import torch inside their functions.
"""
from __future__ import annotations

import json
import sys
from typing import Annotated, Any, List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from replay_harness.errors import UsageError

# stdout: tables and lines (wide when piped, so lines are not cut); stderr: progress, warnings, errors.
# markup off: labels such as "stochastic[drop-drafts]" would otherwise be eaten as rich style tags.
out = Console(highlight=False, markup=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)


def progress(label: str, total: int | None = None, *, info: bool = False) -> Progress:
    """A transient progress bar on stderr, shown only on a terminal and for ``total`` >= 2 steps (None:
    the caller sets the total). ``info``: one more column showing the task's ``info`` field."""
    extra = [TextColumn("{task.fields[info]}")] if info else []
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), *extra, TimeElapsedColumn(),
                    console=err, transient=True, disable=not err.is_terminal or (total is not None and total < 2))


def print_json(doc: Any, *, default: Any = None) -> None:
    """One JSON document on stdout: indented, keys sorted (byte-identical run to run)."""
    print(json.dumps(doc, indent=2, sort_keys=True, default=default))


def ids(values: list[int], limit: int = 12) -> str:
    """'1, 2, 3' for at most ``limit`` ids, then ' … (+N more)'."""
    shown = ", ".join(map(str, values[:limit]))
    return shown + (f" … (+{len(values) - limit} more)" if len(values) > limit else "")


def _nan_mode(value: str) -> str:
    if value not in ("error", "warn"):
        raise UsageError("--nan takes error or warn")
    return value


# ----------------------------------------------------------------------------- option and argument types
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
NanOpt = Annotated[str, typer.Option("--nan", callback=_nan_mode,
                                     help="What a NaN in the logits is: error (exit 2) or warn.")]
ImplTimeoutOpt = Annotated[Optional[float], typer.Option(
    "--impl-timeout", help="Seconds an external impl may take to answer one step (default 60); past it the "
                           "program is killed and replay exits 3.")]
RecordingArg = Annotated[str, typer.Argument(help="A recording folder.")]
RecordingsArg = Annotated[List[str], typer.Argument(help="Recording folders (each holds manifest.json and "
                                                         "steps/).")]


def device_opt(cpu_note: str) -> Any:
    """``--device``: auto, cpu or cuda; ``cpu_note`` says what the CPU means for this command."""
    return Annotated[str, typer.Option("--device", help="auto (CUDA if present), cpu, or cuda. " + cpu_note)]


def impl_opt(help: str, *, optional: bool = False) -> Any:
    """``--impl NAME``: a registry impl or exec:PROGRAM (``optional``: no default, checked by the command)."""
    return Annotated[Optional[str] if optional else str, typer.Option("--impl", help=help)]


def impl_arg_opt(help: str) -> Any:
    """``--impl-arg ARG``, repeatable: arguments for an external impl (exec:PROGRAM)."""
    return Annotated[Optional[List[str]], typer.Option("--impl-arg", help="Argument for an external impl " + help)]
