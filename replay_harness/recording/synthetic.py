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


PIPELINE_RULES = ("penalties", "bias", "allowed", "bad-words", "min-tokens", "grammar", "logprobs")


def _ragged_lists(lists: list[list[int]], dtype=torch.int32) -> tuple[torch.Tensor, torch.Tensor]:
    sizes = torch.tensor([0] + [len(x) for x in lists])
    flat = torch.tensor([t for x in lists for t in x], dtype=dtype)
    return flat, torch.cumsum(sizes, 0).to(torch.int32)


def add_pipeline(gen: torch.Generator, step: Step, rules: tuple[str, ...] = PIPELINE_RULES) -> Step:
    """``step`` with SYNTHETIC inputs of the sampling pipeline's ``rules`` (PIPELINE_RULES), chosen to bite: the
    histories, stop ids, banned words and biased ids hold each request's likely tokens (its rows' argmaxes), so
    a rule left out changes tokens. Request 0 of each rule keeps it off (a mix, as an engine batch holds)."""
    import dataclasses

    r, v = step.num_requests, step.vocab_size
    cu = step.cu_num_logits.tolist()
    logits = torch.nan_to_num(step.logits.float(), neginf=-1e30)
    top = [logits[cu[i]:cu[i + 1]].topk(min(3, v), dim=1).indices.flatten().unique().tolist() for i in range(r)]
    rand = lambda n: torch.randint(0, v, (n,), generator=gen).tolist()  # noqa: E731
    out: dict[str, torch.Tensor] = {}
    outputs = [rand(int(torch.randint(0, 12, (1,), generator=gen))) + top[i][:2] for i in range(r)]
    out["output_token_ids"], out["cu_output_token_ids"] = _ragged_lists(outputs)
    if "penalties" in rules:
        prompts = [rand(20) + top[i][1:] for i in range(r)]
        out["prompt_token_ids"], out["cu_prompt_token_ids"] = _ragged_lists(prompts)
        on = torch.arange(r) > 0
        out["repetition_penalty"] = torch.where(on, torch.tensor([1.3, 0.8, 2.0])[torch.arange(r) % 3], 1.0)
        out["frequency_penalty"] = torch.where(on, torch.tensor([0.5, -0.3, 1.5])[torch.arange(r) % 3], 0.0)
        out["presence_penalty"] = torch.where(on, torch.tensor([1.0, 0.0, -0.7])[torch.arange(r) % 3], 0.0)
    if "bias" in rules:
        bias = [[] if i == 0 else sorted(set(top[i][:1] + rand(3))) for i in range(r)]
        out["logit_bias_ids"], out["cu_logit_bias"] = _ragged_lists(bias)
        values = torch.randn(int(out["cu_logit_bias"][-1]), generator=gen) * 6.0
        values[::5] = float("-inf")
        out["logit_bias_values"] = values.to(torch.float32)
    if "allowed" in rules:
        allowed = [[] if i % 2 == 0 else sorted(set(top[i][1:] + rand(30))) for i in range(r)]
        out["allowed_token_ids"], out["cu_allowed_token_ids"] = _ragged_lists(allowed)
    if "bad-words" in rules:
        words = [[] if i == 0 else [top[i][:1], outputs[i][-1:] + top[i][1:2], rand(2)] for i in range(r)]
        words = [[w for w in ws if w] for ws in words]
        out["bad_words_token_ids"], out["cu_bad_words_token_ids"] = _ragged_lists([[t for w in ws for t in w]
                                                                                    for ws in words])
        out["bad_words_lengths"], out["cu_bad_words_lengths"] = _ragged_lists([[len(w) for w in ws] for ws in words])
    if "min-tokens" in rules:
        out["min_tokens"] = torch.tensor([0 if i == 0 else len(outputs[i]) + (i % 3) for i in range(r)],
                                         dtype=torch.int32)
        out["stop_token_ids"], out["cu_stop_token_ids"] = _ragged_lists([top[i][:2] for i in range(r)])
    if "grammar" in rules:
        bits = torch.rand(step.logits.shape[0], v, generator=gen) < 0.5
        bits[torch.arange(bits.shape[0]), logits.argmax(1)] = torch.rand(bits.shape[0], generator=gen) < 0.5
        from replay_harness.oracle.logprobs import pack_bits
        out["grammar_bitmask"] = pack_bits(bits)
        out["has_grammar"] = (torch.arange(r) % 2 == 1).to(torch.int8)
    if "logprobs" in rules:
        out["logprobs"] = torch.tensor([[-1, 0, 3, 5][i % 4] for i in range(r)], dtype=torch.int32)
        out["logprobs_mode"] = torch.tensor([i % 4 for i in range(r)], dtype=torch.int8)
    return dataclasses.replace(step, **out)
