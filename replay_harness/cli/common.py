"""What every `replay` command shares: the consoles, the progress bar, JSON output and the option types.

Each option that several commands take is declared here once, as an ``Annotated`` type (the pattern of
the ``hf`` CLI's ``_cli_utils.py``); a command writes ``nan: NanOpt = "error"``. Where commands word an
option's help differently (``--device``, ``--impl``, ``--impl-arg``), a factory takes the wording and
keeps the flag, the type and the shared part of the text here. Every option and argument names a
metavar (NAME, PATH, SECONDS, RECORDING...), never typer's python type. ``--json-file`` is checked before any
work (:func:`check_json_file`) and written with :func:`print_json`. Only the standard library, typer and
rich are imported, so ``replay`` starts fast; commands import torch inside their functions.
"""
from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any, List, Optional

import typer
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from typer.core import TyperArgument, TyperCommand

from replay_harness.errors import EnvironmentProblem, UsageError, printable



class SafeConsole(Console):
    """A rich Console that escapes every string it renders (:func:`replay_harness.errors.printable`): the
    lines, table cells and titles of every command, so a path or a string that came from a file (a folder
    named with a newline, a manifest holding an escape sequence) can neither forge a line nor drive the
    terminal (docs/HARDENING.md, "Printing what came from a file")."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(printable(text), **kwargs)


# stdout: tables and lines; stderr: progress, warnings, errors. Tables fit the terminal, $COLUMNS, or 80 columns
# when piped (their long cells fold: tests/test_tables_80.py); plain lines are never cut (soft_wrap).
# markup off: labels such as "stochastic[drop-drafts]" would otherwise be eaten as rich style tags.
out = SafeConsole(highlight=False, markup=False, emoji=False, soft_wrap=True)
err = SafeConsole(stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True)


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
    extra = [TextColumn("{task.fields[info]}", markup=False)] if info else []
    return Progress(TextColumn(printable(label).replace("{", "{{").replace("}", "}}"), markup=False), BarColumn(), MofNCompleteColumn(), *extra, TimeElapsedColumn(),
                    TimeRemainingColumn(), console=err, transient=True,
                    disable=quiet or (total is not None and total < 2))


def warn_recording(rec: Any) -> None:
    """One warning line on stderr for a recording that did not close cleanly or whose content digest does
    not match its steps (what `replay validate` reports); the exit code is left alone."""
    from replay_harness.recording.validate import close_problems

    for p in close_problems(rec):
        err.print(f"replay: warning: {p}")


def dumps(doc: Any, *, default: Any = None) -> str:
    """A JSON document as every command prints it: indented, keys sorted (byte-identical run to run), strict
    JSON: a non-finite number (an infinite decision margin: no second candidate) is written as null."""
    convert = None if default is None else (lambda obj: _finite(default(obj)))
    return json.dumps(_finite(doc), indent=2, sort_keys=True, default=convert, allow_nan=False)


def _finite(doc: Any) -> Any:
    """``doc`` with every float that is inf or NaN replaced by None (dicts, lists and tuples walked)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: _finite(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [_finite(v) for v in doc]
    return doc


def print_json(doc: Any, *, default: Any = None, json_file: Optional[str] = None, stdout: bool = True) -> None:
    """One JSON document on stdout (not with ``stdout=False``) and, with ``json_file``, the same text in
    that file (--json-file)."""
    text = dumps(doc, default=default)
    write_json_file(json_file, text)
    if stdout:
        print(text)


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


class _MetavarArgument(TyperArgument):
    """An argument shown by its metavar alone, as click does: RECORDING... (required), [RECORDING]...
    (optional); typer would show {RECORDING}... and its python type (<list[str]>)."""

    def _shown(self) -> str:
        name = self.metavar if self.required else f"[{self.metavar}]"
        return name + ("..." if self.nargs != 1 else "")

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        return [self._shown()]

    def get_help_record(self, ctx: Any) -> Any:
        record = super().get_help_record(ctx)
        return None if record is None else (self._shown(), record[1])


class Command(TyperCommand):
    """Every `replay` command (``app.command(cls=Command)``): arguments that name a metavar are shown by it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if type(param) is TyperArgument and param.metavar:
                param.__class__ = _MetavarArgument


# ----------------------------------------------------------------------------- option and argument types
# Every option and argument names a metavar (NAME, SECONDS, PATH, ...): without one, `--help` shows the
# python type (`<list[str]>`), which says nothing to the reader (tests/test_cli_shape.py checks it).
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
JsonFileOpt = Annotated[Optional[str], typer.Option(
    "--json-file", metavar="PATH", help="Also write the JSON document (what --json prints) to PATH; the "
                                        "tables still go to stdout. Checked before any work.")]
NanOpt = Annotated[str, typer.Option("--nan", callback=_nan_mode, metavar="error|warn",
                                     help="What a NaN in the logits is: error (exit 2) or warn.")]
NegInfOpt = Annotated[str, typer.Option("--neg-inf-rows", callback=_neg_inf_mode, metavar="warn|error",
                                        help="What an all -inf logits row (every token masked) is: warn (the "
                                             "reference emits token 0 there, as vLLM does) or error (exit 2).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress and no info lines on stderr "
                                                              "(warnings and errors still print).")]
ImplTimeoutOpt = Annotated[Optional[float], typer.Option(
    "--impl-timeout", metavar="SECONDS", help="Seconds an external impl may take to answer one step (default "
                                              "60); past it the program is killed and replay exits 3.")]
RecordingsArg = Annotated[List[str], typer.Argument(metavar="RECORDING", help="Recording folders (each holds "
                                                    "manifest.json and steps/), or folders of them (searched "
                                                    "recursively).")]


def temperatures(values: Optional[List[str]], option: str = "--temperature") -> list[float]:
    """The values of a repeatable ``--temperature`` option, each of which may also be a comma-separated list
    ("0.7,1.0" is "--temperature 0.7 --temperature 1.0"); [] when not given. Request i gets value
    ``i % len(values)`` (cycled), so one value applies to every request. UsageError (exit 2) when a value is
    not a finite number >= 0."""
    import math

    parsed = []
    for text in values or []:
        for part in str(text).split(","):
            try:
                value = float(part)
            except ValueError:
                raise UsageError(f"{option} {text!r}: not a number (0 = greedy)") from None
            if not (math.isfinite(value) and value >= 0):
                raise UsageError(f"{option} {part.strip()}: must be finite and >= 0 (0 = greedy)")
            parsed.append(value)
    return parsed


def check_output_file(path: Optional[str], inputs: Any, option: str) -> None:
    """Refuse an output file PATH of ``option`` before any work (UsageError, exit 2, not an internal error
    after the work that also hides the verdict): an existing folder, a folder that does not exist or cannot
    be written, or a path that is, holds or lies inside one of ``inputs`` (what the command reads: writing
    there would destroy it)."""
    import os

    from replay_harness.limits import check_output, check_special_output

    if path is None:
        return
    check_special_output(path, option)  # a FIFO, socket or device: never opened, never replaced
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a folder; name a file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{option} {path}: folder {folder} does not exist")
    check_output(path, list(inputs or ()), option)
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {path}: cannot write there (permission denied)")


CHECKED_JSON_FILE: list[str] = []  # the --json-file path that passed its check: main writes an error there


def check_json_file(path: Optional[str], inputs: Any = ()) -> None:
    """:func:`check_output_file` for ``--json-file``; ``inputs``: the recordings (or other files) read."""
    check_output_file(path, inputs, "--json-file")
    if path is not None:
        CHECKED_JSON_FILE[:] = [path]


def write_json_file(path: Optional[str], text: str) -> None:
    """Write ``text`` (a JSON document, as printed) to ``path`` atomically (a temp file beside it, then a
    rename: a reader never sees half a document); nothing when ``path`` is None. A FIFO, socket or device
    that appeared at ``path`` since its check is left alone (UsageError, exit 2); a failed write (disk full,
    the folder gone) is EnvironmentProblem (exit 3) naming ``--json-file PATH``."""
    import os
    import tempfile

    from replay_harness.limits import check_special_output, os_reason

    if path is None:
        return
    check_special_output(path, "--json-file")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                   dir=os.path.dirname(os.path.abspath(path)))
        with os.fdopen(fd, "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        check_special_output(path, "--json-file")
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise EnvironmentProblem(f"--json-file {path}: cannot write the JSON document ({os_reason(e)})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def device_opt(cpu_note: str) -> Any:
    """``--device``: auto, cpu or cuda; ``cpu_note`` says what the CPU means for this command."""
    return Annotated[str, typer.Option("--device", metavar="auto|cpu|cuda",
                                       help="auto (CUDA if present), cpu, or cuda. " + cpu_note)]


def complete_impl(incomplete: str) -> list[str]:
    """Shell completion of ``--impl`` (and ``--vs``, ``--against``): the registered names and ``exec:``."""
    from replay_harness.impls import known_names

    return [n for n in [*known_names(), "exec:"] if n.startswith(incomplete)]


def impl_opt(help: str, *, optional: bool = False) -> Any:
    """``--impl NAME``: a registry impl or exec:PROGRAM (``optional``: no default, checked by the command)."""
    return Annotated[Optional[str] if optional else str, typer.Option("--impl", metavar="NAME", help=help,
                                                                      autocompletion=complete_impl)]


def impl_arg_opt(help: str) -> Any:
    """``--impl-arg ARG``, repeatable: arguments for an external impl (exec:PROGRAM)."""
    return Annotated[Optional[List[str]], typer.Option("--impl-arg", metavar="ARG",
                                                       help="Argument for an external impl " + help)]


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
