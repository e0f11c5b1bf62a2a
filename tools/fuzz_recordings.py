#!/usr/bin/env python
"""Fuzz the `replay` read commands with corrupted recordings (docs/HARDENING.md).

    nice python tools/fuzz_recordings.py --cases 10000 --seed 1 --workers 2 --out fuzz.json

Case i of a run is built from (seed, i) alone (tools/fuzz/cases.py: truncated / garbled steps, lying
headers, sparse files claiming GiBs, wrong dtypes / shapes / fields, NaN and -inf rows, bad or oversize
manifests, FIFOs, symlinks, unreadable files, temp leftovers, bad step indices), then the read commands
run on it (validate, inspect, run, audit, bench on the CPU; ``--per-case`` of them, in rotation) inside a
few long-lived worker processes (tools/fuzz/worker.py); about one case in ``--subprocess-every`` runs one
command as a real `python -m replay_harness.cli` child instead, half of those with a SIGINT. Command-line
attacks (tools/fuzz/cli_kinds.py) run too: failing stdout / stderr (in a child: /dev/full, a pipe without
reader, a closed descriptor), torchrun's variables, `bench --plot-from` special files, hostile `--steps`; and
write-path attacks (tools/fuzz/write_kinds.py): bind mounts and read-only folders, symlink races, SIGINT /
SIGTERM mid-write (one case in 4 of that kind in a child), the plugin's ``--replay-update``, `record --model`
paths. ``--budget-s`` stops starting cases after that many seconds.

A failure is a traceback, an "internal error", an exit code outside {0, 1, 2, 4}, more than one error
line, stderr lines that are not replay's, a modified input tree, a peak RSS rise over the bound, what a
write-path kind checks after its command (a refusal that is not exit 2, a partial or missing output, a temp
file left), or a hang (no answer within ``--timeout`` s: the worker is killed and replaced). The summary is printed and,
with ``--out``, written as JSON; the exit code is 1 when anything failed. ``--only 17,42`` rebuilds and
reruns single cases.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.fuzz import cases, tree  # noqa: E402
from tools.fuzz.worker import rss_bound_kb, serve  # noqa: E402

# Counted, not failures: Ctrl-C in the interpreter's first ~0.1 s; SIGINT to exit past 1.5 s, which on a shared
# machine measures the other processes' load as much as replay (tests/test_exec_signals.py holds the bound).
NOT_FAILURES = ("startup-interrupt", "slow-interrupt")
COMMANDS = ("validate", "inspect", "run", "audit", "bench")
BUILD_TIMEOUT_S = 60.0
START_TIMEOUT_S = 180.0
SUBPROCESS_EXTRA_S = 30.0  # a child's start-up (imports) on a loaded machine


EXEC_CHILD_EVERY = 8  # exec-hostile cases: one in 8 runs as a child (half of those get a SIGINT)
# Kinds whose behaviour only a child shows in full, and how often one of their cases runs as one: exec-hostile
# (Ctrl-C, orphans), signal-write (the real SIGINT / SIGTERM handlers of cli.entry; the signal is the kind's own).
CHILD_EVERY = {"exec-hostile": EXEC_CHILD_EVERY, "signal-write": 4}


def plan_for(index: int, commands: list[str], per_case: int, subprocess_every: int,
             child_signals: tuple[str, ...] = ("INT",)) -> list[tuple[str, str]]:
    """The (command, mode) list case ``index`` runs: ``per_case`` commands in rotation in-process, or, for
    about one case in ``subprocess_every`` (drawn from the index; one in EXEC_CHILD_EVERY of the exec-hostile
    kind, whose Ctrl-C and orphan behaviour only a child shows), one command as a child process, half of them
    interrupted."""
    pick = random.Random(f"plan/{index}")  # not index mod M: that would tie child cases to one kind
    kinds = list(cases.KINDS)
    kind = kinds[index % len(kinds)]
    every = CHILD_EVERY.get(kind, subprocess_every) if subprocess_every else 0
    if every and pick.randrange(every) == 0:
        mode = "subprocess" if kind == "signal-write" else pick.choice(["subprocess", "sigint"])
        if mode == "sigint" and child_signals != ("INT",):  # the signal drawn from --child-signals
            mode = "sig" + pick.choice(child_signals).lower()
        return [(pick.choice(commands), mode)]
    return [(commands[(index + j) % len(commands)], "inproc") for j in range(min(per_case, len(commands)))]


class Slot:
    """One worker process and the case it is on."""

    def __init__(self, ctx, workdir: str, seed: int, timeout: float, limits: dict[str, int]):
        self.args = (workdir, seed, timeout, limits)
        self.ctx = ctx
        self.start()

    def start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=serve, args=(child, *self.args), daemon=True)
        self.proc.start()
        child.close()
        self.case, self.plan, self.step, self.info = None, [], -1, {}
        self.deadline = time.monotonic() + START_TIMEOUT_S
        self.ready = False

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(10)
        self.conn.close()


class Summary:
    """Counts of the run and the failures, as the JSON document ``--out`` writes."""

    def __init__(self, args, limit: int):
        self.args, self.limit = args, limit
        self.fuzz_limits = dict(cases.FUZZ_LIMITS)
        self.by_kind, self.stacked, self.by_mode = Counter(), Counter(), Counter()
        self.kind_codes: dict[str, Counter] = defaultdict(Counter)
        self.cmd: dict[str, dict] = defaultdict(lambda: {"runs": 0, "exit_codes": Counter(), "max_wall_s": 0.0,
                                                         "max_rss_grown_kb": 0, "max_rss_peak_kb": 0})
        self.problems, self.failures = Counter(), []
        self.cases_done, self.workers = 0, {}
        self.max_interrupt_s = 0.0  # SIGINT to exit of a child, the longest

    def case_built(self, info: dict) -> None:
        kind, *extra = info["kind"].split("+")
        self.by_kind[kind] += 1
        self.stacked.update(extra)

    def result(self, index: int, info: dict, res: dict) -> None:
        c = self.cmd[f"{res['command']}" + ("" if res["mode"] == "inproc" else f"[{res['mode']}]")]
        c["runs"] += 1
        c["exit_codes"][str(res["code"])] += 1
        c["max_wall_s"] = max(c["max_wall_s"], round(res["wall_s"], 3))
        c["max_rss_grown_kb"] = max(c["max_rss_grown_kb"], res["rss_grown_kb"])
        c["max_rss_peak_kb"] = max(c["max_rss_peak_kb"], res["rss_peak_kb"])
        self.by_mode[res["mode"]] += 1
        if res.get("interrupt_s") is not None and res.get("code") is not None:
            self.max_interrupt_s = max(self.max_interrupt_s, res["interrupt_s"])
        self.kind_codes[info.get("kind", "?").split("+")[0]][str(res["code"])] += 1
        for p in res["problems"]:
            self.problems[p] += 1
        if set(res["problems"]) - set(NOT_FAILURES):
            self.failures.append({"case": index, "kind": info.get("kind"), "notes": info.get("notes"), **{
                k: res.get(k) for k in ("command", "mode", "argv", "code", "problems", "changed", "wall_s",
                                        "rss_grown_kb", "stderr_tail")}})
            print(f"fuzz: FAIL case {index} ({info.get('kind')}) {res['command']}[{res['mode']}]: "
                  f"{res['problems']} exit {res['code']}", file=sys.stderr, flush=True)

    def build_failed(self, index: int, tb: str) -> None:
        self.cases_done += 1
        self.problems["build-error"] += 1
        self.failures.append({"case": index, "kind": None, "notes": None, "command": "build", "mode": "inproc",
                              "argv": None, "code": None, "problems": ["build-error"], "changed": [],
                              "wall_s": 0.0, "rss_grown_kb": 0, "stderr_tail": tb})

    def hang(self, index: int, info: dict, command: str, mode: str, timeout: float) -> None:
        self.result(index, info, {"command": command, "mode": mode, "code": None, "wall_s": timeout,
                                  "rss_grown_kb": 0, "rss_peak_kb": 0, "problems": ["hang"],
                                  "argv": None, "changed": [], "stderr_tail": ""})

    def document(self, elapsed: float) -> dict:
        import torch

        cmd = {k: {**v, "exit_codes": dict(sorted(v["exit_codes"].items()))} for k, v in sorted(self.cmd.items())}
        ready = list(self.workers.values())
        return {
            "seed": self.args.seed, "cases": self.cases_done, "commands_run": sum(v["runs"] for v in cmd.values()),
            "failed": len(self.failures), "problems": {k: n for k, n in self.problems.items() if k not in NOT_FAILURES},
            "startup_interrupts": self.problems["startup-interrupt"],
            "hangs": self.problems["hang"], "tracebacks": self.problems["traceback"],
            "modified_inputs": self.problems["modified"], "rss_over_bound": self.problems["rss"],
            "forged_lines": self.problems["forged-line"], "orphans": self.problems["orphan"],
            "slow_interrupts": self.problems["slow-interrupt"],
            "max_interrupt_s": round(self.max_interrupt_s, 3),
            "max_rss_grown_kb": max((v["max_rss_grown_kb"] for v in cmd.values()), default=0),
            "max_rss_peak_kb": max((v["max_rss_peak_kb"] for v in cmd.values()), default=0),
            "max_wall_s": max((v["max_wall_s"] for v in cmd.values()), default=0.0),
            "rss_bound_kb": rss_bound_kb(self.fuzz_limits), "limits": self.fuzz_limits, "timeout_s": self.args.timeout,
            "by_kind": dict(sorted(self.by_kind.items())), "stacked": dict(sorted(self.stacked.items())),
            "exit_codes_by_kind": {k: dict(sorted(v.items())) for k, v in sorted(self.kind_codes.items())},
            "by_command": cmd, "by_mode": dict(self.by_mode),
            "permission_checks": all(w.get("permission_checks") for w in ready) if ready else None,
            "worker_euid": ready[0].get("euid") if ready else None,
            "baseline_rss_kb": max((w.get("baseline_rss_kb", 0) for w in ready), default=0),
            "elapsed_s": round(elapsed, 1), "cases_per_s": round(self.cases_done / max(elapsed, 1e-9), 2),
            "environment": {"python": platform.python_version(), "torch": torch.__version__,
                            "platform": platform.platform(), "cpus": os.cpu_count(), "workers": self.args.workers},
            "failures": self.failures[:self.limit],
        }


def drive(args) -> dict:
    """Run the cases over the workers; return the summary document."""
    commands = args.commands.split(",")
    indices = [int(i) for i in args.only.split(",")] if args.only else list(range(args.start, args.start + args.cases))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    workdir = tempfile.mkdtemp(prefix="replay-fuzz-")
    ctx = multiprocessing.get_context("spawn")
    summary = Summary(args, args.keep_failures)
    queue, t0 = list(reversed(indices)), time.monotonic()
    summary.fuzz_limits = fuzz_limits(args.limit)
    count = max(1, min(args.workers, len(indices)))
    slots = [Slot(ctx, workdir, args.seed, args.timeout, summary.fuzz_limits) for _ in range(count)]
    last_print = t0
    try:
        while queue or any(s.case is not None for s in slots):
            if args.budget_s and time.monotonic() - t0 > args.budget_s:
                queue.clear()  # no new case past the budget; the ones in flight finish
            for s in slots:
                if s.proc is None and queue:  # replaced after a hang, started when there is work for it
                    s.start()
                if s.ready and s.case is None and queue:
                    s.case = queue.pop()
                    s.plan = plan_for(s.case, commands, args.per_case, args.subprocess_every,
                                      tuple(args.child_signals.upper().split(",")))
                    s.step, s.info = -1, {}
                    s.deadline = time.monotonic() + BUILD_TIMEOUT_S
                    s.conn.send(("case", s.case, s.plan))
            if not queue and all(s.case is None for s in slots):
                break
            now = time.monotonic()
            live = [s for s in slots if s.proc is not None]
            ready = multiprocessing.connection.wait([s.conn for s in live], max(0.0, min(s.deadline for s in live) - now))
            for s in live:
                if s.conn in ready:
                    try:
                        msg = s.conn.recv()
                    except (EOFError, OSError):
                        msg = ("died",)
                    _handle(s, msg, summary, args)
                elif time.monotonic() > s.deadline:
                    _handle(s, ("timeout",), summary, args)
            if time.monotonic() - last_print > args.progress_every:
                last_print = time.monotonic()
                print(f"fuzz: {summary.cases_done}/{len(indices)} cases, {len(summary.failures)} failures, "
                      f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        for s in slots:
            if s.proc is not None and s.proc.is_alive():
                try:
                    s.conn.send(("stop",))
                except OSError:
                    pass
                s.proc.join(5)
                if s.proc.is_alive():
                    s.kill()
        tree.remove(workdir)
    return summary.document(time.monotonic() - t0)


def fuzz_limits(overrides: list[str]) -> dict[str, int]:
    """cases.FUZZ_LIMITS with ``NAME=VALUE`` overrides (--limit)."""
    limits = dict(cases.FUZZ_LIMITS)
    for item in overrides or []:
        name, _, value = item.partition("=")
        if name not in limits or not value.isdigit():
            raise SystemExit(f"fuzz: --limit {item}: expected one of {', '.join(limits)} = a positive integer")
        limits[name] = int(value)
    return limits


def _handle(s: Slot, msg: tuple, summary: Summary, args) -> None:
    """One message (or a timeout, or a dead worker) of slot ``s``."""
    kind = msg[0]
    if kind == "ready":
        s.ready, s.deadline = True, float("inf")
        summary.workers[msg[1]["pid"]] = msg[1]
    elif kind == "built":
        s.info, s.step = msg[1], 0
        summary.case_built(msg[1])
        s.deadline = time.monotonic() + _cmd_timeout(s, args)
    elif kind == "result":
        summary.result(s.case, s.info, msg[1])
        s.step += 1
        s.deadline = time.monotonic() + (_cmd_timeout(s, args) if s.step < len(s.plan) else BUILD_TIMEOUT_S)
    elif kind == "build-failed":
        summary.build_failed(s.case, msg[1])
        s.case, s.deadline = None, float("inf")
    elif kind == "done":
        summary.cases_done += 1
        s.case, s.deadline = None, float("inf")
    else:  # "timeout" or "died": a hang (or a crash) on the command in flight; a fresh worker takes over
        if not s.ready:
            raise SystemExit(f"fuzz: a worker did not start ({kind}); run one case with --only 0 to see why")
        if s.case is not None:
            command, mode = s.plan[s.step] if 0 <= s.step < len(s.plan) else ("build", "inproc")
            summary.hang(s.case, s.info, command, mode, args.timeout)
            summary.cases_done += 1
            if kind == "died":
                summary.failures[-1]["problems"] = ["worker-died"]
        s.kill()
        if s.case is not None:
            _kill_programs(Path(s.args[0]) / f"case-{s.case}")
            tree.remove(Path(s.args[0]) / f"case-{s.case}")
        s.proc, s.ready, s.case, s.deadline = None, False, None, float("inf")


def _kill_programs(root: Path) -> None:
    """A killed worker's exec programs (tools/fuzz/hostile_kinds.py) are not left running."""
    import signal

    from tools.fuzz.hostile_kinds import alive_in

    try:
        groups = [int(x) for x in (root / "pgids").read_text().split()]
    except (OSError, ValueError):
        return
    for pid in alive_in(groups):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _cmd_timeout(s: Slot, args) -> float:
    mode = s.plan[s.step][1] if s.step < len(s.plan) else "inproc"
    return args.timeout + (SUBPROCESS_EXTRA_S if mode != "inproc" else 0.0)


def print_summary(doc: dict) -> None:
    print(f"fuzz: {doc['cases']} cases, {doc['commands_run']} command runs, {doc['failed']} failures "
          f"(hangs {doc['hangs']}, tracebacks {doc['tracebacks']}, modified inputs {doc['modified_inputs']}, "
          f"RSS over bound {doc['rss_over_bound']}); {doc['elapsed_s']} s, {doc['cases_per_s']} cases/s")
    print(f"  max RSS rise {doc['max_rss_grown_kb'] / 1024:.0f} MiB (bound {doc['rss_bound_kb'] / 1024:.0f} MiB), "
          f"max peak RSS {doc['max_rss_peak_kb'] / 1024:.0f} MiB, max wall {doc['max_wall_s']:.2f} s; "
          f"permission checks {'enforced' if doc['permission_checks'] else 'NOT enforced (root)'}")
    print("  kinds: " + ", ".join(f"{k} {n}" for k, n in doc["by_kind"].items()))
    for name, c in doc["by_command"].items():
        print(f"  {name}: {c['runs']} runs, exit codes {c['exit_codes']}, max wall {c['max_wall_s']:.2f} s, "
              f"max RSS rise {c['max_rss_grown_kb'] / 1024:.0f} MiB")
    if doc["problems"]:
        print("  problems: " + ", ".join(f"{k} {n}" for k, n in doc["problems"].items()))
    for f in doc["failures"][:10]:
        print(f"  FAIL case {f['case']} ({f['kind']}) {f['command']}[{f['mode']}]: {f['problems']} exit {f['code']}"
              f" {f['changed'] or ''} {(f['stderr_tail'] or '').strip()[-300:]!r}")


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=200, help="cases to build and run (default 200)")
    p.add_argument("--seed", type=int, default=1, help="run seed: case i is built from (seed, i)")
    p.add_argument("--start", type=int, default=0, help="first case index")
    p.add_argument("--only", default="", help="comma-separated case indices to rerun (overrides --cases)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--commands", default=",".join(COMMANDS), help="commands to rotate over (default all five)")
    p.add_argument("--per-case", type=int, default=len(COMMANDS), help="commands run on each case (default all)")
    p.add_argument("--subprocess-every", type=int, default=100, help="one case in N runs as a child process "
                                                                     "(0: never; default 100)")
    p.add_argument("--child-signals", default="INT", help="signals a child case is sent, drawn per case (INT, "
                   "TERM, HUP, QUIT; default INT): HUP and QUIT end replay without its handlers, exit -1 / -3")
    p.add_argument("--limit", action="append", metavar="NAME=VALUE", help="a fuzz limit other than the "
                   "default (REPLAY_MAX_STEP_BYTES=67108864, REPLAY_MAX_MANIFEST_BYTES=1048576, REPLAY_MAX_VOCAB=262144)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds one command may take (default 30)")
    p.add_argument("--budget-s", type=float, default=0.0, help="start no case after this many seconds (0: no "
                                                                "budget; the summary counts the cases run)")
    p.add_argument("--keep-failures", type=int, default=50, help="failures listed in the JSON (default 50)")
    p.add_argument("--progress-every", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("--out", help="write the summary JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    doc = drive(args)
    print_summary(doc)
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
