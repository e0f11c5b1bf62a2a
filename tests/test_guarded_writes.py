"""Every write and delete goes through replay_harness/guarded/ (docs/HARDENING.md, "Writes and deletes"; issue
67 item 1), and the data-loss cases of issue 67 (a bind mount, a symlink race, the plugin's update, --json-file
and --csv reaching an input, `record --out`) leave every input as it was.

The first test reads the source of replay_harness/ with ``ast`` (never imports it): outside guarded/, a call
that writes or deletes a file (``open(..., "w"/"a"/"x"/"+")``, ``os.open`` with a write flag, ``os.fdopen``
for writing, ``unlink``/``remove``/``rmdir``, ``shutil.rmtree``, ``rename``/``replace``, ``write_text``/
``write_bytes``, ``savefig``, ``mkstemp``/``mkdtemp``, ``save_pretrained``, ``torch.save``, shutil's copies
and moves, links, ``truncate``) fails the test unless :data:`ALLOWED` names it with the reason it touches no
user path.

Mount cases need root and a working ``mount --bind`` (skipped otherwise); each unmounts in a ``finally``.
Recordings used: copies of the committed fixture synthetic-mixed (SYNTHETIC).
"""
from __future__ import annotations

import ast
import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import main_inproc

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "replay_harness"
GUARDED = PACKAGE / "guarded"
MIXED = REPO / "fixtures" / "synthetic-mixed"
SYNTH = ("--batch", "4", "--vocab", "1000", "--num-steps", "1")

# ----------------------------------------------------------------------------- the AST scan
WRITE_CALLS = {"unlink", "remove", "rmdir", "removedirs", "rmtree", "rename", "renames", "write_text", "write_bytes",
               "savefig", "mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory", "save_pretrained",
               "symlink", "symlink_to", "link", "hardlink_to", "link_to", "truncate", "copyfile", "copy", "copy2",
               "copytree", "move"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}
RECEIVERS_NOT_FILES = {"copy": {"dict", "list", "set"}}  # x.copy() of a container is no file copy

# (module, enclosing function, call) -> why it touches no path the user named
ALLOWED = {
    ("replay_harness/impls/external.py", "ExecSampler.__init__", "mkdtemp"):
        "the exec: temp folder (replay-exec-* under $TMPDIR), made by replay for the program's step files",
    ("replay_harness/impls/external.py", "ExecSampler.__init__", "rmtree"):
        "the exec: temp folder replay just made, when the program failed to start",
    ("replay_harness/impls/external_io.py", "write_fresh", "os.open"):
        "a step file in the exec: temp folder, O_CREAT|O_EXCL|O_NOFOLLOW relative to its descriptor",
    ("replay_harness/impls/external_io.py", "write_fresh", "replace"):
        "renames within the exec: temp folder, relative to its descriptor",
    ("replay_harness/impls/external_io.py", "write_fresh", "unlink"):
        "a temp file in the exec: temp folder, relative to its descriptor",
    ("replay_harness/impls/external_io.py", "shutdown", "unlink"):
        "the exec: temp folder's own path when the program put a symlink there (the link goes)",
    ("replay_harness/impls/external_io.py", "shutdown", "rmtree"):
        "the exec: temp folder replay made (rmtree does not follow a symlink inside)",
    ("replay_harness/impls/external_adapter.py", "private_stdout", "os.fdopen"):
        "the protocol stream on a dup of file descriptor 1 (stdout), no path",
    ("replay_harness/cli/__init__.py", "_open_standard_fds", "os.open"):
        "os.devnull in place of a closed standard descriptor",
    ("replay_harness/compare/distributed.py", "_native_stderr_quiet", "os.open"):
        "os.devnull, to quiet a native library's stderr",
    ("replay_harness/record/model.py", "load_model", "open"): "os.devnull, to quiet transformers' progress bars",
    ("replay_harness/record/weights.py", "_convert_to_cache", "open"): "os.devnull, to quiet transformers",
    ("replay_harness/record/weights.py", "_convert_to_cache", "mkdtemp"):
        "replay's own model cache (cache_root()): a conversion folder beside its final name",
    ("replay_harness/record/weights.py", "_convert_to_cache", "save_pretrained"):
        "into the conversion folder replay just made in its own model cache",
    ("replay_harness/record/weights.py", "_convert_to_cache", "write_text"):
        "replay-source.json in the conversion folder replay just made in its own model cache",
    ("replay_harness/record/weights.py", "_convert_to_cache", "rename"):
        "the finished conversion folder onto its name in replay's own model cache",
    ("replay_harness/record/weights.py", "_convert_to_cache", "rmtree"):
        "the conversion folder replay made in its own model cache, when the conversion failed",
    ("replay_harness/bench/report.py", "_plot_rows", "savefig"):
        "into an io.BytesIO; the bytes are written by guarded.write_file (the claim of --png's check)",
    ("replay_harness/cli/command.py", "HelpFormatter.write_text", "write_text"):
        "click's HelpFormatter.write_text: help text to the formatter's buffer, no file",
}


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _dotted(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return _name(func) or ""


def _mode(call: ast.Call, position: int) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _writes_mode(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(c in node.value for c in "wax+")
    return True  # a mode computed at run time: cannot tell, so it counts


def write_calls(source: str) -> list[tuple[str, str, int]]:
    """(enclosing function's qualified name, call, line) of every write or delete call in ``source``."""
    found: list[tuple[str, str, int]] = []

    class Visitor(ast.NodeVisitor):
        def __init__(self) -> None:
            self.stack: list[str] = []

        def _scope(self, node: ast.AST) -> None:
            self.stack.append(node.name)  # type: ignore[attr-defined]
            self.generic_visit(node)
            self.stack.pop()

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

        def visit_Call(self, node: ast.Call) -> None:
            name, dotted = _name(node.func), _dotted(node.func)
            hit = None
            if dotted in ("open", "io.open", "builtins.open") and _writes_mode(_mode(node, 1)):
                hit = "open"
            elif dotted == "os.fdopen" and _writes_mode(_mode(node, 1) or ast.Constant("r")):
                hit = "os.fdopen"
            elif dotted == "os.open" and len(node.args) > 1 and (
                    {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)} & WRITE_FLAGS):
                hit = "os.open"
            elif isinstance(node.func, ast.Attribute) and name == "open" and dotted != "os.open" and \
                    isinstance(_mode(node, 0), ast.Constant) and _writes_mode(_mode(node, 0)):
                hit = "Path.open"  # p.open("w"); a non-literal first argument is a path (Folder.at-like), not a mode
            elif dotted in ("torch.save", "np.save", "numpy.save"):
                hit = dotted
            elif name == "replace" and (dotted == "os.replace" or (
                    isinstance(node.func, ast.Attribute) and len(node.args) == 1 and not node.keywords
                    and not isinstance(node.func.value, ast.Constant))):  # Path.replace(target); not str.replace
                hit = "replace"
            elif name in WRITE_CALLS:
                receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
                container = isinstance(receiver, (ast.Dict, ast.List, ast.Set)) or (
                    name == "copy" and not node.args)
                if not container:
                    hit = name
            if hit:
                found.append((".".join(self.stack), hit, node.lineno))
            self.generic_visit(node)

    Visitor().visit(ast.parse(source))
    return found


SCAN_CASES = [
    ("open(p, 'w')", ["open"]), ("open(p, mode='a')", ["open"]), ("open(p)", []), ("open(p, 'rb')", []),
    ("open(p, m)", ["open"]), ("Path(p).open('x')", ["Path.open"]), ("f.open()", []), ("Folder.open(p)", []),
    ("os.open(p, os.O_WRONLY | os.O_CREAT)", ["os.open"]), ("os.open(p, os.O_RDONLY)", []),
    ("os.fdopen(fd, 'w')", ["os.fdopen"]), ("os.fdopen(fd)", []),
    ("os.unlink(p)", ["unlink"]), ("p.unlink(missing_ok=True)", ["unlink"]), ("shutil.rmtree(p)", ["rmtree"]),
    ("os.rename(a, b)", ["rename"]), ("os.replace(a, b)", ["replace"]), ("p.replace(q)", ["replace"]),
    ("s.replace('a', 'b')", []), ("dataclasses.replace(x, a=1)", []), ("'x'.replace(y)", []), ("replace(x)", []),
    ("p.write_text('x')", ["write_text"]), ("p.write_bytes(b)", ["write_bytes"]), ("fig.savefig(p)", ["savefig"]),
    ("tempfile.mkdtemp()", ["mkdtemp"]), ("torch.save(x, p)", ["torch.save"]), ("d.copy()", []),
    ("shutil.copy(a, b)", ["copy"]),
]


def test_every_write_and_delete_goes_through_guarded():
    """Outside replay_harness/guarded/, no module writes or deletes a file but those ALLOWED names. First the scan
    itself: each kind of call it must find, and look-alikes it must not (str.replace, dict.copy, X.open(path))."""
    for code, expected in SCAN_CASES:
        assert [call for _, call, _ in write_calls(code)] == expected, code
    bad, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if GUARDED in path.parents:
            continue
        rel = path.relative_to(REPO).as_posix()
        for scope, call, line in write_calls(path.read_text()):
            key = (rel, scope, call)
            if key in ALLOWED:
                used.add(key)
            else:
                bad.append(f"{rel}:{line} {scope or '<module>'}: {call}")
    assert not bad, "write or delete outside replay_harness/guarded/ (route it there, or allow it with a reason):\n" \
                    + "\n".join(bad)
    assert not set(ALLOWED) - used, f"ALLOWED entries that match nothing: {sorted(set(ALLOWED) - used)}"


# ----------------------------------------------------------------------------- helpers
def _tree(folder: Path) -> dict:
    """Every entry under ``folder`` (symlinks not followed) -> its bytes, link target or "dir"."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else ("dir" if p.is_dir() else p.read_bytes())
    return out


def _one_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if not ln.startswith("replay: warning:")]
    assert len(lines) == 1 and lines[0].startswith("replay: error: "), err
    return lines[0]


def _copy(dst: Path) -> Path:
    shutil.copytree(MIXED, dst)
    return dst


def _mounts_under(folder: Path) -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split(" ")[4].replace("\\040", " ")
            if point.startswith(str(folder) + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


@contextlib.contextmanager
def bind(source: Path, target: Path):
    """``mount --bind source target`` for the block (skips the test where that is not possible). On the way
    out every mount under the test's folder (``source``'s parent) is unmounted, also one that a broken
    replay moved elsewhere with the folder holding it."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("bind mounts need root")
    done = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot bind-mount here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield target
    finally:
        for point in _mounts_under(source.parent):
            subprocess.run(["umount", "-l", point], check=True)


def _exchange(a: Path, b: Path) -> None:
    """Swap two entries atomically (renameat2 RENAME_EXCHANGE): what an attacker flipping a path does."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2):
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(a))


# ----------------------------------------------------------------------------- synth --overwrite
def test_synth_overwrite_never_deletes_a_folder_bind_mounted_inside_the_old_recording(tmp_path):
    """Issue 67: a same-file-system bind mount inside the old recording has its st_dev; the mount table shows it.
    Before: --overwrite deleted the mounted folder's files."""
    src, out, victim = _copy(tmp_path / "src"), _copy(tmp_path / "out"), tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    (out / "sub").mkdir()
    with bind(victim, out / "sub"):
        before_src, before_out = _tree(src), _tree(out)
        code, _, err = main_inproc("synth", str(src), "--out", str(out), "--overwrite", *SYNTH)
        assert code == 2 and "mount point" in _one_error(err), err
        assert _tree(out) == before_out and _tree(src) == before_src
    assert (victim / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src", "victim"]


def test_synth_to_an_empty_mount_point_is_refused_before_any_work(tmp_path):
    """The new recording is renamed into place, which a mount point does not allow: exit 2 at once (was exit 3
    after all the work)."""
    src, empty, mnt = _copy(tmp_path / "src"), tmp_path / "empty", tmp_path / "mnt"
    empty.mkdir()
    mnt.mkdir()
    with bind(empty, mnt):
        code, _, err = main_inproc("synth", str(src), "--out", str(mnt), *SYNTH)
        assert code == 2 and "is a mount point" in _one_error(err), err
        assert list(mnt.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "mnt", "src"]


def test_synth_out_dot_replaces_the_empty_working_folder(tmp_path):
    """`synth --out .` from an empty folder: the folder `.` names is the output (resolved once, its parent held
    open), replaced by the swap; exit 0. Before: exit 3 after all the work."""
    here = tmp_path / "here"
    here.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's replay, whatever the working folder
    done = subprocess.run([sys.executable, "-m", "replay_harness.cli", "synth", str(MIXED), "--out", ".", *SYNTH],
                          cwd=here, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stderr == "", (done.stdout, done.stderr)
    assert sorted(p.name for p in here.iterdir()) == ["manifest.json", "steps"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]


def test_out_flipped_to_the_input_after_the_check_leaves_the_input(tmp_path, monkeypatch):
    """The symlink race of issue 67 made certain: --out is a decoy recording when checked and a symlink to the
    input when the new recording is swapped in. The swap works relative to the parent's descriptor and never
    follows the link: the link is what gets deleted. Before: the input was swapped out and deleted."""
    import replay_harness.recording.swap as swap

    src, out = _copy(tmp_path / "src"), _copy(tmp_path / "out")
    flip = tmp_path / "flip"
    flip.symlink_to(src)
    before = _tree(src)
    real = swap.swap_into_place

    def flipped_then_swapped(*args, **kwargs):
        _exchange(out, flip)  # now out -> src, and flip holds the decoy
        return real(*args, **kwargs)

    monkeypatch.setattr(swap, "swap_into_place", flipped_then_swapped)
    code, _, err = main_inproc("synth", str(src), "--out", str(out), "--overwrite", *SYNTH)
    assert code in (0, 2), err
    assert _tree(src) == before, err


FLIPPER = textwrap.dedent("""
    import ctypes, ctypes.util, os, sys
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    a, b, stop, target = sys.argv[1:5]
    n = 0
    while not os.path.exists(stop):
        libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2)
        n += 1
        if not (os.path.islink(a) or os.path.islink(b)):  # a swap deleted the link (its right): a new one
            try:
                os.rename(b, f"{b}.{n}")
                os.symlink(target, b)
            except OSError:
                pass
    print(n)
""")


def test_synth_overwrite_under_a_symlink_flipping_between_a_decoy_and_the_input(tmp_path):
    """Issue 67's race as it was found: another process flips --out between a decoy recording and a symlink to
    the input as fast as it can while `synth --overwrite` runs, again and again (bounded: 100 runs or 30 s; a
    link that a run deleted is made again). The input is never touched; each run replaces the decoy or
    refuses (exit 0 or 2, one line), and leaves no staging folder."""
    src, decoy = _copy(tmp_path / "src"), _copy(tmp_path / "out")
    alt, stop = tmp_path / "alt", tmp_path / "stop"
    alt.symlink_to(src)
    before = _tree(src)
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(decoy), str(alt), str(stop), str(src)],
                               stdout=subprocess.PIPE, text=True)
    codes = []
    try:
        deadline = time.monotonic() + 30
        while len(codes) < 100 and time.monotonic() < deadline:
            code, out, err = main_inproc("synth", str(src), "--out", str(decoy), "--overwrite", *SYNTH)
            codes.append(code)
            assert code in (0, 2), (code, out, err)
            if code == 2:
                _one_error(err)
            assert _tree(src) == before, f"the input changed on run {len(codes)} (exit {code}): {err}"
    finally:
        stop.touch()
        flips = flipper.communicate(timeout=30)[0].strip()
    assert int(flips or 0) > 0 and {0, 2} <= set(codes), (codes, flips)  # the race ran: both outcomes seen
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
    assert leftovers == [], leftovers


# ----------------------------------------------------------------------------- the plugin's --replay-update
FOUNDING = REPO / "fixtures" / "synthetic-founding"  # greedy-only answers it differently: an update is written


def _update(rec_path: str, root: Path):
    from types import SimpleNamespace

    from replay_harness.api import load
    from replay_harness.testing.pytest_plugin import _update as update

    return update(SimpleNamespace(rootpath=root), load(rec_path), "greedy-only", "cpu", None)


def test_replay_update_through_a_symlinked_updated_folder_leaves_the_input(tmp_path):
    """REC.updated is a symlink to REC: the update is refused (exit 2's line in the test), REC untouched.
    Before: the writer deleted REC's steps through the link and wrote its own there."""
    from replay_harness.errors import ReplayError

    rec = tmp_path / "rec"
    shutil.copytree(FOUNDING, rec)
    (tmp_path / "rec.updated").symlink_to("rec")
    before = _tree(rec)
    with pytest.raises(ReplayError, match="is the input"):
        _update(str(rec), tmp_path)
    assert _tree(rec) == before and (tmp_path / "rec.updated").is_symlink()


def test_replay_update_of_dot_writes_beside_the_recording_not_inside(tmp_path, monkeypatch):
    """``replay_check(".")`` from inside the recording: REC.updated beside REC. Before: ``..updated/`` inside it."""
    rec = tmp_path / "rec"
    shutil.copytree(FOUNDING, rec)
    before = _tree(rec)
    monkeypatch.chdir(rec)
    what, out = _update(".", tmp_path)
    assert what == "wrote" and Path(out).resolve() == tmp_path / "rec.updated"
    assert _tree(rec) == before
    assert (tmp_path / "rec.updated" / "manifest.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec", "rec.updated"]


# ----------------------------------------------------------------------------- --json-file, --csv, --png
def _linked_steps(tmp_path: Path) -> tuple[Path, Path]:
    """(a recording whose steps/ is a symlink to another folder's steps/, that other folder)."""
    real = _copy(tmp_path / "real")
    linked = tmp_path / "linked"
    linked.mkdir()
    shutil.copy(real / "manifest.json", linked / "manifest.json")
    (linked / "steps").symlink_to(real / "steps")
    return linked, real


def _output_args(option: str, rec: Path, target: Path) -> list[str]:
    if option == "--json-file":
        return ["inspect", str(rec), "--json-file", str(target)]
    return ["bench", str(rec), "--impl", "reference", option, str(target)]


OPTIONS = ["--json-file", "--csv", "--png"]


def _targets(option: str, folder: Path, existing: str) -> list[Path]:
    """Outputs into ``folder``: over its file ``existing`` and a new file (--png: a new .png only; matplotlib
    refuses to draw into another format's name)."""
    if option == "--png":
        return [folder / "new.png"]
    return [folder / existing, folder / "new.out"]


@pytest.mark.parametrize("option", OPTIONS)
def test_an_output_over_an_input_step_reached_through_a_symlinked_steps_folder_is_refused(tmp_path, option):
    """The input reads real/steps/ through its symlinked steps/: an output there is the input's step. Before:
    written over it (only the input's own path was compared)."""
    linked, real = _linked_steps(tmp_path)
    before = _tree(real)
    for target in _targets(option, real / "steps", "step-000000.safetensors"):
        code, _, err = main_inproc(*_output_args(option, linked, target))
        assert code == 2 and "the input" in _one_error(err), (target, err)
        assert _tree(real) == before


@pytest.mark.parametrize("option", OPTIONS)
def test_an_output_into_an_input_reached_through_a_bind_mount_is_refused(tmp_path, option):
    """The input bind-mounted at MNT: MNT/manifest.json is the input's manifest, by the mount table. And the
    input named through the mount point, the output under its own path. Before: written over the manifest."""
    rec, mnt = _copy(tmp_path / "rec"), tmp_path / "mnt"
    mnt.mkdir()
    with bind(rec, mnt):
        before = _tree(rec)
        for source, target in [*((rec, t) for t in _targets(option, mnt, "manifest.json")),
                               *((mnt, t) for t in _targets(option, rec, "manifest.json"))]:
            code, _, err = main_inproc(*_output_args(option, source, target))
            assert code == 2 and "the input" in _one_error(err), (source, target, err)
            assert _tree(rec) == before


def test_json_file_is_written_relative_to_the_folder_checked(tmp_path, monkeypatch):
    """The folder of --json-file is swapped for a symlink to the input after the check: the document goes into
    the folder that was checked (its descriptor), never into the input."""
    import replay_harness.cli.inspect as inspect_cli

    rec, out = _copy(tmp_path / "rec"), tmp_path / "out"
    out.mkdir()
    before = _tree(rec)
    real_check = inspect_cli.check_json_file

    def check_then_swap(path, inputs=()):
        real_check(path, inputs)
        out.rename(tmp_path / "moved")
        out.symlink_to(rec)

    monkeypatch.setattr(inspect_cli, "check_json_file", check_then_swap)
    code, _, err = main_inproc("inspect", str(rec), "--json-file", str(out / "doc.json"))
    assert _tree(rec) == before, err
    assert code == 0 and json.loads((tmp_path / "moved" / "doc.json").read_text())["recordings"], (code, err)


# ----------------------------------------------------------------------------- record --out, RecordingWriter
def test_record_out_bind_mounted_on_the_model_folder_is_refused(tmp_path):
    """`record --out OUT` where OUT is the model folder bind-mounted: refused before the model loads. Before:
    the recording was written into the model's folder."""
    from replay_harness.errors import UsageError
    from replay_harness.record.pipeline import RecordOptions, _out_folder

    model, out = tmp_path / "model", tmp_path / "out"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out.mkdir()
    with bind(model, out):
        for path, overwrite in ((out / "rec", False), (out, True), (out, False)):  # a new folder in it; it
            with pytest.raises(UsageError, match="the input"):
                _out_folder(RecordOptions(out_path=str(path), overwrite=overwrite, model=str(model)))
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]


def test_overwrite_in_place_unlinks_a_symlinked_steps_folder_and_keeps_what_it_names(tmp_path):
    """`record --out OUT --overwrite` (the Recorder's writer) where OUT/steps/ links to another recording's
    steps: the link goes, the other recording stays. Before: its step files were deleted through the link."""
    from replay_harness.impls.reference import ReferenceSampler
    from replay_harness.recording.recorder import Recorder
    from replay_harness.recording.store import Recording

    other, out = _copy(tmp_path / "other"), _copy(tmp_path / "out")
    shutil.rmtree(out / "steps")
    (out / "steps").symlink_to(other / "steps")
    before = _tree(other)
    source = Recording(MIXED)
    step = source[0].step
    with Recorder(out, vocab_size=source.vocab_size, overwrite=True) as rec:
        rec.record_sample(step, ReferenceSampler().sample(step))
    assert _tree(other) == before
    assert not (out / "steps").is_symlink() and len(Recording(out)) == 1


def test_overwrite_of_a_symlinked_output_folder_is_refused(tmp_path):
    """Under --overwrite the output folder itself may not be a symlink (what it names is someone else's)."""
    from replay_harness.errors import UsageError
    from replay_harness.recording.store import RecordingWriter

    other = _copy(tmp_path / "other")
    (tmp_path / "link").symlink_to(other)
    before = _tree(other)
    with pytest.raises(UsageError, match="is a symlink"):
        RecordingWriter(tmp_path / "link", vocab_size=8, overwrite=True)
    assert _tree(other) == before


def test_clean_tmp_never_deletes_through_a_symlinked_steps_folder(tmp_path):
    """`validate --clean-tmp` deletes the temp files of the recording's own folders only."""
    linked, real = _linked_steps(tmp_path)
    theirs = real / "steps" / ".step-000009.safetensors.abcd.tmp"
    theirs.write_bytes(b"someone else's")
    mine = linked / ".manifest.json.abcd.tmp"
    mine.write_bytes(b"half a manifest")
    code, out, err = main_inproc("validate", str(linked), "--clean-tmp")
    assert code == 0, (out, err)
    assert not mine.exists() and f"removed {mine}" in out
    assert theirs.read_bytes() == b"someone else's" and "not deleted" in out
