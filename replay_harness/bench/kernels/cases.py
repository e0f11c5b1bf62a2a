"""What the kernel benchmark times: the synthetic inputs of one shape, and THE case table.

A shape is (V, R, k): R requests of k drafts each (k = 0: plain samples), N = R(k+1) logits rows of V.
A *case* is a function ``case(x: CaseInput) -> list[Timed | Skip]``: the impls of one family that apply to
the input ``x`` (one shape at one top_p), each as a zero-argument callable of device work only (host work
such as ``prepare`` done once, outside the timing). :data:`CASES` lists them; to add an impl or a peer,
write one such function and append it (the run times every entry interleaved, eager and CUDA graph).

Bytes (the floor each impl must move): N*V*4 (each fp32 logits row read once; plain: R*V*4);
FlashInfer's chain sampler also reads its draft probabilities, R*k*V*4.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import torch

from replay_harness.bench.kernels.peers import Peers
from replay_harness.impls.peers import vllm_layout
from replay_harness.bench.kernels.settings import SERIAL_R, SERIAL_V
from replay_harness.impls import get_impl
from replay_harness.recording.step import Step


@dataclass
class Inputs:
    """SYNTHETIC inputs of one shape, on ``device``: logits [N, V] fp32 (randn*3 plus one peak per row),
    draft_ids [N] int32 (the row argmax 70% of the time, else random; -1 on bonus rows), positions [N]
    int64, seeds [R] int64."""

    V: int
    R: int
    k: int
    logits: torch.Tensor
    draft_ids: torch.Tensor
    positions: torch.Tensor
    seeds: torch.Tensor

    @property
    def N(self) -> int:
        return self.R * (self.k + 1)

    @property
    def bytes(self) -> int:
        return self.N * self.V * 4

    @staticmethod
    def seed_of(V: int, R: int, k: int) -> int:
        """The generator seed of shape (V, R, k): the same inputs whichever shapes a run lists with it."""
        return 1234 + zlib.crc32(f"{V}:{R}:{k}".encode())

    @classmethod
    def make(cls, V: int, R: int, k: int, seed: int, device: str) -> "Inputs":
        g = torch.Generator(device=device).manual_seed(seed)
        N = R * (k + 1)
        logits = torch.randn(N, V, generator=g, device=device) * 3.0
        # The peak carries p ~ 0.25 .. 0.95 of the mass: E[exp(3z)] = exp(4.5), so log(V) + 4.5 is even odds.
        peak_tok = torch.randint(0, V, (N,), generator=g, device=device)
        peak_val = math.log(V) + 4.5 + (torch.rand(N, generator=g, device=device) * 4.0 - 1.0)
        logits[torch.arange(N, device=device), peak_tok] = peak_val
        am = logits.argmax(-1)
        rnd = torch.randint(0, V, (N,), generator=g, device=device)
        use_am = torch.rand(N, generator=g, device=device) < 0.7
        draft_row = torch.where(use_am, am, rnd)
        is_bonus = torch.zeros(N, dtype=torch.bool, device=device)
        is_bonus[k::k + 1] = True
        draft_ids = torch.where(is_bonus, torch.full_like(draft_row, -1), draft_row).to(torch.int32)
        base = torch.randint(16, 4096, (R,), generator=g, device=device)
        positions = (base.repeat_interleave(k + 1) + torch.arange(k + 1, device=device).repeat(R)).to(torch.int64)
        seeds = torch.randint(-2**62, 2**62, (R,), generator=g, device=device, dtype=torch.int64)
        return cls(V=V, R=R, k=k, logits=logits, draft_ids=draft_ids, positions=positions, seeds=seeds)

    def step(self, top_p: float, top_k: int = 0) -> Step:
        """The inputs as a Step: every request at temperature 1, the given top-k (0 = off) and top-p."""
        R, k, N, dev = self.R, self.k, self.N, self.logits.device
        return Step(logits=self.logits, cu_num_logits=torch.arange(0, N + 1, k + 1, dtype=torch.int32, device=dev),
                    draft_token_ids=self.draft_ids, positions=self.positions,
                    temperature=torch.ones(R, dtype=torch.float32, device=dev),
                    top_k=torch.full((R,), top_k, dtype=torch.int32, device=dev),
                    top_p=torch.full((R,), top_p, dtype=torch.float32, device=dev),
                    min_p=torch.zeros(R, dtype=torch.float32, device=dev), seed=self.seeds,
                    request_ids=torch.arange(R, dtype=torch.int64, device=dev) + 1000)


@dataclass
class CaseInput:
    inp: Inputs
    step: Step
    top_p: float
    peers: Peers
    top_k: int = 0


@dataclass
class Timed:
    """One impl ready to time: ``fn()`` runs its device work once. family: ours, vllm, flashinfer, torch."""

    impl: str
    family: str
    fn: Callable[[], Any]
    bytes: int


@dataclass
class Skip:
    impl: str
    reason: str


# -- the case table --------------------------------------------------------------------------------------

OURS = ("gumbel-max", "serial-scan", "stochastic")  # registry names, in timing order


def ours_applies(name: str, V: int, R: int, k: int, *, checking: bool = False, quick: bool = False) -> bool:
    """gumbel-max and serial-scan take plain samples only (k = 0); serial-scan is slow, so it is timed at
    R in SERIAL_R and V = SERIAL_V only (checked at any V in quick mode, where it is never timed)."""
    if name == "stochastic":
        return True
    if k:
        return False
    return name != "serial-scan" or (R in SERIAL_R and (V == SERIAL_V or (checking and quick)))


def ours(x: CaseInput) -> list[Timed | Skip]:
    out: list[Timed | Skip] = []
    for name in OURS:
        if ours_applies(name, x.inp.V, x.inp.R, x.inp.k):
            impl = get_impl(name)
            out.append(Timed(name, "ours", partial(impl.launch, impl.prepare(x.step)), x.inp.bytes))
    return out


def vllm(x: CaseInput) -> list[Timed | Skip]:
    p, s, k = x.peers, x.step, x.inp.k
    if p.gumbel_sample is None:
        return [Skip("vllm", p.status.get("vllm", "not loaded"))]
    if x.top_p < 1.0 or x.top_k:
        return [Skip("vllm", "MRV2 gumbel_sample / rejection_sample take no top-k / top-p (a separate pass)")]
    m = vllm_layout(s)
    if k == 0:  # logits already temperature-processed (T=1): apply_temperature=False
        fn = partial(p.gumbel_sample, s.logits, m["idx"], s.temperature, s.seed, s.positions, False, False)
        return [Timed("vllm.gumbel_sample", "vllm", fn, x.inp.bytes)]
    fn = partial(p.rejection_sample, s.logits, None, m["draft_sampled"], s.cu_num_logits, s.positions, m["idx"],
                 m["exp_idx"], m["local"], s.temperature, s.seed, k)
    return [Timed("vllm.rejection_sample", "vllm", fn, x.inp.bytes)]


def flashinfer(x: CaseInput) -> list[Timed | Skip]:
    fi, logits, V, R, k, top_p = x.peers.fi, x.step.logits, x.inp.V, x.inp.R, x.inp.k, x.top_p
    if fi is None:
        return [Skip("flashinfer", x.peers.status.get("flashinfer", "not loaded"))]
    top_k = x.top_k or V
    if k == 0 and top_p >= 1.0 and top_k == V:
        return [Timed("fi.sampling_from_logits", "flashinfer",
                      lambda: fi.sampling_from_logits(logits, seed=0, offset=0), x.inp.bytes)]
    if k == 0:
        return [Timed(f"fi.top_k_top_p_from_logits({'V' if top_k == V else top_k},p,joint)", "flashinfer",
                      lambda: fi.top_k_top_p_sampling_from_logits(logits, top_k, top_p, filter_apply_order="joint",
                                                                  seed=0, offset=0), x.inp.bytes)]
    if top_p < 1.0 or top_k != V:
        return [Skip("flashinfer", "chain_speculative_sampling applies no top-k / top-p")]
    dids = x.step.draft_token_ids.view(R, k + 1)[:, :k].contiguous()
    dprobs = torch.zeros(R, k, V, dtype=torch.float32, device=logits.device)
    dprobs.scatter_(2, dids.long().unsqueeze(-1), 1.0)
    tprobs = fi.softmax(logits).view(R, k + 1, V)
    nbytes = x.inp.bytes + R * k * V * 4
    return [Timed("fi.softmax+chain_speculative", "flashinfer",
                  lambda: fi.chain_speculative_sampling(dprobs, dids, fi.softmax(logits).view(R, k + 1, V),
                                                        seed=0, offset=0), nbytes),
            Timed("fi.chain_speculative(probs given)", "flashinfer",
                  lambda: fi.chain_speculative_sampling(dprobs, dids, tprobs, seed=0, offset=0), nbytes)]


def torch_race(x: CaseInput) -> list[Timed | Skip]:
    """The plain torch baseline (k = 0): softmax, then the exponential race (with a sort-based top-p)."""
    logits, top_p = x.step.logits, x.top_p
    if x.inp.k:
        return []

    def topk_race():
        kth = torch.topk(logits, x.top_k, dim=-1).values[:, -1:]
        p = torch.softmax(logits.masked_fill(logits < kth, float("-inf")), -1)
        return torch.argmax(p / torch.empty_like(p).exponential_(), -1)

    def race():
        p = torch.softmax(logits, -1)
        return torch.argmax(p / torch.empty_like(p).exponential_(), -1)

    def topp_race():
        p = torch.softmax(logits, -1)
        sp, si = torch.sort(p, -1, descending=True)
        sp = sp.masked_fill((sp.cumsum(-1) - sp) > top_p, 0.0)
        q = torch.zeros_like(p).scatter_(-1, si, sp)
        return torch.argmax(q / torch.empty_like(q).exponential_(), -1)

    if x.top_k:
        return [Timed("torch.topk+exp-race", "torch", topk_race, x.inp.bytes)] if top_p >= 1.0 else []
    if top_p >= 1.0:
        return [Timed("torch.softmax+exp-race", "torch", race, x.inp.bytes)]
    return [Timed("torch.sort-top-p+exp-race", "torch", topp_race, x.inp.bytes)]


CASES: list[Callable[[CaseInput], list[Timed | Skip]]] = [ours, vllm, flashinfer, torch_race]


def build(x: CaseInput, only: list[str] | None = None) -> tuple[list[Timed], list[Skip]]:
    """Every case of :data:`CASES` on ``x``: (what to time, in table order; what was skipped and why).
    ``only``: keep impls whose name contains one of these substrings."""
    timed: list[Timed] = []
    skipped: list[Skip] = []
    for case in CASES:
        for item in case(x):
            (skipped if isinstance(item, Skip) else timed).append(item)
    if only:
        timed = [t for t in timed if any(s in t.impl for s in only)]
    return timed, skipped
