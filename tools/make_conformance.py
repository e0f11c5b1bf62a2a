#!/usr/bin/env python3
"""Regenerate the conformance vectors (replay_harness/conformance/vectors/<rule>/, package data), emitted tokens from `reference`.

    python tools/make_conformance.py                 # every rule into replay_harness/conformance/vectors/
    python tools/make_conformance.py top-k-ties --out /tmp/x

One small recording per rule of replay_harness/conformance/rules.py (V = 16, F32 unless the rule is about
dtypes). Vectors marked ``robust`` are checked before writing: every decision margin under the reference
is > 1e-3 nats and the emitted tokens survive perturbing the logits by 2e-4, so an implementation that
rounds differently (another log, another summation order) still matches them token for token; the other
vectors hold exact ties on purpose (ties are decided by rules, not by rounding).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from replay_harness.conformance.rules import RULE, RULES
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.oracle.near_tie import decision_margin
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


def build_step(reqs: list[Req], dtype: torch.dtype = torch.float32) -> Step:
    sizes = [len(r.drafts) + 1 for r in reqs]
    cu = torch.tensor([0] + sizes, dtype=torch.int32).cumsum(0).to(torch.int32)
    with_dl = any(r.draft_logits is not None for r in reqs)
    dl = [r.draft_logits if r.draft_logits is not None else torch.zeros(len(r.drafts), V) for r in reqs]
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
        draft_logits=torch.cat(dl).float() if with_dl else None)


def emitted(step: Step) -> Emitted:
    res = ReferenceSampler().sample(step)
    return Emitted(res.tokens.to(torch.int32), res.counts.to(torch.int32), res.routes.to(torch.int8))


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


BUILDERS: dict[str, Callable] = {
    "greedy-ties": greedy_ties, "gumbel-hash": gumbel_hash, "gumbel-clamp": gumbel_clamp,
    "extreme-seeds-positions": extreme_seeds_positions, "temperature": temperature, "min-p": min_p,
    "top-k-ties": top_k_ties, "top-p-cut": top_p_cut, "filter-order": filter_order,
    "stochastic-verify": stochastic_verify, "placeholder-drafts": placeholder_drafts, "draft-logits": draft_logits,
    "logits-dtypes": logits_dtypes,
}
DTYPES = {"logits-dtypes": [torch.bfloat16, torch.float16]}
assert set(BUILDERS) == set(RULE), "one builder per rule"


def write_vector(rule: str, out: Path) -> Path:
    g = torch.Generator().manual_seed(sum(map(ord, rule)))
    steps, robust = BUILDERS[rule](g)
    built = [build_step(reqs, dtype) for reqs, dtype in zip(steps, DTYPES.get(rule, [torch.float32] * len(steps)))]
    if robust:
        for s in built:
            check_robust(s, rule)
    source = {"engine": "reference", "rule": rule, "statement": RULE[rule].statement,
              "doc": f"docs/FIXTURES.md, '{RULE[rule].section}'", "tool": "tools/make_conformance.py"}
    with RecordingWriter(out, vocab_size=V, source=source, synthetic=True, overwrite=True) as w:
        for s in built:
            w.write_step(s, emitted(s), meta={"rule": rule})
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
