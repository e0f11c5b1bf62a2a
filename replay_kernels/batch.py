"""The tensors of one sampler call in Model Runner V2's expanded layout, and the route each request takes.

Request ``r`` owns the ``1 + k_r`` consecutive logits rows ``[cu_num_logits[r], cu_num_logits[r+1])``: ``k_r``
draft-verify rows, then its bonus row; ``k_r == 0`` is a plain sample. The samplers of this package take a
:class:`SamplingBatch` (or any object with the same attributes: they read nothing else) and the public entry
points of :mod:`replay_kernels.api` build one from plain tensors. Nothing here knows of recordings.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

# Route codes of the samplers' ``state.routes`` ([R] int8): the path each request took.
ROUTES = ("greedy-sample", "random-sample", "greedy-verify", "stochastic-verify", "refused")
ROUTE_CODE = {name: code for code, name in enumerate(ROUTES)}


def route_of(temperature: float, num_drafts: int) -> str:
    """The route of a request: temperature 0 is greedy, drafts mean verify."""
    if num_drafts > 0:
        return "greedy-verify" if temperature == 0.0 else "stochastic-verify"
    return "greedy-sample" if temperature == 0.0 else "random-sample"


def normalized_top_k(top_k: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[R] int64: k, with 0 (off) or k > V read as V (no top-k), as the engine stores it."""
    k = top_k.long()
    return torch.where((k <= 0) | (k > vocab_size), torch.full_like(k, vocab_size), k)


def needs_processing(b: "SamplingBatch") -> torch.Tensor:
    """[R] bool: the request's logits change under its parameters (Model Runner V2's rule: T != 0 and some
    parameter is not the identity); the other requests' rows are read raw."""
    t = b.temperature
    k = normalized_top_k(b.top_k, b.vocab_size)
    return (t != 0) & ((t != 1) | (b.min_p != 0) | (k != b.vocab_size) | (b.top_p != 1))


# The fields whose presence means a logits processor (or the grammar mask) may change a row.
PROCESSOR_FIELDS = ("repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens", "allowed_token_ids",
                    "logit_bias_ids", "bad_words_token_ids", "grammar_bitmask")


@dataclass
class SamplingBatch:
    """One sampler call: R requests, N = sum(1 + k_r) rows, V vocabulary.

    logits          [N, V]   float32 | bfloat16 | float16  target logits before temperature and filters
    cu_num_logits   [R+1]    int32   exclusive prefix sum of rows per request, starts at 0
    draft_token_ids [N]      int32   the draft verified at row j (MRV2's ``draft_sampled[j + 1]``); -1 on bonus
                                     rows and for placeholders
    positions       [N]      int64   sequence position of each row (the RNG key)
    temperature     [R]      float32 0 = greedy
    top_k           [R]      int32   0 (or >= V) = off
    top_p           [R]      float32 1 = off
    min_p           [R]      float32 0 = off
    seed            [R]      int64   per-request RNG seed
    request_ids     [R]      int64 (optional) the engine's request ids, quoted in notes
    draft_logits    [N-R, V] float (optional) pre-temperature draft logits, one row per verify row

    The sampling pipeline's inputs (all optional; None: the rule is off; docs/FIXTURES.md "The sampling
    pipeline"). ``*`` is a ragged list: request r's entries are ``x[cu_x[r]:cu_x[r+1]]``.
    repetition_penalty, frequency_penalty, presence_penalty [R] float32   1 / 0 / 0 = off
    min_tokens       [R] int32    stop ids are suppressed while the output holds fewer tokens
    has_grammar      [R] int8     1: ``grammar_bitmask`` applies to the request's rows
    logprobs         [R] int32    -1 none, n >= 0: the sampled token's logprob and the top n
    logprobs_mode    [R] int8     0 raw logprobs, 1 processed logprobs, 2 raw logits, 3 processed logits
    prompt_token_ids, output_token_ids, allowed_token_ids, stop_token_ids, bad_words_token_ids,
    bad_words_lengths, logit_bias_ids  [*] int32, logit_bias_values [*] float32, with their ``cu_*`` [R+1] int32
    grammar_bitmask  [N, ceil(V/32)] int32  bit v % 32 of word v // 32 set: token v allowed at the row
    """

    logits: torch.Tensor
    cu_num_logits: torch.Tensor
    draft_token_ids: torch.Tensor
    positions: torch.Tensor
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    seed: torch.Tensor
    request_ids: torch.Tensor | None = None
    draft_logits: torch.Tensor | None = None
    repetition_penalty: torch.Tensor | None = None
    frequency_penalty: torch.Tensor | None = None
    presence_penalty: torch.Tensor | None = None
    min_tokens: torch.Tensor | None = None
    has_grammar: torch.Tensor | None = None
    logprobs: torch.Tensor | None = None
    logprobs_mode: torch.Tensor | None = None
    prompt_token_ids: torch.Tensor | None = None
    cu_prompt_token_ids: torch.Tensor | None = None
    output_token_ids: torch.Tensor | None = None
    cu_output_token_ids: torch.Tensor | None = None
    allowed_token_ids: torch.Tensor | None = None
    cu_allowed_token_ids: torch.Tensor | None = None
    stop_token_ids: torch.Tensor | None = None
    cu_stop_token_ids: torch.Tensor | None = None
    bad_words_token_ids: torch.Tensor | None = None
    cu_bad_words_token_ids: torch.Tensor | None = None
    bad_words_lengths: torch.Tensor | None = None
    cu_bad_words_lengths: torch.Tensor | None = None
    logit_bias_ids: torch.Tensor | None = None
    logit_bias_values: torch.Tensor | None = None
    cu_logit_bias: torch.Tensor | None = None
    grammar_bitmask: torch.Tensor | None = None

    @classmethod
    def of(cls, obj: object) -> "SamplingBatch":
        """The batch of any object with these attributes (one of this class, or a caller's own step type)."""
        return obj if isinstance(obj, cls) else cls(**{f.name: getattr(obj, f.name, None) for f in fields(cls)})

    def host(self) -> "SamplingBatch":
        """The batch with every small field on the CPU (logits and draft logits stay where they are)."""
        small = {f.name: getattr(self, f.name) for f in fields(SamplingBatch)}  # a subclass's own fields dropped
        for name, value in small.items():
            if name not in ("logits", "draft_logits", "grammar_bitmask") and isinstance(value, torch.Tensor):
                small[name] = value.cpu()
        if small["request_ids"] is None:
            small["request_ids"] = torch.arange(self.num_requests)
        return SamplingBatch(**small)

    @property
    def num_requests(self) -> int:
        return self.cu_num_logits.numel() - 1

    @property
    def vocab_size(self) -> int:
        return self.logits.shape[1]

    @property
    def num_drafts(self) -> torch.Tensor:
        """[R] int64: k_r per request."""
        return (self.cu_num_logits[1:] - self.cu_num_logits[:-1]).long() - 1

    @property
    def max_drafts(self) -> int:
        return int(self.num_drafts.max()) if self.num_requests else 0

    def row_to_request(self) -> torch.Tensor:
        """[N] int64: the request that owns each row (on the device of ``cu_num_logits``)."""
        return torch.repeat_interleave(torch.arange(self.num_requests, device=self.cu_num_logits.device),
                                       self.num_drafts + 1)

    def draft_row_index(self) -> torch.Tensor:
        """[N] int64: the draft_logits row of each logits row, -1 on bonus rows (device of ``cu_num_logits``)."""
        is_bonus = torch.zeros(self.logits.shape[0], dtype=torch.bool, device=self.cu_num_logits.device)
        is_bonus[self.cu_num_logits[1:].long() - 1] = True
        idx = torch.cumsum((~is_bonus).long(), 0) - 1
        return torch.where(is_bonus, torch.full_like(idx, -1), idx)

    @property
    def has_pipeline(self) -> bool:
        """Whether any logits processor or grammar mask is set (the rules of docs/FIXTURES.md "The sampling
        pipeline" beyond temperature, min-p, top-k and top-p; logprob requests do not count)."""
        return any(getattr(self, name) is not None for name in PROCESSOR_FIELDS)

    def expected_routes(self) -> list[str]:
        temps, ks = self.temperature.tolist(), self.num_drafts.tolist()
        return [route_of(t, k) for t, k in zip(temps, ks)]


@dataclass
class Sampled:
    """What a sampler's ``sample`` returns, on the host: tokens [R, max_k+1] int64 (-1 padded), counts [R] int32,
    routes [R] int8 (:data:`ROUTE_CODE`), notes (what the sampler refused, and why); with logprob requests,
    emitted: logprobs [R, max_k+1, L] float32, logprob_ids [R, max_k+1, L] int32, logprob_ranks [R, max_k+1] int32,
    kept_mask [R, max_k+1, ceil(V/32)] int32 (replay_kernels/filters/logprobs.py)."""

    tokens: torch.Tensor
    counts: torch.Tensor
    routes: torch.Tensor
    notes: list
    emitted: dict = field(default_factory=dict)

    def route_names(self) -> list[str]:
        return [ROUTES[c] if 0 <= c < len(ROUTES) else "unknown" for c in self.routes.tolist()]


class KernelSampler:
    """``sample`` = ``prepare`` (host work) then ``launch`` (device work only, graph-capturable); subclasses write
    those two. A state carries ``routes`` and may carry ``notes``."""

    def prepare(self, batch) -> object:
        raise NotImplementedError

    def launch(self, state) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def sample(self, batch) -> Sampled:
        b = SamplingBatch.of(batch)
        if b.num_requests == 0:
            return Sampled(torch.full((0, b.max_drafts + 1), -1, dtype=torch.int64), torch.zeros(0, dtype=torch.int32),
                           torch.zeros(0, dtype=torch.int8), [])
        state = self.prepare(b)
        return self.result(state, *self.launch(state))

    def result(self, state, tokens: torch.Tensor, counts: torch.Tensor) -> Sampled:
        """The host copy of a launch's outputs, with the state's routes and notes (and logprob outputs: a
        ``pipeline.PipelineState``'s ``emitted()``)."""
        emitted = state.emitted() if hasattr(state, "emitted") else {}
        return Sampled(tokens.cpu(), counts.cpu(), state.routes.clone().cpu(), list(getattr(state, "notes", [])),
                       emitted)
