"""The ``vllm-mrv2`` peer's sampling pipeline: vLLM 0.33 Model Runner V2's own logits processors and logprobs,
called on the engine state they read, built here from a step's histories (docs/FIXTURES.md, "The sampling
pipeline"; the peers kit's "vLLM MRV2's logits processors and logprobs").

The functions are vLLM's, loaded from the same place as its samplers (``.peers/vllm_mrv2`` or an installed
vllm): ``apply_logit_bias`` (``sample/logit_bias.py``: allowed ids, bias, min-tokens with the grammar restore),
``bincount`` and ``apply_penalties`` (``sample/penalties.py``), ``apply_bad_words`` (``sample/bad_words.py``),
``apply_temperature`` (``sample/gumbel.py``), ``apply_min_p`` (``sample/min_p.py``) and ``compute_topk_scores``
(``sample/logprob.py``). What the kit does not hold is done by this module's own torch code, named as such:

* the grammar bitmask (vLLM: ``worker/gpu/structured_outputs.py``, a Triton kernel): :func:`apply_grammar_bits`;
* top-k / top-p (vLLM: ``v1/sample/ops/topk_topp_sampler.py`` and its Triton kernels): the oracle's
  ``top_k_top_p_sorted`` on the filtered rows;
* the emitted tokens laid out one a row for the logprobs (vLLM: ``_flatten_sampled_kernel`` in
  ``spec_decode/rejection_sampler.py``): one ``torch.where``.

Engine state (vLLM's per-request tensors, request r at state index r; N rows, R requests, V vocabulary):
``input_ids`` [N] int32 (row ``cu[r]`` the last committed token, row ``cu[r] + l`` the draft verified at row
``cu[r] + l - 1``: MRV2's ``input_ids`` / ``draft_sampled``), ``all_token_ids`` [R, P+O] int32 (prompt then
output), ``prompt_len`` / ``total_len`` [R] int32, ``prompt_bin_mask`` [R, ceil(V/32)] int32 and
``output_bin_counts`` [R, V] int32 (vLLM's ``bincount`` of the committed history). The min-tokens position
``pos`` [N] int64 is the model's (P + O + l - 1, so ``pos + 1 < P + min_tokens`` while the row's output holds
fewer than ``min_tokens`` tokens); the recorded ``positions`` stay the RNG key. Greedy requests get top-k,
top-p and min-p off, as vLLM's ``SamplingParams`` forces them.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import torch

from replay_harness.errors import EnvironmentProblem
from replay_harness.oracle.sampling_params import needs_processing, normalized_top_k, top_k_top_p_sorted
from replay_harness.recording.schema import FIELD
from replay_harness.recording.step import Step

# each function and the vLLM 0.33 file it comes from (named when a peers folder lacks it)
SOURCES = {
    "apply_logit_bias": "vllm/v1/worker/gpu/sample/logit_bias.py",
    "bincount": "vllm/v1/worker/gpu/sample/penalties.py",
    "apply_penalties": "vllm/v1/worker/gpu/sample/penalties.py",
    "apply_bad_words": "vllm/v1/worker/gpu/sample/bad_words.py",
    "apply_temperature": "vllm/v1/worker/gpu/sample/gumbel.py",
    "apply_min_p": "vllm/v1/worker/gpu/sample/min_p.py",
    "compute_topk_scores": "vllm/v1/worker/gpu/sample/logprob.py",
}
_loaded: dict[str, Any] = {}


def vllm_fn(name: str) -> Any:
    """vLLM's function ``name`` (SOURCES) from the vllm package the samplers came from; EnvironmentProblem (exit
    3) naming the file when it is not there (a peers folder prepared before the kit copied the processors)."""
    if name not in _loaded:
        path = SOURCES[name]
        try:
            _loaded[name] = getattr(importlib.import_module(path[:-3].replace("/", ".")), name)
        except (ImportError, AttributeError) as e:
            raise EnvironmentProblem(f"peer vllm-mrv2 cannot run this step: {path} ({name}) is missing from the "
                                     f"peers folder ({type(e).__name__}: {e}); run the kit's prepare.sh again"
                                     ) from None
    return _loaded[name]


def _lists(step: Step, name: str) -> list[torch.Tensor]:
    """Request r's entries of a ragged list (host), empty ones when the field is absent."""
    values = getattr(step, name)
    if values is None:
        return [torch.zeros(0, dtype=torch.int32)] * step.num_requests
    cu = getattr(step, FIELD[name].ragged).tolist()
    return [values[cu[r]:cu[r + 1]] for r in range(step.num_requests)]


def _padded(lists: list[torch.Tensor], dtype: torch.dtype, dev: torch.device) -> torch.Tensor:
    """[R, max(1, longest)] of the lists, zero-padded (vLLM's fixed-width state rows)."""
    width = max([1] + [x.numel() for x in lists])
    out = torch.zeros(len(lists), width, dtype=dtype)
    for r, x in enumerate(lists):
        out[r, :x.numel()] = x.to(dtype)
    return out.to(dev)


def _per_request(step: Step, name: str, off: float, dtype: torch.dtype) -> torch.Tensor:
    x = getattr(step, name)
    return torch.full((step.num_requests,), off, dtype=dtype) if x is None else x.to(dtype)


@dataclass
class LogprobGroup:
    """One ``compute_topk_scores`` call: the requests asking logprobs in one ``logprobs_mode``, n the largest count
    asked, rows [M] int64 the rows read (device; None: every row of the step, as an engine with that one mode
    computes them), cu the rows' prefix sum a request, offsets the first row of each of ``requests`` in them."""

    mode: int
    n: int
    requests: list[int]
    rows: torch.Tensor | None
    cu: list[int]
    offsets: list[int]


@dataclass
class EngineState:
    """What the pipeline's launches read (device tensors; see the module docstring). A rule nobody uses is None."""

    input_ids: torch.Tensor
    processing: bool
    bias: tuple | None = None
    check_all_masked: bool = False
    penalties: tuple | None = None
    bad_words: tuple | None = None
    temperature: bool = False
    min_p: torch.Tensor | None = None
    top: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    grammar: tuple[torch.Tensor, torch.Tensor] | None = None
    logprob_groups: list[LogprobGroup] = field(default_factory=list)


def engine_state(host: Step, step: Step, lay: dict[str, torch.Tensor]) -> EngineState:
    """Build vLLM's engine state for ``step`` (``host``: the same step with its small tensors on the CPU; ``lay``:
    peers.vllm_layout). Host work plus vLLM's ``bincount`` kernel (it runs when a request is added, not a step)."""
    dev, r_count, vocab = step.logits.device, step.num_requests, step.vocab_size
    cu = host.cu_num_logits.long()
    rows = torch.repeat_interleave(torch.arange(r_count), cu.diff())
    local = torch.arange(rows.numel()) - cu[rows]
    prompts, outputs = _lists(host, "prompt_token_ids"), _lists(host, "output_token_ids")
    p_len = torch.tensor([x.numel() for x in prompts], dtype=torch.int32)
    o_len = torch.tensor([x.numel() for x in outputs], dtype=torch.int32)
    last = [int(o[-1]) if o.numel() else int(p[-1]) if p.numel() else 0 for p, o in zip(prompts, outputs)]
    input_ids = torch.cat([torch.zeros(1, dtype=torch.int32), host.draft_token_ids[:-1].to(torch.int32)])
    input_ids[cu[:-1]] = torch.tensor(last, dtype=torch.int32)
    st = EngineState(input_ids=input_ids.to(dev), processing=False)
    history = None  # all_token_ids, prompt_len, total_len on the device (built once, when a rule needs them)

    def histories():
        nonlocal history
        if history is None:
            history = (_padded([torch.cat([p, o]) for p, o in zip(prompts, outputs)], torch.int32, dev),
                       p_len.to(dev), (p_len + o_len).to(dev))
        return history

    grammar_on = (host.has_grammar.bool() if host.has_grammar is not None else torch.zeros(r_count, dtype=torch.bool))
    flags = torch.zeros(r_count, dtype=torch.bool)  # vLLM's needs_logits_processing, processors' part
    # allowed ids, logit bias, min-tokens: one kernel (logit_bias.py)
    allowed, bias_ids = _lists(host, "allowed_token_ids"), _lists(host, "logit_bias_ids")
    bias_vals = _lists(host, "logit_bias_values")
    stops, min_tokens = _lists(host, "stop_token_ids"), _per_request(host, "min_tokens", 0, torch.int32)
    n_allowed = torch.tensor([x.numel() for x in allowed], dtype=torch.int32)
    n_bias = torch.tensor([x.numel() for x in bias_ids], dtype=torch.int32)
    n_stop = torch.tensor([x.numel() for x in stops], dtype=torch.int32) * (min_tokens > 0)
    used = (n_allowed > 0) | (n_bias > 0) | (n_stop > 0)
    if bool(used.any()):
        flags |= used
        restore = ((n_stop > 0) & grammar_on).to(torch.int32)
        pos = (p_len + o_len)[rows] + local - 1
        st.bias = (pos.to(dev), n_allowed.to(dev), _padded(allowed, torch.int32, dev), n_bias.to(dev),
                   _padded(bias_ids, torch.int32, dev), _padded(bias_vals, torch.float32, dev),
                   (p_len + min_tokens).to(dev), n_stop.to(dev), restore.to(dev), _padded(stops, torch.int32, dev))
        st.check_all_masked = bool(restore.any())
    # penalties (penalties.py): the histories' bins, by vLLM's own bincount
    rep = _per_request(host, "repetition_penalty", 1.0, torch.float32)
    freq = _per_request(host, "frequency_penalty", 0.0, torch.float32)
    pres = _per_request(host, "presence_penalty", 0.0, torch.float32)
    used = (rep != 1.0) | (freq != 0.0) | (pres != 0.0)
    if bool(used.any()):
        flags |= used
        all_ids, prompt_len, total_len = histories()
        prompt_bins = torch.zeros(r_count, (vocab + 31) // 32, dtype=torch.int32, device=dev)
        output_counts = torch.zeros(r_count, vocab, dtype=torch.int32, device=dev)
        who = torch.nonzero(used).flatten()
        longest = int((p_len + o_len)[who].max())
        if longest:
            vllm_fn("bincount")(who.to(dev), all_ids, prompt_len, total_len, prompt_bins, output_counts, longest)
        st.penalties = (rep.to(dev), freq.to(dev), pres.to(dev), prompt_bins, output_counts)
    # bad words (bad_words.py): flattened words and their offsets a request
    tokens, lengths = _lists(host, "bad_words_token_ids"), _lists(host, "bad_words_lengths")
    n_words = torch.tensor([x.numel() for x in lengths], dtype=torch.int32)
    if bool((n_words > 0).any()):
        flags |= n_words > 0
        offsets = [torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(x.long(), 0)]) for x in lengths]
        all_ids, prompt_len, total_len = histories()
        st.bad_words = (_padded(tokens, torch.int32, dev), _padded(offsets, torch.int32, dev), n_words.to(dev),
                        all_ids, prompt_len, total_len, int(n_words.max()))
    # temperature, min-p, top-k / top-p (sampler.py's apply_sampling_params; greedy requests have them off)
    temp, greedy = host.temperature.float(), host.temperature == 0
    min_p = torch.where(greedy, torch.zeros_like(host.min_p), host.min_p.float())
    top_k = torch.where(greedy, torch.full_like(host.top_k.long(), vocab), normalized_top_k(host.top_k, vocab))
    top_p = torch.where(greedy, torch.ones_like(host.top_p), host.top_p.float())
    st.processing = bool((needs_processing(host) | flags).any())
    st.temperature = bool(((temp != 0) & (temp != 1)).any())
    st.min_p = min_p.to(dev) if bool((min_p != 0).any()) else None
    filtered = ((top_k != vocab) | (top_p != 1))[rows]
    if bool(filtered.any()):
        at = torch.nonzero(filtered).flatten()
        st.top = (at.to(dev), top_k[rows[at]].to(dev), top_p[rows[at]].to(dev))
    if host.grammar_bitmask is not None and bool(grammar_on.any()):
        at = torch.nonzero(grammar_on[rows]).flatten().to(step.grammar_bitmask.device)
        st.grammar = (at.to(dev), step.grammar_bitmask[at].to(dev).contiguous())
    st.logprob_groups = logprob_groups(host, dev)
    return st


def logprob_groups(host: Step, dev: torch.device) -> list[LogprobGroup]:
    """The calls vLLM makes for the logprob requests. Its mode is engine-wide: with one mode in the step, one call
    over every row (requests that asked nothing are computed and dropped, as in the engine); with several, one
    call a mode over the rows of its requests."""
    if host.logprobs is None:
        return []
    asked = host.logprobs.tolist()
    modes = host.logprobs_mode.tolist() if host.logprobs_mode is not None else [0] * len(asked)
    cu = host.cu_num_logits.tolist()
    used = sorted({m for m, n in zip(modes, asked) if n >= 0})
    groups = []
    for mode in used:
        reqs = [r for r, (m, n) in enumerate(zip(modes, asked)) if n >= 0 and m == mode]
        n = max(asked[r] for r in reqs)
        if len(used) == 1:
            groups.append(LogprobGroup(mode, n, reqs, None, cu, [cu[r] for r in reqs]))
            continue
        sizes = [cu[r + 1] - cu[r] for r in reqs]
        sub = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        rows = torch.cat([torch.arange(cu[r], cu[r + 1]) for r in reqs]).to(dev)
        groups.append(LogprobGroup(mode, n, reqs, rows, sub, sub[:-1]))
    return groups


def apply_grammar_bits(logits: torch.Tensor, rows: torch.Tensor, words: torch.Tensor) -> None:
    """This module's stand-in for vLLM's grammar kernel (structured_outputs.py is not in the kit): -inf, in place,
    at every token of ``logits[rows]`` ([N, V]; rows [G] int64) whose bit is clear in ``words`` [G, ceil(V/32)]
    int32 (bit v % 32 of word v // 32). Bytes of a little-endian int32 word hold its tokens 8 at a time."""
    vocab = logits.shape[1]
    bits = words.view(torch.uint8).unsqueeze(-1) >> torch.arange(8, dtype=torch.uint8, device=words.device)
    banned = ((bits & 1) == 0).view(words.shape[0], -1)[:, :vocab].to(logits.device)
    if rows.numel() == logits.shape[0]:
        logits.masked_fill_(banned, float("-inf"))
    else:
        logits.index_copy_(0, rows, logits.index_select(0, rows).masked_fill_(banned, float("-inf")))


def process(raw: torch.Tensor, st: EngineState, lay: dict[str, torch.Tensor], temperature: torch.Tensor
            ) -> torch.Tensor:
    """vLLM's pipeline on ``raw`` [N, V] (the state's own copy: the grammar mask lands in it, as vLLM masks the
    model's logits): the [N, V] float32 processed rows, or ``raw`` itself when no request needs processing."""
    if st.grammar is not None:
        apply_grammar_bits(raw, *st.grammar)
    if not st.processing:
        return raw
    x = torch.empty_like(raw, dtype=torch.float32).copy_(raw)
    exp_idx, local = lay["exp_idx"], lay["local"]
    if st.bias is not None:
        pos, *args = st.bias
        vllm_fn("apply_logit_bias")(x, exp_idx, pos, *args, st.check_all_masked)
    if st.penalties is not None:
        vllm_fn("apply_penalties")(x, exp_idx, st.input_ids, local, *st.penalties)
    if st.bad_words is not None:
        words, offsets, count, all_ids, prompt_len, total_len, most = st.bad_words
        vllm_fn("apply_bad_words")(x, exp_idx, words, offsets, count, all_ids, prompt_len, total_len, st.input_ids,
                                   local, most)
    if st.temperature:
        vllm_fn("apply_temperature")(x, exp_idx, temperature)
    if st.min_p is not None:
        vllm_fn("apply_min_p")(x, exp_idx, st.min_p)
    if st.top is not None:  # the oracle's sort-based top-k / top-p (vLLM's are not in the kit)
        at, k, p = st.top
        x[at] = top_k_top_p_sorted(x[at], k, p)
    return x


def topk_scores(raw: torch.Tensor, processed: torch.Tensor, sampled: torch.Tensor, num: torch.Tensor,
                st: EngineState, lay: dict[str, torch.Tensor]) -> list[Any]:
    """vLLM's ``compute_topk_scores`` a logprobs group (raw or processed rows, logprobs or logits), after the
    draw: ``sampled`` [R, >=1] / ``num`` [R] give each row its emitted token (0 past the emitted ones)."""
    exp_idx, local = lay["exp_idx"].long(), lay["local"].long()
    flat = torch.where(local < num.long()[exp_idx], sampled.long()[exp_idx, local.clamp(max=sampled.shape[1] - 1)],
                       torch.zeros_like(local))
    out = []
    for g in st.logprob_groups:
        src = processed if g.mode in (1, 3) else raw
        rows_src, rows_flat = (src, flat) if g.rows is None else (src[g.rows], flat[g.rows])
        out.append(vllm_fn("compute_topk_scores")(rows_src, g.n, rows_flat, g.cu, logits_mode=g.mode in (2, 3)))
    return out


def logprob_result(step: Step, st: EngineState, scores: list[Any], tokens: torch.Tensor, counts: torch.Tensor
                   ) -> dict[str, torch.Tensor]:
    """SampleResult's logprobs [R, K+1, L] float32, logprob_ids [R, K+1, L] int32 and logprob_ranks [R, K+1] int32
    (-inf / -1 / -1 where nothing was asked or emitted) from vLLM's LogprobsTensors of each group."""
    r_count, slots = tokens.shape
    asked = step.logprobs.tolist()
    width = 1 + max([n for n in asked if n >= 0], default=0)
    values = torch.full((r_count, slots, width), float("-inf"), dtype=torch.float32)
    ids = torch.full((r_count, slots, width), -1, dtype=torch.int32)
    ranks = torch.full((r_count, slots), -1, dtype=torch.int32)
    counts = counts.tolist()
    for g, lp in zip(st.logprob_groups, scores):
        v, i, rk = lp.logprobs.float().cpu(), lp.logprob_token_ids.cpu(), lp.selected_token_ranks.cpu()
        for r, first in zip(g.requests, g.offsets):
            n, c = asked[r], counts[r]
            values[r, :c, :n + 1] = v[first:first + c, :n + 1]
            ids[r, :c, :n + 1] = i[first:first + c, :n + 1].to(torch.int32)
            ranks[r, :c] = rk[first:first + c].to(torch.int32)
    return {"logprobs": values, "logprob_ids": ids, "logprob_ranks": ranks}
