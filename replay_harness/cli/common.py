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
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from replay_harness.errors import UsageError

# stdout: tables and lines (wide when piped, so lines are not cut); stderr: progress, warnings, errors.
# markup off: labels such as "stochastic[drop-drafts]" would otherwise be eaten as rich style tags.
out = Console(highlight=False, markup=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)


PROGRESS_EVERY_S = 10.0  # off a terminal: seconds between progress lines (REPLAY_PROGRESS_EVERY overrides)


class LineProgress:
    """Progress off a terminal (CI logs, pipes): one line on stderr at most every ``every`` seconds, e.g.
    "replay verify: 12/40 steps, ETA 30 s". Takes the calls the commands make on a rich ``Progress``
    (``add_task``, ``advance``, ``update``); one task."""

    def __init__(self, label: str, every: float):
        self.label, self.every = label, every
        self.total: float | None = None
        self.done, self.unit = 0.0, ""
        self.start = self.last = 0.0

    def __enter__(self) -> "LineProgress":
        import time

        self.start = self.last = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> int:
        self.unit, self.total = description, total
        return 0

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def update(self, task: int, *, advance: float = 0, total: float | None = None, **fields: Any) -> None:
        import time

        self.done += advance
        if total is not None:
            self.total = total
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        elapsed = now - self.start
        line = f"{self.label}: {self.done:g}"
        if self.total:
            line += f"/{self.total:g} {self.unit}"
            if 0 < self.done < self.total:
                line += f", ETA {elapsed * (self.total - self.done) / self.done:.0f} s"
        else:
            line += f" {self.unit}, {elapsed:.0f} s elapsed"
        err.print(line)


def progress(label: str, total: int | None = None, *, info: bool = False, quiet: bool = False) -> Any:
    """Progress on stderr: a transient bar on a terminal, shown for ``total`` >= 2 steps (None: the caller
    sets the total), else a :class:`LineProgress`; nothing with ``quiet``. ``info``: one more column
    showing the task's ``info`` field."""
    import os

    if not err.is_terminal and not quiet:
        try:
            every = float(os.environ.get("REPLAY_PROGRESS_EVERY", PROGRESS_EVERY_S))
        except ValueError:
            every = PROGRESS_EVERY_S
        return LineProgress(label, every)
    extra = [TextColumn("{task.fields[info]}")] if info else []
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), *extra, TimeElapsedColumn(),
                    TimeRemainingColumn(), console=err, transient=True,
                    disable=quiet or (total is not None and total < 2))


def warn_recording(rec: Any) -> None:
    """One warning line on stderr for a recording that did not close cleanly or whose content digest does
    not match its steps (what `replay validate` reports); the exit code is left alone."""
    from replay_harness.recording.validate import close_problems

    for p in close_problems(rec):
        err.print(f"replay: warning: {p}")


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


def _neg_inf_mode(value: str) -> str:
    if value not in ("error", "warn"):
        raise UsageError("--neg-inf-rows takes warn or error")
    return value


# ----------------------------------------------------------------------------- option and argument types
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
NanOpt = Annotated[str, typer.Option("--nan", callback=_nan_mode,
                                     help="What a NaN in the logits is: error (exit 2) or warn.")]
NegInfOpt = Annotated[str, typer.Option("--neg-inf-rows", callback=_neg_inf_mode,
                                        help="What an all -inf logits row (every token masked) is: warn (the "
                                             "reference emits token 0 there, as vLLM does) or error (exit 2).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no info lines on stderr.")]
ImplTimeoutOpt = Annotated[Optional[float], typer.Option(
    "--impl-timeout", help="Seconds an external impl may take to answer one step (default 60); past it the "
                           "program is killed and replay exits 3.")]
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


def set_impl_timeout(samplers: Any, seconds: float | None) -> None:
    """Apply ``--impl-timeout`` to the external impls among ``samplers`` (one loaded impl or a list):
    > 0 seconds, and at least one of them external (exit 2 otherwise)."""
    if seconds is None:
        return
    if not seconds > 0:
        raise UsageError(f"--impl-timeout must be > 0 seconds, got {seconds:g}")
    external = [s for s in (samplers if isinstance(samplers, (list, tuple)) else [samplers]) if s.external]
    if not external:
        raise UsageError("--impl-timeout is only for external impls (--impl exec:PROGRAM)")
    for s in external:
        s.timeout = seconds


SMALL_CPU_THREADS = 1  # torch intra-op threads for the small tensors of audit / verify on the CPU


def small_cpu_threads(device: Any = None) -> None:
    """Run torch's CPU work on ``SMALL_CPU_THREADS`` thread(s): audit and verify loop over small tensors
    (a few rows of a vocabulary), where a pool of threads per process mostly spins against the other
    processes on the machine (docs/AUDIT.md, "Runtime"). Left alone when OMP_NUM_THREADS is set or the
    work runs on a GPU."""
    import os

    import torch

    if os.environ.get("OMP_NUM_THREADS") or (device is not None and getattr(device, "type", "cpu") != "cpu"):
        return
    torch.set_num_threads(SMALL_CPU_THREADS)
