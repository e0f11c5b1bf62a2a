"""Routes a sampler reports about itself are checked against its tokens (docs/VERIFY.md, "Argmax under
stochastic routes").

When `replay run` cannot compare a T > 0 request's tokens (the RNG contracts differ), it still holds the
step's logits. The last token of such a request-step is drawn at random by a correct sampler: from the
processed row p at the bonus position or a plain sample, from the residual max(p - q, 0) (q one-hot at the
draft, or softmax(draft_logits / T)) after a rejection. A greedy sampler emits argmax(p) there every time.
Over the run, the probability that a correct sampler draws the argmax at every one of those draws is the
product of their argmax probabilities; when every draw was the argmax and that product is below ``ARGMAX_P``
(1e-6, the threshold of the audit's tests), the run fails: the tokens contradict the stochastic routes the
sampler reported, whatever they were (with or without ``--routes-only``). A correct sampler fails this way
with probability below ``ARGMAX_P`` per recording (the product is that probability). Every draw the argmax
with a product below ``ARGMAX_SUSPECT`` (5%) is too little to fail, but ``--routes-only`` then gives no pass.
"""
from __future__ import annotations

import math

import numpy as np
import torch

ARGMAX_P = 1e-6
# every draw the argmax, a correct sampler doing so with probability below this: too little to fail the run, but
# `--routes-only` gives no pass (a correct sampler is held back this way with probability below 5%)
ARGMAX_SUSPECT = 0.05
GOT = "argmax at every draw (greedy)"  # the Violation's ``got``: what the tokens show, against the route reported


def processed_rows(step) -> torch.Tensor:
    """[N, V] float32 CPU: the step's rows after sampling params (the reference's)."""
    from replay_harness.oracle.sampling_params import apply_sampling_params

    return apply_sampling_params(step.to("cpu"))


def observe(cmp, step_index: int, step, r: int, tokens: list[int], route: str, processed: torch.Tensor) -> None:
    """Count request r's last emitted token (``tokens``, its emitted tokens) into ``cmp``'s argmax evidence."""
    a = int(step.cu_num_logits[r])
    k = int(step.num_drafts[r])
    j = len(tokens) - 1
    if not 0 <= j <= k:
        return
    with np.errstate(invalid="ignore", over="ignore"):
        x = processed[a + j].double().numpy()
        p = np.exp(x - x.max())
        p = p / p.sum()
    if not np.isfinite(p).all():
        return
    g = int(np.argmax(p))
    law = p
    d = int(step.draft_token_ids[a + j]) if j < k else -1
    if d >= 0:  # a rejection at draft position j: the token comes from the residual
        if step.draft_logits is not None:
            dl = step.draft_logits[step.draft_row_index()[a + j]].double().cpu().numpy() / float(step.temperature[r])
            q = np.exp(dl - dl.max())
            q = q / q.sum()
            law = np.maximum(p - q, 0.0)
        else:
            law = p.copy()
            law[d] = 0.0
        total = law.sum()
        if not total > 0:
            return
        law = law / total
    cmp.argmax_draws += 1
    if tokens[j] == g:
        cmp.argmax_hits += 1
        cmp.argmax_log_p += math.log(max(float(law[g]), 1e-300))
        cmp.argmax_steps.append((step_index, int(step.request_ids[r]), route))


def probability(cmp) -> float | None:
    """The probability that a correct sampler draws the argmax at every draw counted (None: no draw)."""
    return math.exp(cmp.argmax_log_p) if cmp.argmax_draws else None


def contradicts(cmp) -> bool:
    return cmp.argmax_draws > 0 and cmp.argmax_hits == cmp.argmax_draws and cmp.argmax_log_p < math.log(ARGMAX_P)


def suspect(cmp) -> bool:
    """Every draw the argmax, with probability below ARGMAX_SUSPECT for a correct sampler (not yet below
    ARGMAX_P)."""
    return (cmp.argmax_draws > 0 and cmp.argmax_hits == cmp.argmax_draws and not contradicts(cmp)
            and cmp.argmax_log_p < math.log(ARGMAX_SUSPECT))


def describe(cmp) -> str:
    """The contradiction in one clause."""
    routes = sorted({route for _, _, route in cmp.argmax_steps})
    return (f"all {cmp.argmax_draws} random draws at temperature > 0 were the argmax of the processed row "
            f"(probability {probability(cmp):.2g} for a correct sampler, threshold {ARGMAX_P:g}): greedy decoding, "
            f"although the sampler reported route {','.join(routes)}")


def refresh(cmp, Violation) -> None:  # noqa: N803 (compare.diff.Violation, passed in: no import cycle)
    """Keep ``cmp.violations`` in step with the evidence: one ``Violation`` per request-step of the contradiction
    (expected: the route the sampler reported; got: ``GOT``), none without it."""
    kept = [v for v in cmp.violations if v.got != GOT]
    if contradicts(cmp):
        kept += [Violation(s, rid, route, GOT) for s, rid, route in cmp.argmax_steps]
    cmp.violations = kept
    cmp.notes[:] = [n for n in cmp.notes if not n.startswith("tokens contradict the routes: ")]
    if contradicts(cmp):
        cmp.notes.insert(0, "tokens contradict the routes: " + describe(cmp))
