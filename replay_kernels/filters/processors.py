"""The grammar mask and Model Runner V2's logits processors in Triton: float32 rows for the samplers.

A batch with pipeline inputs (:attr:`replay_kernels.batch.SamplingBatch.has_pipeline`) is turned into ``rows``
[N, V] float32, each row processed as far as the temperature (docs/KERNELS.md "The sampling pipeline"; the
torch oracle: ``replay_harness/oracle/processors.py``), in MRV2's order: grammar bits, allowed token ids,
logit bias, min-tokens stop ids (with the restore rule of grammar requests), repetition / frequency / presence
penalties over the row's output (the request's output, then its drafts before the row), bad words. The samplers
then run unchanged on ``rows`` (temperature, min-p, top-k and top-p on the fly, :mod:`.params`).

Two launches (N rows, V vocabulary, s bytes a logit, W = ceil(V / 32) words):

1. ``_dense_kernel`` grid ``(N, cdiv(V, 32 DENSE_WORDS))``: reads each row once in its dtype (N V s B; nothing
   for a row with an allowed-ids list, which is all -inf here) and its grammar words, one int32 load a 32 lanes
   (4 W B a grammar row), writes the row in float32 (N V x 4 B); with the restore rule in the step, also the count
   of its lanes that are not -inf (4 B a program).
2. ``_sparse_kernel`` grid ``(N,)``: one program a row touches only the tokens of its lists, in phases separated
   by a block barrier: allowed ids (their raw logit and grammar bit), bias, stop ids, the penalised ids (the
   request's unique prompt / output ids with their counts, prepared on the host, plus the drafts before the row,
   counted in the kernel), the last tokens of the bad words whose prefix ends the row's output. O(lists + drafts)
   a row, never O(V); compiled without fp fusion so that ``x - f * c`` rounds twice, as the oracle's torch does.

Host work (:func:`prepare_processors`): the lists deduplicated per request (allowed, stop) and the penalty lists
(unique ids of the output with their counts, plus the prompt's where repetition is on), vectorised with
``torch.unique``. The lists are read at prepare time (prepare again when they change); what the drafts add is read
at launch time from ``draft_token_ids`` (int32 on the device: the tensor itself, no copy).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..shared.launches import launch, run_recorded

DENSE_WORDS = 64     # grammar words a dense program reads: 2,048 lanes
SPARSE_BLOCK = 128   # list entries a sparse program takes at once
WORD_BLOCK = 16      # tokens of a bad word's prefix compared at once
NEG_INF = float("-inf")


@triton.jit
def grammar_allows(bits_row_ptr, ids, mask):
    """True where token ``ids`` has its bit set in the row's packed words (bit id % 32 of word id // 32)."""
    word = tl.load(bits_row_ptr + (ids >> 5), mask=mask, other=-1)
    return ((word >> (ids & 31)) & 1) != 0


@triton.jit
def _dense_kernel(logits_ptr, l_stride, bits_ptr, b_stride, gram_ptr, allow_ptr, out_ptr, part_ptr, V, NB,
                  GRAMMAR: tl.constexpr, COUNT: tl.constexpr, WORDS: tl.constexpr):
    """Program (row, b): lanes ``[b 32 WORDS, (b + 1) 32 WORDS)`` of the row, as a [WORDS, 32] tile: the logit in
    float32, -inf where the grammar bit is clear (grammar rows) and everywhere on rows with an allowed-ids list
    (nothing read; the sparse pass writes their ids); ``COUNT``: the lanes that are not -inf, to ``part[row, b]``."""
    row = tl.program_id(0)
    b = tl.program_id(1)
    listed = tl.load(allow_ptr + row) != 0
    w = b * WORDS + tl.arange(0, WORDS)
    lane = tl.arange(0, 32)
    offs = w[:, None] * 32 + lane[None, :]
    inside = offs < V
    # scalar conditions fold into the bounds (a mask never combines with a scalar bool: the interpreter's splat)
    x = tl.load(logits_ptr + row.to(tl.int64) * l_stride + offs, mask=offs < tl.where(listed, 0, V),
                other=float("-inf")).to(tl.float32)
    if GRAMMAR:
        on = tl.load(gram_ptr + row) != 0
        word = tl.load(bits_ptr + row.to(tl.int64) * b_stride + w, mask=w * 32 < tl.where(on, V, 0), other=-1)
        x = tl.where(((word[:, None] >> lane[None, :]) & 1) != 0, x, float("-inf"))
    tl.store(out_ptr + row.to(tl.int64) * V + offs, x, mask=inside)
    if COUNT:
        live = (x != float("-inf")) & inside
        tl.store(part_ptr + row * NB + b, tl.sum(tl.sum(live.to(tl.int32), axis=1), axis=0))


@triton.jit
def _penalize(v, c, rep, inv, freq, pres):
    """Repetition (``v / rep`` as ``v * inv`` above 0, ``v * rep`` else; rep 1: untouched), then frequency and
    presence, in float32: the oracle's ops one by one (``c`` the token's count in the output)."""
    v = tl.where(rep != 1.0, v * tl.where(v > 0, inv, rep), v)
    v = v - freq * c.to(tl.float32)
    return v - pres * (c > 0).to(tl.float32)


@triton.jit
def _sparse_kernel(logits_ptr, l_stride, bits_ptr, b_stride, gram_ptr, out_ptr, part_ptr, NB, row_req_ptr, cu_ptr,
                   dtok_ptr, cu_out_ptr, out_ids_ptr, allow_ptr, cu_allow_ptr, bias_ids_ptr, bias_val_ptr,
                   cu_bias_ptr, stop_ptr, cu_stop_ptr, min_tok_ptr, req_gram_ptr, pen_ids_ptr, pen_cnt_ptr,
                   cu_pen_ptr, rep_ptr, inv_ptr, freq_ptr, pres_ptr, word_start_ptr, word_len_ptr, cu_word_ptr,
                   words_ptr, V, ALLOW: tl.constexpr, BIAS: tl.constexpr, STOP: tl.constexpr, COUNT: tl.constexpr,
                   PEN: tl.constexpr, BAD: tl.constexpr, KB: tl.constexpr, BLOCK: tl.constexpr,
                   WB: tl.constexpr):
    """Program ``row``: the list phases of its request ``r`` on ``out[row]`` (see the module doc), each phase
    after a block barrier (the previous one's stores visible to every thread). The row's output is the request's
    ``out_len`` tokens then its ``l`` drafts before the row (``draft_token_ids[cu[r] .. cu[r] + l)``)."""
    row = tl.program_id(0)
    r = tl.load(row_req_ptr + row)
    start = tl.load(cu_ptr + r)
    l = row - start
    o0 = tl.load(cu_out_ptr + r)
    out_len = tl.load(cu_out_ptr + r + 1) - o0
    out_row = out_ptr + row.to(tl.int64) * V
    lanes = tl.arange(0, BLOCK)
    live = tl.zeros((), tl.int32)  # lanes not -inf, counted from here on (COUNT: the restore rule needs it)
    if ALLOW:  # a non-empty list: its ids get the raw logit (grammar bit applied) back; the dense pass wrote -inf
        on = tl.load(gram_ptr + row) != 0  # off: the masked word load reads all bits set
        a1 = tl.load(cu_allow_ptr + r + 1)
        for o in range(tl.load(cu_allow_ptr + r), a1, BLOCK):
            m = o + lanes < a1
            ids = tl.load(allow_ptr + o + lanes, mask=m, other=0)
            x = tl.load(logits_ptr + row.to(tl.int64) * l_stride + ids, mask=m, other=float("-inf")).to(tl.float32)
            gm = o + lanes < tl.where(on, a1, o)  # no word read off grammar: all bits set
            x = tl.where(grammar_allows(bits_ptr + row.to(tl.int64) * b_stride, ids, gm), x, float("-inf"))
            tl.store(out_row + ids, x, mask=m)
            live += tl.sum((m & (x != float("-inf"))).to(tl.int32), axis=0)
        tl.debug_barrier()
    if BIAS:
        b1 = tl.load(cu_bias_ptr + r + 1)
        for o in range(tl.load(cu_bias_ptr + r), b1, BLOCK):
            m = o + lanes < b1
            ids = tl.load(bias_ids_ptr + o + lanes, mask=m, other=0)
            old = tl.load(out_row + ids, mask=m, other=float("-inf"))
            new = old + tl.load(bias_val_ptr + o + lanes, mask=m, other=0.0)
            tl.store(out_row + ids, new, mask=m)
            live += tl.sum((m & (new != float("-inf"))).to(tl.int32) - (m & (old != float("-inf"))).to(tl.int32),
                           axis=0)
        tl.debug_barrier()
    if STOP:
        s0 = tl.load(cu_stop_ptr + r)
        s1 = tl.load(cu_stop_ptr + r + 1)
        if out_len + l < tl.load(min_tok_ptr + r):
            restore = tl.zeros((), tl.int1)
            if COUNT:  # a grammar request's row left with no finite logit gets its stop ids' finite values back
                for c in range(0, NB, BLOCK):
                    live += tl.sum(tl.load(part_ptr + row * NB + c + lanes, mask=c + lanes < NB, other=0), axis=0)
                for o in range(s0, s1, BLOCK):
                    m = o + lanes < s1
                    old = tl.load(out_row + tl.load(stop_ptr + o + lanes, mask=m, other=0), mask=m,
                                  other=float("-inf"))
                    live -= tl.sum((m & (old != float("-inf"))).to(tl.int32), axis=0)
                restore = (tl.load(req_gram_ptr + r) != 0) & (live == 0)
            for o in range(s0, s1, BLOCK):
                m = o + lanes < s1
                ids = tl.load(stop_ptr + o + lanes, mask=m, other=0)
                old = tl.load(out_row + ids, mask=m, other=float("-inf"))
                finite = (old == old) & (old != float("inf")) & (old != float("-inf"))
                tl.store(out_row + ids, tl.where(restore & finite, old, float("-inf")), mask=m)
        tl.debug_barrier()
    if PEN:
        rep = tl.load(rep_ptr + r)
        freq = tl.load(freq_ptr + r)
        pres = tl.load(pres_ptr + r)
        if (rep != 1.0) | (freq != 0.0) | (pres != 0.0):
            inv = tl.load(inv_ptr + r)
            kd = tl.arange(0, KB)
            drafts = tl.load(dtok_ptr + start + kd, mask=kd < l, other=-1)  # -1: a placeholder, or no draft
            listed = tl.zeros((KB,), tl.int32)
            p1 = tl.load(cu_pen_ptr + r + 1)
            for o in range(tl.load(cu_pen_ptr + r), p1, BLOCK):
                m = o + lanes < p1
                ids = tl.load(pen_ids_ptr + o + lanes, mask=m, other=-2)
                same = (ids[:, None] == drafts[None, :]).to(tl.int32)  # [BLOCK, KB]
                c = tl.load(pen_cnt_ptr + o + lanes, mask=m, other=0) + tl.sum(same, axis=1)
                listed = tl.maximum(listed, tl.max(same, axis=0))
                v = tl.load(out_row + ids, mask=m, other=0.0)
                tl.store(out_row + ids, _penalize(v, c, rep, inv, freq, pres), mask=m)
            # drafts outside the request's list: each distinct one once, counted over the drafts before the row
            same = drafts[:, None] == drafts[None, :]  # [KB, KB]
            seen = tl.max((same & (kd[None, :] < kd[:, None])).to(tl.int32), axis=1)
            c = tl.sum(same.to(tl.int32), axis=1)
            m = (drafts >= 0) & (listed == 0) & (seen == 0)
            v = tl.load(out_row + drafts, mask=m, other=0.0)
            tl.store(out_row + drafts, _penalize(v, c, rep, inv, freq, pres), mask=m)
        tl.debug_barrier()
    if BAD:  # a word whose tokens but the last end the row's output bans its last token
        length = out_len + l
        qs = tl.arange(0, WB)
        for w in range(tl.load(cu_word_ptr + r), tl.load(cu_word_ptr + r + 1)):
            ws = tl.load(word_start_ptr + w)
            p = tl.load(word_len_ptr + w) - 1
            match = p <= length
            for q0 in range(0, p, WB):
                q = q0 + qs
                m = q < tl.where(match, p, 0)
                want = tl.load(words_ptr + ws + q, mask=m, other=0)
                at = length - p + q
                early = at < out_len
                got = tl.load(out_ids_ptr + o0 + at, mask=m & early, other=-1)
                got = tl.where(early, got, tl.load(dtok_ptr + start + at - out_len, mask=m & (early == 0), other=-1))
                match = match & (tl.sum((m & (got != want)).to(tl.int32), axis=0) == 0)
            tl.store(out_row + tl.load(words_ptr + ws + p), float("-inf"), mask=match)


@dataclass
class Processors:
    """What the two launches read and write, on the step's device (built by :func:`prepare_processors`).

    rows [N, V] float32: the output (the samplers' logits); logits [N, V] the step's (any float dtype, unit
    stride); bits [N, W] int32 grammar words (or a [1, 1] placeholder); gram_row / allow_row [N] int32: the row's
    request has grammar / a non-empty allowed list; grammar: some row has (the dense pass reads words); part
    [N, NB] int32: the dense programs' live counts (COUNT); lists: row_req [N], cu [R+1], dtok [N] int32 and the
    ragged lists, each ``values [*]`` + ``cu_* [R+1]`` int32 (placeholders [1] / zeros when off): out_ids (the
    request's output), allow and stop (unique a request), bias_ids + bias_val (float32; unique ids a request, the
    recording format's rule), pen_ids + pen_cnt (unique ids of the output, and of the prompt where repetition is
    on, with their counts in the output); min_tok, req_gram [R] int32; rep, inv (= 1 / rep in float32), freq,
    pres [R] float32; bad words: word_start / word_len [words] int32 (offsets into words [*]), cu_word [R+1];
    flags: the constexprs of the phases; kb: drafts compared at once (a power of two >= max_k);
    launches: the recorded launch sequence (:mod:`replay_kernels.shared.launches`).
    """

    rows: torch.Tensor
    logits: torch.Tensor
    bits: torch.Tensor
    gram_row: torch.Tensor
    allow_row: torch.Tensor
    part: torch.Tensor
    grammar: bool
    lists: dict
    flags: dict
    kb: int
    launches: list | None = None


def _keys(values: torch.Tensor | None, cu: torch.Tensor | None, r: int, v: int) -> torch.Tensor:
    """[*] int64 ``request * V + id`` of a ragged list (empty when the list is off)."""
    if values is None:
        return torch.zeros(0, dtype=torch.int64)
    sizes = (cu[1:] - cu[:-1]).long()
    return torch.repeat_interleave(torch.arange(r), sizes) * v + values.long()


def _ragged(keys: torch.Tensor, r: int, v: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [*] int32, cu [R+1] int32) of sorted ``request * V + id`` keys."""
    cu = torch.zeros(r + 1, dtype=torch.int64)
    cu[1:] = torch.cumsum(torch.bincount(keys // v, minlength=r), 0)
    return (keys % v).to(torch.int32), cu.to(torch.int32)


def _penalty_lists(h, r: int, v: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(on [R] bool, ids [*] int32, counts [*] int32, cu [R+1] int32): per request with a penalty on, the unique
    ids of its output with their counts, and of its prompt (count 0 unless in the output) where repetition is on."""
    rep = h.repetition_penalty.float() if h.repetition_penalty is not None else torch.ones(r)
    freq = h.frequency_penalty.float() if h.frequency_penalty is not None else torch.zeros(r)
    pres = h.presence_penalty.float() if h.presence_penalty is not None else torch.zeros(r)
    on = (rep != 1) | (freq != 0) | (pres != 0)
    out = _keys(h.output_token_ids, h.cu_output_token_ids, r, v)
    out_ids, out_counts = torch.unique(out[on[out // v]], return_counts=True)
    prompt = _keys(h.prompt_token_ids, h.cu_prompt_token_ids, r, v)
    prompt = prompt[(on & (rep != 1))[prompt // v]]
    keys = torch.unique(torch.cat([out_ids, prompt]))
    at = torch.searchsorted(out_ids, keys).clamp(max=max(out_ids.numel() - 1, 0))
    hit = (out_ids[at] == keys) if out_ids.numel() else torch.zeros_like(keys, dtype=torch.bool)
    counts = torch.where(hit, out_counts[at] if out_ids.numel() else torch.zeros_like(keys), 0)
    ids, cu = _ragged(keys, r, v)
    return on, ids, counts.to(torch.int32), cu


def prepare_processors(batch, device: torch.device | str) -> Processors:
    """Host work for a batch with pipeline inputs (``batch.has_pipeline``): flags, lists and the output rows."""
    from ..batch import SamplingBatch
    b = SamplingBatch.of(batch)
    h = b.host()
    logits = b.logits if b.logits.stride(1) == 1 else b.logits.contiguous()
    n, v = logits.shape
    r = h.num_requests
    i32 = dict(dtype=torch.int32, device=device)
    rows_req = h.row_to_request()
    zeros_cu = torch.zeros(r + 1, dtype=torch.int32)
    one = torch.zeros(1, dtype=torch.int32)
    grammar = b.grammar_bitmask is not None and h.has_grammar is not None and bool(h.has_grammar.any())
    gram_row = h.has_grammar.int()[rows_req] if grammar else torch.zeros(n, dtype=torch.int32)
    allow, cu_allow = _ragged(torch.unique(_keys(h.allowed_token_ids, h.cu_allowed_token_ids, r, v)), r, v)
    has_allow = bool(allow.numel())
    allow_row = ((cu_allow[1:] - cu_allow[:-1]) > 0).int()[rows_req]
    stop, cu_stop = _ragged(torch.unique(_keys(h.stop_token_ids, h.cu_stop_token_ids, r, v)), r, v)
    has_stop = h.min_tokens is not None and bool(stop.numel()) and bool((h.min_tokens > 0).any())
    count = has_stop and grammar
    on, pen_ids, pen_cnt, cu_pen = _penalty_lists(h, r, v)
    has_bias = h.logit_bias_ids is not None and h.logit_bias_ids.numel() > 0
    has_bad = h.bad_words_token_ids is not None and h.bad_words_lengths is not None and h.bad_words_lengths.numel() > 0
    lengths = h.bad_words_lengths.int() if has_bad else one
    rep = h.repetition_penalty.float() if h.repetition_penalty is not None else torch.ones(r)
    words = DENSE_WORDS * 32
    nb = triton.cdiv(v, words)
    host = dict(
        row_req=rows_req.int(), cu=h.cu_num_logits.int(),
        cu_out=h.cu_output_token_ids.int() if h.output_token_ids is not None else zeros_cu,
        out_ids=h.output_token_ids.int() if h.output_token_ids is not None and h.output_token_ids.numel() else one,
        allow=allow if has_allow else one, cu_allow=cu_allow,
        bias_ids=h.logit_bias_ids.int() if has_bias else one,
        bias_val=h.logit_bias_values.float() if has_bias else one.float(),
        cu_bias=h.cu_logit_bias.int() if has_bias else zeros_cu,
        stop=stop if has_stop else one, cu_stop=cu_stop,
        min_tok=h.min_tokens.int() if h.min_tokens is not None else torch.zeros(r, dtype=torch.int32),
        req_gram=h.has_grammar.int() if grammar else torch.zeros(r, dtype=torch.int32),
        pen_ids=pen_ids if pen_ids.numel() else one, pen_cnt=pen_cnt if pen_cnt.numel() else one, cu_pen=cu_pen,
        rep=rep, inv=torch.tensor(1.0, dtype=torch.float32) / rep,
        freq=h.frequency_penalty.float() if h.frequency_penalty is not None else torch.zeros(r),
        pres=h.presence_penalty.float() if h.presence_penalty is not None else torch.zeros(r),
        word_start=(torch.cumsum(lengths, 0) - lengths).int(), word_len=lengths,
        cu_word=h.cu_bad_words_lengths.int() if has_bad else zeros_cu,
        words=h.bad_words_token_ids.int() if has_bad and h.bad_words_token_ids.numel() else one)
    flags = dict(ALLOW=has_allow, BIAS=has_bias, STOP=has_stop, COUNT=count, PEN=bool(on.any()), BAD=has_bad)
    return Processors(
        rows=torch.empty((n, v), dtype=torch.float32, device=device), logits=logits,
        bits=b.grammar_bitmask.to(**i32).contiguous() if grammar else torch.zeros((1, 1), **i32),
        gram_row=gram_row.to(**i32), allow_row=allow_row.to(**i32),
        part=torch.zeros((n, nb) if count else (1, 1), **i32), grammar=grammar,
        lists=dict({k: x.to(device) for k, x in host.items()}, dtok=b.draft_token_ids.to(**i32)), flags=flags,
        kb=max(2, triton.next_power_of_2(max(1, h.max_drafts))))


def launch_processors(p: Processors) -> None:
    """Device work only (graph-capturable): fill ``p.rows`` (two launches, recorded once on ``p``)."""
    if p.rows.shape[0]:
        run_recorded(p, lambda: _launch_all(p))


def _launch_all(p: Processors) -> None:
    n, v = p.rows.shape
    nb = triton.cdiv(v, DENSE_WORDS * 32)
    launch(_dense_kernel, (n, nb), p.logits, p.logits.stride(0), p.bits, p.bits.stride(0), p.gram_row, p.allow_row,
           p.rows, p.part, v, nb, GRAMMAR=p.grammar, COUNT=p.flags["COUNT"], WORDS=DENSE_WORDS)
    if not any(p.flags[k] for k in ("ALLOW", "BIAS", "STOP", "PEN", "BAD")):
        return  # grammar alone: the dense pass did it all
    s = p.lists
    launch(_sparse_kernel, (n,), p.logits, p.logits.stride(0), p.bits, p.bits.stride(0), p.gram_row, p.rows, p.part,
           nb, s["row_req"], s["cu"], s["dtok"], s["cu_out"], s["out_ids"], s["allow"], s["cu_allow"],
           s["bias_ids"], s["bias_val"], s["cu_bias"], s["stop"], s["cu_stop"], s["min_tok"], s["req_gram"],
           s["pen_ids"], s["pen_cnt"], s["cu_pen"], s["rep"], s["inv"], s["freq"], s["pres"], s["word_start"],
           s["word_len"], s["cu_word"], s["words"], v, **p.flags, KB=p.kb, BLOCK=SPARSE_BLOCK, WB=WORD_BLOCK,
           num_warps=4, enable_fp_fusion=False)
