#!/usr/bin/env python
"""False alarms and power of `replay audit`'s pipeline checks (docs/AUDIT.md, "The sampling pipeline").

SYNTHETIC recordings only: per seed, --steps steps of 8 requests (vocabulary 64, drafts 0-2, T in {0, 0.7, 1},
half of the seeds with draft logits, their T > 0 drafts drawn from them, and top-k / top-p), every input of
``synthetic.add_pipeline`` (histories, penalties, bias, allowed ids, bad words, min-tokens, grammar mask). Each
engine emits the tokens of every step and the audit judges them (``audit_steps``, the command's statistics):

* ``reference``: the oracle (mrv2 noise); ``own-rng``: a correct speculative sampler with an RNG of its own
  (token-wise rejection sampling: accept d with min(1, p(d)/q(d)), else draw from max(p - q, 0); torch's
  generator). A finding on either is a false alarm.
* ``no-penalties``: repetition, frequency and presence penalties not applied anywhere; ``no-penalties-drafts``:
  not applied at draft positions (verify rows) only; ``no-presence``: the presence penalty alone dropped.

Per engine: recordings with any finding, with any note, with a ``penalty-not-applied`` finding, with a
``forbidden-token`` finding, and the share of pooled penalty tests below 0.05 / 1e-3 (a valid test keeps them at most that).

    python tools/audit_pipeline_alarms.py --seeds 200 --steps 8
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from replay_harness.checks.audit import audit_steps  # noqa: E402
from replay_harness.impls.reference import ReferenceSampler  # noqa: E402
from replay_harness.oracle.sampling_params import apply_sampling_params  # noqa: E402
from replay_harness.recording.step import SampleResult, Step  # noqa: E402
from replay_harness.recording.synthetic import Case, add_pipeline, random_step  # noqa: E402

PENALTIES = ("repetition_penalty", "frequency_penalty", "presence_penalty")
CASES = (Case("alarms", vocab_size=64, num_requests=8, max_drafts=2, temperatures=(0.0, 0.7, 1.0),
              features=frozenset({"ragged"})),
         Case("alarms-filters", vocab_size=64, num_requests=8, max_drafts=2, temperatures=(0.0, 0.7, 1.0),
              features=frozenset({"ragged", "draft-logits", "top-k", "top-p"})))


def own_rng(step: Step, gen: torch.Generator) -> SampleResult:
    """A correct speculative sampler whose noise is torch's generator (not the mrv2 contract)."""
    proc = apply_sampling_params(step)
    res = SampleResult.empty(step.num_requests, step.max_drafts)
    cu, d_idx = step.cu_num_logits.tolist(), step.draft_row_index()
    for r in range(step.num_requests):
        a, b, t = cu[r], cu[r + 1], float(step.temperature[r])
        out: list[int] = []
        for j in range(a, b):
            row = proc[j].double()
            if not bool(torch.isfinite(row).any()):
                out.append(0)
                break
            d = int(step.draft_token_ids[j]) if j < b - 1 else -1
            if t == 0.0:
                out.append(int(torch.argmax(torch.nan_to_num(row, nan=-torch.inf))))
                if out[-1] != d:
                    break
                continue
            p = torch.softmax(row, 0)
            if d < 0:
                out.append(int(torch.multinomial(p, 1, generator=gen)))
                break
            if step.draft_logits is not None:
                q = torch.softmax(step.draft_logits[int(d_idx[j])].double() / t, 0)
            else:
                q = torch.zeros_like(p)
                q[d] = 1.0
            if float(torch.rand(1, generator=gen, dtype=torch.float64)) < min(1.0, float(p[d] / q[d])):
                out.append(d)
                continue
            residual = (p - q).clamp_min(0)
            out.append(int(torch.multinomial(residual / residual.sum(), 1, generator=gen)))
            break
        res.tokens[r, :len(out)] = torch.tensor(out)
        res.counts[r] = len(out)
    return res


class Dropped(ReferenceSampler):
    """The reference with ``fields`` switched off on every row, or on verify rows only (``drafts``)."""

    def __init__(self, fields: tuple[str, ...], drafts: bool = False):
        self.fields, self.drafts = fields, drafts

    def process(self, step: Step) -> torch.Tensor:
        off = apply_sampling_params(dataclasses.replace(step, **{f: None for f in self.fields}))
        if not self.drafts:
            return off
        full = apply_sampling_params(step)
        verify = torch.ones(full.shape[0], dtype=torch.bool)
        verify[step.cu_num_logits[1:].long() - 1] = False
        full[verify] = off[verify]
        return full


ENGINES = {
    "reference": lambda step, gen: ReferenceSampler().sample(step),
    "own-rng": own_rng,
    "no-penalties": lambda step, gen: Dropped(PENALTIES).sample(step),
    "no-penalties-drafts": lambda step, gen: Dropped(PENALTIES, drafts=True).sample(step),
    "no-presence": lambda step, gen: Dropped(("presence_penalty",)).sample(step),
}


def drafted_from_q(step: Step, gen: torch.Generator) -> Step:
    """``step`` with the drafts of its T > 0 requests drawn from their draft logits (softmax(q / T)), as a draft
    model drafts: the audit's acceptance-rate test assumes it (docs/AUDIT.md, "The fact every check rests on")."""
    if step.draft_logits is None:
        return step
    drafts, d_idx = step.draft_token_ids.clone(), step.draft_row_index()
    t = step.temperature[step.row_to_request()]
    for j in range(drafts.numel()):
        if int(d_idx[j]) >= 0 and float(t[j]) > 0:
            q = torch.softmax(step.draft_logits[int(d_idx[j])].double() / float(t[j]), 0)
            drafts[j] = int(torch.multinomial(q, 1, generator=gen))
    return dataclasses.replace(step, draft_token_ids=drafts)


def recording(seed: int, steps: int) -> list[Step]:
    gen = torch.Generator().manual_seed(seed)
    case = CASES[seed % len(CASES)]
    return [add_pipeline(gen, drafted_from_q(random_step(gen, case, i), gen)) for i in range(steps)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--engines", default=",".join(ENGINES))
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = args.engines.split(",")
    rows = {n: dict(recordings=0, any=0, notes=0, penalty=0, forbidden=0, tests=0, p05=0, p001=0, kinds={})
            for n in names}
    start = time.perf_counter()
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        steps = recording(seed, args.steps)
        for name in names:
            gen = torch.Generator().manual_seed(seed + 7919)
            triples = []
            for step in steps:
                res = ENGINES[name](step, gen)
                triples.append((step, res.tokens, res.counts))
            result = audit_steps(triples)
            row = rows[name]
            row["recordings"] += 1
            kinds = {f.kind for f in result.findings}
            row["any"] += bool(kinds)
            row["notes"] += bool(result.notes)
            row["penalty"] += "penalty-not-applied" in kinds
            row["forbidden"] += "forbidden-token" in kinds
            for kind in kinds:
                row["kinds"][kind] = row["kinds"].get(kind, 0) + 1
            for t in result.tests:
                if t.test == "penalty" and not t.scope.startswith("request"):
                    row["tests"] += 1
                    row["p05"] += t.p_value < 0.05
                    row["p001"] += t.p_value < 1e-3
    seconds = time.perf_counter() - start
    print(f"{args.seeds} SYNTHETIC recordings (seeds {args.first_seed}-{args.first_seed + args.seeds - 1}) x "
          f"{args.steps} steps x 8 requests, {seconds:.0f} s")
    print("| engine | recordings with a finding | with a note | penalty-not-applied | forbidden-token | pooled penalty "
          "tests | p < 0.05 | p < 1e-3 | finding kinds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        n, t = row["recordings"], max(row["tests"], 1)
        print(f"| {name} | {row['any']}/{n} | {row['notes']}/{n} | {row['penalty']}/{n} | {row['forbidden']}/{n} | {row['tests']} | "
              f"{row['p05']} ({row['p05'] / t:.1%}) | {row['p001']} ({row['p001'] / t:.2%}) | "
              f"{', '.join(f'{k}: {v}' for k, v in sorted(row['kinds'].items())) or '-'} |")


if __name__ == "__main__":
    main()
