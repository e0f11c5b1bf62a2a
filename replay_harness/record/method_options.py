"""`replay record`'s verification-method options (docs/RECORDING.md, "Verification methods"): how each request's
drafts are verified, how the model drafters draw them, and the recording's RNG contract. Read and checked before
the model loads (:func:`read_methods`), laid out as one step's fields (:func:`method_fields`; docs/FIXTURES.md,
"Verification methods"). Every problem is a :class:`~replay_harness.errors.UsageError` (exit 2) of one line
naming the option.

* ``--verify-method standard|block|fly|tree`` and FLy's ``--fly-window``, ``--fly-entropy-threshold``,
  ``--fly-entropy-top-k`` and the tree's ``--tree-width``: per request, repeatable or comma separated, the values
  cycled over the requests (request i gets value i mod n) as ``--temperature``'s are. Not given: the steps carry no
  ``verify_method`` (standard). A tree request's drafts are the tree of :mod:`replay_harness.record.tree`
  (``--tree-width`` W >= 1 branches, default 2, over ``--num-drafts`` K nodes), which needs a model drafter
  (early-exit or draft-model: the n-gram drafter has no distribution to take a top-W of); its drafts are one-hot,
  so ``--draft-sampling probabilistic`` is refused with it (docs/FIXTURES.md "Draft trees" defines no sibling
  noise key), and a model drafter's chain requests in the same run need ``--draft-sampling greedy`` (a step holds
  draft logits for every verify row or for none).
* ``--draft-sampling greedy|probabilistic``: one value for the run, as vLLM's ``draft_sample_method`` (a step
  holds draft logits for every verify row or for none, so greedy drafts, which carry none, and probabilistic
  ones cannot mix in a step). Not given: the model drafters' own draws and no ``draft_sampling`` field.
* ``--rng-contract mrv2|mrv2-fp64``: the recording's contract (schema.RNG_CONTRACTS); not given: the impl's.

FLy's defaults and ranges are vLLM 0.33's ``SpeculativeConfig``: threshold 0.3 (>= 0), top-k 3 (>= 1), window
min(6, K - 1), which must stay below K, so FLy needs K >= 2 drafts per step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from replay_harness.errors import UsageError
from replay_harness.record.sampling_options import cycled
from replay_harness.recording.schema import DRAFT_SAMPLING, RNG_CONTRACTS, VERIFY_METHODS
from replay_harness.recording.step import Step

STANDARD, FLY, TREE = VERIFY_METHODS.index("standard"), VERIFY_METHODS.index("fly"), VERIFY_METHODS.index("tree")
GREEDY, PROBABILISTIC = DRAFT_SAMPLING.index("greedy"), DRAFT_SAMPLING.index("probabilistic")
FLY_THRESHOLD, FLY_TOP_K, FLY_MAX_WINDOW = 0.3, 3, 6  # vLLM's defaults (module docstring)
TREE_WIDTH = 2  # --tree-width's default


@dataclass
class MethodText:
    """The options as the command line gives them (text; lists for the per-request ones), before reading."""

    verify_method: list[str] = field(default_factory=list)
    fly_window: list[str] = field(default_factory=list)
    fly_entropy_threshold: list[str] = field(default_factory=list)
    fly_entropy_top_k: list[str] = field(default_factory=list)
    tree_width: list[str] = field(default_factory=list)
    draft_sampling: str | None = None
    rng_contract: str | None = None


@dataclass(frozen=True)
class RequestMethod:
    """How one request's drafts are verified: a code of schema.VERIFY_METHODS and FLy's parameters (recorded for
    every request once one uses fly; only fly requests read them) and a tree request's width (``--tree-width``)."""

    verify_method: int = STANDARD
    fly_window: int = 1
    fly_entropy_threshold: float = FLY_THRESHOLD
    fly_entropy_top_k: int = FLY_TOP_K
    tree_width: int = TREE_WIDTH

    def describe(self) -> dict[str, Any]:
        """JSON-able, for the manifest's ``source.requests``."""
        out: dict[str, Any] = {"verify_method": VERIFY_METHODS[self.verify_method]}
        if self.verify_method == FLY:
            out.update(fly_window=self.fly_window, fly_entropy_threshold=self.fly_entropy_threshold,
                       fly_entropy_top_k=self.fly_entropy_top_k)
        if self.verify_method == TREE:
            out["tree_width"] = self.tree_width
        return out


@dataclass
class Methods:
    """What a run records: ``requests`` one RequestMethod per request (None: no --verify-method), ``draft_sampling``
    a code of schema.DRAFT_SAMPLING (None: not given), ``rng_contract`` the contract asked for (None: the impl's)."""

    requests: list[RequestMethod] | None = None
    draft_sampling: int | None = None
    rng_contract: str | None = None

    @property
    def fp64(self) -> bool:
        return self.rng_contract == "mrv2-fp64"


def _cycled(option: str, texts: list[str], n: int, conv: Callable[[str, str], Any]) -> list[Any] | None:
    """sampling_options.cycled, each part read without its surrounding blanks."""
    return cycled(option, texts, n, lambda opt, part: conv(opt, part.strip()))


def _name(names: tuple[str, ...]) -> Callable[[str, str], int]:
    def conv(option: str, text: str) -> int:
        if text not in names:
            raise UsageError(f"{option}: {text!r} is not one of {', '.join(names)}")
        return names.index(text)
    return conv


def _int(option: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{option}: {text!r} is not an integer") from None


def _float(option: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{option}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{option}: {text!r} is not finite")
    return value


def _requests(text: MethodText, n: int, num_drafts: int) -> list[RequestMethod] | None:
    codes = _cycled("--verify-method", text.verify_method, n, _name(VERIFY_METHODS))
    fly_options = {"--fly-window": _cycled("--fly-window", text.fly_window, n, _int),
                   "--fly-entropy-threshold": _cycled("--fly-entropy-threshold", text.fly_entropy_threshold, n,
                                                      _float),
                   "--fly-entropy-top-k": _cycled("--fly-entropy-top-k", text.fly_entropy_top_k, n, _int)}
    widths = _cycled("--tree-width", text.tree_width, n, _int)
    if widths is not None and TREE not in (codes or []):
        raise UsageError("--tree-width: no request uses tree (add --verify-method tree)")
    fly = [i for i, code in enumerate(codes or []) if code == FLY]
    given = [option for option, values in fly_options.items() if values is not None]
    if given and not fly:
        raise UsageError(f"{given[0]}: no request uses fly (add --verify-method fly)")
    if fly and num_drafts < 2:
        raise UsageError(f"--verify-method fly needs --num-drafts K >= 2 (a deferred rejection needs a window of "
                         f"W >= 1 drafts after it, W < K), got {num_drafts}")
    if codes is None:
        return None
    windows, thresholds, top_ks = fly_options.values()
    out = []
    for i, code in enumerate(codes):
        m = RequestMethod(code, windows[i] if windows else max(1, min(FLY_MAX_WINDOW, num_drafts - 1)),
                          thresholds[i] if thresholds else FLY_THRESHOLD, top_ks[i] if top_ks else FLY_TOP_K,
                          widths[i] if widths else TREE_WIDTH)
        if code == TREE and m.tree_width < 1:
            raise UsageError(f"--tree-width: {m.tree_width} (request {i}) must be >= 1")
        if code == FLY and not 1 <= m.fly_window < num_drafts:
            raise UsageError(f"--fly-window: {m.fly_window} (request {i}) must be in [1, {num_drafts - 1}]: at "
                             f"least 1 and below --num-drafts {num_drafts}")
        if code == FLY and m.fly_entropy_threshold < 0:
            raise UsageError(f"--fly-entropy-threshold: {m.fly_entropy_threshold} (request {i}) is negative")
        if code == FLY and m.fly_entropy_top_k < 1:
            raise UsageError(f"--fly-entropy-top-k: {m.fly_entropy_top_k} (request {i}) must be >= 1")
        out.append(m)
    return out


def read_methods(text: MethodText, n: int, num_drafts: int, drafter: str) -> Methods:
    """The ``n`` requests' methods, the run's draft sampling and contract (module docstring); UsageError on bad
    input, probabilistic drafts from the n-gram drafter (it has no logits to draw from) included."""
    sampling = None
    if text.draft_sampling is not None:
        sampling = _name(DRAFT_SAMPLING)("--draft-sampling", text.draft_sampling.strip())
        if sampling == PROBABILISTIC and drafter == "ngram":
            raise UsageError("--draft-sampling probabilistic: the ngram drafter has no logits to draw drafts from "
                             "(use --drafter early-exit or draft-model)")
    contract = None
    if text.rng_contract is not None:
        contract = RNG_CONTRACTS[_name(RNG_CONTRACTS)("--rng-contract", text.rng_contract.strip())]
    requests = _requests(text, n, num_drafts)
    _check_tree(requests, sampling, drafter)
    return Methods(requests, sampling, contract)


def _check_tree(requests: list[RequestMethod] | None, sampling: int | None, drafter: str) -> None:
    """The rules of tree requests that involve the drafter and --draft-sampling (module docstring)."""
    trees = [m.verify_method == TREE for m in requests or []]
    if not any(trees):
        return
    if drafter == "ngram":
        raise UsageError("--verify-method tree: the ngram drafter has no distribution to take the top "
                         "--tree-width tokens of (use --drafter early-exit or draft-model)")
    if sampling == PROBABILISTIC:
        raise UsageError("--verify-method tree with --draft-sampling probabilistic: probabilistic drafts are defined "
                         "for chains only (no sibling noise key; docs/FIXTURES.md 'Draft trees')")
    if sampling is None and not all(trees):
        raise UsageError("--verify-method tree beside chain requests: tree drafts are one-hot, so the chains' model "
                         "drafts must be too (add --draft-sampling greedy)")


def method_fields(methods: list[RequestMethod | None], draft_sampling: int | None) -> dict[str, torch.Tensor]:
    """One step's verify_method, fly_* (once a request uses fly) and draft_sampling fields for its requests'
    ``methods`` (all None: no verify_method) and the run's ``draft_sampling`` (None: no field)."""
    out: dict[str, torch.Tensor] = {}
    if any(m is not None for m in methods):
        ms = [m or RequestMethod() for m in methods]
        out["verify_method"] = torch.tensor([m.verify_method for m in ms], dtype=torch.int8)
        # tree_parent (per row) comes from decode.build_step, which knows each request's nodes
        if any(m.verify_method == FLY for m in ms):
            out["fly_window"] = torch.tensor([m.fly_window for m in ms], dtype=torch.int32)
            out["fly_entropy_threshold"] = torch.tensor([m.fly_entropy_threshold for m in ms], dtype=torch.float32)
            out["fly_entropy_top_k"] = torch.tensor([m.fly_entropy_top_k for m in ms], dtype=torch.int32)
    if draft_sampling is not None:
        out["draft_sampling"] = torch.full((len(methods),), draft_sampling, dtype=torch.int8)
    return out


def probe_step(methods: Methods) -> Step | None:
    """A tiny step (V = 8, two drafts a request) with one stochastic request per non-standard method asked for, under
    the contract asked for, to learn whether the loop's impl samples them (a refusal is then exit 2 before the model
    loads); None when nothing but standard verification under ``mrv2`` is asked for."""
    codes = sorted({m.verify_method for m in methods.requests or []} - {STANDARD})
    if not codes and methods.rng_contract in (None, "mrv2"):
        return None
    reqs = [RequestMethod(code, 1, 0.0, 2) for code in codes] or [RequestMethod()]
    r, rows = len(reqs), 3 * len(reqs)
    tree = {"tree_parent": torch.tensor([-1, 0, -1] * r, dtype=torch.int32)} if TREE in codes else {}
    return Step(logits=torch.arange(rows * 8, dtype=torch.float32).reshape(rows, 8).remainder(5),
                cu_num_logits=torch.arange(0, rows + 1, 3, dtype=torch.int32),
                draft_token_ids=torch.tensor([1, 2, -1] * r, dtype=torch.int32),
                positions=torch.tensor([0, 1, 2] * r, dtype=torch.int64),
                temperature=torch.ones(r), top_k=torch.zeros(r, dtype=torch.int32), top_p=torch.ones(r),
                min_p=torch.zeros(r), seed=torch.arange(r, dtype=torch.int64),
                request_ids=torch.arange(r, dtype=torch.int64), rng_contract=methods.rng_contract or "mrv2",
                **method_fields(reqs, None), **tree)
