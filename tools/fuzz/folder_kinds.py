"""Fuzz corruptions of a recording's folder: a broken or oversize manifest, FIFOs and symlinks (to
/dev/zero, to a FIFO, loops, dangling) in place of files, files and folders without permission, temp-file
leftovers, duplicate / missing / stray step names. Each is ``kind(case, rec, rng)``, like step_kinds."""
from __future__ import annotations

import json
import os
import shutil

from tools.fuzz.files import FUZZ_LIMITS, GiB, MiB, limit_of, manifest_of, steps_of


def bad_manifest(case, rec, rng):
    m = rec / "manifest.json"
    manifest = manifest_of(rec)
    how = rng.choice(["bytes", "truncate", "not-object", "deep", "bigint", "field", "field", "empty", "utf8"])
    if how == "bytes":
        m.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))))
    elif how == "truncate":
        text = m.read_bytes()
        m.write_bytes(text[:rng.randrange(len(text))])
    elif how == "not-object":
        m.write_text(rng.choice(["[]", "null", "3", '"x"', "[{}]"]))
    elif how == "deep":
        m.write_text("[" * 50000 + "]" * 50000 if rng.random() < 0.5 else '{"a":' * 30000 + "1" + "}" * 30000)
    elif how == "bigint":
        m.write_text('{"schema": "replay.recording/1", "vocab_size": ' + "9" * 6000 + "}")
    elif how == "empty":
        m.write_bytes(b"")
    elif how == "utf8":
        m.write_bytes(b'{"schema": "\xff\xfe"}')
    else:
        key = rng.choice(["vocab_size", "schema", "num_steps", "complete", "digest", "rng_contract", "synthetic",
                          "source", "schema_minor"])
        manifest[key] = rng.choice([None, -1, 0, 2 ** 40, 2 ** 70, 1.5, True, "8", [], {}, "replay.recording/2",
                                    "zzz", float("nan")])
        m.write_text(json.dumps(manifest))
        how = f"{key}={manifest[key]!r}"
    case.notes.append(f"manifest: {how}")


def oversize_manifest(case, rec, rng):
    if rng.random() < 0.3:
        case.limits = {k: None for k in FUZZ_LIMITS}
    cap = limit_of(case, "REPLAY_MAX_MANIFEST_BYTES")
    m = rec / "manifest.json"
    text = m.read_bytes()
    size = cap + rng.choice([1, 4096, GiB])
    if size <= 2 * MiB:  # real bytes: valid JSON padded with spaces
        m.write_bytes(text[:-2] + b" " * (size - len(text)) + text[-2:])
    else:  # sparse
        with open(m, "r+b") as f:
            f.truncate(size)
    case.notes.append(f"manifest: {size} bytes, limit {cap}")


def fifo_in_place(case, rec, rng):
    target = rng.choice([rec / "manifest.json", rng.choice(steps_of(rec)), rec / "steps" / "step-000099.safetensors"])
    if target.exists():
        target.unlink()
    os.mkfifo(target)
    case.notes.append(f"{target.relative_to(rec)} is a FIFO")


def symlinks(case, rec, rng):
    fifo = case.root / "a-fifo"
    target = rng.choice([rec / "manifest.json", rng.choice(steps_of(rec))])
    how = rng.choice(["/dev/zero", "/dev/null", "/dev/urandom", "fifo", "loop", "self", "dangling", "dir",
                      "steps-dir-loop", "folder-loop"])
    if how in ("steps-dir-loop", "folder-loop"):
        where = rec / "steps" / "again" if how == "steps-dir-loop" else case.root / "loop"
        os.symlink(".." if how == "steps-dir-loop" else ".", where)
        case.paths = [str(case.root)] if how == "folder-loop" else case.paths
        case.notes.append(f"{where.relative_to(case.root)} -> loop")
        return
    target.unlink()
    if how == "fifo":
        os.mkfifo(fifo)
        os.symlink(fifo, target)
    elif how == "loop":
        os.symlink(case.root / "b-link", target)
        os.symlink(target, case.root / "b-link")
    elif how == "self":
        os.symlink(target.name, target)
    elif how == "dangling":
        os.symlink(case.root / "nowhere", target)
    elif how == "dir":
        os.symlink(rec / "steps", target)
    else:
        os.symlink(how, target)
    case.notes.append(f"{target.relative_to(rec)} -> {how}")


def unreadable(case, rec, rng):
    target = rng.choice([rec / "manifest.json", rng.choice(steps_of(rec)), rec / "steps", rec / "steps", rec])
    mode = rng.choice([0o000, 0o200] if target.is_file() else [0o000, 0o300, 0o400, 0o100])
    case.chmods.append((target, mode))
    case.notes.append(f"{target.relative_to(case.root)} chmod {mode:03o}")


def tmp_leftovers(case, rec, rng):
    for _ in range(rng.randrange(1, 4)):
        folder = rng.choice([rec, rec / "steps"])
        base = "manifest.json" if folder == rec else rng.choice(steps_of(rec)).name
        tmp = folder / f".{base}.{rng.randrange(16 ** 8):08x}.tmp"
        how = rng.choice(["partial", "empty", "fifo", "link-zero", "dir", "unreadable"])
        if how == "fifo":
            os.mkfifo(tmp)
        elif how == "link-zero":
            os.symlink("/dev/zero", tmp)
        elif how == "dir":
            tmp.mkdir()
        else:
            data = (rec / "manifest.json" if folder == rec else folder / base).read_bytes()
            tmp.write_bytes(b"" if how == "empty" else data[:rng.randrange(len(data) + 1)])
            if how == "unreadable":
                case.chmods.append((tmp, 0))
        case.notes.append(f"{tmp.relative_to(rec)} ({how})")


def step_indices(case, rec, rng):
    files = steps_of(rec)
    how = rng.choice(["duplicate", "missing", "gap", "extra", "renamed", "no-steps-dir", "empty-steps-dir", "stray",
                      "huge-index", "empty-file", "newline-name"])
    if how == "duplicate":
        f = rng.choice(files)
        shutil.copy(f, f.with_name(f.name.replace("step-", "step-0")))
    elif how == "missing" and len(files) > 1:
        files[rng.randrange(len(files) - 1)].unlink()
    elif how == "gap":
        files[-1].rename(files[-1].with_name(f"step-{len(files) + 3:06d}.safetensors"))
    elif how == "extra":
        shutil.copy(files[0], files[0].with_name(f"step-{len(files):06d}.safetensors"))
    elif how == "renamed":
        files[0].rename(files[0].with_name(rng.choice(["step-0.safetensors", "step-000000.st", "STEP-000000.safetensors"])))
    elif how == "no-steps-dir":
        shutil.rmtree(rec / "steps")
    elif how == "empty-steps-dir":
        for f in files:
            f.unlink()
    elif how == "stray":
        (rec / "steps" / rng.choice(["README", "step-abc.safetensors", "step-000000.safetensors~"])).write_text("x")
    elif how == "huge-index":
        files[-1].rename(files[-1].with_name("step-99999999999999999999999.safetensors"))
    elif how == "empty-file":
        rng.choice(files).write_bytes(b"")
    elif how == "newline-name":  # not a step: STEP_RE ends in \Z, not "$"
        shutil.copy(files[-1], files[-1].with_name(f"step-{len(files):06d}.safetensors\n"))
    case.notes.append(f"steps: {how}")


def valid(case, rec, rng):
    case.notes.append("unmodified (control)")
