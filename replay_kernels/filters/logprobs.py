"""What an engine returns beside its tokens, in Triton: logprobs, top-n, ranks and kept sets of the emitted slots.

For a batch with logprob requests (``logprobs`` [R] int32, -1 none, n >= 0; ``logprobs_mode`` [R] int8: 0 raw
logprobs, 1 processed logprobs, 2 raw logits, 3 processed logits) and every emitted slot i of request r (row
``cu[r] + i``, ``i < counts[r]``), the layout and rules of the torch oracle (``replay_harness/oracle/logprobs.py``):

* ``values`` [R, K+1, L] float32, ``ids`` [R, K+1, L] int32: column 0 the emitted token, columns 1..n the n largest
  values, descending, ties by ascending id; ``x - logsumexp(x)`` (logprob modes) or ``x`` (logits modes); -inf / -1
  where nothing was asked or emitted (L = 1 + the largest n);
* ``ranks`` [R, K+1] int32: the count of tokens whose value is >= the emitted token's (-1 unused);
* ``kept`` [R, K+1, W] int32: the finite processed logits as packed words (bit v % 32 of word v // 32), every
  emitted slot of every request; zeros elsewhere.

**raw** is the row after the grammar mask (the step's logits and words read again); **processed** is the row after
everything: the samplers' float32 rows (:mod:`.processors`, or the logits when the batch has no processor) under
the row's temperature and its exact filter bound (:mod:`.params` with no sample-and-check: its own
``launch_params``, the samplers' bounds leave top-k / top-p to a check). NaN reads as -inf.

Launches, after the sampler's (its tokens and counts are read on the device): the filter passes of the rows with
min-p / top-k / top-p (:mod:`.filters`), then ``_logprob_kernel`` grid ``(N,)``: one program a row reads the
processed row once (N V x 4 B, or s B when the logits are the rows), and the raw row again for the raw modes
(V s B + W x 4 B), with one online max / sum-exp / rank pass, writes the W kept words of its slot and its column 0
and rank, and, for rows of requests with n > 0, the row's int64 keys ``float_key(x) << 32 | (V - 1 - id)``
(8 B a logit): ``torch.topk`` of those keys gives the n largest with ties by ascending id (torch ops, no host sync).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .bound_rules import float_key
from .params import RowParams, launch_params, prepare_params, process_loaded
from .processors import grammar_allows
from ..shared.launches import launch, run_recorded

WORDS = 32  # kept words a tile: 1,024 lanes
NEG_INF = float("-inf")


@triton.jit
def _raw(logit_row, bits_row, offs, V, on):
    """float32 raw logits of lanes ``offs`` (lanes >= V read -inf), -inf where the grammar bit is clear (``on``)."""
    x = tl.load(logit_row + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    return tl.where(grammar_allows(bits_row, offs, offs < tl.where(on, V, 0)), x, float("-inf"))


@triton.jit
def _logprob_kernel(rows_ptr, r_stride, logits_ptr, l_stride, bits_ptr, b_stride, gram_ptr, temp_ptr, cut_val_ptr,
                    cut_idx_ptr, row_req_ptr, cu_ptr, n_ptr, mode_ptr, key_row_ptr, tokens_ptr, tok_stride, counts_ptr,
                    val_ptr, id_ptr, rank_ptr, kept_ptr, lse_ptr, keys_ptr, V, SLOTS, L, W,
                    GRAMMAR: tl.constexpr, WORDS: tl.constexpr):
    """Program ``row`` (slot ``i`` of request ``r``): the kept words of the slot (zeros when not emitted); when
    emitted and asked, the emitted token's value and rank, the row's log-sum-exp (``lse[row]``) and, for a row of
    ``keys`` (``key_row >= 0``), the keys of its values."""
    row = tl.program_id(0)
    r = tl.load(row_req_ptr + row)
    i = row - tl.load(cu_ptr + r)
    emitted = i < tl.load(counts_ptr + r)
    mode = tl.load(mode_ptr + r)
    asked = emitted & (tl.load(n_ptr + r) >= 0)
    raw_mode = (mode == 0) | (mode == 2)
    slot = r * SLOTS + i
    token = tl.where(emitted, tl.load(tokens_ptr + r * tok_stride + i), 0).to(tl.int32)
    t = tl.load(temp_ptr + row)
    cv = tl.load(cut_val_ptr + row)
    ci = tl.load(cut_idx_ptr + row)
    rows_row = rows_ptr + row.to(tl.int64) * r_stride
    logit_row = logits_ptr + row.to(tl.int64) * l_stride
    bits_row = bits_ptr + row.to(tl.int64) * b_stride
    on = tl.zeros((), tl.int32) != 0
    if GRAMMAR:
        on = tl.load(gram_ptr + row) != 0
    xt = process_loaded(tl.load(rows_row + token), token, t, cv, ci)
    if raw_mode:
        xt = _raw(logit_row, bits_row, token, V, on)
    key_row = tl.load(key_row_ptr + row)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    rank = tl.zeros((), tl.int32)
    lane = tl.arange(0, 32)
    for b0 in range(0, V, 32 * WORDS):
        w = b0 // 32 + tl.arange(0, WORDS)
        offs = w[:, None] * 32 + lane[None, :]
        inside = offs < V
        xp = process_loaded(tl.load(rows_row + offs, mask=inside, other=float("-inf")), offs, t, cv, ci)
        kept = ((xp != float("-inf")) & (xp != float("inf"))).to(tl.int64) << lane[None, :].to(tl.int64)
        word = tl.sum(kept, axis=1).to(tl.int32)  # bit 31 wraps to the sign: the int32 word
        tl.store(kept_ptr + slot * W + w, tl.where(emitted, word, 0), mask=w * 32 < V)
        if asked:
            x = xp
            if raw_mode:
                x = _raw(logit_row, bits_row, offs, V, on)
            x = tl.where(x != x, float("-inf"), x)
            top = tl.maximum(m, tl.max(tl.max(x, axis=1), axis=0))
            if top != float("-inf"):
                s = s * tl.exp(m - top) + tl.sum(tl.sum(tl.exp(x - top), axis=1), axis=0)
                m = top
            rank += tl.sum(tl.sum(((x >= xt) & inside).to(tl.int32), axis=1), axis=0)
            if key_row >= 0:
                key = (float_key(x).to(tl.int64) << 32) | (V - 1 - offs).to(tl.int64)
                tl.store(keys_ptr + key_row.to(tl.int64) * V + offs, key, mask=inside)
    lse = tl.where(m == float("-inf"), float("-inf"), m + tl.log(tl.where(s > 0, s, 1.0)))
    tl.store(lse_ptr + row, lse)
    value = tl.where((mode == 0) | (mode == 1), xt - lse, xt)
    tl.store(val_ptr + slot * L, tl.where(asked, value, float("-inf")))
    tl.store(id_ptr + slot * L, tl.where(asked, token, -1))
    tl.store(rank_ptr + slot, tl.where(asked, rank, -1))


@dataclass
class Logprobs:
    """What the logprob launches read and write (built by :func:`prepare_logprobs`; device tensors).

    rows [N, V] the samplers' rows; logits [N, V], bits [N, W] int32 (or [1, 1]), gram_row [N] int32: the raw rows;
    params: RowParams of the exact filter bounds; row_req [N], cu [R+1], n [R], mode [R] int32; key_row [N] int32
    (the row's slot of ``keys``, -1: none); outputs values [R, K+1, L] float32, ids [R, K+1, L] int32,
    ranks [R, K+1] int32, kept [R, K+1, W] int32 (slots past a request's rows keep their fill); lse [N] float32;
    keys [M, V] int64 for the M rows of requests with n > 0, with their row / request / slot / n / logprob mode
    (top_rows, top_req, top_slot [M] int64, top_n [M] int32, top_lp [M] bool); grammar: some row has a grammar
    mask; launches: the recorded Triton launches.
    """

    rows: torch.Tensor
    logits: torch.Tensor
    bits: torch.Tensor
    gram_row: torch.Tensor
    grammar: bool
    params: RowParams
    row_req: torch.Tensor
    cu: torch.Tensor
    n: torch.Tensor
    mode: torch.Tensor
    key_row: torch.Tensor
    values: torch.Tensor
    ids: torch.Tensor
    ranks: torch.Tensor
    kept: torch.Tensor
    lse: torch.Tensor
    keys: torch.Tensor
    top_rows: torch.Tensor
    top_req: torch.Tensor
    top_slot: torch.Tensor
    top_n: torch.Tensor
    top_lp: torch.Tensor
    launches: list | None = None


def prepare_logprobs(batch, rows: torch.Tensor, filter_span: int) -> Logprobs:
    """Host work for a batch with ``logprobs`` set: ``rows`` [N, V] are the rows the sampler reads (unit stride)."""
    from ..batch import SamplingBatch
    b = SamplingBatch.of(batch)
    h = b.host()
    device = rows.device
    n_rows, v = rows.shape
    r = h.num_requests
    slots = h.max_drafts + 1
    words = triton.cdiv(v, 32)
    asked = h.logprobs.long()
    mode = h.logprobs_mode.long() if h.logprobs_mode is not None else torch.zeros(r, dtype=torch.long)
    width = 1 + int(asked.clamp(min=0).max()) if r else 1
    row_req = h.row_to_request()
    slot_of = torch.arange(n_rows) - h.cu_num_logits.long()[row_req]
    top = torch.nonzero(asked[row_req] > 0).flatten()
    key_row = torch.full((n_rows,), -1, dtype=torch.int32)
    key_row[top] = torch.arange(top.numel(), dtype=torch.int32)
    grammar = b.grammar_bitmask is not None and h.has_grammar is not None and bool(h.has_grammar.any())
    logits = b.logits if b.logits.stride(1) == 1 else b.logits.contiguous()
    i32 = dict(dtype=torch.int32, device=device)
    inner = SamplingBatch(logits=rows, cu_num_logits=b.cu_num_logits, draft_token_ids=b.draft_token_ids,
                          positions=b.positions, temperature=b.temperature, top_k=b.top_k, top_p=b.top_p,
                          min_p=b.min_p, seed=b.seed)
    return Logprobs(
        rows=rows, logits=logits, grammar=grammar,
        bits=b.grammar_bitmask.to(**i32).contiguous() if grammar else torch.zeros((1, 1), **i32),
        gram_row=(h.has_grammar.int()[row_req] if grammar else torch.zeros(n_rows, dtype=torch.int32)).to(device),
        params=prepare_params(inner, device, filter_span, check=False),
        row_req=row_req.to(**i32), cu=h.cu_num_logits.to(**i32), n=asked.to(**i32), mode=mode.to(**i32),
        key_row=key_row.to(device),
        values=torch.full((r, slots, width), NEG_INF, dtype=torch.float32, device=device),
        ids=torch.full((r, slots, width), -1, **i32), ranks=torch.full((r, slots), -1, **i32),
        kept=torch.zeros((r, slots, words), **i32), lse=torch.zeros(n_rows, dtype=torch.float32, device=device),
        keys=torch.zeros((top.numel(), v) if top.numel() else (1, 1), dtype=torch.int64, device=device),
        top_rows=top.to(device), top_req=row_req[top].to(device), top_slot=slot_of[top].to(device),
        top_n=asked[row_req[top]].to(**i32), top_lp=(mode[row_req[top]] <= 1).to(device))


def launch_logprobs(lp: Logprobs, tokens: torch.Tensor, counts: torch.Tensor) -> None:
    """Device work only (graph-capturable): every output of ``lp`` for the launch's ``tokens`` [R, K+1] int64 and
    ``counts`` [R] int32 (the sampler's buffers: the same on every launch of a state)."""
    if not lp.rows.shape[0]:
        return
    run_recorded(lp, lambda: _launch_all(lp, tokens, counts))
    if not lp.top_rows.numel():
        return
    width = lp.values.shape[2]
    best = torch.topk(lp.keys, width - 1, dim=1).values  # [M, n_max]: descending value, then ascending id
    high = (best >> 32).to(torch.int32)
    value = torch.where(high < 0, high ^ 0x7FFFFFFF, high).view(torch.float32)
    value = torch.where(lp.top_lp[:, None], value - lp.lse[lp.top_rows][:, None], value)
    ids = (lp.rows.shape[1] - 1 - (best & 0xFFFFFFFF)).to(torch.int32)
    cols = torch.arange(width - 1, device=best.device)
    use = (cols[None, :] < lp.top_n[:, None]) & (lp.top_slot < counts[lp.top_req])[:, None]
    lp.values[lp.top_req, lp.top_slot, 1:] = torch.where(use, value, torch.full_like(value, NEG_INF))
    lp.ids[lp.top_req, lp.top_slot, 1:] = torch.where(use, ids, torch.full_like(ids, -1))


def _launch_all(lp: Logprobs, tokens: torch.Tensor, counts: torch.Tensor) -> None:
    p = lp.params
    launch_params(lp.rows, p)
    n_rows, v = lp.rows.shape
    launch(_logprob_kernel, (n_rows,), lp.rows, lp.rows.stride(0), lp.logits, lp.logits.stride(0), lp.bits,
           lp.bits.stride(0), lp.gram_row, p.temp_div, p.cut_val, p.cut_idx, lp.row_req, lp.cu, lp.n, lp.mode,
           lp.key_row, tokens, tokens.stride(0), counts, lp.values, lp.ids, lp.ranks, lp.kept, lp.lse, lp.keys, v,
           lp.values.shape[1], lp.values.shape[2], lp.kept.shape[2], GRAMMAR=lp.grammar, WORDS=WORDS)


def outputs(lp: Logprobs) -> dict[str, torch.Tensor]:
    """The host copies: logprobs, logprob_ids, logprob_ranks, kept_mask (the names of the harness's result)."""
    return {"logprobs": lp.values.cpu(), "logprob_ids": lp.ids.cpu(), "logprob_ranks": lp.ranks.cpu(),
            "kept_mask": lp.kept.cpu()}
