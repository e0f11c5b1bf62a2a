"""Fuzz attacks on the write path (docs/HARDENING.md, "The fuzz classes of the write path"): bind mounts and
read-only folders, a recording folder or an output swapped for a symlink while a command checks and writes,
SIGINT / SIGTERM mid-write, the pytest plugin's ``--replay-update``, ``record --model`` paths that are no
model, and ``synth`` onto a read-only old recording. Each is ``kind(case, rec, rng)`` like the others and
sets ``case.argv``; the paths a command may change go in ``case.exclude``; ``case.post`` adds what must hold
after a command (a refusal is exit 2; an output is absent, the old one or complete: tools/fuzz/racing.py).

Mounts are made with mount(2) (``MS_BIND``, a read-only remount) when the worker may (root with
CAP_SYS_ADMIN), only of folders inside the case onto folders inside the case, and unmounted by
``tree.remove``; elsewhere the mount variants become read-only folder variants.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

from tools.fuzz.files import REPO
from tools.fuzz.racing import complete_or_absent, old_digest

MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
_LIBC = ctypes.CDLL(None, use_errno=True)
_CAN_MOUNT: list[bool] = []
FOUNDING = REPO / "fixtures" / "synthetic-founding"  # greedy-only answers it differently: an update is written
SYNTH = ["--batch", "2", "--vocab", "1000", "--num-steps", "1"]


def bind(src: Path, dst: Path, readonly: bool = False) -> bool:
    """Bind-mount the folder (or file) ``src`` at ``dst``; read-only when asked. False when not allowed."""
    if _LIBC.mount(os.fsencode(src), os.fsencode(dst), None, MS_BIND, None) != 0:
        return False
    if readonly and _LIBC.mount(None, os.fsencode(dst), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None) != 0:
        _LIBC.umount2(os.fsencode(dst), 2)
        return False
    return True


def can_mount() -> bool:
    """Whether this process may bind-mount (tried once, on a scratch folder)."""
    if not _CAN_MOUNT:
        with tempfile.TemporaryDirectory() as d:
            a, b = Path(d, "a"), Path(d, "b")
            a.mkdir(), b.mkdir()
            ok = bind(a, b)
            if ok:
                _LIBC.umount2(os.fsencode(b), 2)
            _CAN_MOUNT.append(ok)
    return _CAN_MOUNT[0]


def _copy(rec: Path, dst: Path) -> Path:
    shutil.copytree(rec, dst, symlinks=True)
    return dst


def _read_only(folder: Path, how: str) -> None:
    """Take write permission away: the folder alone, its steps/ alone, or everything under it."""
    targets = {"top": [folder], "steps": [folder / "steps"],
               "all": [p for p in [folder, *folder.rglob("*")]]}[how]
    for p in sorted(targets, key=lambda p: -len(p.parts)):
        os.chmod(p, os.stat(p).st_mode & ~0o222)


def _refusal(case, res) -> list[str]:
    """A refusal is exit 2; after a SIGINT of the child cases (exit 130, or a start-up interrupt) the exit code is
    worker.problems' to judge."""
    return [] if res["code"] == 2 or res.get("sigint") else ["expected-exit-2"]


def _synth(src, out, *extra) -> list[str]:
    return ["synth", str(src), "--out", str(out), *SYNTH, *extra]


def _outputs_to(rec: Path, folder: Path, rng) -> list[list[str]]:
    """Command lines writing a file into ``folder``: --json-file of inspect / validate / run, --csv / --png of bench."""
    name = rng.choice(["manifest.json", "new.json", "steps"])
    return [["inspect", str(rec), "--json-file", str(folder / name)],
            ["validate", str(rec), "--json", "--json-file", str(folder / "v.json")],
            ["run", str(rec), "--impl", "reference", "--device", "cpu", "--quiet", "--json-file", str(folder / name)],
            ["bench", str(rec), "--impl", "reference", "--device", "cpu", "--repeats", "1", "--warmup", "0",
             rng.choice(["--csv", "--png"]), str(folder / rng.choice(["x.csv", "x.png"]))]]


# ----------------------------------------------------------------------------- mounts and read-only folders
MOUNTS = ("bind-inside-old", "bind-steps-inside-old", "outputs-through-bind", "empty-mount-point",
          "read-only-mount", "input-through-bind", "file-bind")


def mounts(case, rec, rng):
    """Bind mounts inside the case: the input bind-mounted inside an old recording that `synth --overwrite`
    would replace (or its steps/), outputs (--json-file, --csv, --png) into the input reached through a bind
    mount, an empty mount point or a read-only bind mount as `synth --out`, the input named through a bind
    mount with the output at its own path, a file bind-mounted over a --json-file target. All are refusals:
    exit 2, nothing in the case changes. Without mount(2): :func:`readonly_output`."""
    if not can_mount():
        case.notes.append("(no mount(2): read-only folders instead)")
        return readonly_output(case, rec, rng)
    root, how = case.root, rng.choice(MOUNTS)
    if how in ("bind-inside-old", "bind-steps-inside-old"):
        old = _copy(rec, root / "out")
        mnt = old / rng.choice(["mnt", "steps/mnt"])
        mnt.mkdir()
        bind(rec / "steps" if how == "bind-steps-inside-old" else rec, mnt)
        case.argv = [_synth(rec, old, "--overwrite")]
    elif how == "outputs-through-bind":
        mnt = root / "mnt"
        mnt.mkdir()
        bind(rec, mnt)
        case.argv = _outputs_to(rec, mnt / rng.choice(["", "steps"]), rng)
    elif how == "empty-mount-point":
        (root / "empty").mkdir()
        mnt = root / "mp"
        mnt.mkdir()
        bind(root / "empty", mnt)
        case.argv = [_synth(rec, mnt), _synth(rec, mnt, "--overwrite")]
    elif how == "read-only-mount":
        (root / "outer").mkdir()
        mnt = root / "ro"
        mnt.mkdir()
        bind(root / "outer", mnt, readonly=True)
        case.argv = [_synth(rec, mnt / "new"), *_outputs_to(rec, mnt, rng)[:3]]
    elif how == "input-through-bind":
        alias = root / "alias"
        alias.mkdir()
        bind(rec, alias)
        case.argv = [_synth(alias, rec, "--overwrite"), ["inspect", str(alias), "--json-file",
                                                         str(rec / "manifest.json")]]
    else:
        target = root / "target.json"
        target.write_text("{}")
        bind(rec / "manifest.json", target)
        case.argv = [["inspect", str(rec), "--json-file", str(target)],
                     ["validate", str(rec), "--json", "--json-file", str(target)]]
    case.post = _refusal
    case.notes.append(how)


READ_ONLY = ("old-recording", "parent", "output-file", "deep-parent")


def readonly_output(case, rec, rng):
    """Read-only places (modes enforced: the worker has dropped CAP_DAC_OVERRIDE): `synth --out OLD
    --overwrite` onto an old recording whose folder, steps/ or every entry is read-only (issue 67: exit 2
    after the swap, the old recording left in a staging folder); an output whose folder is read-only
    (`synth --out`, --json-file, --csv, --png); a read-only existing --json-file. All exit 2 before any
    work, nothing changes."""
    root, how = case.root, rng.choice(READ_ONLY)
    if how == "old-recording":
        old = _copy(rec, root / "out")
        which = rng.choice(["top", "steps", "all"])
        case.argv = [_synth(rec, old, "--overwrite")]
        _read_only(old, which)
        case.notes.append(f"{how} ({which})")
    elif how in ("parent", "deep-parent"):
        folder = root / "locked"
        folder.mkdir()
        out = folder / ("new" if how == "parent" else "a/b/new")
        case.argv = [_synth(rec, out), *_outputs_to(rec, folder, rng)]
        case.chmods.append((folder, 0o555))
        case.notes.append(how)
    else:
        target = root / "old.json"
        target.write_text("{}")
        case.argv = [["inspect", str(rec), "--json-file", str(target)]]
        case.chmods.append((target, 0o444))
        case.notes.append(how)
    case.post = _refusal


# ----------------------------------------------------------------------------- symlink races
RACES = ("synth-overwrite", "synth-new", "output-folder", "input-folder", "input-steps")


def symlink_race(case, rec, rng):
    """A name exchanged again and again (atomically) between a real folder and a symlink while the command
    runs: `synth --out OUT [--overwrite]` with OUT a decoy old recording / empty folder and a link to the input
    (or its steps/); the folder of --json-file / --csv a real folder and a link into the input's steps/; the
    input recording itself (or its steps/) and a link to another recording, /dev/zero, a FIFO or nothing. The
    input (and, for the output races, everything but the two names) must not change."""
    root, how = case.root, rng.choice(RACES)
    if how in ("synth-overwrite", "synth-new", "output-folder"):
        out = root / ("out" if how != "output-folder" else "d")
        if how == "synth-overwrite":
            _copy(rec, out)
        else:
            out.mkdir()
        (root / "spare").symlink_to(rng.choice(["rec", "rec/steps"]) if how != "output-folder" else "rec/steps")
        if how == "output-folder":
            case.argv = _outputs_to(rec, out, rng)
        else:
            case.argv = [_synth(rec, out, *(["--overwrite"] if how == "synth-overwrite" else []))]
        case.race = (root, out.name, "spare")
        case.exclude += [f"./{out.name}", "./spare"]
    else:
        other = _copy(rec, root / "rec2")
        target = rng.choice(["../rec2", "/dev/zero", "nowhere", "fifo"])
        if target == "fifo":
            os.mkfifo(root / "fifo")
            target = str(root / "fifo")
        if how == "input-folder":
            (root / "spare").symlink_to(target.replace("../", "") if target.startswith("../") else target)
            case.race = (root, "rec", "spare")
        else:
            (rec / "spare").symlink_to(f"../{other.name}/steps" if target == "../rec2" else target)
            case.race = (rec, "steps", "spare")
        case.argv = [["validate", str(rec)], ["inspect", str(rec), "--json"],
                     ["run", str(rec), "--impl", "reference", "--device", "cpu", "--quiet"],
                     ["audit", str(rec), "--quiet"]]
        rng.shuffle(case.argv)
    case.notes.append(how)


# ----------------------------------------------------------------------------- signals mid-write
def signal_write(case, rec, rng):
    """SIGINT or SIGTERM while a command writes (at a random moment, or 0-50 ms after its staging folder or
    temp file appears): `synth --out NEW`, `synth --out OLD --overwrite`, `run --json-file`, `validate --json
    --json-file`, `bench --csv`. Exit 130 (0 when it finished first); the input unchanged; no staging folder
    or temp file left; every output absent, the old one or complete (racing.complete_or_absent)."""
    root = case.root
    sig = rng.choice([signal.SIGINT, signal.SIGTERM])
    case.signal = (sig, rng.choice(["tmp", "tmp", "timer"]))
    size = ["--batch", str(rng.choice([8, 32, 64])), "--vocab", str(rng.choice([2000, 20000])), "--num-steps",
            str(rng.choice([2, 4]))]
    outs = root / "outs"  # excluded from the snapshot (its listing changes); the post-check looks inside
    outs.mkdir()
    old = _copy(rec, outs / "old")
    outputs = [("recording", outs / "new", None), ("recording", old, old_digest(old)),
               ("json", outs / "r.json", None), ("json", outs / "v.json", None), ("csv", outs / "b.csv", None)]
    argv = [["synth", str(rec), "--out", str(outs / "new"), *size],
            ["synth", str(rec), "--out", str(old), "--overwrite", *size],
            ["run", str(rec), "--impl", "reference", "--device", "cpu", "--quiet", "--json",
             "--json-file", str(outs / "r.json")],
            ["validate", str(rec), "--json", "--json-file", str(outs / "v.json")],
            ["bench", str(rec), "--impl", "reference", "--device", "cpu", "--repeats", "1", "--warmup", "0",
             "--csv", str(outs / "b.csv")]]
    rng.shuffle(argv)
    case.argv = argv
    case.exclude.append("./outs")
    case.allowed = frozenset({130})
    case.post = lambda case, res: complete_or_absent(outputs, res)
    case.notes.append(f"{signal.Signals(sig).name} on {case.signal[1]}")


# ----------------------------------------------------------------------------- the plugin's --replay-update
UPDATES = ("absent", "old-recording", "link-to-input", "link-to-decoy", "file", "fifo", "socket", "read-only-old",
           "not-recording", "bind-inside", "mount-point", "race", "dot")


def plugin_update(case, rec, rng):
    """The pytest plugin's ``--replay-update`` (impl greedy-only) of the recording (a copy of synthetic-founding,
    whose answer differs: REC.updated is written) with REC.updated absent, an old recording (also read-only),
    a symlink to the input or to a decoy, a file, a FIFO, a socket, a folder that is no recording, an old
    recording with the input bind-mounted inside, an empty mount point, a real folder and a link to the input
    exchanged while it runs, or ``replay_check(".")`` from inside the recording. Only REC.updated may change,
    and only where replacing it is right; a refusal fails the test with one line (code 2 here)."""
    root, how = case.root, rng.choice(UPDATES)
    shutil.rmtree(rec)
    _copy(FOUNDING, rec)
    upd = root / "rec.updated"
    refused = how not in ("absent", "old-recording", "dot", "race")
    if how in ("old-recording", "read-only-old", "bind-inside", "race"):
        _copy(rec, upd)
    if how == "link-to-input":
        upd.symlink_to("rec")
    elif how == "link-to-decoy":
        (root / "decoy").mkdir()
        upd.symlink_to("decoy")
    elif how == "file":
        upd.write_text("not a recording")
    elif how == "fifo":
        os.mkfifo(upd)
    elif how == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(upd))
        s.close()
    elif how == "read-only-old":
        _read_only(upd, rng.choice(["top", "steps", "all"]))
    elif how == "not-recording":
        upd.mkdir()
        (upd / "notes.txt").write_text("keep me")
    elif how in ("bind-inside", "mount-point"):
        if not can_mount():
            how, refused = "absent", False
        elif how == "bind-inside":
            (upd / "mnt").mkdir()
            bind(rec, upd / "mnt")
        else:
            (root / "empty").mkdir()
            upd.mkdir()
            bind(root / "empty", upd)
    elif how == "race":
        (root / "spare").symlink_to("rec")
        case.race = (root, "rec.updated", "spare")
        case.exclude.append("./spare")
    if not refused:
        case.exclude.append("./rec.updated")
    path, case.cwd = (".", str(rec)) if how == "dot" else (str(rec), None)
    case.argv = [["@plugin-update", path]]
    if refused:
        case.post = _refusal
    case.notes.append(how)


# ----------------------------------------------------------------------------- record --model
MODELS = ("missing", "junk-file", "no-config", "junk-config", "config-unreadable", "folder-unreadable",
          "config-fifo", "config-dev-zero", "config-folder", "config-link-loop", "bad-gguf", "gguf-magic",
          "config-no-weights", "config-oversize", "hub-id-not-cached", "empty", "control-chars")


def record_model(case, rec, rng):
    """`record --model M --steps 1 --out OUT` with M missing, a junk file, a folder without config.json, a
    config.json that is junk, unreadable, a FIFO, /dev/zero, a folder or a symlink loop, a folder that is
    unreadable, a .gguf with a bad or a bare magic, a config without weights, a 20 MiB config of spaces, a Hub
    id not in the cache (HF_HUB_OFFLINE=1: no network; exit 3, the environment), an empty name, control
    characters. Exit 2, one line, nothing written (OUT is never made)."""
    root, how = case.root, rng.choice(MODELS)
    m = root / "model"
    if how == "junk-file":
        m.write_bytes(rng.randbytes(rng.randrange(1, 4096)))
    elif how in ("bad-gguf", "gguf-magic"):
        m = root / "model.gguf"
        m.write_bytes((b"GGUF\x03\x00\x00\x00" if how == "gguf-magic" else b"NOPE") + rng.randbytes(rng.randrange(64)))
    elif how not in ("missing", "hub-id-not-cached", "empty", "control-chars"):
        m.mkdir()
        config = m / "config.json"
        if how == "junk-config":
            config.write_bytes(rng.choice([b"{bad", b"[]", b"null", b"\xff\xfe", b"{" * 50000]))
        elif how in ("config-unreadable", "folder-unreadable"):
            config.write_text('{"model_type": "llama"}')
            case.chmods.append((config if how == "config-unreadable" else m, 0))
        elif how == "config-fifo":
            os.mkfifo(config)
        elif how == "config-dev-zero":
            config.symlink_to("/dev/zero")
        elif how == "config-folder":
            config.mkdir()
        elif how == "config-link-loop":
            config.symlink_to("config.json")
        elif how == "config-no-weights":
            config.write_text(rng.choice(['{"model_type": "llama"}', '{"model_type": "gpt2", "vocab_size": 10}',
                                          '{"model_type": "no-such-type"}', '{}']))
        elif how == "config-oversize":
            config.write_text("{" + " " * (20 << 20) + "}")
    name = {"hub-id-not-cached": "no-such-org/no-such-model", "empty": "",
            "control-chars": str(root / "m\x1b[2J\nreplay: error: FORGED")}.get(how, str(m))
    out = str(root / "out")
    case.argv = [["record", "--model", name, "--steps", "1", "--num-drafts", "0", "--batch", "1", "--out", out],
                 ["record", "--model", name, "--steps", "1", "--out", out, "--overwrite", "--json"]]
    case.env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "REPLAY_CACHE": str(root / "cache")})
    if how == "hub-id-not-cached":  # exit 3: the environment (no network, no cache) lacks it, by the book
        case.allowed = frozenset({3})
    else:
        case.post = _refusal
    case.notes.append(how)
