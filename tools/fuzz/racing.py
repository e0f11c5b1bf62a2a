"""What the write-path fuzz kinds (tools/fuzz/write_kinds.py) do while a command runs, and check after it:

* :class:`Flipper`: two entries of the case folder exchanged again and again (``renameat2(RENAME_EXCHANGE)``,
  atomic: at every moment each name is one of the two) on a thread, while the command checks and writes; put
  back as they were after it (an even number of exchanges), so the snapshot compares the same names;
* :class:`Interrupt`: SIGINT or SIGTERM to this process mid-command, at a random moment or right after a
  ``.tmp`` entry (a staging folder, a temp file) appears in the case folder; its handler is replay's own
  (``cli.interrupt``: KeyboardInterrupt) while the command runs and drops a signal that lands after;
* :func:`plugin_update`: the pytest plugin's ``--replay-update`` of one recording (``_check`` with a config
  that asks for it), its outcome in the shape of ``worker.run_inprocess``'s;
* :func:`complete_or_absent`: an output after an interrupted or finished command is absent, the old one
  unchanged, or complete (a recording whose manifest says complete with all its steps; JSON that parses; a
  CSV ending in a newline): never a partial output that looks complete.
"""
from __future__ import annotations

import ctypes
import io
import json
import os
import random
import signal
import threading
import time
import traceback
from pathlib import Path

RENAME_EXCHANGE = 2
_LIBC = ctypes.CDLL(None, use_errno=True)


def exchange(dir_fd: int, a: str, b: str) -> bool:
    """Swap the entries ``a`` and ``b`` of the folder ``dir_fd`` atomically; False when either is gone."""
    return _LIBC.renameat2(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), RENAME_EXCHANGE) == 0


class Flipper:
    """``with Flipper(root, a, b, rng):`` exchanges root/a and root/b every 0-2 ms on a thread until the block
    ends, then once more when the count is odd (both names back where they were, if both still exist)."""

    def __init__(self, root: Path, a: str, b: str, rng: random.Random):
        self.root, self.pair, self.rng = root, (a, b), rng
        self.count, self._stop = 0, threading.Event()

    def __enter__(self) -> "Flipper":
        self.fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        pause = self.rng.choice([0.0, 0.0005, 0.002])
        while not self._stop.is_set():
            if not exchange(self.fd, *self.pair):
                return  # one of them was removed or renamed (a swap moved it): the race is over
            self.count += 1
            time.sleep(pause)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(10)
        if self.count % 2 and exchange(self.fd, *self.pair):
            self.count += 1
        os.close(self.fd)


class Interrupt:
    """``with Interrupt(signum, trigger, root, rng):`` around ``cli.main()`` in this process: ``signum`` sent
    ``rng``-drawn seconds in (``trigger`` "timer": 0-0.8 s) or 0-50 ms after a ``.tmp`` entry shows in
    ``root`` ("tmp"; polled every 2 ms); ``sent`` says whether it was. The handler is replay's own
    (``cli.interrupt``), only inside the block; afterwards cli's once-a-process state (the "interrupted" line printed, the
    signalled flag) is cleared for the next command."""

    def __init__(self, signum: int, trigger: str, root: Path, rng: random.Random):
        self.signum, self.trigger, self.root = signum, trigger, root
        self.delay = rng.uniform(0.0, 0.8) if trigger == "timer" else rng.uniform(0.0, 0.05)
        self.sent, self.active, self._stop = False, False, threading.Event()

    def _handler(self, signum: int, frame: object) -> None:
        if self.active:
            from replay_harness import cli

            cli.interrupt(signum, frame)  # replay's own handler (KeyboardInterrupt; a finalizer's frame: later)

    def _watch(self) -> None:
        end = time.monotonic() + 60
        if self.trigger == "tmp":
            while not self._stop.is_set() and time.monotonic() < end:
                if staging_seen(self.root):
                    break
                time.sleep(0.002)
            else:
                return
        if not self._stop.wait(self.delay) and self.active:
            self.sent = True
            os.kill(os.getpid(), self.signum)

    def __enter__(self) -> "Interrupt":
        self.previous = signal.signal(self.signum, self._handler)
        self.active = True
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.active = False
        self._stop.set()
        self.thread.join(10)
        signal.signal(self.signum, self.previous)
        from replay_harness import cli

        for flag in ("_REPORTED", "_SIGNALLED"):
            event = getattr(cli, flag, None)
            if event is not None:
                event.clear()


def staging_seen(root: Path) -> bool:
    """Is there a ``.tmp`` entry (a staging folder, a temp file) in ``root`` or in its ``outs/``?"""
    for folder in (root, root / "outs"):
        try:
            if any(n.endswith(".tmp") for n in os.listdir(folder)):
                return True
        except OSError:
            pass
    return False


# ----------------------------------------------------------------------------- the plugin's update
class _Config:
    """What the plugin's ``_check`` reads of pytest's config, asking for ``--replay-update``."""

    def __init__(self, root: Path):
        self.rootpath, self.inipath, self.stash = root, None, {}
        self.options = {"--replay-update": True, "--replay-impl": "greedy-only", "--replay-device": "cpu",
                        "--replay-impl-arg": None, "--replay-routes-only": False}

    def getoption(self, name: str):
        return self.options.get(name)

    def getini(self, name: str):
        return ""


def plugin_update(path: str, root: Path, cwd: str | None) -> dict:
    """``replay_check(path)`` under ``--replay-update`` (impl greedy-only, CPU) from ``cwd``: code 0 (written or
    unchanged), 2 (the test failed with the plugin's one line: stderr holds it), -1 (anything else escaped: a
    traceback); wall time and RSS as ``worker.run_inprocess`` gives them."""
    import warnings

    from _pytest.outcomes import Failed

    from replay_harness.testing.pytest_plugin import _check
    from tools.fuzz.worker import _reset_peak, _status_kb

    saved = os.getcwd()
    _reset_peak()
    rss0, t0 = _status_kb("VmRSS"), time.monotonic()
    code, err = 0, io.StringIO()
    try:
        os.chdir(cwd or saved)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _check(_Config(root), path)
    except Failed as e:
        code = 2
        err.write(f"replay: error: {e.msg}\n")
    except BaseException:
        code = -1
        err.write(traceback.format_exc())
    finally:
        os.chdir(saved)
    return {"code": code, "stdout": "", "stderr": err.getvalue(), "wall_s": time.monotonic() - t0,
            "rss_before_kb": rss0, "rss_peak_kb": _status_kb("VmHWM")}


# ----------------------------------------------------------------------------- outputs after the command
def _recording_state(folder: Path) -> str:
    """"complete", "absent" or what is wrong with the recording at ``folder``."""
    if not os.path.lexists(folder):
        return "absent"
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        return f"no readable manifest ({type(e).__name__})"
    steps = [n for n in os.listdir(folder / "steps") if n.startswith("step-") and n.endswith(".safetensors")]
    if manifest.get("complete") is not True or len(steps) != manifest.get("num_steps"):
        return f"partial (complete {manifest.get('complete')!r}, {len(steps)} of {manifest.get('num_steps')} steps)"
    return "complete"


def complete_or_absent(outputs: list[tuple[str, Path, str | None]], res: dict) -> list[str]:
    """Problems of those ``outputs`` (kind "recording", "json" or "csv"; path; the digest of the old one, which
    may stay) that the command ``res["argv"]`` names, after it ended with ``res["code"]``: "partial-output" when
    one is neither absent, the old one nor complete; "missing-output" when exit 0 left none; "leftover-tmp" when a
    staging folder or temp file is left beside them."""
    from tools.fuzz.tree import snapshot

    found, code = [], res["code"]
    named = [o for o in outputs if str(o[1]) in res.get("argv", [])]
    if named and any(n.endswith(".tmp") for n in os.listdir(named[0][1].parent)):
        found.append("leftover-tmp")
    for kind, path, old in named:
        if old is not None and os.path.lexists(path) and str(sorted(snapshot(path).items())) == old:
            state = "old"
        elif kind == "recording":
            state = _recording_state(path)
        elif not os.path.lexists(path):
            state = "absent"
        else:
            try:
                text = path.read_text()
                state = "complete" if (json.loads(text) is not None if kind == "json" else text.endswith("\n")) \
                    else "empty"
            except (OSError, ValueError) as e:
                state = f"unreadable ({type(e).__name__})"
        if state not in ("absent", "old", "complete"):
            found.append("partial-output")
        elif code == 0 and state == "absent":
            found.append("missing-output")
    return found


def old_digest(path: Path) -> str | None:
    """What :func:`complete_or_absent` compares an old output with (None: there is none)."""
    from tools.fuzz.tree import snapshot

    return str(sorted(snapshot(path).items())) if os.path.lexists(path) else None
