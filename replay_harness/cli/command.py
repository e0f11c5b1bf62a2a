"""The class of every `replay` command: how its arguments show in --help, how its help wraps, and the one rule
of repeated options (a value-taking option given twice is a usage error, never its last value silently).

:class:`Command` is what ``app.command(cls=...)`` gets in :mod:`replay_harness.cli`, :class:`Group` the app's
own class; both wrap help text at spaces only (:class:`HelpFormatter`), so no option, impl name or example is
split at a hyphen, piped or not (tests/test_cli_output.py). Only the standard library and typer are imported.
"""
from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Any, Iterator

from typer.core import TyperArgument, TyperCommand, TyperGroup


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


# typer may vendor click (typer._click): the classes below derive from the ones typer's commands use
_CONTEXT = TyperCommand.context_class
_CLICK = _CONTEXT.formatter_class.__module__.rpartition(".")[0]  # "click" or "typer._click"


@contextmanager
def _whole_words() -> Iterator[None]:
    """click wraps help text with ``textwrap``, which breaks at hyphens (``--routes-`` / ``only``,
    ``greedy-at-`` / ``temperature``) and inside words longer than a line (a path, an example's command line).
    While the help is formatted, its wrapper breaks at spaces only: a long word overflows the line instead.
    click exposes no option for it: its wrapper class is swapped for a subclass (click left as it is when that
    class is not where this click keeps it)."""
    try:
        _textwrap = importlib.import_module(_CLICK + "._textwrap")
        base = _textwrap.TextWrapper
    except (ImportError, AttributeError):
        yield
        return

    class Whole(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.break_on_hyphens = self.break_long_words = False

    _textwrap.TextWrapper = Whole
    try:
        yield
    finally:
        _textwrap.TextWrapper = base


class HelpFormatter(_CONTEXT.formatter_class):  # type: ignore[misc, valid-type]
    """click's help formatter, wrapping at spaces only (:func:`_whole_words`): no option name, impl name or
    example is split at a hyphen, piped or not, and an "Example:" paragraph is not wrapped at all
    (tests/test_cli_output.py)."""

    def write_usage(self, *args: Any, **kwargs: Any) -> None:
        with _whole_words():
            super().write_usage(*args, **kwargs)

    def write_text(self, text: str) -> None:
        """The help text, wrapped at spaces; a paragraph that starts with "Example:" is kept as written (click's
        no-rewrap marker), so an example command is one line to copy, however wide."""
        paragraphs = ["\b\n" + p if p.lstrip().startswith("Example:") else p for p in text.split("\n\n")]
        with _whole_words():
            super().write_text("\n\n".join(paragraphs))

    def write_dl(self, *args: Any, **kwargs: Any) -> None:
        with _whole_words():
            super().write_dl(*args, **kwargs)


class Context(_CONTEXT):  # type: ignore[misc, valid-type]
    formatter_class = HelpFormatter


def _single_valued(param: Any) -> bool:
    """An option that takes one value: given twice, click would keep the last one silently."""
    return (param.param_type_name == "option" and not param.multiple and not param.is_flag and not param.count
            and param.nargs == 1)


class Command(TyperCommand):
    """Every `replay` command (``app.command(cls=Command)``): arguments that name a metavar are shown by it;
    help wrapped at spaces only (:class:`HelpFormatter`); an option that takes one value given twice is a
    usage error (exit 2) naming it, where click would keep the last value silently. The repeatable options
    say so in their help (``--temperature``, ``--impl-arg``, ``--rule``, ...)."""

    context_class = Context

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if type(param) is TyperArgument and param.metavar:
                param.__class__ = _MetavarArgument

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and not ctx.resilient_parsing:
            from collections import Counter

            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            for param, times in Counter(p for p in order if _single_valued(p)).items():
                if times > 1:
                    name = max(param.opts, key=len)
                    hint = (f"give one comma-separated list ({name} {param.metavar})" if "," in (param.metavar or "")
                            else "give it once")
                    raise importlib.import_module(_CLICK + ".exceptions").UsageError(f"{name} was given {times} times; it takes one value: {hint} (a "
                                           "repeated option is not silently narrowed to its last value)", ctx)
        return super().parse_args(ctx, args)


class Group(TyperGroup):
    """The `replay` app's group: its help wrapped at spaces only, as every command's."""

    context_class = Context
