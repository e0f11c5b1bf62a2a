"""Correctness before timing (mismatches never stop the timing; they are reported):

* vs-reference: our impls' tokens/counts against the torch ``reference`` on a CPU copy of the checked
  requests (all when R <= 8, else ``check_requests`` spread over the batch); a mismatch at a near-tie
  (:func:`replay_harness.oracle.near_tie.is_near_tie`) is counted apart, not as a failure;
* determinism: ``det_launches`` repeated launches give bit-identical tokens and counts;
* vllm-parity (information): vLLM MRV2 follows the same RNG contract, so its tokens should equal
  ``stochastic``'s up to near-ties.

Each check appends a dict (check, impl, V, R, k, top_p, verdict PASS / MISMATCH / NONDETERMINISTIC /
ERROR / INFO, details) to ``results``.
"""
from __future__ import annotations

import time
import traceback

import torch

from replay_harness.bench.kernels.cases import OURS, Inputs, ours_applies
from replay_harness.bench.kernels.peers import Peers
from replay_harness.impls.peers import vllm_layout
from replay_harness.bench.kernels.settings import Settings
from replay_harness.impls import get_impl
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.near_tie import is_near_tie
from replay_harness.recording.step import Step

FAILED = ("MISMATCH", "NONDETERMINISTIC", "ERROR")


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
        pos = min(next((j for j in range(min(c, rc)) if a[j] != b[j]), min(c, rc)), k)
        tie, margin = is_near_tie(sub, i, pos)
        if tie:
            ties += 1
        else:
            real.append(dict(request=i, pos=pos, margin=margin, got=a, want=b))
    return ok, ties, real


def _check_impl(name: str, step: Step, sub: Step, ref, reqs: list[int], tag: str, t_ref: float, cfg: Settings,
                shape: dict, results: list) -> tuple[torch.Tensor, torch.Tensor]:
    """vs-reference and determinism of one of our impls; its (tokens, counts)."""
    impl = get_impl(name)
    state = impl.prepare(step)
    tok, cnt = impl.launch(state)
    tok, cnt = tok.clone(), cnt.clone()
    idx = torch.tensor(reqs, dtype=torch.long, device=tok.device)
    ok, ties, real = compare_tokens(tok[idx].cpu(), cnt[idx].cpu(), ref.tokens, ref.counts, sub, shape["k"])
    line = (f"{name}: {ok}/{len(reqs)} requests exact, {ties} near-tie, {len(real)} REAL mismatches "
            f"(reference {t_ref:.1f}s)" + (f"; first: {real[0]}" if real else ""))
    print(f"  {'PASS ' if not real else '!!!! MISMATCH'} {tag} {line}", flush=True)
    results.append(dict(check="vs-reference", impl=name, **shape, checked=len(reqs), exact=ok, near_tie=ties,
                        real=len(real), verdict="PASS" if not real else "MISMATCH", detail=real[:3]))
    n_det = cfg.det_launches if name != "serial-scan" else min(cfg.det_launches, 1 if cfg.quick else 10)
    n_same = 0
    for _ in range(n_det):
        t2, c2 = impl.launch(state)
        n_same += bool(torch.equal(t2, tok) and torch.equal(c2, cnt))
    dv = "PASS" if n_same == n_det else "NONDETERMINISTIC"
    print(f"  {'PASS ' if dv == 'PASS' else '!!!! NONDET'} {tag} {name}: determinism "
          f"{n_same}/{n_det} launches bit-identical", flush=True)
    results.append(dict(check="determinism", impl=name, **shape, launches=n_det, identical=n_same, verdict=dv))
    return tok, cnt


def _vllm_parity(step: Step, tok: torch.Tensor, cnt: torch.Tensor, peers: Peers, tag: str, shape: dict,
                 results: list) -> None:
    R, k = shape["R"], shape["k"]
    m = vllm_layout(step)
    if k == 0:
        vt = peers.gumbel_sample(step.logits, m["idx"], step.temperature, step.seed, step.positions, False, False)
        same, vc = int((vt.long() == tok[:, 0]).sum()), None
    else:
        vt, vc = peers.rejection_sample(step.logits, None, m["draft_sampled"], step.cu_num_logits, step.positions,
                                        m["idx"], m["exp_idx"], m["local"], step.temperature, step.seed, k)
        vt, vc, tc, cc = vt.cpu(), vc.cpu(), tok.cpu(), cnt.cpu()
        same = sum(int(vc[r]) == int(cc[r]) and vt[r, :int(vc[r])].tolist() == tc[r, :int(cc[r])].tolist()
                   for r in range(R))
    acc = "" if vc is None else f", mean emitted vllm {vc.float().mean():.2f} / ours {cnt.float().mean():.2f}"
    print(f"  INFO  {tag} vllm vs stochastic: {same}/{R} requests token-identical{acc} "
          f"(differences should be near-ties only)", flush=True)
    results.append(dict(check="vllm-parity", impl="vllm", **shape, identical=same, total=R, verdict="INFO"))


def check_shape(inp: Inputs, steps: dict[float, Step], peers: Peers, cfg: Settings, results: list) -> None:
    """Every check of one shape, for each top_p's step."""
    V, R, k = inp.V, inp.R, inp.k
    reqs = pick_requests(R, cfg.check_requests)
    for top_p, step in steps.items():
        shape = dict(V=V, R=R, k=k, top_p=top_p)
        tag = f"V={V} R={R} k={k} top_p={top_p}"
        t = time.time()
        try:
            sub = step.select(reqs).to("cpu")
            ref = ReferenceSampler().sample(sub)
        except Exception as e:  # noqa: BLE001 - reported, the timing still runs
            print(f"  CHECK-ERROR reference {tag}: {type(e).__name__}: {e}", flush=True)
            results.append(dict(check="reference", **shape, verdict="ERROR", detail=str(e)))
            continue
        t_ref = time.time() - t
        ours_tokens = {}
        for name in OURS:
            if not ours_applies(name, V, R, k, checking=True, quick=cfg.quick):
                continue
            try:
                ours_tokens[name] = _check_impl(name, step, sub, ref, reqs, tag, t_ref, cfg, shape, results)
            except Exception as e:  # noqa: BLE001
                print(f"  !!!! CHECK-ERROR {tag} {name}: {type(e).__name__}: {e}", flush=True)
                traceback.print_exc(limit=3)
                results.append(dict(check="vs-reference", impl=name, **shape, verdict="ERROR",
                                    detail=f"{type(e).__name__}: {e}"))
        if peers.gumbel_sample is not None and top_p >= 1.0 and "stochastic" in ours_tokens:
            try:
                _vllm_parity(step, *ours_tokens["stochastic"], peers, tag, shape, results)
            except Exception as e:  # noqa: BLE001
                print(f"  INFO  {tag} vllm parity failed: {type(e).__name__}: {e}", flush=True)
        if "stochastic" in ours_tokens and k > 0:
            c = ours_tokens["stochastic"][1].float()
            print(f"  INFO  {tag} stochastic mean emitted {c.mean():.2f} of {k + 1} (acceptance "
                  f"{(c.mean() - 1) / k:.2f})", flush=True)
