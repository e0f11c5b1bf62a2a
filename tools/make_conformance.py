#!/usr/bin/env python3
"""Regenerate the conformance vectors (replay_harness/conformance/vectors/<rule>/, package data), emitted tokens from `reference`.

    python tools/make_conformance.py                 # every rule into replay_harness/conformance/vectors/
    python tools/make_conformance.py top-k-ties --out /tmp/x

One small recording per rule of replay_harness/conformance/rules.py (V = 16 unless VOCAB says otherwise, F32
unless the rule is about dtypes). Vectors marked ``robust`` are checked before writing: every decision margin
under the reference is > 1e-3 nats and the emitted tokens survive perturbing the logits by 2e-4, so an
implementation that rounds differently (another log, another summation order) still matches them token for
token; the other vectors hold exact ties on purpose (ties are decided by rules, not by rounding).

The sampling pipeline's vectors (schema minor 2; docs/FIXTURES.md, "The sampling pipeline") also carry the
reference's logprobs and kept sets, and are checked by ablation: what the rule decides (tokens; logprobs or
kept sets for the last three rules) must change when the rule is left out (ABLATIONS), else the vector pins
nothing. A vector is written without ``write_stats`` (timings), so writing one again gives the same bytes.
The vectors written before schema minor 2 are minor-0 sha256 recordings: regenerate only the rules you change
(naming them), or every vector is rewritten as minor 2 with xxh3-128 digests (same tokens, other bytes).

The verification methods' vectors (docs/FIXTURES.md, "Verification methods": block, FLy, probabilistic drafts, the
mrv2-fp64 contract) are checked by METHOD_ABLATIONS: the tokens must change when the method is replaced by standard
verification, the drafts by greedy or unsalted draws, the contract by mrv2. Their robustness is checked by
perturbation rather than by decision margins (near_tie measures the standard decisions under mrv2 only): the tokens,
and the probabilistic drafts re-derived from the draft logits, must not change when every logit is moved by up to
1e-3 (PERTURBATIONS random trials). Their builders pick, among candidate requests, the first whose tokens the method
changes (:func:`_differing`), beside control requests it leaves alone.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from replay_harness.conformance.rules import RULE, RULES
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle import processors
from replay_harness.oracle.drafts import derive_drafts
from replay_harness.oracle.near_tie import decision_margin
from replay_harness.oracle.walk import argmax_first
from replay_harness.record.method_options import FLY, RequestMethod, method_fields
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.step import Step
from replay_harness.recording.store import Emitted, RecordingWriter

V = 16
NEG = float("-inf")
I64_MIN, I64_MAX = -(2 ** 63), 2 ** 63 - 1
MARGIN = 1e-3


@dataclass
class Req:
    """One request: logits [k+1, V] (k verify rows, then the bonus row), k drafts, positions pos0.."""

    logits: torch.Tensor
    drafts: list[int] = field(default_factory=list)
    pos0: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0
    draft_logits: torch.Tensor | None = None
    # Schema minor 2, the sampling pipeline (docs/FIXTURES.md, "The sampling pipeline"); None: not set for this
    # request. A vector holds a field when one of its requests sets it; the others then hold its "off" value.
    prompt: list[int] | None = None
    output: list[int] | None = None
    rep: float | None = None
    freq: float | None = None
    pres: float | None = None
    min_tokens: int | None = None
    stops: list[int] | None = None
    allowed: list[int] | None = None
    bias: dict[int, float] | None = None
    bad_words: list[list[int]] | None = None
    grammar: list[list[int]] | None = None  # allowed ids of each row (ids >= V set bits past the vocabulary)
    grammar_on: bool = True  # has_grammar; False: the rows are written and must be ignored
    logprobs: int | None = None
    logprobs_mode: int = 0
    # Verification methods: how the request's drafts are verified (None: no verify_method field); probabilistic:
    # the drafts are the contract drafter's draws (draft_sampling 1 for the step)
    method: RequestMethod | None = None
    probabilistic: bool = False


def ragged(lists: list[list], dtype: torch.dtype = torch.int32) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [*], cu [R+1] int32) of one list per request."""
    cu = torch.tensor([0] + [len(x) for x in lists]).cumsum(0).to(torch.int32)
    return torch.tensor([v for x in lists for v in x], dtype=dtype), cu


def bitmask_row(ids: list[int], words: int) -> list[int]:
    """The int32 words of one grammar row: bit id % 32 of word id // 32 set for each allowed id."""
    w = [0] * words
    for i in ids:
        w[i // 32] |= 1 << (i % 32)
    return [x - (1 << 32) if x >= 1 << 31 else x for x in w]


def pipeline_fields(reqs: list[Req], vocab: int) -> dict[str, torch.Tensor]:
    """The schema minor 2 inputs the requests set (with their partners), for :class:`Step`."""
    def uses(*names: str) -> bool:
        return any(getattr(r, n) is not None for r in reqs for n in names)

    out: dict[str, torch.Tensor] = {}
    for name, attr, off, dtype in (("repetition_penalty", "rep", 1.0, torch.float32),
                                   ("frequency_penalty", "freq", 0.0, torch.float32),
                                   ("presence_penalty", "pres", 0.0, torch.float32),
                                   ("min_tokens", "min_tokens", 0, torch.int32),
                                   ("logprobs", "logprobs", -1, torch.int32)):
        if uses(attr):
            out[name] = torch.tensor([off if getattr(r, attr) is None else getattr(r, attr) for r in reqs], dtype=dtype)
    if "logprobs" in out:
        out["logprobs_mode"] = torch.tensor([r.logprobs_mode for r in reqs], dtype=torch.int8)
    lists = {"prompt_token_ids": ("prompt", uses("prompt", "rep")),
             "output_token_ids": ("output", uses("output", "rep", "freq", "pres", "min_tokens", "bad_words")),
             "allowed_token_ids": ("allowed", uses("allowed")), "stop_token_ids": ("stops", uses("stops"))}
    for name, (attr, on) in lists.items():
        if on:
            out[name], out["cu_" + name] = ragged([getattr(r, attr) or [] for r in reqs])
    if uses("bias"):
        out["logit_bias_ids"], out["cu_logit_bias"] = ragged([list(r.bias or {}) for r in reqs])
        out["logit_bias_values"], _ = ragged([list((r.bias or {}).values()) for r in reqs], torch.float32)
    if uses("bad_words"):
        words = [r.bad_words or [] for r in reqs]
        out["bad_words_token_ids"], out["cu_bad_words_token_ids"] = ragged([[t for w in ws for t in w] for ws in words])
        out["bad_words_lengths"], out["cu_bad_words_lengths"] = ragged([[len(w) for w in ws] for ws in words])
    if uses("grammar"):
        w = (vocab + 31) // 32
        rows = [bitmask_row(ids, w) for r in reqs for ids in (r.grammar or [[]] * (len(r.drafts) + 1))]
        out["grammar_bitmask"] = torch.tensor(rows, dtype=torch.int32)
        out["has_grammar"] = torch.tensor([int(r.grammar is not None and r.grammar_on) for r in reqs], dtype=torch.int8)
    return out


def build_step(reqs: list[Req], dtype: torch.dtype = torch.float32, contract: str = "mrv2") -> Step:
    sizes = [len(r.drafts) + 1 for r in reqs]
    cu = torch.tensor([0] + sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    vocab = reqs[0].logits.shape[1]
    with_dl = any(r.draft_logits is not None for r in reqs)
    dl = [r.draft_logits if r.draft_logits is not None else torch.zeros(len(r.drafts), vocab) for r in reqs]
    return Step(
        logits=torch.cat([r.logits for r in reqs]).to(dtype),
        cu_num_logits=cu,
        draft_token_ids=torch.tensor([d for r in reqs for d in r.drafts + [-1]], dtype=torch.int32),
        positions=torch.tensor([r.pos0 + i for r in reqs for i in range(len(r.drafts) + 1)], dtype=torch.int64),
        temperature=torch.tensor([r.temperature for r in reqs], dtype=torch.float32),
        top_k=torch.tensor([r.top_k for r in reqs], dtype=torch.int32),
        top_p=torch.tensor([r.top_p for r in reqs], dtype=torch.float32),
        min_p=torch.tensor([r.min_p for r in reqs], dtype=torch.float32),
        seed=torch.tensor([r.seed for r in reqs], dtype=torch.int64),
        request_ids=torch.arange(100, 100 + len(reqs), dtype=torch.int64),
        draft_logits=torch.cat(dl).float() if with_dl else None, **pipeline_fields(reqs, vocab),
        **method_fields([r.method for r in reqs], 1 if any(r.probabilistic for r in reqs) else None),
        rng_contract=contract)


def emitted(step: Step) -> Emitted:
    """The reference's answer, with its logprobs and kept sets when the step asks for logprobs."""
    res = ReferenceSampler().sample(step)
    return Emitted(res.tokens.to(torch.int32), res.counts.to(torch.int32), res.routes.to(torch.int8),
                   res.logprobs, res.logprob_ids, res.logprob_ranks, res.kept_mask)


def check_robust(step: Step, rule: str) -> None:
    """Every decision margin > MARGIN, and the tokens survive a 2e-4 perturbation of the logits."""
    e = emitted(step)
    for r in range(step.num_requests):
        for i in range(int(e.counts[r])):
            m = decision_margin(step, r, i)
            if m <= MARGIN:
                raise SystemExit(f"make_conformance: {rule}: request {r} slot {i} has margin {m:.2g} <= {MARGIN}")
    g = torch.Generator().manual_seed(7)
    for _ in range(3):
        noisy = Step(**{**step.__dict__, "logits": step.logits.float() + (torch.rand(step.logits.shape, generator=g)
                                                                          - 0.5) * 4e-4})
        if not torch.equal(emitted(noisy).tokens, e.tokens):
            raise SystemExit(f"make_conformance: {rule}: tokens change under a 2e-4 perturbation")


def rand_logits(g: torch.Generator, rows: int, scale: float = 1.5) -> torch.Tensor:
    return torch.randn(rows, V, generator=g) * scale


def ints(*rows: list[float]) -> torch.Tensor:
    """Rows given as lists, padded with -inf to V."""
    return torch.tensor([list(r) + [NEG] * (V - len(r)) for r in rows], dtype=torch.float32)


def low(g: torch.Generator, *tops: dict[int, float], width: int = V) -> torch.Tensor:
    """One row per dict: uniform noise in [-3, -1], then the dict's tokens set to its values (the pipeline
    vectors place every value that decides a token by hand, far from the others)."""
    x = torch.rand(len(tops), width, generator=g) * 2 - 3
    for i, top in enumerate(tops):
        for t, v in top.items():
            x[i, t] = v
    return x


# ----------------------------------------------------------------------------- one builder per rule
def greedy_ties(g):
    tie = ints([0, 1, 2, 5, 0, 0, 0, 0, 0, 5, 1, 2, 3, 4, 5, 0])  # max 5 at 3, 9, 14: first index 3
    flat = torch.zeros(1, V)
    return [[Req(tie, temperature=0.0), Req(flat, temperature=0.0),
             Req(tie, temperature=0.0, top_k=1, top_p=0.1, min_p=0.9),  # greedy ignores the filters
             Req(torch.cat([tie, tie, flat]), drafts=[3, 9], temperature=0.0),   # 3 accepted, 9 rejected -> 3
             Req(torch.cat([tie, tie]), drafts=[-1], temperature=0.0),          # placeholder: argmax, stop
             Req(torch.cat([tie, flat]), drafts=[3], temperature=0.0)]], False   # accepted, bonus argmax 0


def gumbel_hash(g):
    return [[Req(rand_logits(g, 1), pos0=p, seed=s) for s, p in
             [(0, 0), (1, 1), (42, 17), (1234, 40), (98765, 3), (7, 1000), (31337, 255), (2 ** 20 + 3, 65536)]]], True


def gumbel_clamp(g):
    row = torch.zeros(1, V)
    row[0, 1] = 10.0  # with the clamp token 1 scores 10 - 2.81; without it, -inf noise drops it
    return [[Req(row, pos0=20531159, seed=12345), Req(row * 0.5, pos0=20531159, seed=12345, temperature=0.5),
             Req(row, pos0=20531160, seed=12345)]], False  # the last: no clamp needed (control)


def extreme_seeds_positions(g):
    seeds = [0, -1, I64_MIN, I64_MAX, 2 ** 32, -(2 ** 32), 2 ** 31, 12345]
    positions = [0, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32 + 5, 2 ** 40 + 3, 2 ** 62, I64_MAX - 3]
    reqs = [Req(rand_logits(g, 1), pos0=p, seed=s) for s, p in zip(seeds, positions)]
    for s, p in zip(seeds[::2], positions[1::2]):  # verify: the acceptance uniform uses both position words
        x = rand_logits(g, 3, 1.0)
        reqs.append(Req(x, drafts=[int(x[0].argmax()), int(x[1].argmin())], pos0=p, seed=s))
    return [reqs], True


def temperature(g):
    return [[Req(rand_logits(g, 1, 3.0), temperature=t, seed=11 + i, pos0=5 * i)
             for i, t in enumerate([0.25, 0.7, 1.5, 3.0, 0.05, 1.0])]], True


def min_p(g):
    # integer logits: the bound max + log(min_p) never lands within 0.1 of a value
    base = torch.tensor([[4, 3, 3, 2, 2, 1, 0, 0, -1, -2, -3, 1, 2, 3, 0, -1]], dtype=torch.float32)
    tie_max = ints([6, 0, 6, 6, 1, 5])  # min_p = 1: bound = max, the three 6s are kept
    return [[Req(base, min_p=mp, seed=3 + i, pos0=i) for i, mp in enumerate([0.05, 0.2, 0.5, 0.3])]
            + [Req(tie_max, min_p=1.0, seed=s, pos0=9) for s in range(4)]], False


def top_k_ties(g):
    row = ints([4, 2, 2, 2, 2, 2, 1, 0, 2, 1])  # k = 3: the 3rd largest is 2; the 4 and all six 2s are kept
    return [[Req(row, top_k=3, seed=s, pos0=s) for s in range(8)]
            + [Req(ints([3, 3, 3, 1, 3]), top_k=2, seed=20 + s, pos0=s) for s in range(4)]], False


def top_p_cut(g):
    four = ints([NEG, NEG, 0, NEG, NEG, 0, NEG, 0, NEG, NEG, NEG, 0])  # masses 1/4: cum 1/4, 1/2 dropped at p=1/2
    eight = ints([0] * 8)                                            # masses 1/8: cum <= 1/4 dropped at p=3/4
    top2 = ints([3, 3, 0, 0, 0])                                     # p tiny: only the last of the stable sort
    return [[Req(four, top_p=0.5, seed=s, pos0=s) for s in range(6)]
            + [Req(eight, top_p=0.75, seed=10 + s, pos0=s) for s in range(4)]
            + [Req(top2, top_p=0.01, seed=s, pos0=s) for s in range(2)]], False


def filter_order(g):
    reqs = []
    for i, (t, mp, k, p) in enumerate([(0.5, 0.1, 5, 0.8), (2.0, 0.05, 6, 0.7), (0.8, 0.2, 0, 0.9),
                                       (1.3, 0.0, 4, 0.6), (0.6, 0.3, 8, 1.0), (1.7, 0.02, 10, 0.5)]):
        reqs.append(Req(rand_logits(g, 1, 2.0), temperature=t, min_p=mp, top_k=k, top_p=p, seed=50 + i, pos0=i))
    return [reqs], True


def stochastic_verify(g):
    reqs = []
    for i, (k, t) in enumerate([(1, 1.0), (2, 1.0), (3, 0.8), (4, 1.0), (2, 1.2), (3, 1.0)]):
        x = rand_logits(g, k + 1, 2.0)
        drafts = [int(x[j].argmax()) if (i + j) % 3 else int(torch.randint(V, (1,), generator=g)) for j in range(k)]
        reqs.append(Req(x, drafts=drafts, temperature=t, seed=200 + i, pos0=30 + 7 * i))
    return [reqs], True


def placeholder_drafts(g):
    reqs = []
    for i, drafts in enumerate([[-1], [None, -1], [None, None, -1], [-1, None]]):
        x = rand_logits(g, len(drafts) + 1, 2.0)
        d = [int(x[j].argmax()) if v is None else v for j, v in enumerate(drafts)]
        reqs.append(Req(x, drafts=d, seed=300 + i, pos0=11 * i))
        reqs.append(Req(x, drafts=d, temperature=0.0, pos0=11 * i))
    return [reqs], True


def draft_logits(g):
    reqs = []
    for i, (k, t) in enumerate([(2, 1.0), (3, 0.9), (1, 1.0), (2, 0.7)]):
        x, q = rand_logits(g, k + 1, 2.0), rand_logits(g, k, 2.0)
        reqs.append(Req(x, drafts=[int(q[j].argmax()) for j in range(k)], temperature=t, seed=400 + i,
                        pos0=13 * i, draft_logits=q))
    return [reqs], True


def logits_dtypes(g):
    def reqs():
        return [Req(rand_logits(g, 1, 2.0), seed=500 + i, pos0=i, temperature=t) for i, t in
                enumerate([1.0, 0.0, 0.7])]
    return [reqs(), reqs()], True  # step 0 BF16, step 1 F16 (see DTYPES)


# ----------------------------------------------------------------------------- the sampling pipeline (minor 2)
# Every pipeline vector mixes greedy requests (decided without noise: checked token for token by any RNG) with
# stochastic ones, and places the values that decide its tokens by hand, so that leaving its rule out changes
# tokens (ABLATIONS below; make_conformance checks it when it writes the vector).
GRAMMAR_V = 40  # the grammar vector: two bitmask words, the second one partial (bits past V set and ignored)


def grammar_mask(g):
    w = GRAMMAR_V
    return [[Req(low(g, {5: 6.0, 31: 4.0, 17: 3.0}, width=w), temperature=0.0,  # 5 masked: 31 (word 0's sign bit)
                 grammar=[[3, 17, 31, 35, 39, 40, 45, 63]]),
             Req(low(g, {5: 6.0, 31: 4.0}, width=w), temperature=0.0, grammar=[[31]], grammar_on=False),  # ignored
             Req(low(g, {2: 5.0, 7: 4.0}, {9: 5.0, 36: 3.5, 2: 3.0}, {1: 4.0, 38: 2.0}, width=w),  # per-row masks
                 drafts=[7, 36], temperature=0.0, grammar=[[7, 9], [36, 2], [38, 0]]),
             Req(low(g, {4: 9.0, 20: 1.0, 33: 1.5, 11: 0.5}, width=w), seed=601, pos0=3,
                 grammar=[[20, 33, 11]]),
             Req(low(g, {6: 8.0, 12: 2.0}, {6: 3.0, 34: 2.5}, width=w), drafts=[6], temperature=0.8, seed=602,
                 pos0=9, grammar=[[12, 14, 34], [6, 34]])]], True


def allowed_token_ids(g):
    return [[Req(low(g, {0: 5.0, 9: 2.0, 14: 3.0, 2: 1.0}), temperature=0.0, allowed=[9, 2, 9, 14]),  # dup kept
             Req(low(g, {0: 5.0, 9: 2.0}), temperature=0.0, allowed=[]),  # empty: no restriction
             Req(low(g, {1: 9.0, 4: 1.0, 7: 1.5}), seed=611, pos0=5, allowed=[4, 7]),
             Req(low(g, {3: 6.0, 8: 4.0}, {3: 6.0, 10: 2.0}, {8: 3.0, 11: 2.5}), drafts=[8, 10], temperature=0.0,
                 allowed=[8, 10, 11]),
             Req(torch.cat([low(g, {5: 2.0, 6: 4.0})[:, :3], torch.tensor([[NEG]]), low(g, {})[:, 4:]], 1),
                 temperature=0.0, allowed=[3, 5])]], True  # an allowed -inf stays -inf


def logit_bias(g):
    return [[Req(low(g, {2: 4.0, 6: 3.0}), temperature=0.0, bias={2: -3.0, 6: 0.5}),
             Req(low(g, {9: 4.0, 1: 3.0}), temperature=0.0, bias={9: NEG}),
             Req(low(g, {0: 3.0, 13: -2.0}), seed=621, pos0=4, bias={13: 9.0}),
             Req(low(g, {4: 1.0, 5: 2.0}), temperature=0.0, bias={4: 2.0}, prompt=[4], rep=2.0),  # (1+2)/2 < 2
             Req(low(g, {3: 5.0, 8: 4.5}, {3: 5.0, 12: 4.8}), drafts=[8], temperature=0.0, bias={3: -1.0})]], True


def min_tokens(g):
    return [[Req(low(g, {7: 5.0, 9: 4.0, 2: 3.0}), temperature=0.0, output=[1, 1], min_tokens=5, stops=[7, 9]),
             Req(low(g, {7: 5.0, 2: 3.0}), temperature=0.0, output=[1, 2, 3, 4, 5], min_tokens=5, stops=[7]),
             Req(low(g, {15: 5.0, 4: 4.0}, {15: 5.0, 6: 4.0}, {3: 2.0}), drafts=[4, 15], temperature=0.0,
                 output=[0, 0, 0], min_tokens=4, stops=[15]),  # the draft makes row 1's output long enough
             Req(low(g, {11: 9.0, 2: 1.0}), seed=631, pos0=7, output=[3], min_tokens=3, stops=[11]),
             Req(low(g, {12: 5.0}), temperature=0.0, output=[], min_tokens=2, stops=[])]], True


def min_tokens_restore(g):
    return [[Req(low(g, {2: 5.0, 9: 1.0, 13: 3.0}), temperature=0.0, output=[4], min_tokens=3, stops=[9, 13],
                 grammar=[[9]]),  # only stop 9 allowed: restored; 13 (grammar-masked) stays -inf
             Req(low(g, {9: 5.0, 6: 1.0}), temperature=0.0, output=[4], min_tokens=3, stops=[9], grammar=[[9, 6]]),
             Req(low(g, {9: 1.0, 13: 1.2, 0: 8.0}), seed=641, pos0=2, output=[], min_tokens=2, stops=[9, 13],
                 grammar=[[9, 13]]),
             Req(low(g, {14: 2.0, 5: 6.0}, {3: 2.0, 14: 1.0}), drafts=[14], temperature=0.0, output=[], min_tokens=1,
                 stops=[14], grammar=[[14], [3, 14]])]], True


def repetition_penalty(g):
    return [[Req(low(g, {3: 3.0, 8: 2.0}), temperature=0.0, prompt=[3], output=[], rep=2.0),
             Req(low(g, {3: -0.2, 8: -0.5}), temperature=0.0, prompt=[], output=[3], rep=3.0),  # x < 0: times 3
             Req(low(g, {3: 1.2, 8: 2.0}), temperature=0.0, prompt=[], output=[3], rep=0.5),  # < 1 promotes
             Req(low(g, {10: 4.0, 1: 1.0}), seed=651, pos0=6, prompt=[10, 10], output=[], rep=5.0),
             Req(low(g, {6: 4.0, 7: 1.9}), temperature=0.0, prompt=[6], output=[6, 6, 6], rep=2.0)]], True  # once


def frequency_penalty(g):
    return [[Req(low(g, {3: 3.0, 8: 2.2}), temperature=0.0, output=[3, 3, 3, 8], freq=0.5),
             Req(low(g, {5: 3.0, 8: 2.5}), temperature=0.0, prompt=[5, 5], output=[], freq=1.0),  # prompt not counted
             Req(low(g, {2: 1.0, 8: 2.0}), temperature=0.0, output=[2, 2], freq=-0.8),
             Req(low(g, {12: 5.0, 1: 1.0}), seed=661, pos0=8, output=[12, 12, 12], freq=2.0)]], True


def presence_penalty(g):
    return [[Req(low(g, {3: 3.0, 8: 2.0}), temperature=0.0, output=[3, 3, 3], pres=0.6),  # once, not per count
             Req(low(g, {5: 3.0, 8: 2.5}), temperature=0.0, prompt=[5], output=[], pres=1.0),  # prompt not counted
             Req(low(g, {2: 1.0, 8: 2.0}), temperature=0.0, output=[2], pres=-1.5),
             Req(low(g, {12: 5.0, 1: 1.0}), seed=671, pos0=8, output=[12], pres=6.0),
             Req(low(g, {3: 3.0, 8: 2.0}), temperature=0.0, output=[3, 3, 3, 3], freq=0.25, pres=0.6)]], True


def penalties_at_drafts(g):
    return [[Req(low(g, {1: 4.0, 2: 3.0}, {1: 3.0, 2: 2.5}, {2: 3.0, 5: 2.0}), drafts=[1, 2], temperature=0.0,
                 output=[], freq=2.0),  # row 1 counts draft 1, the bonus row drafts 1 and 2
             Req(low(g, {4: 4.0, 6: 3.0}, {4: 4.0, 6: 3.0}), drafts=[4], temperature=0.0, prompt=[], output=[],
                 rep=3.0),
             Req(low(g, {7: 4.0, 0: 1.0}, {7: 6.0, 9: 2.0}), drafts=[7], seed=681, pos0=12, output=[], pres=9.0),
             Req(low(g, {3: 4.0}, {3: 4.0, 10: 3.0}, {}), drafts=[3, -1], temperature=0.0, output=[], freq=1.5)]], True


def bad_words(g):
    return [[Req(low(g, {4: 5.0, 6: 3.0}), temperature=0.0, output=[], bad_words=[[4]]),  # one token: always
             Req(low(g, {4: 5.0, 6: 3.0}), temperature=0.0, output=[1, 9], bad_words=[[9, 4], [2, 6]]),
             Req(low(g, {4: 5.0, 6: 3.0}), temperature=0.0, prompt=[9], output=[], bad_words=[[9, 4]]),  # prompt
             Req(low(g, {8: 5.0, 2: 4.0}, {11: 5.0, 13: 4.0}, {}), drafts=[8, 13], temperature=0.0, output=[0, 7],
                 bad_words=[[7, 8, 11]]),  # completed by draft 8 at row 1
             Req(low(g, {14: 9.0, 3: 1.0}), seed=691, pos0=5, output=[2], bad_words=[[14]]),
             Req(low(g, {4: 5.0, 6: 3.0}), temperature=0.0, output=[9], bad_words=[[1, 9, 4]])]], True  # too long


def _logprob_reqs(g, modes: tuple[int, int]) -> list[Req]:
    a, b = modes
    return [Req(low(g, {0: 6.0, 1: 5.5, 2: 3.0, 3: 2.5, 4: 2.0}), temperature=0.0, grammar=[[2, 3, 4, 9]],
                logprobs=3, logprobs_mode=a),
            Req(low(g, {5: 4.0, 6: 3.5, 7: 1.0}), temperature=0.7, seed=701, pos0=4, output=[5, 5], freq=1.0,
                logprobs=2, logprobs_mode=b),
            Req(low(g, {8: 4.0, 9: 3.0}, {10: 4.0, 11: 3.8}, {12: 2.0}), drafts=[8, 11], temperature=0.0,
                bias={10: -1.0}, logprobs=1, logprobs_mode=a),
            Req(ints([1.0, 2.0, 2.0, 0.0, 2.0, 1.0, 0.5] + [-1.0] * 9), temperature=0.5, top_k=4, seed=702, pos0=1,
                logprobs=V, logprobs_mode=b),  # ties at 2.0: ascending ids
            Req(low(g, {3: 4.0}), temperature=0.0, logprobs=-1, output=[], pres=0.5),
            Req(low(g, {13: 3.0, 14: 2.0}), temperature=1.5, top_p=0.5, seed=703, pos0=2, logprobs=0,
                logprobs_mode=a, grammar=[[13, 14, 15]])]


def kept_set(g):
    return [[Req(low(g, {0: 3.0, 1: 3.0, 2: 3.0, 3: 1.0}), top_k=2, seed=711, pos0=1, logprobs=-1),  # ties kept
             Req(low(g, {4: 3.0, 5: 2.0, 6: 1.0}), top_p=0.6, min_p=0.01, seed=712, pos0=2, logprobs=0),
             Req(low(g, {7: 3.0, 8: 2.9}), min_p=0.5, seed=713, pos0=3, logprobs=0, bad_words=[[8]], output=[]),
             Req(low(g, {0: 4.0, 9: 3.0, 10: 2.0}), temperature=0.0, top_k=1, logprobs=0, allowed=[9, 10, 11, 12]),
             Req(low(g, {13: 4.0, 14: 3.0}, {13: 1.0, 15: 2.0}), drafts=[15], top_k=3, seed=714, pos0=4, logprobs=1,
                 grammar=[[13, 14, 15, 0], [13, 15, 1]])]], False  # exact ties on purpose (request 0)


PIPELINE_BUILDERS: dict[str, Callable] = {
    "grammar-mask": grammar_mask, "allowed-token-ids": allowed_token_ids, "logit-bias": logit_bias,
    "min-tokens": min_tokens, "min-tokens-restore": min_tokens_restore, "repetition-penalty": repetition_penalty,
    "frequency-penalty": frequency_penalty, "presence-penalty": presence_penalty,
    "penalties-at-drafts": penalties_at_drafts, "bad-words": bad_words,
    "logprobs-raw": lambda g: ([_logprob_reqs(g, (0, 2))], True),  # raw_logprobs, raw_logits
    "logprobs-processed": lambda g: ([_logprob_reqs(g, (1, 3))], True),  # processed_logprobs, processed_logits
    "kept-set": kept_set,
}


def _without(*names: str) -> Callable[[Step], Step]:
    return lambda step: dataclasses.replace(step, **{n: None for n in names})


def _drafts_not_counted(step: Step) -> Emitted:
    """The reference with each row's output = output_token_ids alone (the drafts before the row left out)."""
    real = processors.row_outputs
    processors.row_outputs = lambda s, r: [real(s, r)[0]] * len(real(s, r))  # row 0's: the output alone
    try:
        return emitted(step)
    finally:
        processors.row_outputs = real


def _grammar_baked(step: Step) -> Step:
    """The grammar mask applied to the logits, has_grammar dropped: the same rows, but no restore (no grammar)."""
    x = step.logits.float().clone()
    processors.apply_grammar(x, step)
    return dataclasses.replace(step, logits=x, grammar_bitmask=None, has_grammar=None)


def _modes_swapped(step: Step) -> Step:
    return dataclasses.replace(step, logprobs_mode=step.logprobs_mode ^ 1)  # raw <-> processed


def _filters_off(step: Step) -> Step:
    return dataclasses.replace(step, top_k=torch.zeros_like(step.top_k), top_p=torch.ones_like(step.top_p),
                               min_p=torch.zeros_like(step.min_p))


# What leaving a rule out means (rule -> (what it changes, the step without the rule)): the pipeline vectors'
# tokens (or, for the logprob rules, their logprobs / kept sets) must differ from the reference's on the ablated
# step; tests/test_conformance.py checks the committed vectors against the same table.
ABLATIONS: dict[str, tuple[str, Callable[[Step], Step] | None]] = {
    "grammar-mask": ("tokens", _without("grammar_bitmask", "has_grammar")),
    "allowed-token-ids": ("tokens", _without("allowed_token_ids", "cu_allowed_token_ids")),
    "logit-bias": ("tokens", _without("logit_bias_ids", "logit_bias_values", "cu_logit_bias")),
    "min-tokens": ("tokens", _without("min_tokens", "stop_token_ids", "cu_stop_token_ids")),
    "min-tokens-restore": ("tokens", _grammar_baked),
    "repetition-penalty": ("tokens", _without("repetition_penalty")),
    "frequency-penalty": ("tokens", _without("frequency_penalty")),
    "presence-penalty": ("tokens", _without("presence_penalty")),
    "penalties-at-drafts": ("tokens", None),  # the drafts before a row left out of its output
    "bad-words": ("tokens", _without("bad_words_token_ids", "cu_bad_words_token_ids", "bad_words_lengths",
                                     "cu_bad_words_lengths")),
    "logprobs-raw": ("logprobs", _modes_swapped),
    "logprobs-processed": ("logprobs", _modes_swapped),
    "kept-set": ("kept_mask", _filters_off),
}


def ablated(rule: str, step: Step) -> Emitted:
    """The reference's answer on ``step`` without ``rule`` (:data:`ABLATIONS`)."""
    fn = ABLATIONS[rule][1]
    return _drafts_not_counted(step) if fn is None else emitted(fn(step))


def rule_output(rule: str, e: Emitted) -> list[torch.Tensor]:
    """The tensors of ``e`` that ``rule`` decides."""
    what = ABLATIONS[rule][0]
    return ([e.tokens] if what == "tokens" else [e.kept_mask] if what == "kept_mask"
            else [torch.nan_to_num(e.logprobs, neginf=-1e30), e.logprob_ids, e.logprob_ranks])


def check_ablation(step: Step, rule: str) -> None:
    """Leaving the rule out must change what it decides, else the vector pins nothing."""
    if all(torch.equal(a, b) for a, b in zip(rule_output(rule, emitted(step)), rule_output(rule, ablated(rule, step)))):
        raise SystemExit(f"make_conformance: {rule}: the step's {ABLATIONS[rule][0]} do not depend on the rule")


# ----------------------------------------------------------------------------- verification methods
BLOCK = RequestMethod(VERIFY_METHODS.index("block"))
PERTURBATIONS = 16


def _fly(window: int, threshold: float = 0.5, top_k: int = 3) -> RequestMethod:
    return RequestMethod(FLY, window, threshold, top_k)


def _set(step: Step, **fields) -> Step:
    return dataclasses.replace(step, **fields)


def _standard(step: Step) -> Step:
    return _set(step, verify_method=torch.zeros_like(step.verify_method))


def _redrawn(step: Step, salt: int | None) -> Step:
    """The step with each drafted request's drafts drawn again from its draft logits: by the contract's drafter with
    ``salt`` added to the positions, or (None) greedily, the argmax, and then verified one-hot (vLLM's greedy drafts
    carry no draft logits)."""
    drafts = step.draft_token_ids.clone()
    cu, d_idx = step.cu_num_logits.tolist(), step.draft_row_index()
    for r in range(step.num_requests):
        if cu[r + 1] - cu[r] > 1:
            new = (derive_drafts(step, r, salt=salt) if salt is not None and float(step.temperature[r]) != 0 else
                   [argmax_first(step.draft_logits[int(d_idx[j])]) for j in range(cu[r], cu[r + 1] - 1)])
            drafts[cu[r]:cu[r + 1] - 1] = torch.tensor(new, dtype=drafts.dtype)
    if salt is not None:
        return _set(step, draft_token_ids=drafts)
    return _set(step, draft_token_ids=drafts, draft_logits=None, draft_sampling=torch.zeros_like(step.draft_sampling))


# What replacing each method means (rule -> [(what, the step without the method)]): the vector's tokens must differ
# from the reference's on every ablated step; tests/test_conformance.py checks the committed vectors the same way.
METHOD_ABLATIONS: dict[str, list[tuple[str, Callable[[Step], Step]]]] = {
    "block-verification": [("standard verification", _standard)],
    "fly-verification": [("standard verification", _standard)],
    "probabilistic-drafts": [("greedy drafts (the argmax, verified one-hot)", lambda s: _redrawn(s, None)),
                             ("drafts drawn with the verifier's own key (no 2^30 salt)", lambda s: _redrawn(s, 0))],
    "fp64-noise": [("the mrv2 contract", lambda s: _set(s, rng_contract="mrv2"))],
}
CONTRACTS = {"fp64-noise": "mrv2-fp64"}  # a vector's RNG contract (default mrv2)


def _perturbed_ok(step: Step) -> bool:
    """The tokens, and the probabilistic drafts re-derived from the draft logits, survive PERTURBATIONS random moves
    of every logit (and draft logit) by up to 1e-3."""
    want = emitted(step).tokens
    g = torch.Generator().manual_seed(11)
    for _ in range(PERTURBATIONS):
        move = {name: getattr(step, name).float() + (torch.rand(getattr(step, name).shape, generator=g) - 0.5) * 2e-3
                for name in ("logits", "draft_logits") if getattr(step, name) is not None}
        noisy = _set(step, **move)
        if not torch.equal(emitted(noisy).tokens, want):
            return False
        cu = step.cu_num_logits.tolist()
        for r in range(step.num_requests):
            if step.draft_sampling is not None and float(step.temperature[r]) != 0 and cu[r + 1] - cu[r] > 1:
                if derive_drafts(noisy, r) != step.draft_token_ids[cu[r]:cu[r + 1] - 1].tolist():
                    return False
    return True


def _changed(step: Step, rule: str) -> bool:
    """Every ablation of ``rule`` changes the step's tokens."""
    want = emitted(step).tokens
    return all(not torch.equal(emitted(fn(step)).tokens, want) for _, fn in METHOD_ABLATIONS[rule])


def _differing(rule: str, make: Callable[[int], Req], count: int, start: int = 0) -> list[Req]:
    """The first ``count`` requests ``make(i)`` (i = start, start + 1, ...) whose tokens every ablation of ``rule``
    changes and that survive the perturbations, each alone in a step."""
    out = []
    for i in range(start, start + 400):
        req = make(i)
        step = build_step([req], contract=CONTRACTS.get(rule, "mrv2"))
        if _changed(step, rule) and _perturbed_ok(step):
            out.append(req)
            if len(out) == count:
                return out
    raise SystemExit(f"make_conformance: {rule}: fewer than {count} candidate requests the method changes")


def _second(row: torch.Tensor) -> int:
    return int(row.topk(2).indices[1])


def block_verification(g):
    def onehot(i):  # 3 one-hot drafts, the first the row's second best: standard verification often rejects it
        x = rand_logits(g, 4, 1.5)
        return Req(x, drafts=[_second(x[0]), int(x[1].argmax()), int(x[2].argmax())], seed=800 + i, pos0=9 * i,
                   method=BLOCK)

    def with_q(i):  # 2 drafts drawn from draft logits q
        x, q = rand_logits(g, 3, 1.5), rand_logits(g, 2, 1.5)
        return Req(x, drafts=[_second(q[0]), int(q[1].argmax())], temperature=0.9, seed=900 + i, pos0=5 * i,
                   draft_logits=q, method=BLOCK)

    x = rand_logits(g, 3, 2.0)
    controls = [Req(x, drafts=[int(x[0].argmax()), _second(x[1])], temperature=0.0, method=BLOCK),  # token-wise
                Req(x, drafts=[int(x[0].argmax()), -1], seed=950, pos0=3, method=BLOCK),  # a placeholder ends it
                Req(rand_logits(g, 1, 2.0), seed=951, pos0=4, method=BLOCK)]  # no drafts: a plain draw
    return [_differing("block-verification", onehot, 3) + controls,
            _differing("block-verification", with_q, 2)], True


def fly_verification(g):
    def stochastic(i):  # flat rows (high entropy); the first draft the second best; windows 1 and 2
        w = 1 + i % 2
        x = rand_logits(g, w + 2, 0.8)
        return Req(x, drafts=[_second(x[0])] + [int(x[j].argmax()) for j in range(1, w + 1)], seed=1000 + i,
                   pos0=6 * i, method=_fly(w, (0.5, 0.3)[i % 2], (3, 5)[i % 2]))

    def greedy(i):  # the first draft is not the argmax; the next is, so FLy accepts both where greedy stops
        x = rand_logits(g, 3, 0.8)
        return Req(x, drafts=[_second(x[0]), int(x[1].argmax())], temperature=0.0, method=_fly(1))

    peaked = low(g, {3: 6.0, 9: 3.0}, {5: 6.0}, {})  # top-3 entropy about 0.2, below 0.5: no deferral, as standard
    flat = rand_logits(g, 3, 0.8)  # the draft after the rejected one is rejected too: FLy stops at the first
    controls = [Req(peaked, drafts=[9, 5], temperature=0.0, method=_fly(1)),
                Req(flat, drafts=[_second(flat[0]), _second(flat[1])], temperature=0.0, method=_fly(1))]
    return [_differing("fly-verification", stochastic, 3) + _differing("fly-verification", greedy, 1) + controls], \
        True


def probabilistic_drafts(g):
    def drawn(i):  # the drafts are the contract drafter's draws from q
        k, t = 1 + i % 3, (0.7, 1.0, 1.3)[i % 3]
        x, q = rand_logits(g, k + 1, 1.5), rand_logits(g, k, 1.0)
        req = Req(x, drafts=[0] * k, temperature=t, seed=1100 + i, pos0=8 * i, draft_logits=q, probabilistic=True)
        req.drafts = derive_drafts(build_step([req]), 0)
        return req

    x, q = rand_logits(g, 3, 1.5), rand_logits(g, 2, 1.0)
    greedy = Req(x, drafts=[int(q[0].argmax()), int(q[1].argmax())], temperature=0.0, draft_logits=q,
                 probabilistic=True)  # temperature 0: the drafter's argmax
    return [_differing("probabilistic-drafts", drawn, 4) + [greedy]], True


def _signed(x: int) -> int:
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def fp64_noise(g):
    def plain(i):  # seeds over the whole int64 range, positions past 2^32
        return Req(rand_logits(g, 1, 1.0), seed=_signed((i + 1) * 0x9E3779B97F4A7C15), pos0=i * (1 << 29) + 3,
                   temperature=(1.0, 0.7)[i % 2])

    def verify(i):  # a rejected or accepted draft: the resample and the bonus draw
        x = rand_logits(g, 3, 1.5)
        return Req(x, drafts=[_second(x[0]), int(x[1].argmax())], seed=_signed(-(i + 7) * 0x5DEECE66D),
                   pos0=(1 << 32) + 11 * i)

    return [_differing("fp64-noise", plain, 5) + _differing("fp64-noise", verify, 3)], True


METHOD_BUILDERS: dict[str, Callable] = {
    "block-verification": block_verification, "fly-verification": fly_verification,
    "probabilistic-drafts": probabilistic_drafts, "fp64-noise": fp64_noise,
}


def check_methods(step: Step, rule: str) -> None:
    """A method vector's step: every ablation changes its tokens, and they survive the perturbations."""
    for what, fn in METHOD_ABLATIONS[rule]:
        if torch.equal(emitted(fn(step)).tokens, emitted(step).tokens):
            raise SystemExit(f"make_conformance: {rule}: the tokens do not change with {what}")
    if not _perturbed_ok(step):
        raise SystemExit(f"make_conformance: {rule}: the tokens or drafts change under a 1e-3 perturbation")


BUILDERS: dict[str, Callable] = {
    "greedy-ties": greedy_ties, "gumbel-hash": gumbel_hash, "gumbel-clamp": gumbel_clamp,
    "extreme-seeds-positions": extreme_seeds_positions, "temperature": temperature, "min-p": min_p,
    "top-k-ties": top_k_ties, "top-p-cut": top_p_cut, "filter-order": filter_order,
    "stochastic-verify": stochastic_verify, "placeholder-drafts": placeholder_drafts, "draft-logits": draft_logits,
    "logits-dtypes": logits_dtypes, **PIPELINE_BUILDERS, **METHOD_BUILDERS,
}
DTYPES = {"logits-dtypes": [torch.bfloat16, torch.float16]}
VOCAB = {"grammar-mask": GRAMMAR_V}  # V of each vector (default V)
assert set(BUILDERS) == set(RULE), "one builder per rule"


def write_vector(rule: str, out: Path) -> Path:
    g = torch.Generator().manual_seed(sum(map(ord, rule)))
    steps, robust = BUILDERS[rule](g)
    contract = CONTRACTS.get(rule, "mrv2")
    built = [build_step(reqs, dtype, contract)
             for reqs, dtype in zip(steps, DTYPES.get(rule, [torch.float32] * len(steps)))]
    if rule in METHOD_ABLATIONS:
        for s in built:
            check_methods(s, rule)
    elif robust:
        for s in built:
            check_robust(s, rule)
    if rule in ABLATIONS:
        for s in built:
            check_ablation(s, rule)
    return write_steps(out, built, emitted, rule=rule, statement=RULE[rule].statement, section=RULE[rule].section,
                       tool="tools/make_conformance.py", vocab=VOCAB.get(rule, V), contract=contract)


def write_steps(out: Path, steps, emitted_of, *, rule: str, statement: str, section: str, tool: str, vocab: int,
                contract: str) -> Path:
    """Write a vector: a SYNTHETIC recording of ``steps`` with ``emitted_of(step)`` as what was emitted, without
    ``write_stats`` (timings), so that writing it again gives the same bytes (tools/make_tree_vectors.py too)."""
    source = {"engine": "reference", "rule": rule, "statement": statement, "doc": f"docs/FIXTURES.md, '{section}'",
              "tool": tool}
    with RecordingWriter(out, vocab_size=vocab, rng_contract=contract, source=source, synthetic=True,
                         overwrite=True) as w:
        for s in steps:
            w.write_step(s, emitted_of(s), meta={"rule": rule})
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.pop("write_stats", None)  # timings: a vector written again must be the same bytes
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rules", nargs="*", help="rule ids (default: all)")
    vectors = Path(__file__).resolve().parents[1] / "replay_harness" / "conformance" / "vectors"
    ap.add_argument("--out", default=str(vectors), help="folder of the vectors (default: the package's, the one copy)")
    args = ap.parse_args()
    for rule in args.rules or [r.id for r in RULES]:
        if rule not in BUILDERS:
            raise SystemExit(f"make_conformance: unknown rule {rule!r}; known: {', '.join(BUILDERS)}")
        print(f"wrote {write_vector(rule, Path(args.out) / rule)}")


if __name__ == "__main__":
    main()
