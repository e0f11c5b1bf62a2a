"""The kernel benchmark's run: per shape, checks, then every case timed in every mode, interleaved.

Per shape (V, R, k), inputs allocated once and freed after it: the correctness checks
(:mod:`replay_harness.bench.kernels.checks`), then the cases (:data:`replay_harness.bench.kernels.cases.CASES`)
at each top_p, timed in rounds with the impl order alternating every round:

    eager-cold  triton do_bench with the L2 flushed before every call (``rounds`` rounds)
    eager-warm  back-to-back calls, CUDA events
    graph       G launches captured in one CUDA graph, replays timed, divided by G (CUDA only)

Every timing is one record of the shared CSV layout (:mod:`replay_harness.bench.csvlog`). A run that
passes ``budget_s`` stops starting timings; the outputs are still written.
"""
from __future__ import annotations

import gc
import json
import traceback
from pathlib import Path

import torch

from replay_harness.bench.environment import environment
from replay_harness.bench.kernels.cases import CaseInput, Inputs, Timed, build
from replay_harness.bench.kernels.checks import FAILED, check_shape
from replay_harness.bench.kernels.peers import Peers
from replay_harness.bench.kernels.report import print_headline, write_outputs
from replay_harness.bench.kernels.settings import Settings
from replay_harness.bench.timing import copy_bandwidth, sync, time_cold, time_graph, time_warm

L2_POLICY = {"eager-cold": "flushed before every call (triton do_bench)", "eager-warm": "warm: back-to-back calls",
             "graph": "warm: CUDA graph replays"}


def _record(t: Timed, inp: Inputs, top_p: float, mode: str, rnd: int, cfg: Settings, copy_gbs: float,
            timing: tuple | None = None, error: str = "", graph_launches: int | None = None) -> dict:
    """One measurement as a CSV record (timing: (median, p20, p80) µs, or None with ``error``)."""
    case = f"V{inp.V} R{inp.R} k{inp.k} top_p={top_p}" + (f" top_k={cfg.top_k}" if cfg.top_k else "")
    rec = dict(case=case, impl=t.impl, family=t.family, vocab=inp.V,
               requests=inp.R, rows=inp.N, max_drafts=inp.k, top_p=top_p, mode=mode, round=rnd,
               clock="cuda-events" if cfg.cuda else "cpu-wall",
               l2_policy=L2_POLICY.get(mode, mode) if cfg.cuda else "CPU",
               error=error, bytes=t.bytes, median_us=None, p20_us=None, p80_us=None, gbps=None, pct_copy_bw=None,
               floor_us=None)
    if graph_launches is not None:
        rec["graph_launches"] = graph_launches
    if timing is None:
        return rec
    med, p20, p80 = timing
    gbps = t.bytes / (med * 1e-6) / 1e9 if med > 0 else None
    rec.update(median_us=round(med, 2), p20_us=round(p20, 2), p80_us=round(p80, 2),
               gbps=None if gbps is None else round(gbps, 1),
               pct_copy_bw=round(100.0 * gbps / copy_gbs, 1) if gbps and copy_gbs else None,
               floor_us=round(t.bytes / (copy_gbs * 1e9) * 1e6, 2) if copy_gbs else None)
    return rec


def _time_one(t: Timed, mode: str, cfg: Settings) -> tuple[tuple, int | None]:
    if mode == "eager-cold":
        return time_cold(t.fn, cfg.cuda, cfg.warmup, cfg.rep), None
    if mode == "eager-warm":
        return time_warm(t.fn, cfg.cuda, cfg.warm_ms), None
    med, p20, p80, g = time_graph(t.fn, cfg.graph_launches, cfg.graph_ms)
    return (med, p20, p80), g


def time_shape(inp: Inputs, timed: dict[float, list[Timed]], copy_gbs: float, cfg: Settings, rows: list) -> None:
    """Time every case of one shape (all top_p's together), interleaved; records appended to ``rows``."""
    def fail(t: Timed, tp: float, mode: str, e: Exception) -> None:
        msg = f"{type(e).__name__}: {str(e)[:200]}"
        rows.append(_record(t, inp, tp, mode, 0, cfg, copy_gbs, error=msg))
        print(f"  !!!! TIMING-ERROR {t.impl} V={inp.V} R={inp.R} k={inp.k} top_p={tp} {mode}: {msg}", flush=True)

    items, broken = [(tp, t) for tp, lst in timed.items() for t in lst], set()
    for tp, t in items:  # first call of each (compile, JIT) outside every timing
        try:
            t.fn()
        except Exception as e:  # noqa: BLE001 - one broken impl must not stop the others
            broken.add(id(t))
            fail(t, tp, "warmup", e)
    sync(cfg.cuda)
    items = [(tp, t) for tp, t in items if id(t) not in broken]
    modes = [("eager-cold", r) for r in range(1, cfg.rounds + 1)] + [("eager-warm", 1)] + \
        ([("graph", 1)] if cfg.cuda else [])
    for mode, rnd in modes:
        for tp, t in (items if rnd % 2 == 1 else list(reversed(items))):
            if cfg.over_budget():
                print(f"  !!!! BUDGET: {cfg.elapsed():.0f}s > --budget-s {cfg.budget_s:.0f}: "
                      f"skipping the rest of V={inp.V} R={inp.R} k={inp.k}", flush=True)
                return
            try:
                timing, g = _time_one(t, mode, cfg)
                rows.append(_record(t, inp, tp, mode, rnd, cfg, copy_gbs, timing, graph_launches=g))
            except Exception as e:  # noqa: BLE001
                fail(t, tp, mode, e)
                if cfg.cuda:
                    try:
                        torch.cuda.synchronize()
                    except Exception:  # noqa: BLE001
                        pass
    for tp in timed:  # compact per-shape line (eager-cold round-1 medians)
        cells = [f"{r['impl']}={r['median_us']:.1f}" for r in rows
                 if (r["vocab"], r["requests"], r["max_drafts"], r["top_p"], r["mode"], r["round"]) ==
                 (inp.V, inp.R, inp.k, tp, "eager-cold", 1) and r["median_us"] is not None]
        print(f"  V={inp.V} R={inp.R} k={inp.k} top_p={tp} cold us: " + "  ".join(cells), flush=True)


def run(cfg: Settings) -> int:
    """The whole benchmark; writes OUT/bench.{json,csv,md}. Exit code: 1 if a correctness check failed."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(torch.device(cfg.device))
    cfg.log("environment: " + json.dumps(env))
    copy = copy_bandwidth(cfg.cuda, cfg.copy_gib)
    cfg.log(f"copy bandwidth: {copy['gbps']:.0f} GB/s ({copy['note']}; {copy['bytes'] / 2**30:.1f} GiB moved, "
            f"median {copy['median_us']:.0f} us)")
    peers = Peers().load(cfg.peers_dir, cuda=cfg.cuda, allow_jit=not cfg.no_jit, skip=cfg.no_peers)
    for p, st in peers.status.items():
        cfg.log(f"peer {p}: {st}")
    checks: list = []
    rows: list = []
    skipped: list = []
    for V in cfg.vocabs:
        for R, k in cfg.shapes:
            if cfg.over_budget():
                cfg.log(f"!!!! BUDGET exhausted before V={V} R={R} k={k}: skipped")
                continue
            cfg.log(f"shape V={V} R={R} k={k} (N={R * (k + 1)}, logits {R * (k + 1) * V * 4 / 2**20:.1f} MiB)")
            inp = Inputs.make(V, R, k, Inputs.seed_of(V, R, k), cfg.device)
            steps = {tp: inp.step(tp, cfg.top_k) for tp in cfg.top_ps}
            if not cfg.skip_correctness:
                check_shape(inp, steps, peers, cfg, checks)
            timed = {}
            for tp, st in steps.items():
                try:
                    timed[tp], skips = build(CaseInput(inp, st, tp, peers, cfg.top_k), cfg.impls)
                    skipped += [dict(impl=s.impl, V=V, R=R, k=k, top_p=tp, reason=s.reason) for s in skips]
                except Exception as e:  # noqa: BLE001
                    print(f"  !!!! BUILD-ERROR V={V} R={R} k={k} top_p={tp}: {type(e).__name__}: {e}", flush=True)
                    traceback.print_exc(limit=3)
            time_shape(inp, timed, copy["gbps"], cfg, rows)
            del inp, steps, timed
            gc.collect()
            if cfg.cuda:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        write_outputs(out, env, copy, peers.status, cfg, checks, rows, skipped, final=False)  # partial, in case
    write_outputs(out, env, copy, peers.status, cfg, checks, rows, skipped, final=True)
    bad = [c for c in checks if c.get("verdict") in FAILED]
    print_headline(out, env, copy, peers.status, cfg, checks, rows)
    return 1 if bad else 0
