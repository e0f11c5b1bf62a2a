#!/usr/bin/env python
"""Run the README's install line in a fresh venv, then `pip check` (README, first block; docs/RECORDING.md, "Install").

    python tools/readme_pip_check.py                 # the line as written (needs download.pytorch.org)
    python tools/readme_pip_check.py --local-torch   # without --index-url: where pip finds the CPU wheel locally (CI)

Creates the venv in a temporary folder (or --venv DIR), runs every command of the README's first line in it
from the repository root (`python -m pip ...` with the venv's python, `replay ...` with the venv's script;
--no-run skips the `replay run` of the line), then `python -m pip check`. Prints each command, its time, and
pip check's output; exits with pip check's status (1 also when a command of the line fails). Takes a minute
or two (torch is the bulk); tests/test_dependencies.py is the cheap part of this check that CI runs.
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_install_line() -> str:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    if not block:
        sys.exit("README.md has no ```bash block")
    return block.group(1).strip().splitlines()[0]


def commands(line: str, local_torch: bool, run: bool) -> list[list[str]]:
    out = []
    for cmd in line.split("&&"):
        args = shlex.split(cmd)
        if local_torch and "--index-url" in args:
            i = args.index("--index-url")
            del args[i:i + 2]
        if args and args[0] == "replay" and not run:
            continue
        out.append(args)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--local-torch", action="store_true", help="drop --index-url (pip finds the CPU wheel locally)")
    ap.add_argument("--no-run", action="store_true", help="install only; skip the line's `replay run`")
    ap.add_argument("--venv", help="where to create the venv (default: a temporary folder, removed after)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="readme-pip-check-") as tmp:
        env_dir = Path(args.venv or Path(tmp) / "venv")
        venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        bindir = env_dir / "bin"
        line = readme_install_line()
        print(f"README install line: {line}", flush=True)
        for cmd in commands(line, args.local_torch, not args.no_run):
            exe = {"python": str(bindir / "python"), "replay": str(bindir / "replay")}.get(cmd[0], cmd[0])
            if cmd[0] == "replay":  # the shell expands fixtures/*/ in the README
                cmd = [x for a in cmd for x in ([f"{p.relative_to(ROOT)}/" for p in sorted(ROOT.glob(a.rstrip("/")))
                                                 if p.is_dir()] if "*" in a else [a])]
            t0 = time.time()
            print(f"$ {shlex.join(cmd)}", flush=True)
            p = subprocess.run([exe, *cmd[1:]], cwd=ROOT, capture_output=True, text=True)
            tail = (p.stdout + p.stderr).strip().splitlines()[-3:]
            print("\n".join(f"  {t}" for t in tail) + f"\n  -> exit {p.returncode} in {time.time() - t0:.0f} s",
                  flush=True)
            if p.returncode != 0:
                return 1
        print("$ python -m pip check", flush=True)
        p = subprocess.run([str(bindir / "python"), "-m", "pip", "check"], capture_output=True, text=True)
        print((p.stdout + p.stderr).strip() + f"\n  -> exit {p.returncode}", flush=True)
        return p.returncode


if __name__ == "__main__":
    sys.exit(main())
