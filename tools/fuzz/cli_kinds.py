"""Fuzz attacks on the command line around a valid recording (docs/HARDENING.md, "No internal error"): stdout
or stderr that fails (a full disk, a reader that left, a closed descriptor, an ASCII-only encoding), torchrun's
variables missing or malformed (and, in a child, a rendezvous nobody answers), `bench --plot-from` on special
files and hostile CSVs (formula-like names, numbers that are no numbers, oversize and sparse files), and
hostile `--steps` / `--trials` (40,000 indices, 5,000-digit numbers, Unicode digits). Each is
``kind(case, rec, rng)`` like the others; all set ``case.argv`` (their own command lines) and may set
``case.stdout`` / ``case.stderr`` (tools/fuzz/streams.py), ``case.env`` (every run), ``case.env_child``
(children only) and ``case.allowed`` (exit codes the kind makes legitimate).
"""
from __future__ import annotations

import os
import socket

from tools.fuzz.files import MiB

READ = {"validate": [], "inspect": [], "audit": ["--quiet"],
        "run": ["--impl", "reference", "--device", "cpu", "--quiet"],
        "bench": ["--impl", "reference", "--device", "cpu", "--repeats", "1", "--warmup", "0"]}


def _read(command: str, path: str, rng) -> list[str]:
    return [command, path, *READ[command], *(["--json"] if rng.random() < 0.4 else [])]


# ----------------------------------------------------------------------------- stdout and stderr
STREAMS = ("full", "epipe", "closed", "none", "ascii", "stderr-full", "stderr-epipe", "stderr-none")
OTHER = [["impls"], ["--help"], ["--version"], ["inspect", "no/such/recording", "--json"],
         ["run", "--help"], ["bench", "--plot-from", "no/such.csv", "--png", "/nonexistent-dir/x.png"], []]


def stdout_failure(case, rec, rng):
    """Every command printing into a stream that fails: ENOSPC (full), EPIPE (the reader left), a closed
    file (EBADF / ValueError), no stream at all (started with the descriptor closed), an ASCII-only encoding;
    or the same on stderr. Exit 3 is legitimate where stdout failed for real (the output is incomplete); a
    reader that left is never exit 1 by itself (tools/fuzz/streams.py: how each is made in and out of process)."""
    case.stdout = rng.choice(STREAMS)
    path = case.paths[0]
    argv = [_read(c, path, rng) for c in rng.sample(sorted(READ), 3)] + [rng.choice(OTHER), rng.choice(OTHER)]
    rng.shuffle(argv)
    case.argv = [a for a in argv if a] or [["impls"]]
    if case.stdout in ("full", "closed"):
        case.allowed = frozenset({3})
    case.notes.append(f"stream {case.stdout}")


# ----------------------------------------------------------------------------- torchrun's variables
def _value(rng, good: str) -> str | None:
    return rng.choice([None, good, good, "", " ", "abc", "-1", "0x10", "1e3", "²", "9" * 30, "9" * 5000,
                       str(1 << 40), " 1 ", "1_0", "+1", "\u0661", "1.0"])


def torchrun_env(case, rec, rng):
    """WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR / MASTER_PORT missing, malformed or out of
    range under the sharded commands (run, audit, bench, verify) and others; REPLAY_DIST_TIMEOUT 1 s. In
    this process the variables never let rank 0 start a store (no valid address and port together); a child
    gets a real rendezvous nobody answers (a closed port, an unresolvable host): exit 3, one line."""
    env = {"WORLD_SIZE": rng.choice(["2", "2", "3", "1", *(v for v in [_value(rng, "2")] if v is not None)]),
           "REPLAY_DIST_TIMEOUT": rng.choice(["1", "1", "0.5", "abc", "-1"])}
    for name, good in (("RANK", "1"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "2")):
        value = _value(rng, good)
        if value is not None:
            env[name] = value
    if rng.random() < 0.5:
        env["MASTER_ADDR"] = rng.choice(["nonexistent.invalid", "", "::1::", "x" * 300])
    elif rng.random() < 0.5:
        env["MASTER_PORT"] = rng.choice(["abc", "99999999", "-1", "", "0"])
    with socket.socket() as s:  # a port nobody listens on (for a child's rendezvous)
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    case.env_child = {"MASTER_ADDR": rng.choice(["127.0.0.1", "nonexistent.invalid"]), "MASTER_PORT": port}
    case.env = env
    path = case.paths[0]
    case.argv = [_read(c, path, rng) for c in ("run", "audit", "bench", "inspect")]
    case.argv.append(["verify", path, "--impl", "reference", "--device", "cpu", "--trials", "2", "--steps", "0",
                      "--quiet"])
    rng.shuffle(case.argv)
    case.allowed = frozenset({3})
    case.notes.append(" ".join(f"{k}={v[:12]!r}" for k, v in sorted(env.items())))


# ----------------------------------------------------------------------------- bench --plot-from
HEADER = ("case,impl,label,side,family,overrides,recording,data,step,group,route_mix,vocab,requests,rows,max_drafts,"
          "top_p,dtype,mode,timed,clock,round,l2_policy,verdict,error,statistic,value,unit")
ENV = ["gpu,cpu,", "torch,2.13.0,", "triton,3.9.0,", "cuda,,", "triton_interpret,1,", "date,2026-12-07,"]
STATS = [("calls", "1", "count"), ("median_us", "{m}", "us"), ("p20_us", "{lo}", "us"), ("p80_us", "{hi}", "us")]
NAMES = ["rec$\\frac{1}{$bad_^", "$$", "a$b$c", "\\", "$\\mathrm{x}$", "x\n" + "replay: error: FORGED", "\x1b[2J",
         "%s%n{}", "\u202eevil", "n" * 3000, "", "rec,with,commas", '"quoted"', os.fsdecode(b"bad-\xff")]
NUMBERS = ["1.5", "inf", "-inf", "nan", "-1", "0", "1e308", "1e-320", "9" * 5000, "0x10", "", "abc", "1_000"]


def _csv(rng, rows: int) -> str:
    """A long-layout bench CSV (bench/csvlog.py) with hostile names; in three files of ten, hostile numbers and
    empty names too (which make most of those files no bench CSV: exit 2)."""
    lines = [HEADER] + ["environment" + "," * 24 + e for e in ENV]
    hostile = rng.random() < 0.3
    names = NAMES if hostile else [n for n in NAMES if n]
    for i in range(rows):
        name = rng.choice(names) if rng.random() < 0.5 else f"rec{i % 7}"
        step = rng.choice([str(i), "-3", "9" * 5000, "x", "1.5"]) if hostile and rng.random() < 0.2 else str(i)
        m = rng.choice(NUMBERS) if hostile and rng.random() < 0.2 else f"{rng.uniform(1, 1e6):.3f}"
        ident = [f"{name}#{step}", "reference", rng.choice(["reference", "$x$", "a\\b"]), rng.choice("AB"), "", "",
                 name, "synthetic", step, rng.choice(["all", "greedy-sample", "$g$"]), rng.choice(["random-sample",
                 "$r$"]), "3001", "8", "8", "0", "", "float32", "", "sample", "cpu-wall", "", "l2", "conclusive", ""]
        quoted = ['"' + f.replace('"', '""') + '"' for f in ident]
        for stat, value, unit in STATS:
            v = value.format(m=m, lo=m, hi=m)
            lines.append(",".join(quoted + [stat, v, unit]))
    return "\n".join(lines) + "\n"


def plot_from(case, rec, rng):
    """`bench --plot-from X --png OUT`: X a FIFO, a character device (/dev/zero, /dev/null, /dev/urandom, a
    link to one), a socket, a folder, a sparse file past the cap (or a TiB), an empty or binary or non-UTF-8
    file, or a bench CSV whose names hold `$...$`, backslashes, control characters, 3,000 characters, and
    whose numbers are inf, NaN, 5,000 digits or no number: exit 0 or 2 at once, never a hang or a read
    without end (only out.png may change)."""
    root = case.root
    target = root / "bench.csv"
    how = rng.choice(["fifo", "dev", "link-dev", "socket", "folder", "sparse", "sparse-tib", "empty", "binary",
                      "not-utf8", "csv", "csv", "csv", "csv-big", "csv-nul", "csv-wide"])
    if how == "fifo":
        os.mkfifo(target)
    elif how == "dev":
        target = rng.choice(["/dev/zero", "/dev/null", "/dev/urandom", "/dev/full"])
    elif how == "link-dev":
        target.symlink_to(rng.choice(["/dev/zero", "/dev/null", "/dev/urandom", "/dev/full"]))
    elif how == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(target))
        s.close()
    elif how == "folder":
        target.mkdir()
    elif how in ("sparse", "sparse-tib"):
        with open(target, "wb") as f:
            f.truncate(17 * MiB if how == "sparse" else 1 << 40)
    elif how == "empty":
        target.write_bytes(b"")
    elif how == "binary":
        target.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5000))))
    elif how == "not-utf8":
        target.write_bytes(HEADER.encode() + b"\n\xff\xfe\x00bad\n")
    elif how == "csv-nul":
        target.write_bytes(_csv(rng, 4).replace(",", ",\x00", 3).encode("utf-8", "surrogateescape"))
    elif how == "csv-wide":
        target.write_text(HEADER + "," * 20000 + "\n" + "x," * 20000 + "\n" + "y" * 200000 + "\n")
    else:
        text = _csv(rng, rng.randrange(300, 600) if how == "csv-big" else rng.randrange(1, 40))
        target.write_bytes(text.encode("utf-8", "surrogateescape"))  # a name's undecodable byte, as on disk
    out = root / "out.png"
    out.write_bytes(b"an older plot")  # there before the snapshot: replacing it is the one change allowed
    case.exclude.append("./out.png")
    extra = rng.choice([[], ["--json"], ["--quiet"], ["--impl", "reference"]])
    case.argv = [["bench", "--plot-from", str(target), "--png", str(out), *extra]]
    case.notes.append(f"plot-from {how}")


# ----------------------------------------------------------------------------- --steps and --trials
STEPS = [",".join(map(str, range(40_000))), "0-39999", "0," * 100_000, "0-" + "9" * 5000, "9" * 5000, "²", "\u0661",
         "1-0", ",,,", " ", "-", "0-1-2", "0--1", "-1", "0,1,2,0,1,2," * 20_000, "1e3", "0x1", "0-0", "0", "0, 1",
         "\x1b[2J", "0\n1", "0-" + "9" * 19, "9" * 19]
TRIALS = ["0", "1", "2", "3", "-5", "10" + "0" * 30, "9" * 5000, "abc", "1000001", "1e3"]


def hostile_steps(case, rec, rng):
    """`run --steps` and `verify --steps / --trials` with 40,000 indices (linear parse), 200,000 repeats,
    5,000-digit numbers, Unicode digits, ranges backwards or malformed, a control character; `--trials`
    below 2, past 1,000,000 or no number: exit 0, 1, 2 or 4 in well under the timeout."""
    path = case.paths[0]
    argv = []
    for _ in range(3):
        steps = rng.choice(STEPS)
        argv.append(["run", path, "--impl", "reference", "--device", "cpu", "--quiet", "--steps", steps,
                     *(["--json"] if rng.random() < 0.3 else [])])
    trials = rng.choice(TRIALS)
    steps = rng.choice(STEPS[4:] + ["0"])
    argv.append(["verify", path, "--impl", "reference", "--device", "cpu", "--quiet", "--trials", trials,
                 "--steps", steps])
    argv.append(["verify", "--trials", rng.choice(TRIALS[4:]), "--steps", rng.choice(STEPS)])
    rng.shuffle(argv)
    case.argv = argv
    case.notes.append(f"steps/trials (trials {trials[:12]!r})")
