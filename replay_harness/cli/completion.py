"""`replay completion SHELL`: print the shell completion script (typer's, for the `replay` program).

The script calls `replay` back with ``_REPLAY_COMPLETE`` set; :func:`replay_harness.cli.main` then registers
typer's completion classes (:func:`enable_completion`) so click answers with the candidates. Nothing of it
runs on an ordinary command, so startup stays fast.
"""
from __future__ import annotations

import os

import typer

from replay_harness.errors import UsageError

SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
COMPLETE_VAR = "_REPLAY_COMPLETE"  # the variable click's completion protocol reads (_<PROG>_COMPLETE)


def completion(shell: str = typer.Argument(..., metavar="SHELL",
                                           help="bash, zsh, fish or powershell.")) -> None:
    """Print the shell completion script for `replay` (commands, options, file names).

    Install it once: bash: add `eval "$(replay completion bash)"` to ~/.bashrc; zsh: the same line with zsh
    in ~/.zshrc (after compinit); fish: `replay completion fish > ~/.config/fish/completions/replay.fish`;
    PowerShell: add `replay completion powershell | Out-String | Invoke-Expression` to $PROFILE.

    Example: replay completion bash >> ~/.bash_completion
    """
    from typer.completion import get_completion_script

    if shell not in SHELLS:
        raise UsageError(f"completion: unknown shell {shell!r}; one of {', '.join(SHELLS)}")
    print(get_completion_script(prog_name="replay", complete_var=COMPLETE_VAR, shell=shell))


def enable_completion() -> None:
    """When a completion script called `replay` back (``_REPLAY_COMPLETE`` set), register typer's shell
    classes so click's completion answers (typer registers them only with ``add_completion=True``, which
    would also add its shell-detecting ``--install-completion`` options)."""
    if os.environ.get(COMPLETE_VAR):
        from typer.completion import completion_init

        completion_init()
