#!/usr/bin/env python3
"""Build, check and time the project's sampler kernels next to the peers, in ONE run.

GPU (H200):   bash tools/run_gpu_bench.sh            (installs the peers, sets PYTHONPATH, runs this)
CPU smoke:    python tools/bench_kernels.py --quick  (TRITON_INTERPRET=1, V=1000, two tiny shapes)

Phases, per shape (V, R, k), inputs allocated once per shape and freed after it:
  1. correctness: our impls' tokens/counts vs the torch ``reference`` (CPU copy of the sampled
     requests; all requests when R <= 8, else --check-requests of them), mismatches classified with
     ``near_tie.is_near_tie``; vLLM MRV2 token parity (same RNG contract) as information;
     determinism: 100 repeated launches give bit-identical tokens. Mismatches never stop the timing.
  2. timing, impls interleaved per shape: eager-cold (triton do_bench, L2 flushed; --rounds rounds
     in alternating impl order), eager-warm (back-to-back calls, CUDA events), graph (G launches
     captured in one CUDAGraph, replays timed, divided by G).

Bytes per row of results (the floor each impl must move at least):
  plain (k=0): R*V*4 (logits read once); verify: N*V*4, N = R*(k+1); FlashInfer's chain sampler
  adds its draft probabilities R*k*V*4. GB/s = bytes / median; floor_us = bytes / copy bandwidth.

Writes OUT/bench.json, OUT/bench.csv (long format, one row per measurement) and OUT/bench.md, and
prints the headline table last. Imports only torch/triton and the torch-only modules of the harness
(step, reference, near_tie, rng, sampling_params), never replay_harness.cli or .fixture.
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
T0 = time.time()

VOCABS = (248320, 151936, 32000)  # headline vocabulary first: it is measured even if time runs out
SHAPES = ((1, 0), (64, 0), (256, 0), (1, 4), (8, 4), (64, 4), (256, 4))
TOP_PS = (1.0, 0.9)
SERIAL_R = (1, 64)
SERIAL_V = 248320
OURS = ("gumbel-max", "stochastic", "serial-scan")


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench_out", help="results folder (default $OUT)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny CPU smoke under TRITON_INTERPRET=1: V=1000, shapes R1k0 and R2k4")
    ap.add_argument("--vocab", default=None, help="comma list of vocab sizes (default 248320,151936,32000)")
    ap.add_argument("--cases", default=None,
                    help="comma list of shape filters: labels like R64k4, or 'plain' (k=0) / 'verify' (k>0)")
    ap.add_argument("--impls", default=None, help="comma list of substrings of impl names to time")
    ap.add_argument("--top-p", default=None, help="comma list of top_p values (default 1.0,0.9)")
    ap.add_argument("--no-peers", action="store_true", help="do not load FlashInfer / vLLM")
    ap.add_argument("--peers-dir", default=str(REPO / ".peers"))
    ap.add_argument("--no-jit", action="store_true", help="refuse a FlashInfer JIT build (prebuilt only)")
    ap.add_argument("--skip-correctness", action="store_true")
    ap.add_argument("--check-requests", type=int, default=8, help="requests checked vs reference when R > 8")
    ap.add_argument("--det-launches", type=int, default=100, help="repeated launches of the determinism check")
    ap.add_argument("--warmup", type=float, default=25.0, help="do_bench warmup, ms")
    ap.add_argument("--rep", type=float, default=60.0, help="do_bench rep, ms")
    ap.add_argument("--rounds", type=int, default=2, help="eager-cold rounds (alternating impl order)")
    ap.add_argument("--warm-ms", type=float, default=30.0, help="target time of the eager-warm loop, ms")
    ap.add_argument("--graph-ms", type=float, default=40.0, help="target time of the graph replays, ms")
    ap.add_argument("--graph-launches", type=int, default=16, help="launches captured per graph")
    ap.add_argument("--copy-gib", type=float, default=2.0, help="size of the copy-bandwidth test, GiB")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="stop starting new timings after this many seconds (outputs are still written)")
    return ap.parse_args()


ARGS = parse_args()
if ARGS.quick:  # the interpreter is slow: fewer repeats (explicit flags still win)
    if "--det-launches" not in sys.argv:
        ARGS.det_launches = 5
    if "--rounds" not in sys.argv:
        ARGS.rounds = 1
if ARGS.quick:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede any Triton kernel definition

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(REPO))

import triton  # noqa: E402
import triton.testing  # noqa: E402

from replay_harness.impls.reference import ReferenceSampler  # noqa: E402
from replay_harness.near_tie import is_near_tie  # noqa: E402
from replay_harness.step import Step  # noqa: E402
from replay_kernels.sample import GumbelMaxSampler, SerialScanSampler  # noqa: E402
from replay_kernels.verify import StochasticSampler  # noqa: E402

CUDA = torch.cuda.is_available() and not ARGS.quick
DEV = "cuda" if CUDA else "cpu"


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------


def make_inputs(V: int, R: int, k: int, seed: int) -> dict:
    """SYNTHETIC fp32 logits (randn*3 plus one peak per row) and one-hot drafts (argmax 70% of the time)."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    N = R * (k + 1)
    logits = torch.randn(N, V, generator=g, device=DEV) * 3.0
    # The peak carries p ~ 0.25 .. 0.95 of the mass: E[exp(3z)] = exp(4.5), so log(V) + 4.5 is even odds.
    peak_tok = torch.randint(0, V, (N,), generator=g, device=DEV)
    peak_val = math.log(V) + 4.5 + (torch.rand(N, generator=g, device=DEV) * 4.0 - 1.0)
    logits[torch.arange(N, device=DEV), peak_tok] = peak_val
    am = logits.argmax(-1)
    rnd = torch.randint(0, V, (N,), generator=g, device=DEV)
    use_am = torch.rand(N, generator=g, device=DEV) < 0.7
    draft_row = torch.where(use_am, am, rnd)
    is_bonus = torch.zeros(N, dtype=torch.bool, device=DEV)
    is_bonus[k::k + 1] = True
    draft_ids = torch.where(is_bonus, torch.full_like(draft_row, -1), draft_row).to(torch.int32)
    base = torch.randint(16, 4096, (R,), generator=g, device=DEV)
    positions = (base.repeat_interleave(k + 1) + torch.arange(k + 1, device=DEV).repeat(R)).to(torch.int64)
    seeds = torch.randint(-2**62, 2**62, (R,), generator=g, device=DEV, dtype=torch.int64)
    return dict(V=V, R=R, k=k, N=N, logits=logits, draft_ids=draft_ids, positions=positions, seeds=seeds)


def make_step(inp: dict, top_p: float) -> Step:
    R, k, N = inp["R"], inp["k"], inp["N"]
    return Step(
        logits=inp["logits"],
        cu_num_logits=torch.arange(0, N + 1, k + 1, dtype=torch.int32, device=DEV),
        draft_token_ids=inp["draft_ids"],
        positions=inp["positions"],
        temperature=torch.ones(R, dtype=torch.float32, device=DEV),
        top_k=torch.zeros(R, dtype=torch.int32, device=DEV),
        top_p=torch.full((R,), top_p, dtype=torch.float32, device=DEV),
        min_p=torch.zeros(R, dtype=torch.float32, device=DEV),
        seed=inp["seeds"],
        request_ids=torch.arange(R, dtype=torch.int64, device=DEV) + 1000,
    )


def sub_step_cpu(step: Step, reqs: list[int], k: int) -> Step:
    """The given requests (uniform k) as a CPU step, gathered on the device first (no full copy)."""
    dev = step.logits.device
    rows = torch.tensor([r * (k + 1) + i for r in reqs for i in range(k + 1)], dtype=torch.long, device=dev)
    rq = torch.tensor(reqs, dtype=torch.long, device=dev)
    n = len(reqs) * (k + 1)
    return Step(logits=step.logits[rows].cpu(),
                cu_num_logits=torch.arange(0, n + 1, k + 1, dtype=torch.int32),
                draft_token_ids=step.draft_token_ids[rows].cpu(), positions=step.positions[rows].cpu(),
                temperature=step.temperature[rq].cpu(), top_k=step.top_k[rq].cpu(), top_p=step.top_p[rq].cpu(),
                min_p=step.min_p[rq].cpu(), seed=step.seed[rq].cpu(), request_ids=step.request_ids[rq].cpu())


# ---------------------------------------------------------------------------
# impls: each is (name, family, fn, bytes) built per (shape, top_p); fn() runs device work only
# ---------------------------------------------------------------------------


class Peers:
    def __init__(self):
        self.fi = None
        self.gumbel_sample = None
        self.rejection_sample = None
        self.status = {}

    def load(self, args):
        if args.no_peers:
            self.status = {"flashinfer": "skipped (--no-peers)", "vllm": "skipped (--no-peers)"}
            return
        pdir = args.peers_dir
        if not Path(pdir, "gpu_env.py").exists():
            self.status = {p: f"UNAVAILABLE: {pdir}/gpu_env.py not found (carry .peers)" for p in ("flashinfer", "vllm")}
            return
        sys.path.insert(0, pdir)
        try:
            import gpu_env
        except Exception as e:  # noqa: BLE001
            self.status = {p: f"UNAVAILABLE: import gpu_env failed: {e}" for p in ("flashinfer", "vllm")}
            return
        if not CUDA:
            self.status["flashinfer"] = "skipped (needs a CUDA GPU)"
        else:
            t = time.time()
            try:
                self.fi = gpu_env.load_flashinfer(pdir, allow_jit=not args.no_jit)
                self.status["flashinfer"] = (f"FlashInfer {getattr(self.fi, '__version__', '?')} "
                                             f"({gpu_env.LOADED.get('modules')}, {time.time() - t:.1f}s)")
            except gpu_env.PeerUnavailable as e:
                self.status["flashinfer"] = f"UNAVAILABLE: {e}"
            except Exception as e:  # noqa: BLE001
                self.status["flashinfer"] = f"UNAVAILABLE: {type(e).__name__}: {e}"
        try:
            self.gumbel_sample, self.rejection_sample = gpu_env.load_vllm_mrv2(pdir)
            self.status["vllm"] = "vLLM MRV2 gumbel_sample / rejection_sample" + (
                "" if CUDA else " (Triton interpreter)")
        except gpu_env.PeerUnavailable as e:
            self.status["vllm"] = f"UNAVAILABLE: {e}"
        except Exception as e:  # noqa: BLE001
            self.status["vllm"] = f"UNAVAILABLE: {type(e).__name__}: {e}"


def vllm_meta(inp: dict, step: Step) -> dict:
    R, k, N = inp["R"], inp["k"], inp["N"]
    idx = torch.arange(R, dtype=torch.int32, device=DEV)
    # vLLM: draft i of request r is draft_sampled[cu[r] + i + 1]; ours: draft_token_ids[cu[r] + i]
    ds = torch.zeros(N, dtype=torch.int32, device=DEV)
    if k:
        ds[1:] = step.draft_token_ids[:-1]
        ds[0::k + 1] = 0
    return dict(idx=idx, exp_idx=torch.repeat_interleave(idx, k + 1),
                loc=torch.arange(k + 1, dtype=torch.int32, device=DEV).repeat(R), draft_sampled=ds)


def build_impls(inp: dict, step: Step, top_p: float, peers: Peers, skipped: list) -> list[dict]:
    V, R, k, N = inp["V"], inp["R"], inp["k"], inp["N"]
    logits = inp["logits"]
    plain_bytes = R * V * 4
    verify_bytes = N * V * 4
    out = []

    def add(name, family, fn, nbytes, state=None, impl=None):
        out.append(dict(impl=name, family=family, fn=fn, bytes=nbytes, state=state, obj=impl))

    def skip(name, why):
        skipped.append(dict(impl=name, V=V, R=R, k=k, top_p=top_p, reason=why))

    # ours
    if k == 0:
        gm = GumbelMaxSampler()
        st = gm.prepare(step)
        add("gumbel-max", "ours", lambda: gm.launch(st), plain_bytes, st, gm)
        if R in SERIAL_R and V == SERIAL_V:  # quick mode: correctness only (the interpreter takes ~15 s/call)
            ss = SerialScanSampler()
            st2 = ss.prepare(step)
            add("serial-scan", "ours", lambda: ss.launch(st2), plain_bytes, st2, ss)
    so = StochasticSampler()
    st3 = so.prepare(step)
    add("stochastic", "ours", lambda: so.launch(st3), verify_bytes, st3, so)

    # vLLM MRV2
    if peers.gumbel_sample is None:
        skip("vllm", peers.status.get("vllm", "not loaded"))
    elif top_p < 1.0:
        skip("vllm", "MRV2 gumbel_sample / rejection_sample take no top-p (applied by a separate pass)")
    else:
        m = vllm_meta(inp, step)
        temp, seeds, pos, cu = step.temperature, step.seed, step.positions, step.cu_num_logits
        if k == 0:
            gs = peers.gumbel_sample
            # logits already temperature-processed (T=1): apply_temperature=False
            add("vllm.gumbel_sample", "vllm", lambda: gs(logits, m["idx"], temp, seeds, pos, False, False),
                plain_bytes)
        else:
            rs = peers.rejection_sample
            add("vllm.rejection_sample", "vllm",
                lambda: rs(logits, None, m["draft_sampled"], cu, pos, m["idx"], m["exp_idx"], m["loc"],
                           temp, seeds, k), verify_bytes)

    # FlashInfer
    fi = peers.fi
    if fi is None:
        skip("flashinfer", peers.status.get("flashinfer", "not loaded"))
    elif k == 0:
        if top_p >= 1.0:
            add("fi.sampling_from_logits", "flashinfer",
                lambda: fi.sampling_from_logits(logits, seed=0, offset=0), plain_bytes)
        else:
            add("fi.top_k_top_p_from_logits(V,p,joint)", "flashinfer",
                lambda: fi.top_k_top_p_sampling_from_logits(logits, V, top_p, filter_apply_order="joint",
                                                            seed=0, offset=0), plain_bytes)
    elif top_p < 1.0:
        skip("flashinfer", "chain_speculative_sampling applies no top-p")
    else:
        dids = step.draft_token_ids.view(R, k + 1)[:, :k].contiguous()
        dprobs = torch.zeros(R, k, V, dtype=torch.float32, device=DEV)
        dprobs.scatter_(2, dids.long().unsqueeze(-1), 1.0)
        tprobs = fi.softmax(logits).view(R, k + 1, V)
        fi_bytes = verify_bytes + R * k * V * 4
        add("fi.softmax+chain_speculative", "flashinfer",
            lambda: fi.chain_speculative_sampling(dprobs, dids, fi.softmax(logits).view(R, k + 1, V),
                                                  seed=0, offset=0), fi_bytes)
        add("fi.chain_speculative(probs given)", "flashinfer",
            lambda: fi.chain_speculative_sampling(dprobs, dids, tprobs, seed=0, offset=0), fi_bytes)

    # torch baseline (k = 0)
    if k == 0:
        if top_p >= 1.0:
            def torch_race():
                p = torch.softmax(logits, -1)
                return torch.argmax(p / torch.empty_like(p).exponential_(), -1)
            add("torch.softmax+exp-race", "torch", torch_race, plain_bytes)
        else:
            def torch_topp_race():
                p = torch.softmax(logits, -1)
                sp, si = torch.sort(p, -1, descending=True)
                cut = (sp.cumsum(-1) - sp) > top_p
                sp = sp.masked_fill(cut, 0.0)
                q = torch.zeros_like(p).scatter_(-1, si, sp)
                return torch.argmax(q / torch.empty_like(q).exponential_(), -1)
            add("torch.sort-top-p+exp-race", "torch", torch_topp_race, plain_bytes)

    if ARGS.impls:
        keys = [s.strip() for s in ARGS.impls.split(",") if s.strip()]
        out = [d for d in out if any(s in d["impl"] for s in keys)]
    return out


# ---------------------------------------------------------------------------
# correctness
# ---------------------------------------------------------------------------


def pick_requests(R: int, n: int) -> list[int]:
    if R <= 8 or R <= n:
        return list(range(R))
    return sorted({round(i * (R - 1) / (n - 1)) for i in range(n)})


def compare_tokens(tok: torch.Tensor, cnt: torch.Tensor, ref_tok: torch.Tensor, ref_cnt: torch.Tensor,
                   sub: Step, k: int) -> tuple[int, int, list]:
    """(exact-matching requests, near-tie mismatches, [details of real mismatches])."""
    ok = ties = 0
    real = []
    for i in range(ref_tok.shape[0]):
        c, rc = int(cnt[i]), int(ref_cnt[i])
        a, b = tok[i, :c].tolist(), ref_tok[i, :rc].tolist()
        if c == rc and a == b:
            ok += 1
            continue
        pos = next((j for j in range(min(c, rc)) if a[j] != b[j]), min(c, rc))
        pos = min(pos, k)
        tie, margin = is_near_tie(sub, i, pos)
        if tie:
            ties += 1
        else:
            real.append(dict(request=i, pos=pos, margin=margin, got=a, want=b))
    return ok, ties, real


def check_shape(inp: dict, steps: dict, peers: Peers, results: list) -> None:
    V, R, k = inp["V"], inp["R"], inp["k"]
    reqs = pick_requests(R, ARGS.check_requests)
    for top_p, step in steps.items():
        tag = f"V={V} R={R} k={k} top_p={top_p}"
        t = time.time()
        try:
            sub = sub_step_cpu(step, reqs, k)
            ref = ReferenceSampler().sample(sub)
        except Exception as e:  # noqa: BLE001
            print(f"  CHECK-ERROR reference {tag}: {type(e).__name__}: {e}", flush=True)
            results.append(dict(check="reference", V=V, R=R, k=k, top_p=top_p, verdict="ERROR", detail=str(e)))
            continue
        t_ref = time.time() - t
        impls = []
        if k == 0:
            impls.append(GumbelMaxSampler())
            if R in SERIAL_R and (V == SERIAL_V or ARGS.quick):
                impls.append(SerialScanSampler())
        impls.append(StochasticSampler())
        ours_tokens = {}
        for impl in impls:
            try:
                state = impl.prepare(step)
                tok, cnt = impl.launch(state)
                tok, cnt = tok.clone(), cnt.clone()
                ours_tokens[impl.name] = (tok, cnt)
                idx = torch.tensor(reqs, dtype=torch.long, device=tok.device)
                ok, ties, real = compare_tokens(tok[idx].cpu(), cnt[idx].cpu(), ref.tokens, ref.counts, sub, k)
                verdict = "PASS" if not real else "MISMATCH"
                line = (f"{impl.name}: {ok}/{len(reqs)} requests exact, {ties} near-tie, {len(real)} REAL mismatches "
                        f"(reference {t_ref:.1f}s)")
                if real:
                    line += f"; first: {real[0]}"
                print(f"  {'PASS ' if not real else '!!!! MISMATCH'} {tag} {line}", flush=True)
                results.append(dict(check="vs-reference", impl=impl.name, V=V, R=R, k=k, top_p=top_p,
                                    checked=len(reqs), exact=ok, near_tie=ties, real=len(real), verdict=verdict,
                                    detail=real[:3]))
                # determinism
                n_same = 0
                n_det = ARGS.det_launches if impl.name != "serial-scan" else min(ARGS.det_launches, 1 if ARGS.quick else 10)
                for _ in range(n_det):
                    t2, c2 = impl.launch(state)
                    n_same += bool(torch.equal(t2, tok) and torch.equal(c2, cnt))
                dv = "PASS" if n_same == n_det else "NONDETERMINISTIC"
                print(f"  {'PASS ' if dv == 'PASS' else '!!!! NONDET'} {tag} {impl.name}: determinism "
                      f"{n_same}/{n_det} launches bit-identical", flush=True)
                results.append(dict(check="determinism", impl=impl.name, V=V, R=R, k=k, top_p=top_p,
                                    launches=n_det, identical=n_same, verdict=dv))
                del state
            except Exception as e:  # noqa: BLE001
                print(f"  !!!! CHECK-ERROR {tag} {impl.name}: {type(e).__name__}: {e}", flush=True)
                traceback.print_exc(limit=3)
                results.append(dict(check="vs-reference", impl=impl.name, V=V, R=R, k=k, top_p=top_p,
                                    verdict="ERROR", detail=f"{type(e).__name__}: {e}"))
        # vLLM parity (same RNG contract): information, whole batch against stochastic
        if peers.gumbel_sample is not None and top_p >= 1.0 and "stochastic" in ours_tokens:
            try:
                tok, cnt = ours_tokens["stochastic"]
                m = vllm_meta(inp, step)
                if k == 0:
                    vt = peers.gumbel_sample(step.logits, m["idx"], step.temperature, step.seed, step.positions,
                                             False, False)
                    same = int((vt.long() == tok[:, 0]).sum())
                    vc = None
                else:
                    vt, vc = peers.rejection_sample(step.logits, None, m["draft_sampled"], step.cu_num_logits,
                                                    step.positions, m["idx"], m["exp_idx"], m["loc"],
                                                    step.temperature, step.seed, k)
                    vt, vc = vt.cpu(), vc.cpu()
                    tc, cc = tok.cpu(), cnt.cpu()
                    same = sum(int(vc[r]) == int(cc[r]) and vt[r, :int(vc[r])].tolist() == tc[r, :int(cc[r])].tolist()
                               for r in range(R))
                acc = "" if vc is None else f", mean emitted vllm {vc.float().mean():.2f} / ours {cnt.float().mean():.2f}"
                print(f"  INFO  {tag} vllm vs stochastic: {same}/{R} requests token-identical{acc} "
                      f"(differences should be near-ties only)", flush=True)
                results.append(dict(check="vllm-parity", impl="vllm", V=V, R=R, k=k, top_p=top_p, identical=same,
                                    total=R, verdict="INFO"))
            except Exception as e:  # noqa: BLE001
                print(f"  INFO  {tag} vllm parity failed: {type(e).__name__}: {e}", flush=True)
        if "stochastic" in ours_tokens and k > 0:
            c = ours_tokens["stochastic"][1].float()
            print(f"  INFO  {tag} stochastic mean emitted {c.mean():.2f} of {k + 1} (acceptance "
                  f"{(c.mean() - 1) / k:.2f})", flush=True)


# ---------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------


def quantiles(xs: list[float]) -> tuple[float, float, float]:
    t = torch.tensor(xs, dtype=torch.float64)
    q = torch.quantile(t, torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64))
    return float(q[0]), float(q[1]), float(q[2])


def sync():
    if CUDA:
        torch.cuda.synchronize()


def time_cold(fn) -> tuple[float, float, float]:
    if not CUDA:
        return time_cpu(fn)
    r = triton.testing.do_bench(fn, warmup=ARGS.warmup, rep=ARGS.rep, quantiles=[0.5, 0.2, 0.8])
    return r[0] * 1e3, r[1] * 1e3, r[2] * 1e3


def estimate_ms(fn, n=3) -> float:
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return max((time.perf_counter() - t) * 1e3 / n, 1e-3)


def time_warm(fn) -> tuple[float, float, float]:
    if not CUDA:
        return time_cpu(fn)
    est = estimate_ms(fn)
    n = int(min(300, max(3, ARGS.warm_ms / est)))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return quantiles([s.elapsed_time(e) * 1e3 for s, e in ev])


def time_graph(fn) -> tuple[float, float, float, int]:
    est = estimate_ms(fn)
    G = ARGS.graph_launches if est < 2.0 else max(1, int(20.0 / est))
    G = min(G, ARGS.graph_launches)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(G):
            fn()
    g.replay()
    torch.cuda.synchronize()
    n = int(min(50, max(3, ARGS.graph_ms / (est * G))))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    med, p20, p80 = quantiles([a.elapsed_time(b) * 1e3 / G for a, b in ev])
    del g
    return med, p20, p80, G


def time_cpu(fn) -> tuple[float, float, float]:
    fn()
    xs = []
    for _ in range(3):
        t = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t) * 1e6)
    return quantiles(xs)


def over_budget() -> bool:
    return time.time() - T0 > ARGS.budget_s


def time_shape(inp: dict, impls_by_tp: dict, copy_gbs: float, rows: list) -> None:
    V, R, k = inp["V"], inp["R"], inp["k"]

    def record(d, top_p, mode, rnd, med, p20, p80, extra=None):
        b = d["bytes"]
        row = dict(impl=d["impl"], family=d["family"], case="plain" if k == 0 else "verify", V=V, R=R, k=k,
                   top_p=top_p, mode=mode, round=rnd, median_us=round(med, 2), p20_us=round(p20, 2),
                   p80_us=round(p80, 2), bytes=b, gbps=round(b / (med * 1e-6) / 1e9, 1) if med > 0 else None,
                   pct_copy_bw=round(100.0 * b / (med * 1e-6) / 1e9 / copy_gbs, 1) if med > 0 and copy_gbs else None,
                   floor_us=round(b / (copy_gbs * 1e9) * 1e6, 2) if copy_gbs else None, error="")
        if extra:
            row.update(extra)
        rows.append(row)

    def record_err(d, top_p, mode, e):
        rows.append(dict(impl=d["impl"], family=d["family"], case="plain" if k == 0 else "verify", V=V, R=R, k=k,
                         top_p=top_p, mode=mode, round=0, median_us=None, p20_us=None, p80_us=None, bytes=d["bytes"],
                         gbps=None, pct_copy_bw=None, floor_us=None, error=f"{type(e).__name__}: {str(e)[:200]}"))
        print(f"  !!!! TIMING-ERROR {d['impl']} V={V} R={R} k={k} top_p={top_p} {mode}: "
              f"{type(e).__name__}: {str(e)[:200]}", flush=True)

    items = [(tp, d) for tp, lst in impls_by_tp.items() for d in lst]
    # first call of each (compile, JIT) outside every timing
    for tp, d in items:
        try:
            d["fn"]()
        except Exception as e:  # noqa: BLE001
            d["broken"] = True
            record_err(d, tp, "warmup", e)
    sync()
    items = [(tp, d) for tp, d in items if not d.get("broken")]
    modes = [("eager-cold", rr) for rr in range(1, ARGS.rounds + 1)] + [("eager-warm", 1)]
    if CUDA:
        modes.append(("graph", 1))
    for mode, rnd in modes:
        order = items if rnd % 2 == 1 else list(reversed(items))
        for tp, d in order:
            if over_budget():
                print(f"  !!!! BUDGET: {time.time() - T0:.0f}s > --budget-s {ARGS.budget_s:.0f}: "
                      f"skipping the rest of V={V} R={R} k={k}", flush=True)
                return
            try:
                if mode == "eager-cold":
                    record(d, tp, mode, rnd, *time_cold(d["fn"]))
                elif mode == "eager-warm":
                    record(d, tp, mode, rnd, *time_warm(d["fn"]))
                else:
                    med, p20, p80, G = time_graph(d["fn"])
                    record(d, tp, mode, rnd, med, p20, p80, dict(graph_launches=G))
            except Exception as e:  # noqa: BLE001
                record_err(d, tp, mode, e)
                if CUDA:
                    try:
                        torch.cuda.synchronize()
                    except Exception:  # noqa: BLE001
                        pass
    # compact per-shape line (eager-cold round-1 medians)
    for tp in impls_by_tp:
        cells = [f"{r['impl']}={r['median_us']:.1f}" for r in rows
                 if r["V"] == V and r["R"] == R and r["k"] == k and r["top_p"] == tp and r["mode"] == "eager-cold"
                 and r["round"] == 1 and r["median_us"] is not None]
        print(f"  V={V} R={R} k={k} top_p={tp} cold us: " + "  ".join(cells), flush=True)


# ---------------------------------------------------------------------------
# environment and copy bandwidth
# ---------------------------------------------------------------------------


def environment() -> dict:
    env = dict(date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               host=platform.node(), python=platform.python_version(), torch=torch.__version__,
               triton=triton.__version__, cuda=torch.version.cuda, device=DEV,
               triton_interpret=os.environ.get("TRITON_INTERPRET", ""))
    if CUDA:
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=torch.cuda.get_device_name(0), sm=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                   mem_gib=round(p.total_memory / 2**30, 1))
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,clocks.mem,"
                                "power.draw,power.limit,temperature.gpu,utilization.gpu",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            env["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
        except Exception as e:  # noqa: BLE001
            env["nvidia_smi"] = f"unavailable: {e}"
    return env


def copy_bandwidth() -> dict:
    if CUDA:
        n = int(ARGS.copy_gib * 2**30) // 4
        src = torch.randn(n, device="cuda")
        dst = torch.empty_like(src)
        r = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200, quantiles=[0.5, 0.2, 0.8])
        nbytes = 2 * n * 4
        res = dict(bytes=nbytes, median_us=r[0] * 1e3, p20_us=r[1] * 1e3, p80_us=r[2] * 1e3,
                   gbps=nbytes / (r[0] * 1e-3) / 1e9, note="device-to-device copy, bytes read + written")
        del src, dst
        torch.cuda.empty_cache()
    else:
        n = 2**24
        src = torch.randn(n)
        dst = torch.empty_like(src)
        med, p20, p80 = time_cpu(lambda: dst.copy_(src))
        res = dict(bytes=2 * n * 4, median_us=med, p20_us=p20, p80_us=p80, gbps=2 * n * 4 / (med * 1e-6) / 1e9,
                   note="CPU copy (quick mode), not a GPU ceiling")
    return res


# ---------------------------------------------------------------------------
# outputs
# ---------------------------------------------------------------------------

CSV_COLS = ["impl", "family", "case", "V", "R", "k", "top_p", "mode", "round", "median_us", "p20_us", "p80_us",
            "bytes", "gbps", "pct_copy_bw", "floor_us", "graph_launches", "error"]


def summarize(rows: list) -> dict:
    """(V,R,k,top_p,mode,impl) -> (median over rounds, spread max-min of round medians, family, floor)."""
    agg = {}
    for r in rows:
        if r["median_us"] is None:
            continue
        key = (r["V"], r["R"], r["k"], r["top_p"], r["mode"], r["impl"])
        agg.setdefault(key, dict(meds=[], family=r["family"], floor=r["floor_us"], pct=[]))
        agg[key]["meds"].append(r["median_us"])
        agg[key]["pct"].append(r["pct_copy_bw"])
    out = {}
    for key, a in agg.items():
        m = sorted(a["meds"])
        out[key] = dict(us=m[len(m) // 2] if len(m) % 2 else 0.5 * (m[len(m) // 2 - 1] + m[len(m) // 2]),
                        spread=m[-1] - m[0], family=a["family"], floor=a["floor"], pct=a["pct"][0])
    return out


def headline(rows: list, V: int) -> str:
    s = summarize(rows)
    shapes = sorted({(k[1], k[2], k[3]) for k in s if k[0] == V}, key=lambda x: (x[1], x[0], -x[2]))
    if not shapes:
        return f"(no timings at V={V})\n"
    lines = [f"### V={V}: eager-cold median us (L2 flushed; spread = max-min over rounds) and graph us/launch",
             "",
             "| R | k | top_p | floor | gumbel-max | stochastic | best peer (cold) | ours/peer | "
             "graph ours | graph peer | ours/peer graph |",
             "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]

    def get(R, k, tp, mode, impl):
        return s.get((V, R, k, tp, mode, impl))

    def best(R, k, tp, mode, fams):
        c = [(v["us"], key[5]) for key, v in s.items()
             if key[:5] == (V, R, k, tp, mode) and v["family"] in fams]
        return min(c) if c else None

    for R, k, tp in shapes:
        gmx, sto = get(R, k, tp, "eager-cold", "gumbel-max"), get(R, k, tp, "eager-cold", "stochastic")
        floor = (gmx or sto or {}).get("floor")
        ours_fast = min([x for x in [(gmx or {}).get("us"), (sto or {}).get("us")] if x is not None], default=None)
        peer = best(R, k, tp, "eager-cold", ("vllm", "flashinfer", "torch"))
        og = [x["us"] for x in [get(R, k, tp, "graph", "gumbel-max"), get(R, k, tp, "graph", "stochastic")] if x]
        pg = best(R, k, tp, "graph", ("vllm", "flashinfer", "torch"))
        f = lambda v: "-" if v is None else f"{v['us']:.1f}±{v['spread']:.1f}"  # noqa: E731
        ratio = f"{ours_fast / peer[0]:.2f}" if ours_fast and peer else "-"
        gratio = f"{min(og) / pg[0]:.2f}" if og and pg else "-"
        lines.append(f"| {R} | {k} | {tp} | {floor if floor is not None else '-'} | {f(gmx)} | {f(sto)} | "
                     f"{'-' if not peer else f'{peer[0]:.1f} {peer[1]}'} | {ratio} | "
                     f"{'-' if not og else f'{min(og):.1f}'} | {'-' if not pg else f'{pg[0]:.1f} {pg[1]}'} | {gratio} |")
    ser = [(key, v) for key, v in s.items() if key[0] == V and key[5] == "serial-scan" and key[4] == "eager-cold"]
    if ser:
        lines.append("")
        lines.append("serial-scan (eager-cold): " + ", ".join(
            f"R={key[1]} top_p={key[3]}: {v['us']:.0f} us" for key, v in sorted(ser)))
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, env: dict, copy: dict, peers: Peers, checks: list, rows: list, skipped: list,
                  vocabs: list, final: bool) -> str:
    out.mkdir(parents=True, exist_ok=True)
    doc = dict(env=env, copy_bandwidth=copy, peers=peers.status, args=vars(ARGS), checks=checks, skipped=skipped,
               rows=rows, elapsed_s=round(time.time() - T0, 1), complete=final)
    (out / "bench.json").write_text(json.dumps(doc, indent=1, default=str))
    with open(out / "bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    n_real = sum(1 for c in checks if c.get("verdict") in ("MISMATCH", "NONDETERMINISTIC", "ERROR"))
    md = [f"# Sampler kernel benchmark ({env.get('gpu', env['device'])}, {env['date']})", "",
          f"torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, python {env['python']}"
          + (f", nvidia-smi: {env['nvidia_smi']}" if env.get("nvidia_smi") else ""), "",
          f"copy bandwidth: {copy['gbps']:.0f} GB/s ({copy['note']}, median {copy['median_us']:.0f} us)", "",
          "peers: " + "; ".join(f"{k}: {v}" for k, v in peers.status.items()), "",
          f"correctness: {sum(1 for c in checks if c.get('verdict') == 'PASS')} checks PASS, "
          f"{n_real} FAIL/ERROR" + (" <<<<<< LOOK AT THE LOG" if n_real else ""), ""]
    for c in checks:
        if c.get("verdict") not in ("PASS", "INFO"):
            md.append(f"- {c.get('verdict')}: {c.get('check')} {c.get('impl', '')} V={c['V']} R={c['R']} k={c['k']} "
                      f"top_p={c['top_p']}: {c.get('detail', '')}")
    md.append("")
    for V in vocabs:
        md.append(headline(rows, V))
    md += ["bytes: plain R*V*4, verify N*V*4 (+R*k*V*4 draft probs for FlashInfer); floor = bytes / copy bw.",
           "cold = triton do_bench with L2 flush; warm = back-to-back eager calls; graph = CUDA-graph replay / launches.",
           "vLLM MRV2 takes no top-p; FlashInfer chain_speculative_sampling applies no top-p (those cells are n/a).",
           "", "## skipped", ""]
    seen = set()
    for sk in skipped:
        key = (sk["impl"], sk["reason"])
        if key not in seen:
            seen.add(key)
            md.append(f"- {sk['impl']}: {sk['reason']}")
    md += ["", "## all eager-cold / eager-warm / graph medians (us)", "",
           "| impl | V | R | k | top_p | cold | warm | graph | GB/s cold | % copy bw | floor |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    s = summarize(rows)
    keys = sorted({(k[0], k[1], k[2], k[3], k[5]) for k in s}, key=lambda x: (-x[0], x[2], x[1], -x[3], x[4]))
    for V, R, k, tp, impl in keys:
        c, wv, g = (s.get((V, R, k, tp, m, impl)) for m in ("eager-cold", "eager-warm", "graph"))
        f = lambda v: "-" if v is None else f"{v['us']:.1f}"  # noqa: E731
        gb = "-" if c is None else f"{[r for r in rows if r['impl'] == impl and r['V'] == V and r['R'] == R and r['k'] == k and r['top_p'] == tp and r['mode'] == 'eager-cold'][0]['gbps']}"  # noqa: E501
        md.append(f"| {impl} | {V} | {R} | {k} | {tp} | {f(c)} | {f(wv)} | {f(g)} | {gb} | "
                  f"{'-' if c is None else c['pct']} | {'-' if c is None else c['floor']} |")
    errs = [r for r in rows if r.get("error")]
    if errs:
        md += ["", "## timing errors", ""] + [f"- {r['impl']} V={r['V']} R={r['R']} k={r['k']} top_p={r['top_p']} "
                                               f"{r['mode']}: {r['error']}" for r in errs]
    text = "\n".join(md) + "\n"
    (out / "bench.md").write_text(text)
    return text


# ---------------------------------------------------------------------------


def main() -> int:
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    if ARGS.quick:
        vocabs, shapes, top_ps = [1000], [(1, 0), (2, 4)], [1.0, 0.9]
    else:
        vocabs, shapes, top_ps = list(VOCABS), list(SHAPES), list(TOP_PS)
    if ARGS.vocab:
        vocabs = [int(x) for x in ARGS.vocab.split(",") if x.strip()]
    if ARGS.top_p:
        top_ps = [float(x) for x in ARGS.top_p.split(",") if x.strip()]
    if ARGS.cases:
        keys = [x.strip() for x in ARGS.cases.split(",") if x.strip()]
        shapes = [(R, k) for R, k in shapes
                  if any(c == f"R{R}k{k}" or (c == "plain" and k == 0) or (c == "verify" and k > 0) for c in keys)]
    env = environment()
    log("environment: " + json.dumps(env))
    copy = copy_bandwidth()
    log(f"copy bandwidth: {copy['gbps']:.0f} GB/s ({copy['note']}; {copy['bytes'] / 2**30:.1f} GiB moved, "
        f"median {copy['median_us']:.0f} us)")
    peers = Peers()
    peers.load(ARGS)
    for p, st in peers.status.items():
        log(f"peer {p}: {st}")
    checks, rows, skipped = [], [], []
    seed = 1234
    for V in vocabs:
        for R, k in shapes:
            if over_budget():
                log(f"!!!! BUDGET exhausted before V={V} R={R} k={k}: skipped")
                continue
            seed += 1
            log(f"shape V={V} R={R} k={k} (N={R * (k + 1)}, logits {R * (k + 1) * V * 4 / 2**20:.1f} MiB)")
            inp = make_inputs(V, R, k, seed)
            steps = {tp: make_step(inp, tp) for tp in top_ps}
            if not ARGS.skip_correctness:
                check_shape(inp, steps, peers, checks)
            impls = {}
            for tp, st in steps.items():
                try:
                    impls[tp] = build_impls(inp, st, tp, peers, skipped)
                except Exception as e:  # noqa: BLE001
                    print(f"  !!!! BUILD-ERROR V={V} R={R} k={k} top_p={tp}: {type(e).__name__}: {e}", flush=True)
                    traceback.print_exc(limit=3)
            time_shape(inp, impls, copy["gbps"], rows)
            del inp, steps, impls
            gc.collect()
            if CUDA:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        write_outputs(out, env, copy, peers, checks, rows, skipped, vocabs, final=False)  # partial, in case
    text = write_outputs(out, env, copy, peers, checks, rows, skipped, vocabs, final=True)
    bad = [c for c in checks if c.get("verdict") in ("MISMATCH", "NONDETERMINISTIC", "ERROR")]
    print("\n" + "=" * 100)
    print(f"## HEADLINE  ({env.get('gpu', env['device'])}, torch {env['torch']}, triton {env['triton']}, "
          f"CUDA {env['cuda']}, {env['date']}, elapsed {time.time() - T0:.0f}s)")
    print(f"copy bandwidth {copy['gbps']:.0f} GB/s; peers: " + "; ".join(
        f"{k}: {v[:60]}" for k, v in peers.status.items()))
    n_pass = sum(1 for c in checks if c.get("verdict") == "PASS")
    print(f"correctness: {n_pass} PASS, {len(bad)} FAIL/ERROR" + ("" if not bad else "  <<<<<<<<<< FAILURES:"))
    for c in bad[:10]:
        print(f"  {c.get('verdict')} {c.get('check')} {c.get('impl', '')} V={c['V']} R={c['R']} k={c['k']} "
              f"top_p={c['top_p']} {str(c.get('detail', ''))[:200]}")
    par = [c for c in checks if c.get("check") == "vllm-parity"]
    if par:
        print("vllm parity (token-identical requests): " + ", ".join(
            f"V{c['V']}R{c['R']}k{c['k']}:{c['identical']}/{c['total']}" for c in par))
    n_err = sum(1 for r in rows if r.get("error"))
    if n_err:
        print(f"timing errors: {n_err} (see bench.md)")
    head_v = SERIAL_V if SERIAL_V in vocabs else vocabs[0]
    print()
    print(headline(rows, head_v))
    print(f"full results: {out}/bench.md, bench.csv ({len(rows)} rows), bench.json")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
