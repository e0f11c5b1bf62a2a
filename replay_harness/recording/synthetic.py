"""SYNTHETIC steps for tests and committed synthetic fixtures (never real model output).

Every recording written from here has ``synthetic: true`` in its manifest and
``"synthetic": true`` in each step's metadata. Seeded: the same arguments give
the same bytes.

Features a case can switch on: ties (duplicate row maxima), one-hot rows (one
finite logit), -inf entries, placeholder drafts (-1), draft logits, top-k (incl.
k = 1), tiny top-p, min-p, bf16 logits, mixed greedy and stochastic requests,
ragged k including k = 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from replay_harness.recording.store import Emitted, RecordingWriter
from replay_harness.recording.step import Step


@dataclass
class Case:
    """A recipe for synthetic steps."""

    name: str
    vocab_size: int = 211
    num_requests: int = 6
    max_drafts: int = 4
    steps: int = 3
    temperatures: tuple[float, ...] = (0.0, 1.0)
    features: frozenset[str] = field(default_factory=frozenset)
    dtype: torch.dtype = torch.float32
    description: str = ""


def random_step(gen: torch.Generator, case: Case, step_index: int = 0) -> Step:
    """One synthetic step following ``case`` (all randomness from ``gen``)."""
    f, v, r = case.features, case.vocab_size, case.num_requests
    k = torch.randint(0, case.max_drafts + 1, (r,), generator=gen)
    if "no-k0" in f:
        k = k.clamp(min=1)
    if "all-k0" in f:
        k = torch.zeros_like(k)
    if "ragged" in f and r >= 2:
        k[0], k[1] = 0, case.max_drafts
    n = int((k + 1).sum())
    cu = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(k + 1, 0)]).to(torch.int32)
    logits = torch.randn(n, v, generator=gen) * 3.0
    if "peaked" in f:
        logits[torch.arange(n), torch.randint(0, v, (n,), generator=gen)] += 8.0
    if "ties" in f:
        for j in range(0, n, 2):
            top = logits[j].max()
            a, b = torch.randint(0, v, (2,), generator=gen).tolist()
            logits[j, a] = top + 1.0
            logits[j, b] = top + 1.0
    if "one-hot" in f:
        for j in range(1, n, 3):
            hot = int(torch.randint(0, v, (1,), generator=gen))
            logits[j] = float("-inf")
            logits[j, hot] = 0.5
    if "-inf" in f:
        mask = torch.rand(n, v, generator=gen) < 0.3
        mask[torch.arange(n), logits.argmax(1)] = False
        logits[mask] = float("-inf")
    bonus = (cu[1:] - 1).long()
    argmax = logits.argmax(1)
    pick_top = torch.rand(n, generator=gen) < 0.7
    drafts = torch.where(pick_top, argmax, torch.randint(0, v, (n,), generator=gen)).to(torch.int32)
    if "placeholders" in f:
        drafts[torch.rand(n, generator=gen) < 0.15] = -1
    drafts[bonus] = -1
    temps = torch.tensor(case.temperatures, dtype=torch.float32)
    temperature = temps[torch.randint(0, len(temps), (r,), generator=gen)]
    top_k = torch.zeros(r, dtype=torch.int32)
    top_p = torch.ones(r, dtype=torch.float32)
    min_p = torch.zeros(r, dtype=torch.float32)
    if "top-k" in f:
        top_k = torch.tensor([1, 5, 0, 20, 2, 0, 50, 1][:r] + [3] * max(0, r - 8), dtype=torch.int32)
    if "top-p" in f:
        top_p = torch.tensor([0.01, 0.9, 1.0, 0.5, 0.3, 0.95][:r] + [0.8] * max(0, r - 6), dtype=torch.float32)
    if "min-p" in f:
        min_p = torch.tensor([0.1, 0.0, 0.05, 0.3][:r] + [0.2] * max(0, r - 4), dtype=torch.float32)
    start = torch.randint(5, 4000, (r,), generator=gen)
    positions = torch.cat([torch.arange(int(s), int(s) + int(kk) + 1) for s, kk in zip(start, k)]) + 7 * step_index
    seed = torch.randint(-2**62, 2**62, (r,), generator=gen, dtype=torch.int64)
    draft_logits = None
    if "draft-logits" in f:
        # a draft model that roughly agrees with the target: target logits plus noise
        not_bonus = torch.ones(n, dtype=torch.bool)
        not_bonus[bonus] = False
        draft_logits = (torch.nan_to_num(logits[not_bonus], neginf=-30.0)
                        + torch.randn(n - r, v, generator=gen)).to(case.dtype)
    return Step(logits=logits.to(case.dtype), cu_num_logits=cu, draft_token_ids=drafts, positions=positions,
                temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                request_ids=torch.arange(r, dtype=torch.int64) + 1000 * (step_index + 1),
                draft_logits=draft_logits)


CASES: dict[str, Case] = {c.name: c for c in [
    Case("synthetic-founding", temperatures=(1.0,), features=frozenset({"no-k0", "peaked"}),
         description="temperature 1.0 requests under speculative decoding (the founding case), one-hot drafts"),
    Case("synthetic-mixed", vocab_size=1000, num_requests=8, features=frozenset({"ragged", "ties", "placeholders"}),
         description="mixed greedy/stochastic, ragged k incl. k = 0, ties, placeholder drafts"),
    Case("synthetic-edge", vocab_size=97, features=frozenset({"one-hot", "-inf", "ties", "ragged"}),
         temperatures=(0.0, 0.7, 1.0), description="one-hot rows, -inf entries, ties; non-power-of-two vocab"),
    Case("synthetic-filters", vocab_size=4099, num_requests=8, temperatures=(0.6, 1.0, 1.3),
         features=frozenset({"top-k", "top-p", "min-p", "ragged"}),
         description="top-k incl. k = 1, tiny top-p, min-p, temperatures != 1"),
    Case("synthetic-draft-logits", vocab_size=512, features=frozenset({"draft-logits", "ragged", "peaked"}),
         temperatures=(0.0, 0.8, 1.0), dtype=torch.bfloat16,
         description="bf16 logits with draft logits (probabilistic drafts)"),
    Case("synthetic-plain", vocab_size=3001, num_requests=8, features=frozenset({"all-k0"}),
         temperatures=(0.0, 1.0), description="plain samples only (k = 0)"),
]}


def write_case(case: Case, out: str | Path, *, seed: int = 0, impl: str = "reference", overwrite: bool = False) -> Path:
    """Write ``case`` as a recording whose emitted tokens come from ``impl`` (SYNTHETIC)."""
    from replay_harness.impls import get_impl

    sampler = get_impl(impl)
    gen = torch.Generator().manual_seed(seed)
    source = {"synthetic": True, "generator": "replay_harness.synthetic", "case": case.name, "seed": seed,
              "emitted_by": impl, "description": case.description, "features": sorted(case.features)}
    with RecordingWriter(out, vocab_size=case.vocab_size, source=source, synthetic=True, overwrite=overwrite) as w:
        for i in range(case.steps):
            step = random_step(gen, case, i)
            res = sampler.sample(step)
            w.write_step(step, Emitted(res.tokens.to(torch.int32), res.counts, res.routes), meta={"synthetic": True})
    return Path(out)
