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
from contextlib import contextmanager, nullcontext
from typing import Annotated, Any, Iterator, List, Optional

import typer
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from replay_harness.cli.command import Command, Group  # noqa: F401 (every command's class, here too)
from replay_harness.errors import UsageError, printable



class SafeConsole(Console):
    """A rich Console that escapes every string it renders (:func:`replay_harness.errors.printable`): the
    lines, table cells and titles of every command, so a path or a string that came from a file (a folder
    named with a newline, a manifest holding an escape sequence) can neither forge a line nor drive the
    terminal (docs/HARDENING.md, "Printing what came from a file")."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(printable(text), **kwargs)


# stdout: tables and lines; stderr: progress, warnings, errors. Tables wrap their text at the terminal's width,
# $COLUMNS, or 80 columns when piped, and never break a word (cli/tables.py); plain lines are never cut (soft_wrap).
# markup off: labels such as "stochastic[drop-drafts]" would otherwise be eaten as rich style tags.
out = SafeConsole(highlight=False, markup=False, emoji=False, soft_wrap=True)
err = SafeConsole(stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True)


PROGRESS_EVERY_S = 10.0  # off a terminal: seconds between progress lines (REPLAY_PROGRESS_EVERY overrides)


class LineProgress:
    """Progress off a terminal (CI logs, pipes): one line on stderr at most every ``every`` seconds, e.g.
    "replay verify: 12/40 steps, ETA 30 s, 20 s elapsed", and AT LEAST every ``every`` seconds while the
    command runs: a heartbeat thread prints the line again when no step has finished for that long (a step
    that takes a minute, an impl that compiles), with what the command is doing now (:meth:`describe`).
    Takes the calls the commands make on a rich ``Progress`` (``add_task``, ``advance``, ``update``); one
    task. ``every`` <= 0: a line per update and no heartbeat. The thread sleeps between lines, so it takes no
    CPU from timed calls (`replay bench`). When the work ends, a run that printed lines prints its last count too."""

    def __init__(self, label: str, every: float):
        import threading

        self.label, self.every = label, every
        self.total: float | None = None
        self.done, self.unit, self.doing = 0.0, "", ""
        self.shown, self.printed = 0.0, 0  # the count the last line showed; lines printed
        self.start = self.last = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "LineProgress":
        import threading
        import time

        self.start = self.last = time.monotonic()
        if self.every > 0:
            self._thread = threading.Thread(target=self._beat, name="replay-progress", daemon=True)
            try:
                self._thread.start()
            except BaseException:  # an interrupt as it starts: __exit__ will not run, so stop it here
                self._stop.set()
                raise
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        import time

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if kind is None and self.printed and self.done != self.shown:  # the last count, after earlier lines
            self.doing = ""
            self._print(time.monotonic())
        return None

    def _beat(self) -> None:
        import time

        while True:
            with self._lock:
                wait = self.last + self.every - time.monotonic()
            if self._stop.wait(max(wait, 0.01)):
                return
            with self._lock:
                now = time.monotonic()
                if now - self.last >= self.every:
                    self._print(now)

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> int:
        self.unit, self.total = description, total
        return 0

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def describe(self, doing: str) -> None:
        """What the command is doing now ("loading the impls", "timing step 3"): the end of the next lines."""
        with self._lock:
            self.doing = doing

    def update(self, task: int, *, advance: float = 0, total: float | None = None, **fields: Any) -> None:
        import time

        with self._lock:
            self.done += advance
            if total is not None:
                self.total = total
            if fields.get("info"):  # the bar's info column (`replay record`: "5 recorded") ends the line instead
                self.doing = str(fields["info"])
            now = time.monotonic()
            if now - self.last >= self.every:
                self._print(now)

    def _print(self, now: float) -> None:
        """One line (the lock held)."""
        self.last, self.shown, self.printed = now, self.done, self.printed + 1
        elapsed = now - self.start
        parts = []
        if self.total:
            parts.append(f"{self.done:g}/{self.total:g} {self.unit}")
            if 0 < self.done < self.total:
                parts.append(f"ETA {elapsed * (self.total - self.done) / self.done:.0f} s")
        elif self.unit:
            parts.append(f"{self.done:g} {self.unit}")
        parts.append(f"{elapsed:.0f} s elapsed")
        line = f"{self.label}: " + ", ".join(parts) + (f"; {self.doing}" if self.doing else "")
        err.print(line, soft_wrap=True)


def progress_every() -> float:
    """Seconds between progress lines off a terminal: ``REPLAY_PROGRESS_EVERY`` (default 10)."""
    import os

    try:
        return float(os.environ.get("REPLAY_PROGRESS_EVERY", PROGRESS_EVERY_S))
    except ValueError:
        return PROGRESS_EVERY_S


def progress(label: str, total: int | None = None, *, info: bool = False, quiet: bool = False) -> Any:
    """Progress on stderr: a transient bar on a terminal, shown for ``total`` >= 2 steps (None: the caller
    sets the total), else a :class:`LineProgress`; nothing with ``quiet``. ``info``: one more column
    showing the task's ``info`` field."""
    if not err.is_terminal and not quiet:
        return LineProgress(label, progress_every())
    extra = [TextColumn("{task.fields[info]}", markup=False)] if info else []
    return Progress(TextColumn(printable(label).replace("{", "{{").replace("}", "}}"), markup=False), BarColumn(), MofNCompleteColumn(), *extra, TimeElapsedColumn(),
                    TimeRemainingColumn(), console=err, transient=True,
                    disable=quiet or (total is not None and total < 2))


@contextmanager
def waiting(what: str, *, quiet: bool = False) -> Iterator[None]:
    """One long operation with no steps to count (a model load, a download): a spinner on a terminal; off a
    terminal the line "WHAT ..." at once, "WHAT: N s elapsed" at least every ``REPLAY_PROGRESS_EVERY``
    seconds while it runs, and "WHAT: done in N s" at the end; nothing with ``quiet``."""
    import time

    if quiet:
        yield
        return
    if err.is_terminal:
        with err.status(what):
            yield
        return
    err.print(f"{what} ...", soft_wrap=True)
    start = time.monotonic()
    with LineProgress(what, progress_every()) if progress_every() > 0 else nullcontext():
        yield
    err.print(f"{what}: done in {time.monotonic() - start:.0f} s", soft_wrap=True)


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


def NumStepsOpt(default: int, what: str) -> Any:  # noqa: N802 (an option type, as JsonOpt)
    """``--num-steps N``: how many steps a command makes (``record``, ``synth``). ``--steps`` SELECTS steps
    (``run``, ``verify``: ``0,2``, ``1-3``); a count is ``--num-steps`` (README.md, "Tour")."""
    return Annotated[Optional[int], typer.Option("--num-steps", min=1, metavar="N",
                                                 help=f"{what} (default {default}).")]


LegacyStepsOpt = Annotated[Optional[int], typer.Option(
    "--steps", min=1, metavar="N", hidden=True, help="Deprecated spelling of --num-steps (warns).")]


def num_steps(count: Optional[int], legacy: Optional[int], default: int, command: str) -> int:
    """The value of ``--num-steps`` (``count``), else of the deprecated ``--steps N`` (``legacy``: one warning
    line on stderr, the value used), else ``default``; both given is a usage error (exit 2)."""
    if legacy is None:
        return default if count is None else count
    if count is not None:
        raise UsageError(f"{command}: give --num-steps only (--steps is its deprecated spelling)")
    err.print(f"replay: warning: {command} --steps {legacy} is deprecated: write --num-steps {legacy} (a count of "
              "steps to make; --steps selects steps in run and verify)")
    return legacy


def check_output_file(path: Optional[str], inputs: Any, option: str) -> None:
    """Refuse an output file PATH of ``option`` before any work (UsageError, exit 2, not an internal error
    after the work that also hides the verdict): a FIFO, socket or device, an existing folder, a folder that
    does not exist or cannot be written, or a path that is or lies inside one of ``inputs`` (what the command
    reads: writing there would destroy it) by place or identity (limits.check_output). The check's claim (the
    folder's descriptor, the inputs) is what :func:`write_json_file` and the --csv / --png writers use."""
    import os

    from replay_harness.limits import check_output, check_special_output

    if path is None:
        return
    check_special_output(path, option)  # a FIFO, socket or device: never opened, never replaced
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a folder; name a file")
    check_output(path, list(inputs or ()), option, folder=False)


CHECKED_JSON_FILE: list[str] = []  # the --json-file path that passed its check: main writes an error there


def check_json_file(path: Optional[str], inputs: Any = ()) -> None:
    """:func:`check_output_file` for ``--json-file``; ``inputs``: the recordings (or other files) read."""
    check_output_file(path, inputs, "--json-file")
    if path is not None:
        CHECKED_JSON_FILE[:] = [path]


def write_json_file(path: Optional[str], text: str) -> None:
    """Write ``text`` (a JSON document, as printed) to ``path`` atomically through the claim its check made
    (replay_harness.guarded: a temp file in the folder checked, then a rename; a reader never sees half a
    document); nothing when ``path`` is None. An input or a FIFO, socket or device that appeared at ``path``
    since its check is left alone (UsageError, exit 2); a failed write (disk full, the folder gone) is
    EnvironmentProblem (exit 3) naming ``--json-file PATH``."""
    from replay_harness.guarded import write_file

    if path is None:
        return
    write_file(path, text if text.endswith("\n") else text + "\n", "--json-file", "the JSON document")


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
