"""Where two recordings of the same prompts part (`replay diff A B`): by step, request and rule. No printing.

Two engine builds recorded the same prompts (same request ids, same positions). Step i of A is paired with step
i of B and, inside it, requests with the same request id. For each request the emitted tokens (and counts)
are compared step by step; the first step where they differ is where the request PARTS (also where the
tokens agree but the recorded routes differ: the same tokens by another path). There, every input of that
request in the two steps is compared, to say which one differs, by rule:

* ``sampling-params``: temperature, top_k, top_p, min_p, seed (exactly);
* ``drafts``: the draft tokens (and so their number), how they were verified and drawn (verify_method,
  fly_*, draft_sampling) and a draft tree's shape (tree_parent), exactly;
* ``pipeline``: the sampling pipeline's inputs of schema minor 2 (histories, penalties, logit bias, allowed /
  stop / bad-word lists, min-tokens, grammar bitmask, logprob requests), exactly; a field one side lacks differs;
* ``positions``: the rows' positions, exactly;
* ``logits`` and ``draft-logits``: widened to float32, equal within ``atol + rtol * |b|`` (infinities equal
  only themselves); compared only where both sides hold the same rows (other drafts are the drafts rule);
* ``sampler``: every input above agrees, so the sampler's output itself differs (another RNG, a sampler change).

A request's later steps are not compared once it parted (its state has diverged). Request-steps whose tokens
agree although an input differed (logits drift that changed no token) are counted by rule, as ``drift``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from replay_harness.recording.schema import FIELDS, INPUT, route_name

DEFAULT_ATOL = 1e-3  # logits: |a - b| <= atol + rtol * |b| is "the same" (bf16 rounding is ~4e-3 relative)
DEFAULT_RTOL = 1e-2
SAMPLING = ("temperature", "top_k", "top_p", "min_p", "seed")
DRAFTS = ("draft_token_ids", "verify_method", "fly_window", "fly_entropy_threshold", "fly_entropy_top_k",
          "draft_sampling", "tree_parent")
FLOAT_RULES = {"logits": "logits", "draft_logits": "draft-logits"}
RULES = ("sampling-params", "drafts", "pipeline", "positions", "logits", "draft-logits", "sampler")
# the per-request slices of every input of the table but the keys and prefix sums
COMPARED = tuple(f for f in FIELDS if f.role == INPUT and f.name != "request_ids" and not f.name.startswith("cu_"))


def rule_of(name: str) -> str:
    """The rule an input field belongs to."""
    if name in SAMPLING:
        return "sampling-params"
    if name in DRAFTS:
        return "drafts"
    if name == "positions":
        return "positions"
    if name in FLOAT_RULES:
        return FLOAT_RULES[name]
    return "pipeline"  # the rest: schema minor 2's PIPELINE_FIELDS


@dataclass
class InputDifference:
    rule: str
    field: str
    detail: str


@dataclass
class Parting:
    """The first step where one request's output differs between A and B, and why."""

    request_id: int
    step: int
    position: int
    kind: str  # "tokens" or "route" (same tokens, another recorded route)
    a_tokens: list[int]
    b_tokens: list[int]
    a_route: str
    b_route: str
    inputs: list[InputDifference] = field(default_factory=list)

    @property
    def rules(self) -> list[str]:
        """The rules of the inputs that differ, in RULES order; ["sampler"] when none does."""
        found = {d.rule for d in self.inputs}
        return [r for r in RULES if r in found] or ["sampler"]


@dataclass
class RecordingDiff:
    a: str
    b: str
    atol: float
    rtol: float
    steps_a: int = 0
    steps_b: int = 0
    request_steps: int = 0  # request-steps compared (paired, before their request parted)
    requests: int = 0  # distinct request ids compared
    partings: list[Parting] = field(default_factory=list)
    drift: Counter = field(default_factory=Counter)  # rule -> request-steps with the same tokens, an input differing
    only_a: list[tuple[int, int]] = field(default_factory=list)  # (step, request id) in A's step only
    only_b: list[tuple[int, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not self.partings and not self.only_a and not self.only_b and self.steps_a == self.steps_b

    def by_rule(self) -> dict[str, int]:
        """How many requests parted for each rule (a parting with two differing inputs counts for both)."""
        found = Counter(r for p in self.partings for r in p.rules)
        return {r: found[r] for r in RULES if found[r]}

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "tolerance": {"atol": self.atol, "rtol": self.rtol},
                "steps": {"a": self.steps_a, "b": self.steps_b, "paired": min(self.steps_a, self.steps_b)},
                "request_steps_compared": self.request_steps, "requests": self.requests,
                "partings": [{**asdict(p), "rules": p.rules} for p in self.partings], "by_rule": self.by_rule(),
                "drift": {r: self.drift[r] for r in RULES if self.drift[r]},
                "only_a": [{"step": s, "request_id": q} for s, q in self.only_a],
                "only_b": [{"step": s, "request_id": q} for s, q in self.only_b], "notes": self.notes}


def _request_slice(step: Any, name: str, r: int, spec: Any) -> torch.Tensor | None:
    """Request ``r``'s part of input ``name``: its element ([R]), its rows ([N, ...]), its verify rows
    ([N-R, V]) or its span of a ragged list; None when the step does not hold the field."""
    value = getattr(step, name, None)
    if value is None:
        return None
    cu = step.cu_num_logits
    lo, hi = int(cu[r]), int(cu[r + 1])
    kind = spec.shape[0]
    if kind == "R":
        return value[r:r + 1]
    if kind == "N":
        return value[lo:hi]
    if kind == "N-R":
        return value[lo - r:hi - r - 1]
    bounds = getattr(step, spec.ragged)
    return value[int(bounds[r]):int(bounds[r + 1])]


def _shown(t: torch.Tensor, limit: int = 8) -> str:
    values = t.flatten().tolist()
    text = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values[:limit])
    return f"[{text}{', …' if len(values) > limit else ''}]"


def _differs(name: str, a: torch.Tensor | None, b: torch.Tensor | None, atol: float, rtol: float) -> str | None:
    """Why input ``name`` of one request differs between A and B (one phrase), or None when it does not."""
    if a is None and b is None:
        return None
    if a is None or b is None:
        return f"{name}: {'absent in A' if a is None else 'absent in B'}"
    if name in FLOAT_RULES:
        if a.shape[-1] != b.shape[-1]:
            return f"{name}: vocabulary {a.shape[-1]} vs {b.shape[-1]}"
        if a.shape != b.shape:
            return None  # other rows: the drafts differ (that rule says so)
        x, y = a.float(), b.float()
        close = torch.isclose(x, y, rtol=rtol, atol=atol) | (torch.isnan(x) & torch.isnan(y))
        if bool(close.all()):
            return None
        gap = torch.where(close, torch.zeros_like(x), (x - y).abs().nan_to_num(float("inf")))
        at = int(gap.flatten().argmax())
        row, token = divmod(at, x.shape[-1])
        return (f"{name}: {int((~close).sum())} of {close.numel()} values beyond {atol:g} + {rtol:g}|b| (largest "
                f"{float(gap.flatten()[at]):.3g} at row {row}, token {token}: {float(x.flatten()[at]):.4g} vs "
                f"{float(y.flatten()[at]):.4g})")
    if a.shape == b.shape and bool(torch.equal(a, b)):
        return None
    if a.numel() <= 8 and b.numel() <= 8:
        return f"{name}: {_shown(a)} vs {_shown(b)}"
    if a.shape != b.shape:
        return f"{name}: {a.shape[0]} vs {b.shape[0]} entries"
    return f"{name}: {int((a != b).sum())} of {a.numel()} entries differ"


def input_differences(sa: Any, ra: int, sb: Any, rb: int, atol: float, rtol: float) -> list[InputDifference]:
    """Every input of request ``ra`` of step ``sa`` that differs from request ``rb`` of step ``sb``."""
    found = []
    for spec in COMPARED:
        why = _differs(spec.name, _request_slice(sa, spec.name, ra, spec), _request_slice(sb, spec.name, rb, spec),
                       atol, rtol)
        if why:
            found.append(InputDifference(rule_of(spec.name), spec.name, why))
    return sorted(found, key=lambda x: RULES.index(x.rule))


def _emitted(record: Any, r: int) -> tuple[list[int], str | None]:
    e = record.emitted
    tokens = e.tokens[r, :int(e.counts[r])].tolist()
    return tokens, None if e.routes is None else route_name(int(e.routes[r]))


def diff_recordings(a: Any, b: Any, *, atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL) -> RecordingDiff:
    """Compare two Recordings (``replay_harness.recording.store.Recording``) step by step (module doc)."""
    d = RecordingDiff(str(a.path), str(b.path), atol, rtol, steps_a=len(a), steps_b=len(b))
    for key in ("vocab_size", "rng_contract"):
        if a.manifest.get(key) != b.manifest.get(key):
            d.notes.append(f"{key}: {a.manifest.get(key)} in A, {b.manifest.get(key)} in B")
    if len(a) != len(b):
        d.notes.append(f"A has {len(a)} steps, B {len(b)}: steps {min(len(a), len(b))} and later are not compared")
    parted: set[int] = set()
    seen: set[int] = set()
    for i in range(min(len(a), len(b))):
        ra, rb = a[i], b[i]
        ids_a, ids_b = ra.step.request_ids.tolist(), rb.step.request_ids.tolist()
        where_b, in_a = {q: j for j, q in enumerate(ids_b)}, set(ids_a)
        d.only_a += [(i, q) for q in ids_a if q not in where_b]
        d.only_b += [(i, q) for q in ids_b if q not in in_a]
        for ia, q in enumerate(ids_a):
            ib = where_b.get(q)
            if ib is None or q in parted:
                continue
            seen.add(q)
            d.request_steps += 1
            (ta, route_a), (tb, route_b) = _emitted(ra, ia), _emitted(rb, ib)
            kind = "tokens" if ta != tb else "route" if route_a and route_b and route_a != route_b else None
            inputs = input_differences(ra.step, ia, rb.step, ib, atol, rtol)
            if kind is None:
                d.drift.update({x.rule for x in inputs})
                continue
            parted.add(q)
            position = int(ra.step.positions[int(ra.step.cu_num_logits[ia])])
            d.partings.append(Parting(int(q), i, position, kind, ta, tb, route_a or "unknown", route_b or "unknown",
                                      inputs))
    d.requests = len(seen)
    return d
