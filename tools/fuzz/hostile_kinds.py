"""Fuzz attacks beyond a corrupted recording (docs/HARDENING.md, "Attack kinds"): names and strings holding
control characters, special files as output paths, `synth --out ... --overwrite` pointed back at its input
under another path, and `exec:` programs that flood, hang, ignore SIGTERM or leave children behind. Each is
``kind(case, rec, rng)`` like step_kinds and folder_kinds; the ones that need their own command lines set
``case.argv`` (run instead of the read commands), the paths a command may legitimately change go in
``case.exclude``, and an exec program appends its process group to ``case.pgid_file``.
"""
from __future__ import annotations

import os
import shutil
import socket
import stat
import sys

from tools.fuzz.files import manifest_of, steps_of, write_manifest

FORGED = "replay: error: FORGED"
NAMES = ["x\n" + FORGED + " \x1b[2J", "\x1b]0;pwned\x07rec", "a\rb\x08\x7f", "rec\u2028" + FORGED,
         "\u202eevil\u202c", "tab\there\x1b[31m", "\x9b31m" + "c1", "bad-\udcff-utf8"]
STRINGS = ["\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "ok\n" + FORGED, "\x00nul", "\r" + FORGED, "\u2028" + FORGED,
           "\x9b2J", "\u202e" + "gnp.exe"]
READ_COMMANDS = ("validate", "inspect", "run", "audit", "bench")


def _read_argv(command: str, paths: list[str]) -> list[str]:
    tail = {"run": ["--impl", "reference", "--device", "cpu", "--quiet"], "audit": ["--quiet"],
            "bench": ["--impl", "reference", "--device", "cpu", "--repeats", "1", "--warmup", "0"]}
    return [command, *paths, *tail.get(command, [])]


def control_chars(case, rec, rng):
    """The recording folder renamed with control characters (a forged "replay: error:" line, terminal
    escapes, a line separator, a bidi override, undecodable bytes) and manifest strings holding more; half
    the time a step cut short as well, so every command fails on it and names the path."""
    name = rng.choice(NAMES)
    try:
        target = rec.parent / name
        rec.rename(target)
    except (OSError, UnicodeEncodeError):
        target = rec.parent / os.fsdecode(b"bad-\xff-\x1b[2J")
        rec.rename(target)
    manifest = manifest_of(target)
    field = rng.choice(["rng_contract", "source", "schema", "model"])
    text = rng.choice(STRINGS)
    manifest[field] = {"engine": text} if field == "source" else text
    write_manifest(target, manifest)
    if rng.random() < 0.5 and steps_of(target):
        step = rng.choice(steps_of(target))
        step.write_bytes(step.read_bytes()[:rng.choice([0, 9, 100])])
    case.paths = [str(target)]
    case.notes.append(f"name {name!r}, {field} = {text!r}")


def _special(root, rng) -> str:
    """A FIFO, a Unix socket, a character device (root: c 1 3, the null device) or a symlink to one of them."""
    how = rng.choice(["fifo", "socket", "device", "link-fifo", "link-devnull"])
    path = root / f"out-{how}"
    if how in ("fifo", "link-fifo"):
        os.mkfifo(root / "the-fifo" if how == "link-fifo" else path)
    elif how == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif how == "device":
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:  # not root: a FIFO instead
            os.mkfifo(path)
    if how == "link-fifo":
        path.symlink_to("the-fifo")
    elif how == "link-devnull":
        path.symlink_to("/dev/null")
    return str(path)


def special_output(case, rec, rng):
    """--json-file (every read command), --csv or --png (bench) naming a FIFO, a socket, a device node or a
    symlink to one: exit 2, the node unchanged (the snapshot records each node's inode and device)."""
    node = _special(case.root, rng)
    argv = []
    for command in READ_COMMANDS:
        option = rng.choice(["--json-file", "--csv", "--png"]) if command == "bench" else "--json-file"
        argv.append(_read_argv(command, case.paths) + [option, node])
    rng.shuffle(argv)
    case.argv = argv
    case.notes.append(f"output {os.path.basename(node)}")


def synth_overwrite(case, rec, rng):
    """`synth SRC --out OUT --overwrite` where OUT reaches the input under another path (the input's steps/
    a symlink into OUT, a hard-linked step file in OUT, OUT a symlink to the input, OUT inside the input), is
    a special file, or is a folder that is no recording: exit 2 and nothing changes; or OUT is a plain old
    recording: exit 0, replaced (only OUT may change; a staging folder left behind counts as a change)."""
    root = case.root
    vocab = str(manifest_of(rec)["vocab_size"])
    how = rng.choice(["symlinked-steps", "hard-link", "alias", "inside", "special", "not-recording", "replace"])
    src, out = rec, root / "out"
    if how == "symlinked-steps":  # the layout: the input's steps/ points into --out
        src = root / "slrec"
        src.mkdir()
        shutil.copy(rec / "manifest.json", src / "manifest.json")
        (src / "steps").symlink_to("../rec/steps")
        out = rec
    elif how == "hard-link":
        shutil.copytree(rec, out)
        victim = rng.choice(steps_of(out))
        victim.unlink()
        os.link(rec / "steps" / victim.name, victim)
    elif how == "alias":
        out.symlink_to("rec")
    elif how == "inside":
        out = rec / rng.choice(["steps", "steps/new", "sub"])
    elif how == "special":
        out = root / os.path.basename(_special(root, rng))
    elif how == "not-recording":
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    else:
        shutil.copytree(rec, out)
        case.exclude.append("./out")
    case.argv = [["synth", str(src), "--out", str(out), "--overwrite", "--batch", "2", "--vocab", vocab,
                  "--steps", "1"]]
    case.notes.append(how)


# An exec program: handshake, then per BEHAVIOUR; its process group is appended to PGID first.
PROGRAM = """#!{python} -S
import os, signal, subprocess, sys, time
with open({pgid!r}, "a") as f:
    f.write(str(os.getpgrp()) + "\\n")
{body}
"""
HANDSHAKE = 'print(\'{"protocol": "replay.exec/1", "name": "hostile", "rng_contract": "none"}\', flush=True)\n'
CHILD = ('subprocess.Popen(["sleep", "1000"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, '
         'stderr=subprocess.DEVNULL)\n')
IGNORE_TERM = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
BEHAVIOURS = {
    "hang": HANDSHAKE + "sys.stdin.readline()\n" + CHILD + "time.sleep(1000)\n",
    "hang-ignoring-sigterm": IGNORE_TERM + HANDSHAKE + "sys.stdin.readline()\n" + CHILD + "time.sleep(1000)\n",
    "flood-stdout": HANDSHAKE + "sys.stdin.readline()\nb = b'x' * (1 << 20)\nwhile True:\n    os.write(1, b)\n",
    "flood-handshake": "b = b'{' * (1 << 20)\nwhile True:\n    os.write(1, b)\n",
    "flood-stderr": HANDSHAKE + CHILD + "b = b'e' * (1 << 20)\nwhile True:\n    os.write(2, b)\n",
    "flood-lines": HANDSHAKE + "sys.stdin.readline()\nb = b'[]\\n' * 100000\nwhile True:\n    os.write(1, b)\n",
    "forged-stderr": HANDSHAKE + "sys.stdin.readline()\nos.write(2, " + repr(b"\x1b[2J\n" + FORGED.encode()
                                                                           + b"\n\x1b]0;pwned\x07\n") + ")\nos._exit(5)\n",
    "forged-reply": HANDSHAKE + "sys.stdin.readline()\nos.write(1, " + repr(b"\x1b[2J" + FORGED.encode() + b"\r\x07\n")
                    + ")\ntime.sleep(1000)\n",
    "exit-leaving-child": HANDSHAKE + CHILD + "sys.stdin.readline()\nos._exit(0)\n",
    # never reads its stdin, which it fills itself first (as long step paths do): replay's write must time out
    "never-reads-stdin": "fd = os.open('/proc/self/fd/0', os.O_WRONLY | os.O_NONBLOCK)\ntry:\n    while True:\n"
                         "        os.write(fd, b'x' * 4096)\nexcept BlockingIOError:\n    pass\n" + HANDSHAKE + CHILD
                         + "time.sleep(1000)\n",
    "deep-reply": HANDSHAKE + "sys.stdin.readline()\nos.write(1, b'[' * 100000 + b']' * 100000 + b'\\n')\n"
                              "time.sleep(1000)\n",
    "deep-handshake": "os.write(1, b'[' * 20000 + b']' * 20000 + b'\\n')\ntime.sleep(1000)\n",
    "long-number-reply": HANDSHAKE + "sys.stdin.readline()\nos.write(1, b'{\"tokens\": [[' + b'7' * 5000 + b']]}\\n')\n"
                                     "time.sleep(1000)\n",
    "oversize-reply": HANDSHAKE + "sys.stdin.readline()\nos.write(1, b'{\"x\": [' + b'{},' * (1 << 21) + b'{}]}\\n')\n"
                                  "time.sleep(1000)\n",
    # valid replies (every request refused) with 200 notes of 4,000 characters each: what is kept is capped
    "many-notes": HANDSHAKE + """import json, struct
for line in sys.stdin:
    raw = open(line.strip(), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    a, b = hdr["cu_num_logits"]["data_offsets"]
    cu = struct.unpack("<%di" % hdr["cu_num_logits"]["shape"][0], raw[8 + n + a:8 + n + b])
    r, k = len(cu) - 1, max(cu[i + 1] - cu[i] - 1 for i in range(len(cu) - 1))
    reply = {"tokens": [[-1] * (k + 1)] * r, "counts": [0] * r, "routes": ["refused"] * r, "notes": ["n" * 4000] * 200}
    os.write(1, (json.dumps(reply) + "\\n").encode())
""",
}


def exec_hostile(case, rec, rng):
    """`run` or `bench` through `--impl exec:PROGRAM`, a program that hangs (with a child in the background,
    also ignoring SIGTERM), never reads its stdin, floods stdout (no newline; also before the handshake), stderr
    or short lines, writes control characters to stderr or its reply, sends a reply (or handshake) nested
    100,000 (20,000) deep, with a 5,000-digit integer, past its step's size, or with 800 KB of notes, or exits
    leaving a child: exit 3 (1 for the notes: every request refused; 130 after SIGINT), one escaped line,
    bounded RSS, and nothing of its process group left (``orphan`` otherwise)."""
    behaviour = rng.choice(sorted(BEHAVIOURS))
    prog = case.root / "program.py"
    case.pgid_file = case.root / "pgids"
    prog.write_text(PROGRAM.format(python=sys.executable, pgid=str(case.pgid_file), body=BEHAVIOURS[behaviour]))
    prog.chmod(0o755)
    case.pgid_file.write_text("")  # there before the first snapshot: only its bytes may change
    case.exclude.append("./pgids")
    timeout = rng.choice(["0.2", "0.5", "1"])
    impl = ["--impl", f"exec:{prog}", "--impl-timeout", timeout]
    run = ["run", *case.paths, *impl, "--device", "cpu", "--quiet"]
    bench = ["bench", *case.paths, *impl, "--device", "cpu", "--repeats", "1", "--warmup", "0"]
    case.argv = [run, bench] if rng.random() < 0.5 else [bench, run]
    case.notes.append(f"{behaviour}, --impl-timeout {timeout}")


def program_groups(case) -> list[int]:
    """The process groups the case's exec program ran in (read from ``case.pgid_file``)."""
    try:
        return [int(x) for x in case.pgid_file.read_text().split()]
    except (AttributeError, OSError, ValueError):
        return []


def alive_in(pgids: list[int]) -> list[int]:
    """PIDs of running (not zombie) processes in any of the process groups ``pgids``."""
    found = []
    if not pgids:
        return found
    want = set(pgids)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[2]) in want and fields[0] != "Z":
            found.append(int(entry))
    return found
