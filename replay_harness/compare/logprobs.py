"""Compare what two samplers return beside their tokens: logprobs, top-n ids, ranks and kept sets (docs/VERIFY.md,
"The sampling pipeline").

For each emitted slot the two sides share (the slots before the first token that differs), where both sides
returned them:

* **logprob** (request asked for ``logprobs = n >= 0``): the emitted token's value and the top-n values column by
  column agree within ``|a - b| <= LOGPROB_ABS + LOGPROB_REL * |b|`` (1e-4 + 1e-6 |b|; b the other side); -inf
  equals -inf only;
* **top-n**: the same top-n ids, as sets; ids whose value ties within that tolerance with the n-th value (on
  either side), or is -inf, are interchangeable (an engine may break that tie otherwise);
* **rank**: the count of tokens scoring at least the emitted token's, exactly;
* **kept-set**: the tokens kept with a finite processed logit, bit for bit (bits past V ignored).

Shapes: logprobs [R, K+1, L] float32, logprob_ids [R, K+1, L] int32, logprob_ranks [R, K+1] int32, kept_mask
[R, K+1, ceil(V/32)] int32 (``SampleResult`` and the recording's ``emitted_*`` alike; docs/FIXTURES.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from replay_harness.recording.step import SampleResult, Step

LOGPROB_ABS = 1e-4
LOGPROB_REL = 1e-6
KINDS = ("logprob", "top-n", "rank", "kept-set")


@dataclass
class OutputDivergence:
    """A logprob, top-n, rank or kept-set difference at one emitted slot (``kind`` one of KINDS)."""

    step: int
    request: int       # index in the step
    request_id: int
    position: int      # emitted slot
    kind: str
    detail: str
    rule: str | None = None       # the ablation that reproduces a side's kept sets (compare/attribution.py)
    rule_side: str | None = None  # whose: "impl" or "against"


def close(a: float, b: float) -> bool:
    """``|a - b| <= 1e-4 + 1e-6 |b|``; -inf only equals -inf; NaN (a row with no finite logit: docs/FIXTURES.md,
    "Emitted logprobs and kept sets") only equals NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= LOGPROB_ABS + LOGPROB_REL * abs(b)


def _tied(value: float, boundary: list[float]) -> bool:
    return value == -math.inf or any(close(value, x) or close(x, value) for x in boundary)


def compare_slot(n: int, va: list[float], ia: list[int], vb: list[float], ib: list[int]) -> tuple[str, str] | None:
    """(kind, detail) of the first difference between two slots' logprob columns 0..n (values ``va`` / ``vb``,
    ids ``ia`` / ``ib``), or None when they agree."""
    if not close(va[0], vb[0]):
        return "logprob", f"emitted token {ib[0]}: {va[0]:.7g} vs {vb[0]:.7g}"
    for c in range(1, n + 1):
        if not close(va[c], vb[c]):
            return "logprob", f"top-{n} value {c}: {va[c]:.7g} vs {vb[c]:.7g}"
    if n == 0:
        return None
    boundary = [va[n], vb[n]]
    sure_a = {i for i, v in zip(ia[1:n + 1], va[1:n + 1]) if not _tied(v, boundary)}
    sure_b = {i for i, v in zip(ib[1:n + 1], vb[1:n + 1]) if not _tied(v, boundary)}
    only_a, only_b = sorted(sure_a - set(ib[1:n + 1])), sorted(sure_b - set(ia[1:n + 1]))
    if only_a or only_b:
        return "top-n", (f"top-{n} ids differ: {only_a[:5] or '-'} on this side only, {only_b[:5] or '-'} on the "
                         f"other only (ties at the {n}-th value interchangeable)")
    return None


def unpack(words: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[..., V] bool from packed [..., W] int32 words (bit v % 32 of word v // 32; bits past V dropped, missing
    words read as clear)."""
    bits = ((words.long()[..., None] >> torch.arange(32)) & 1).reshape(*words.shape[:-1], -1)[..., :vocab_size]
    return torch.nn.functional.pad(bits, (0, vocab_size - bits.shape[-1])).bool()


@dataclass
class OutputCounts:
    """What :func:`compare_outputs` looked at: slots whose logprobs / kept sets were compared or could not be."""

    logprob_slots: int = 0
    kept_slots: int = 0
    logprobs_missing: int = 0  # slots that asked for logprobs where a side returned none


def compare_outputs(step_index: int, step: Step, a: SampleResult, b: SampleResult, r: int, slots: int,
                    rows: int, counts: OutputCounts) -> list[OutputDivergence]:
    """The differences between ``a`` (the impl under test) and ``b`` for request r: logprobs, top-n ids and ranks
    of its first ``slots`` emitted slots (those whose tokens agree), kept sets of its first ``rows`` (emitted by
    both sides: a slot's kept set depends on its row alone); ``counts`` gets what was compared."""
    rid = int(step.request_ids[r]) if step.request_ids is not None else r
    out: list[OutputDivergence] = []
    n = -1 if step.logprobs is None else int(step.logprobs[r])
    if n >= 0 and slots:
        short = [x for x in (a, b) if x.logprobs is not None and x.logprob_ids is not None
                 and (x.logprobs.shape[1] < slots or x.logprobs.shape[2] < n + 1)]
        if any(x.logprobs is None or x.logprob_ids is None for x in (a, b)):
            counts.logprobs_missing += slots
        elif short:
            side = "this side" if short[0] is a else "the other side"
            out.append(OutputDivergence(step_index, r, rid, 0, "logprob", f"{side} returned logprobs of shape "
                                        f"{list(short[0].logprobs.shape)}: too small for {slots} slot(s) of "
                                        f"1 + {n} columns"))
        else:
            for i in range(slots):
                counts.logprob_slots += 1
                va, ia = a.logprobs[r, i, :n + 1].double().cpu().tolist(), a.logprob_ids[r, i, :n + 1].cpu().tolist()
                vb, ib = b.logprobs[r, i, :n + 1].double().cpu().tolist(), b.logprob_ids[r, i, :n + 1].cpu().tolist()
                diff = compare_slot(n, va, ia, vb, ib)
                if diff is not None:
                    out.append(OutputDivergence(step_index, r, rid, i, *diff))
                if a.logprob_ranks is not None and b.logprob_ranks is not None:
                    ra, rb = int(a.logprob_ranks[r, i]), int(b.logprob_ranks[r, i])
                    if ra != rb:
                        out.append(OutputDivergence(step_index, r, rid, i, "rank", f"rank {ra} vs {rb}"))
    if a.kept_mask is not None and b.kept_mask is not None and rows and \
            min(a.kept_mask.shape[1], b.kept_mask.shape[1]) >= rows:
        ka = unpack(a.kept_mask[r, :rows].cpu(), step.vocab_size)
        kb = unpack(b.kept_mask[r, :rows].cpu(), step.vocab_size)
        counts.kept_slots += rows
        for i in range(rows):
            if not torch.equal(ka[i], kb[i]):
                extra = torch.nonzero(ka[i] & ~kb[i]).flatten().tolist()
                missing = torch.nonzero(kb[i] & ~ka[i]).flatten().tolist()
                out.append(OutputDivergence(step_index, r, rid, i, "kept-set",
                                            f"{len(extra)} token(s) kept on this side only (first {extra[:5]}), "
                                            f"{len(missing)} on the other only (first {missing[:5]})"))
    return out
