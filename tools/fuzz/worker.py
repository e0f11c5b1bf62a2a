"""A long-lived fuzz worker: builds cases (tools/fuzz/cases.py), runs `replay` commands on them in this
process (``replay_harness.cli.main`` with sys.argv set, SystemExit caught, stdout/stderr captured) or, for
a few cases, as real subprocesses (exit codes, Ctrl-C), and checks each outcome:

* exit code in {0, 1, 2, 4} (130 after a SIGINT), no traceback, at most one error line, no stray stderr;
* the input tree unchanged (tools/fuzz/tree.py snapshot before and after every command);
* peak RSS: the increase over the RSS before the command (VmHWM, reset through /proc/self/clear_refs)
  within :func:`rss_bound_kb`.

Hangs are the parent's to detect (tools/fuzz_recordings.py kills a worker that does not answer in time).
Run as root, the worker drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH first, so chmod 000 means
"permission denied" to it as to anyone else; ``permission_checks`` in its ready message says whether that
holds.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from tools.fuzz import cases, racing, streams, tree
from tools.fuzz.hostile_kinds import alive_in, program_groups

ALLOWED_EXIT = {0, 1, 2, 4}
EXEC_KINDS = ("exec-hostile",)  # an external program failing is exit 3 (environment), by the book
# A raw control character in anything replay printed (tab and line ends aside): a forged line or a terminal
# escape that came from a path or a file (docs/HARDENING.md, "Printing what came from a file").
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
FORGED = ("replay: error: FORGED", "FORGED")
MAX_ARG_BYTES = 131072  # Linux's MAX_ARG_STRLEN: one argument of a child's command line, at most
SLOW_INTERRUPT_S = 1.5  # SIGINT to exit, at most: the 1.0 s grace of cli._watch_interrupts + 0.5 s of a loaded machine
ORPHAN_WAIT_S = 1.0
ERROR_LINE = re.compile(r"^replay: (error|usage error|internal error):")
OK_STDERR = re.compile(r"^replay[: ]")  # errors, warnings, info and progress lines all start so
SELFTEST = ("selftest-modify", "selftest-raise", "selftest-hang", "selftest-memory", "selftest-exit3",
            "selftest-forged")


def rss_bound_kb(limits: dict[str, int] | None = None) -> int:
    """The most a command's peak RSS may rise over its starting RSS, in KiB, under the fuzz ``limits``
    (default cases.FUZZ_LIMITS): 6 step files' worth (the mapped file, its float32 copy, the oracle's
    softmax / sort / cumsum temporaries), 4 manifests' worth, and 192 MiB for torch's and typer's lazily
    built state."""
    limits = limits or cases.FUZZ_LIMITS
    return (6 * limits["REPLAY_MAX_STEP_BYTES"] + 4 * limits["REPLAY_MAX_MANIFEST_BYTES"] + 192 * cases.MiB) // 1024


# ----------------------------------------------------------------------------- process state
def drop_file_capabilities() -> bool:
    """As root: drop CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (effective, permitted, bounding set, so
    children lose them too). Returns whether a chmod 000 file is now unreadable to this process."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (1, 2):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]

        header, data = Header(0x20080522, 0), (Data * 2)()
        if libc.capget(ctypes.byref(header), data) == 0:
            for name in ("effective", "permitted", "inheritable"):
                setattr(data[0], name, getattr(data[0], name) & ~0b110)
            libc.capset(ctypes.byref(header), data)
    with tempfile.NamedTemporaryFile() as probe:
        os.chmod(probe.name, 0)
        try:
            open(probe.name, "rb").close()
            return False
        except PermissionError:
            return True


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass


def _set_limits(limits: dict[str, int | None]) -> None:
    for name, value in limits.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)


# ----------------------------------------------------------------------------- commands
def command_argv(command: str, paths: list[str], rng: random.Random) -> list[str]:
    """The `replay` arguments of ``command`` on ``paths``, options drawn from ``rng``."""
    json_opt = ["--json"] if rng.random() < 0.5 else []
    if command == "validate":
        return ["validate", *paths, *json_opt, *rng.choice([[], [], ["--nan", "warn"], ["--neg-inf-rows", "error"]])]
    if command == "inspect":
        return ["inspect", *paths, *json_opt]
    if command == "run":
        return ["run", *paths, "--impl", "reference", "--against", "recorded", "--device", "cpu", "--quiet",
                *json_opt]
    if command == "audit":
        return ["audit", *paths, "--quiet", *json_opt]
    if command == "bench":
        return ["bench", *paths, "--impl", "reference", "--device", "cpu", "--repeats", "1", "--warmup", "0",
                *json_opt]
    return [command, *paths]  # selftest-*


def _selftest(command: str, paths: list[str]) -> None:
    """Deliberately broken commands, to prove the driver catches each failure kind."""
    root = Path(paths[0]).parent
    if command == "selftest-modify":
        (root / "fuzz-modified").write_text("x")
    elif command == "selftest-raise":
        raise RuntimeError("selftest")
    elif command == "selftest-hang":
        time.sleep(3600)
    elif command == "selftest-memory":
        block = bytearray(rss_bound_kb() * 1024 + 64 * cases.MiB)
        block[::4096] = b"x" * len(block[::4096])
    elif command == "selftest-forged":
        print("replay: error: a path printed raw\nreplay: error: FORGED \x1b[2J", file=sys.stderr)
        sys.exit(2)
    elif command == "selftest-exit3":
        print("replay: internal error: RuntimeError: selftest", file=sys.stderr)
        sys.exit(3)


def run_inprocess(argv: list[str], stream: str | None = None, env: dict[str, str] | None = None,
                  rng: random.Random | None = None, during: object = None) -> dict:
    """`replay ARGV` in this process: exit code, captured output, wall time, RSS before and peak (KiB).
    ``stream``: a failing stdout or stderr (tools/fuzz/streams.py); ``env``: variables set for the call only;
    ``during``: a context manager around ``cli.main()`` (racing.Interrupt: a KeyboardInterrupt that escapes
    main is exit 130, as ``cli.entry`` makes it)."""
    from replay_harness import cli

    out, err = io.StringIO(), io.StringIO()
    bad_out, bad_err = streams.in_process(stream, rng or random.Random(0))
    out, err = (None if bad_out == "none" else bad_out or out), (None if bad_err == "none" else bad_err or err)
    saved, saved_env = sys.argv, {k: os.environ.get(k) for k in (env or {})}
    sys.argv = ["replay", *argv]
    os.environ.update(env or {})
    raised = ""
    _reset_peak()
    rss0, t0 = _status_kb("VmRSS"), time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if argv[0] in SELFTEST:
                    _selftest(argv[0], argv[1:])
                else:
                    with during or contextlib.nullcontext():
                        cli.main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except KeyboardInterrupt:
                if during is None:
                    raise
                code = 130  # landed after main had handled everything: cli.entry's exit code
    except BaseException:  # what cli.main let escape: a traceback a user would see
        code, raised = -1, traceback.format_exc()
    finally:
        sys.argv = saved
        _set_limits(saved_env)
    return {"code": code, "stdout": out.getvalue() if out is not None else "",
            "stderr": (err.getvalue() if err is not None else "") + raised,
            "wall_s": time.monotonic() - t0, "rss_before_kb": rss0, "rss_peak_kb": _status_kb("VmHWM")}


def _child_hwm_kb(pid: int) -> int:
    """VmHWM of a running child (KiB; 0 once it is gone). Not wait4's ru_maxrss: the kernel counts in it the
    RSS of the process that forked the child (this worker, whose RSS grows over a run) as of the exec."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def run_subprocess(argv: list[str], timeout: float, sigint_after: float | None, stream: str | None = None,
                   env: dict[str, str] | None = None, kind_signal: tuple | None = None, root: Path | None = None,
                   cwd: str | None = None) -> dict:
    """`python -m replay_harness.cli ARGV` as a child: exit code, output, wall time, its peak RSS (VmHWM read
    every 20 ms while it runs);
    ``sigint_after``: send SIGINT that many seconds in (Ctrl-C). code None: killed at ``timeout``.
    ``stream``: a real failing stdout or stderr (/dev/full, a pipe without reader, a closed descriptor).
    ``kind_signal``: (signal, "tmp" or "timer") of a signal-write case: sent 0-50 ms after a ``.tmp`` entry shows
    in ``root`` (polled every 5 ms), or 0.5-4 s in."""
    signum, trigger = kind_signal or (signal.SIGINT, None)
    pick = random.Random(repr(argv))  # repr: an argument may hold a lone surrogate (no str seed encodes it)
    if trigger == "timer":
        sigint_after = pick.uniform(0.5, 4.0)
    bad_out, bad_err, preexec, stream_env, cleanup = streams.child(stream)
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "replay_harness.cli", *argv],
                                    stdout=fo if bad_out is None else bad_out,
                                    stderr=fe if bad_err is None else bad_err, stdin=subprocess.DEVNULL,
                                    preexec_fn=preexec, cwd=cwd,
                                    env={**os.environ, **(env or {}), **stream_env})
        finally:
            cleanup()
        code, rusage, sent, sent_at, peak = None, None, False, 0.0, 0
        while True:
            peak = max(peak, _child_hwm_kb(proc.pid))
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            elapsed = time.monotonic() - t0
            if pid:
                code = os.waitstatus_to_exitcode(status)
                break
            if trigger == "tmp" and sigint_after is None and racing.staging_seen(root):
                sigint_after = elapsed + pick.uniform(0.0, 0.05)
            if sigint_after is not None and not sent and elapsed >= sigint_after:
                os.kill(proc.pid, signum)
                sent, sent_at = True, elapsed
            if elapsed > timeout:
                os.kill(proc.pid, signal.SIGKILL)
                _, _, rusage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.005 if trigger == "tmp" else 0.02)
        proc.returncode = code if code is not None else -9
        fo.seek(0), fe.seek(0)
        return {"code": code, "stdout": fo.read().decode(errors="replace"), "stderr": fe.read().decode(errors="replace"),
                "wall_s": time.monotonic() - t0, "rss_before_kb": 0, "rss_peak_kb": peak,
                "sigint": sent, "interrupt_s": (time.monotonic() - t0 - sent_at) if sent else None,
                "trigger": trigger, "signum": int(signum)}


def problems(res: dict, bound_kb: int, baseline_kb: int, allowed_extra: frozenset = frozenset()) -> list[str]:
    """What is wrong with one command's outcome (empty: nothing). ``allowed_extra``: exit codes the case's
    kind makes legitimate (3 for a hostile exec program)."""
    found = []
    text = res["stderr"] + res["stdout"]
    if res.get("sigint") and (res["code"] == -2 or (res["code"] == -15 and res.get("trigger") != "tmp") or (
            text.rstrip().endswith("KeyboardInterrupt")
                                                     and ", in main" not in text)):
        return ["startup-interrupt"]  # Ctrl-C before replay's handler exists (interpreter start, imports)
    escaped = res["code"] == -1 and "signum" not in res  # in this process: an exception escaped main (a child's
    # -1 is death by SIGHUP)
    if res["code"] is None:
        found.append("hang")
    elif "Traceback (most recent call last)" in text or escaped:
        found.append("traceback")
    elif "internal error" in res["stderr"]:
        found.append("internal-error")
    # after SIGHUP or SIGQUIT replay runs none of its code (no handler, by design): it dies of the signal
    by_signal = {-res["signum"]} if res.get("signum") in (signal.SIGHUP, signal.SIGQUIT) else set()
    allowed = ALLOWED_EXIT | allowed_extra | ({130} | by_signal if res.get("sigint") else set())
    if res["code"] is not None and res["code"] not in allowed and not escaped:
        found.append(f"exit-{res['code']}")
    lines = [ln for ln in res["stderr"].splitlines() if ln.strip()]
    errors = [ln for ln in lines if ERROR_LINE.match(ln)]
    if len(errors) > 1 or (res["code"] == 2 and not errors and not res["stdout"].strip()
                           and not res.get("stream")):  # validate: stdout (not there when stdout failed)
        found.append("error-not-one-line")
    if any(not OK_STDERR.match(ln) for ln in lines) and "traceback" not in found:
        found.append("stray-stderr")
    if RAW_CONTROL.search(text) or any(ln.startswith(FORGED) for ln in text.splitlines()):
        found.append("forged-line")
    if res.get("interrupt_s") is not None and res["code"] is not None and res["interrupt_s"] > SLOW_INTERRUPT_S:
        found.append("slow-interrupt")
    grown = res["rss_peak_kb"] - (res["rss_before_kb"] or baseline_kb)
    if grown > bound_kb:
        found.append("rss")
    return found


def _snapshot(case) -> dict:
    """tools/fuzz/tree.py's snapshot of the case folder, less what the case lets a command change."""
    snap = tree.snapshot(case.root, tuple(case.exclude))
    return {k: v for k, v in snap.items() if not any(k == e or k.startswith(e + "/") for e in case.exclude)}


def orphans(case) -> list[int]:
    """Processes still running, ORPHAN_WAIT_S after a command ended, in a process group the case's exec
    program ran in (killed, so they disturb nothing after)."""
    groups = program_groups(case)
    end = time.monotonic() + ORPHAN_WAIT_S
    while (alive := alive_in(groups)) and time.monotonic() < end:
        time.sleep(0.02)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return alive


# ----------------------------------------------------------------------------- the loop
def warm_up() -> int:
    """Run every command once on a committed fixture (imports, lazily built state); the RSS after (KiB)."""
    fixture = str(cases.REPO / "fixtures" / "synthetic-plain")
    for command in ("validate", "inspect", "run", "audit", "bench"):
        run_inprocess(command_argv(command, [fixture], random.Random(0)))
    return _status_kb("VmRSS")


def _run_one(case, argv: list[str], mode: str, timeout: float, rng: random.Random, sig_rng: random.Random) -> dict:
    """One command of ``case``: in this process (a signal-write case's signal sent by racing.Interrupt; the
    plugin's update through racing.plugin_update) or as a child (``mode`` "subprocess" / "sigint")."""
    if argv[0] == "@plugin-update":
        return racing.plugin_update(argv[1], case.root, case.cwd)
    if mode == "inproc":
        during = racing.Interrupt(*case.signal, case.root, sig_rng) if case.signal else None
        res = run_inprocess(argv, case.stdout, case.env, rng, during)
        if during is not None and during.sent:
            res["sigint"], res["interrupt_s"] = True, None
        return res
    sigint = sig_rng.uniform(0.3, 3.0) if mode.startswith("sig") and not case.signal else None
    signum = getattr(signal, mode.upper()) if mode.startswith("sig") and mode != "sigint" else signal.SIGINT
    return run_subprocess(argv, timeout, sigint, case.stdout, {**case.env, **case.env_child},
                          case.signal or (signum, None), case.root, case.cwd)


def serve(conn, workdir: str, seed: int, timeout: float, limits: dict[str, int] | None = None) -> None:
    """Answer the parent's ("case", index, plan) messages until ("stop",). ``plan``: [(command, mode)],
    mode "inproc", "subprocess" or "sigint". ``limits``: fuzz limits other than cases.FUZZ_LIMITS."""
    import torch

    cases.FUZZ_LIMITS.update(limits or {})

    torch.set_num_threads(1)
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):  # ignored when started as `nohup ... &`: the
        if signal.getsignal(signum) == signal.SIG_IGN:  # children would inherit it, and a signal sent to one
            signal.signal(signum, signal.SIG_DFL)  # would be lost (the command runs to its end) instead of tested
    os.environ["HF_HUB_OFFLINE"] = "1"  # no command of a case reaches the network (record --model ORG/NAME)
    permission_checks = drop_file_capabilities()
    baseline = warm_up()
    conn.send(("ready", {"pid": os.getpid(), "permission_checks": permission_checks, "baseline_rss_kb": baseline,
                         "euid": os.geteuid()}))
    bound = rss_bound_kb()
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        _, index, plan = msg
        root = Path(workdir) / f"case-{index}"
        tree.remove(root)
        try:
            case = cases.build_case(root, seed, index)
        except Exception:  # a bug of the fuzzer, not of replay: reported as "build-error"
            conn.send(("build-failed", traceback.format_exc()[-1500:]))
            tree.remove(root)
            continue
        _set_limits(case.limits)
        conn.send(("built", {"kind": case.kind, "notes": case.notes, "paths": case.paths}))
        before = _snapshot(case)
        allowed = (frozenset({3}) if case.kind in EXEC_KINDS else frozenset()) | case.allowed
        for j, (command, mode) in enumerate(plan):
            if case.argv:  # the kind's own command lines (tools/fuzz/hostile_kinds.py)
                argv = case.argv[j % len(case.argv)]
                command = f"{argv[0]}@{case.kind}"
            else:
                argv = command_argv(command, case.paths, random.Random(f"argv/{seed}/{index}/{command}"))
            if mode != "inproc" and max(len(os.fsencode(a)) for a in argv) >= MAX_ARG_BYTES:
                mode = "inproc"  # an argument no kernel passes to a child (E2BIG), so no user can type it
            with racing.Flipper(*case.race, random.Random(f"race/{seed}/{index}/{j}")) if case.race \
                    else contextlib.nullcontext():
                res = _run_one(case, argv, mode, timeout, random.Random(f"stream/{seed}/{index}/{j}"),
                               random.Random(f"sigint/{seed}/{index}"))
            res["argv"] = argv
            if case.post is not None and res["code"] is not None:
                res.setdefault("extra", []).extend(case.post(case, res))
            res["stream"] = case.stdout
            after = _snapshot(case)
            changed = tree.differences(before, after)
            found = problems(res, bound, baseline, allowed) + (["modified"] if changed else []) + res.get("extra", [])
            if orphans(case):
                found.append("orphan")
            before = after
            conn.send(("result", {"command": command, "mode": mode, "argv": argv, "code": res["code"],
                                  "wall_s": res["wall_s"], "rss_peak_kb": res["rss_peak_kb"],
                                  "rss_grown_kb": res["rss_peak_kb"] - (res["rss_before_kb"] or baseline),
                                  "problems": found, "changed": changed, "interrupt_s": res.get("interrupt_s"),
                                  "stderr_tail": res["stderr"][-600:] if found else res["stderr"][-200:]}))
        tree.remove(root)
        conn.send(("done", index))
