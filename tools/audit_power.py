#!/usr/bin/env python
"""Power table of `replay audit` (docs/AUDIT.md, "Power"): simulated engines re-sample real rows.

Rows: the T > 0 rows of a real recording with plain sampling (no drafts) and fixed batch rows, e.g.

    replay record --steps 100 --batch 8 --num-drafts 0 --temperature 1.0 --seed 1,2,3,4,5,6,7,8 \
        --no-stop-at-eos --out /tmp/rows-smollm2

(SmolLM2-135M, float32 logits). Request r at step s gets the recorded row of request r at step s; each
simulated engine draws its own token from it (the recorded trajectory is kept: the engine's tokens do not
feed back into the model). Engines, each drawing from p = softmax(logits / T) after sampling params:

* ``correct``: Gumbel-max, noise keyed by (seed, position, token): fresh every step;
* ``greedy``: the argmax at T > 0 (the founding bug on the plain path);
* ``no-pos-noise``: Gumbel-max, noise keyed by (seed, batch row, token), not position: the same noise
  vector at every step of a request that keeps its batch row (the founding engine's random-sample kernel);
* ``reused-u``: inverse-CDF over tokens sorted by probability, one uniform per (seed, batch row).

Each cell (engine x temperature x steps x requests) is audited --reps times with fresh seeds; a run
"detects" when `audit` has any finding (exit 1); for ``correct`` that is a false alarm. The table also
shows how often the finding's primary kind is the right one.

    python tools/audit_power.py /tmp/rows-smollm2 --reps 10
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from replay_harness.checks.audit import audit_steps  # noqa: E402
from replay_harness.oracle.sampling_params import apply_sampling_params  # noqa: E402
from replay_harness.recording.step import Step  # noqa: E402
from replay_harness.recording.store import Recording  # noqa: E402

ENGINES = ("correct", "greedy", "no-pos-noise", "reused-u")
EXPECTED_KIND = {"greedy": "greedy-at-temperature", "no-pos-noise": "reused-noise", "reused-u": "reused-noise"}


def load_rows(path: str) -> list[list[torch.Tensor]]:
    """rows[r][s]: the raw logits [V] of batch row r at step s (plain-sampling steps only)."""
    per_request: dict[int, list[torch.Tensor]] = {}
    for record in Recording(path):
        step = record.step
        if step.max_drafts != 0:
            raise SystemExit(f"{path}: step {record.index} has drafts; record with --num-drafts 0")
        for r in range(step.num_requests):
            per_request.setdefault(int(step.request_ids[r]), []).append(step.logits[r].clone())
    return [per_request[rid] for rid in sorted(per_request)]


def _gumbel(key: tuple[int, ...], v: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(hash(key) & 0x7FFFFFFFFFFFFFFF)
    return -torch.log(-torch.log(torch.rand(v, generator=gen, dtype=torch.float64).clamp_min(1e-300)))


def draw(engine: str, processed: torch.Tensor, rep: int, r: int, s: int) -> int:
    """The token engine ``engine`` emits from one processed row [V] (request in batch row r, step s)."""
    row = processed.double()
    if engine == "greedy":
        return int(row.argmax())
    if engine == "correct":
        return int(torch.argmax(row + _gumbel((rep, r, s, 1), row.numel())))
    if engine == "no-pos-noise":
        return int(torch.argmax(row + _gumbel((rep, r, 2), row.numel())))
    p, order = torch.sort(torch.softmax(row, 0), descending=True, stable=True)
    u = float(torch.rand(1, generator=torch.Generator().manual_seed(hash((rep, r, 3)) & 0x7FFFFFFF),
                         dtype=torch.float64))
    i = int(torch.searchsorted(torch.cumsum(p, 0), torch.tensor([u], dtype=torch.float64)))
    return int(order[min(i, p.numel() - 1)])


def simulate(rows: list[list[torch.Tensor]], engine: str, temperature: float, steps: int, requests: int,
             rep: int) -> list[tuple[Step, torch.Tensor, torch.Tensor]]:
    """(step, tokens [R, 1], counts [R]) for ``steps`` plain-sampling steps of ``requests`` batch rows."""
    out = []
    for s in range(steps):
        logits = torch.stack([rows[r][s] for r in range(requests)])
        step = Step(logits=logits, cu_num_logits=torch.arange(requests + 1, dtype=torch.int32),
                    draft_token_ids=torch.full((requests,), -1, dtype=torch.int32),
                    positions=torch.full((requests,), 20 + s, dtype=torch.int64),
                    temperature=torch.full((requests,), temperature), top_k=torch.zeros(requests, dtype=torch.int32),
                    top_p=torch.ones(requests), min_p=torch.zeros(requests),
                    seed=torch.arange(requests, dtype=torch.int64) + 1000 * rep,
                    request_ids=torch.arange(requests, dtype=torch.int64))
        processed = apply_sampling_params(step)
        tokens = torch.tensor([[draw(engine, processed[r], rep, r, s)] for r in range(requests)], dtype=torch.int64)
        out.append((step, tokens, torch.ones(requests, dtype=torch.int32)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", help="a recording with plain-sampling steps (see the module docstring)")
    ap.add_argument("--reps", type=int, default=10, help="audits per cell (fresh seeds each)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.7, 1.0])
    ap.add_argument("--steps", type=int, nargs="+", default=[30, 100])
    ap.add_argument("--requests", type=int, nargs="+", default=[8])
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--first-rep", type=int, default=0, help="seed offset: rerun with other seeds")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = load_rows(args.rows)
    start = time.time()
    print("| engine | T | steps | requests | detected (any finding) | primary kind right | kinds found |")
    print("|---|---|---|---|---|---|---|")
    for engine in args.engines:
        for temperature in args.temperatures:
            for steps in args.steps:
                for requests in args.requests:
                    if requests > len(rows) or steps > min(len(x) for x in rows[:requests]):
                        print(f"| {engine} | {temperature:g} | {steps} | {requests} | (recording too short) | | |")
                        continue
                    found, right, kinds = 0, 0, Counter()
                    for rep in range(args.first_rep, args.first_rep + args.reps):
                        result = audit_steps(simulate(rows, engine, temperature, steps, requests, rep))
                        found += bool(result.findings)
                        right += any(f.kind == EXPECTED_KIND.get(engine) for f in result.findings)
                        kinds.update({f.kind for f in result.findings})
                    right_text = "-" if engine == "correct" else f"{right}/{args.reps}"
                    kind_text = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "-"
                    print(f"| {engine} | {temperature:g} | {steps} | {requests} | {found}/{args.reps} | {right_text} "
                          f"| {kind_text} |", flush=True)
    print(f"\n{args.reps} audits per cell, reps {args.first_rep}..{args.first_rep + args.reps - 1}; "
          f"{time.time() - start:.0f} s on one CPU thread")


if __name__ == "__main__":
    main()
