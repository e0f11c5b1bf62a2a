"""``stochastic``: the Model Runner V2 speculative verify step in Triton.

Per request r (rows ``cu[r] .. cu[r] + k_r``, the last is the bonus row), in one set of launches for the whole
batch, greedy and stochastic requests mixed:

* temperature 0 (``greedy-verify`` / ``greedy-sample``): emit the raw row's argmax (first index on ties) for each
  draft position, stop at the first draft that differs (or is a -1 placeholder); if all pass, emit the bonus row's
  argmax.
* otherwise (``stochastic-verify`` / ``random-sample``): accept draft d iff ``log p(d) > log u + log q(d)`` with
  ``u = accept_uniform(seed, pos)`` and ``log q = 0`` without draft logits; a placeholder ends verification. On
  rejection, Gumbel-max from the residual ``max(p - q, 0)`` (one-hot: p with d removed); after all accepted,
  Gumbel-max from the bonus row. Noise is ``gumbel_noise(seed, pos[row], token)``, computed in-kernel.
* k = 0 is the bonus draw alone. A batch where no request has drafts is a plain sample: the plain sampler's
  state and launches (draw/gumbel_max.py), the same tokens without the position launch.

Target rows go through ``apply_sampling_params`` on the fly (replay_kernels.filters.params).

Kernels, grids and bytes (N rows, R requests, V vocabulary, 4 B per fp32 logit)
--------------------------------------------------------------------------------
0. the split-row filter passes of ``replay_kernels.filters.filters`` (only rows of requests with min-p/top-k/top-p):
   1 + a bounded number of search passes per filtered row.
1. ``_position_kernel`` grid ``(R, cdiv(NB, spans))`` (NB = cdiv(V, SPAN) spans a row, ``spans`` of them a program:
   POSITION_SPANS), launched once per draft position i = 0 .. max_k - 1 (once when no request has drafts): the
   programs of a request still verifying at position i read its row ``cu[r] + i`` once (and its draft-logits row
   when present) and write 12 B of stats a span of SPAN elements (online max and sum-exp): the raw max + left-most
   argmax for greedy rows, the processed max and sum-exp for stochastic rows, the same for the draft logits /
   temperature. The last program of the request to arrive (an ``acq_rel`` counter per request) adds the spans and
   runs the accept test of position i; a rejection, a greedy mismatch or a placeholder ends the walk
   (``verifying[r] = 0``) and fixes the draw plan (mode, row, slot, rejected draft, LSEs). Requests that stopped,
   or have no draft at i, exit after two loads. Launch 0 also writes the default plan (the bonus row's draw).
   Below ``FUSED_BELOW`` requests, ONE launch with grid axis 2 = max_k reads every verify row (after a rejection
   too) and the last program of each request runs the tests of its positions in order: one launch instead of
   max_k, where launch latency outweighs the extra rows. Spans, sums and tests are the same in every layout
   (verify_stats.py), so are the tokens.
2. ``draw._draw_kernel`` grid ``(R, SPLITS)``: reads the R resample / bonus rows once (R V x 4 B, plus the rejected
   draft row with draft logits), pruned Gumbel-max or argmax, writes the drawn token and the -1 pads.

Bytes: only the rows the walk reaches are read. A request that stops at draft position j reads j + 1 verify rows
(the rows after a rejection are never needed) and its draw row: at acceptance rate a per draft, 1 + a + ... +
a^(k-1) verify rows instead of k (at a = 0.7, k = 4: 2.5 of 4). When every draft is accepted that is one pass over
the logits (N V x 4 B), in max_k + 1 launches (+ the filter passes). API: :class:`replay_kernels.batch.KernelSampler`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .accept import accept_test
from .. import pipeline
from ..batch import ROUTE_CODE, KernelSampler, SamplingBatch
from ..draw.draw import MODE_GREEDY, MODE_TARGET, REDUCE_CHUNK, DrawScratch, _draw_kernel
from ..shared.partials import last_to_arrive
from ..filters.filter_loop import FilterLoop
from ..filters.filters import FILTER_SPAN
from ..shared.launches import PDL_LATE, launch, pdl_wait, run_cooperative
from ..draw import open_rows
from ..draw.gumbel_max import GumbelMaxSampler, PlainState
from ..draw.one_launch import OneLaunchScratch
from ..draw.sample_check import CheckScratch, launch_rounds, round_draw_scratch
from ..filters.params import RowParams, host_batch, launch_params, prepare_params
from .verify_bounds import WALK_OPEN, WALK_PENDING, Fallback, launch_fallback
from .verify_stats import BOUND_MAXNREG, BOUND_PLANES, load_tile, processed_at, span_stats

# The position launches' tile, span per program and warps: fixed (they set the order of each row's fp32 sums,
# and tokens must not depend on the batch); measured in docs/KERNELS.md "Position launch shape".
STATS_BLOCK = 2048
STATS_SPAN = 8192
POSITION_WARPS = 4
# Register cap a thread of the position launches without top-p bounds: it changes no arithmetic (only what spills),
# so not the order of any sum. With the next tile loaded ahead (verify_stats.span_stats) 64 compiles to 63
# registers, no stack, 8 programs an SM (56: 16 B of stack, 9): 3-4% faster than 56 at verify k=4 R = 64 and 256
# (measured 2026-12-02). The bounded and exact top-p launches are uncapped (a cap cost them 3%
# at R = 64, measured 2026-12-01).
POSITION_MAXNREG = 64
# Batches of fewer requests verify every draft position in one launch (``_position_kernel`` ALL: the rows
# after a rejection are read too, but one launch replaces max_k); same stats and tests, so same tokens.
FUSED_BELOW = 32
# Spans a position program takes, by bytes a logit: ((fewer requests than, spans), ...); else one, as in bounded
# launches. More spans pay a program's prologue once for more bytes; the sums are those of one program a span
# (verify_stats.span_stats), so the tokens too. docs/KERNELS.md "Spans a position program takes".
POSITION_SPANS = {2: ((256, 1), (1 << 31, 4))}
VERIFY_MISS = 0.125  # share of checked requests a first check leaves open (measured: 8 of 64; open_rows.shape)
WALK_CHUNK = 64


@triton.jit(do_not_specialize=["i0"])
def _position_kernel(i0, cu_ptr, req_temp_ptr, seed_ptr, dtok_row_ptr, pos_ptr, vidx_ptr, logits_ptr, l_stride,
                     draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, check_ptr, topp_ptr, smax_ptr,
                     ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr, bstride, arrivals_ptr, walk_ptr, pend_ptr,
                     tokens_ptr, tok_stride, counts_ptr, mode_ptr, rrow_ptr, slot_ptr, rdrow_ptr, rdtok_ptr, lse_t_ptr,
                     lse_q_ptr, kept_ptr, V, NB, P, HAS_DRAFT: tl.constexpr, BOUNDED: tl.constexpr,
                     EXACT: tl.constexpr, ALL: tl.constexpr, SPAN: tl.constexpr, BLOCK: tl.constexpr,
                     CHUNK: tl.constexpr, SPANS: tl.constexpr = 1, PDL: tl.constexpr = False):
    """Draft position ``i0`` of every request still verifying: span stats of its row, then (in the last
    program of the request to arrive) the accept test of position i0, which may end the request's walk.
    ``ALL`` (few requests): every position at once, grid axis 2, stats of each position in its own slot of the P;
    the last program of the request walks the positions in order (same stats, same tests).
    ``EXACT``: the second round after the fallback, with the exact cuts, grid axis 2 of 1: a pending request's programs
    take their spans of each position from the pending one on (each in its slot of the P), the last walks on from
    there; the others read their walk state only. Program (r, b) takes spans b * SPANS .. (axis 1: cdiv(NB, SPANS))."""
    pdl_wait(PDL)
    r = tl.program_id(0)
    b = tl.program_id(1)
    start = tl.load(cu_ptr + r)
    k = tl.load(cu_ptr + r + 1) - start - 1
    temp = tl.load(req_temp_ptr + r)
    greedy = temp == 0.0
    NPB = (NB + SPANS - 1) // SPANS  # programs a row
    j0 = 0
    if EXACT:  # a pending request's positions from its pending one on, the same spans a program at each
        if tl.load(walk_ptr + r) == WALK_PENDING:
            j0 = tl.load(pend_ptr + r)
            for i in range(j0, k):
                _position_span(i, i, r, b, start, greedy, temp, dtok_row_ptr, vidx_ptr, logits_ptr, l_stride,
                               draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, check_ptr, smax_ptr,
                               ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr, bstride, V, NB, P, HAS_DRAFT,
                               False, SPAN, BLOCK, SPANS)
            if last_to_arrive(arrivals_ptr, r, NPB):
                _walk(r, j0, k, start, greedy, temp, seed_ptr, dtok_row_ptr, pos_ptr, vidx_ptr, logits_ptr,
                      l_stride, draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, check_ptr, topp_ptr,
                      smax_ptr, ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr, bstride, walk_ptr, pend_ptr,
                      tokens_ptr, tok_stride, counts_ptr, mode_ptr, rrow_ptr, slot_ptr, rdrow_ptr, rdtok_ptr,
                      lse_t_ptr, lse_q_ptr, kept_ptr, NB, P, HAS_DRAFT, BOUNDED, EXACT, CHUNK)
    else:
        i = i0
        slot = 0
        if ALL:
            i = tl.program_id(2)
            slot = i
        verifying = i < k
        if (i == 0) & (b == 0):  # the plan if every draft is accepted (or k = 0): the bonus row's draw
            tl.store(mode_ptr + r, tl.where(greedy, MODE_GREEDY, MODE_TARGET))
            tl.store(rrow_ptr + r, start + k)
            tl.store(slot_ptr + r, k)
            tl.store(counts_ptr + r, k + 1)
            tl.store(walk_ptr + r, WALK_OPEN)
        if not ALL:
            if i > 0:
                verifying = verifying & (tl.load(walk_ptr + r) == WALK_OPEN)  # from the launch of i - 1
        if verifying:
            _position_span(i, slot, r, b, start, greedy, temp, dtok_row_ptr, vidx_ptr, logits_ptr, l_stride,
                           draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, check_ptr, smax_ptr, ssum_ptr,
                           sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr, bstride, V, NB, P, HAS_DRAFT, BOUNDED, SPAN,
                           BLOCK, SPANS)
        if ALL:  # every program of the request arrives; the last walks the positions
            if last_to_arrive(arrivals_ptr, r, NPB * P):
                _walk(r, j0, k, start, greedy, temp, seed_ptr, dtok_row_ptr, pos_ptr, vidx_ptr, logits_ptr,
                      l_stride, draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, check_ptr, topp_ptr,
                      smax_ptr, ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr, bstride, walk_ptr, pend_ptr,
                      tokens_ptr, tok_stride, counts_ptr, mode_ptr, rrow_ptr, slot_ptr, rdrow_ptr, rdtok_ptr,
                      lse_t_ptr, lse_q_ptr, kept_ptr, NB, P, HAS_DRAFT, BOUNDED, EXACT, CHUNK)
        elif verifying:
            if last_to_arrive(arrivals_ptr, r, NPB):
                accept_test(r, i, start, greedy, temp, r * P * NB, seed_ptr, dtok_row_ptr, pos_ptr, vidx_ptr,
                            logits_ptr, l_stride, draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr,
                            check_ptr, topp_ptr, smax_ptr, ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr,
                            bstride, walk_ptr, pend_ptr, tokens_ptr, tok_stride, counts_ptr, mode_ptr, rrow_ptr,
                            slot_ptr, rdrow_ptr, rdtok_ptr, lse_t_ptr, lse_q_ptr, kept_ptr, NB, HAS_DRAFT, BOUNDED,
                            EXACT, CHUNK)


@triton.jit
def _position_span(i, slot, r, b, start, greedy, temp, dtok_row_ptr, vidx_ptr, logits_ptr, l_stride, draft_ptr,
                   d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, check_ptr, smax_ptr, ssum_ptr, sarg_ptr,
                   dmax_ptr, dsum_ptr, sbound_ptr, bstride, V, NB, P, HAS_DRAFT: tl.constexpr,
                   BOUNDED: tl.constexpr, SPAN: tl.constexpr, BLOCK: tl.constexpr, SPANS: tl.constexpr):
    """Spans b * SPANS .. of request r's verify row at position i: their stats (verify_stats.span_stats) in slot
    ``slot`` of the P (a stochastic placeholder needs none)."""
    row = start + i
    d = tl.load(dtok_row_ptr + row)
    # what the span needs but the draft token: loaded with it, not after it (one round trip less a program)
    t = tl.load(temp_div_ptr + row)
    cv = tl.load(cut_val_ptr + row)
    ci = tl.load(cut_idx_ptr + row)
    row_base = logits_ptr + row.to(tl.int64) * l_stride
    lo = b * SPANS * SPAN
    hi = tl.minimum(lo + SPANS * SPAN, V)
    first = d  # a placeholder: a bounded launch's rows read their spans in their own tiles (verify_stats.span_bounds)
    if not BOUNDED:
        first = load_tile(row_base, lo, hi, BLOCK)  # the span's first tile, in flight with the draft token
    if greedy | (d >= 0):
        bounded = False  # top-p decided by bounds (verify_bounds.py); never in the EXACT round
        xd = tl.full((), float("-inf"), tl.float32)
        if BOUNDED:
            bounded = (tl.load(check_ptr + row) != 0) & (d >= 0)
            if bounded:
                xd = processed_at(row_base, d, t, cv, ci)
        span_stats(row_base, draft_ptr + tl.load(vidx_ptr + row).to(tl.int64) * d_stride, lo, hi, first, greedy,
                   bounded, d, xd, t, cv, ci, temp, smax_ptr, ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr,
                   bstride, (r * P + slot) * NB + b * SPANS, HAS_DRAFT, BLOCK, not BOUNDED, SPAN, SPANS)


@triton.jit
def _walk(r, j0, k, start, greedy, temp, seed_ptr, dtok_row_ptr, pos_ptr, vidx_ptr, logits_ptr, l_stride, draft_ptr,
          d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr, check_ptr, topp_ptr, smax_ptr, ssum_ptr, sarg_ptr,
          dmax_ptr, dsum_ptr, sbound_ptr, bstride, walk_ptr, pend_ptr, tokens_ptr, tok_stride, counts_ptr, mode_ptr,
          rrow_ptr, slot_ptr, rdrow_ptr, rdtok_ptr, lse_t_ptr, lse_q_ptr, kept_ptr, NB, P, HAS_DRAFT: tl.constexpr,
          BOUNDED: tl.constexpr, EXACT: tl.constexpr, CHUNK: tl.constexpr):
    """The accept tests of request r's positions j0 .. k - 1 in order, each from its slot of the P, until one
    ends the walk."""
    go = tl.full((), 1, tl.int32)
    for j in range(j0, k):
        if go != 0:
            go = accept_test(r, j, start, greedy, temp, (r * P + j) * NB, seed_ptr, dtok_row_ptr, pos_ptr, vidx_ptr,
                             logits_ptr, l_stride, draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr,
                             check_ptr, topp_ptr, smax_ptr, ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr, sbound_ptr,
                             bstride, walk_ptr, pend_ptr, tokens_ptr, tok_stride, counts_ptr, mode_ptr, rrow_ptr,
                             slot_ptr, rdrow_ptr, rdtok_ptr, lse_t_ptr, lse_q_ptr, kept_ptr, NB, HAS_DRAFT, BOUNDED,
                             EXACT, CHUNK)


@dataclass
class VerifyState:
    """Everything ``StochasticSampler.launch`` needs, on the step's device.

    logits [N, V] engine dtype; draft_logits [N-R, V] or None; params: RowParams ([N] rows); cu [R+1] int32;
    req_temp [R] f32; seed [R] int64; draft_tokens [N] int32; positions [N] int64; vidx [N] int32 (draft/verify row
    per logits row, -1 on bonus rows); span stats smax/ssum/sarg/dmax/dsum [R, NB_stats] of the position in flight,
    or [R, max_k x NB_stats] of every position when ``fused`` (fewer than ``fused_below`` requests: one position
    launch) or top-p bounds are used (the fallback's exact round takes every position in one launch), and sbound
    [BOUND_PLANES, the same] (top-p bounds: Rb, X2, level masses; verify_stats.py, verify_bounds.py); arrivals [R]
    int32 (zero between launches); walk [R] int32 (WALK_* codes) and pend [R] int32 (the position of an undecided
    test); draw plan mode/rrow/slot/rdrow/rdtok [R] int32, lse_t/lse_q/kept_above [R] f32 (kept_above: a
    rejection's value above which its bounds found every token kept, accept.accept_test); draw: DrawScratch
    (partials and arrival counters); outputs tokens [R, max_k+1] int64, counts [R] int32; routes [R] int8 (host);
    program_spans: spans a position program takes (POSITION_SPANS; the bounded launches take one);
    positions_launched: max(1, max_k) (host int, fixed at prepare time); fallback: the exact-cut fallback's scratch
    when some row is decided by bounds (``params.any_check``), else None; check / round_draw: sample-and-check of
    those rows' draws (its scratch, and its later draws split finer); open: the scratch of the open-row launch
    (``open_rows.launcher``; None: the rounds and the finish loop); fallback_loop: the fallback's filter passes in
    one cooperative launch (:mod:`replay_kernels.filters.filter_loop`; None: the launch sequence);
    launches: the launch sequence, recorded on the first launch (:mod:`replay_kernels.shared.launches`).
    """

    logits: torch.Tensor
    draft_logits: torch.Tensor | None
    params: RowParams
    cu: torch.Tensor
    req_temp: torch.Tensor
    seed: torch.Tensor
    draft_tokens: torch.Tensor
    positions: torch.Tensor
    vidx: torch.Tensor
    smax: torch.Tensor
    ssum: torch.Tensor
    sarg: torch.Tensor
    dmax: torch.Tensor
    dsum: torch.Tensor
    sbound: torch.Tensor
    arrivals: torch.Tensor
    walk: torch.Tensor
    pend: torch.Tensor
    mode: torch.Tensor
    rrow: torch.Tensor
    slot: torch.Tensor
    rdrow: torch.Tensor
    rdtok: torch.Tensor
    lse_t: torch.Tensor
    lse_q: torch.Tensor
    kept_above: torch.Tensor
    draw: DrawScratch
    tokens: torch.Tensor
    counts: torch.Tensor
    routes: torch.Tensor
    num_stats_blocks: int
    program_spans: int
    positions_launched: int
    fused: bool
    fallback: Fallback | None
    check: CheckScratch | None
    round_draw: DrawScratch | None
    open: OneLaunchScratch | None = None
    fallback_loop: FilterLoop | None = None
    launches: list | None = None


class StochasticSampler(KernelSampler):
    """MRV2 verify (greedy and stochastic per request) + plain sample, all in Triton. ``open_rows``: as for the plain
    samplers (:class:`replay_kernels.draw.plain.PlainSampler`), each checked request counted as open with chance
    VERIFY_MISS (measured: a residual draw misses its top-p set with a chance 1 - p does not bound).
    ``fallback_loop``: the exact-cut fallback's filter passes in one cooperative launch (False: the launch sequence;
    the same cuts). ``program_spans``: spans a position program takes (None: POSITION_SPANS)."""

    name = "stochastic"
    description = ("MRV2 speculative verify in Triton: greedy + stochastic accept per request, residual "
                   "resample, bonus draw, apply_sampling_params on the expanded batch, in-kernel RNG")
    rng_contract = "mrv2"
    requires_cuda = False

    def __init__(self, stats_block: int = STATS_BLOCK, draw_block: int | None = None, programs: int | None = None,
                 filter_span: int = FILTER_SPAN, stats_span: int | None = None, position_warps: int = POSITION_WARPS,
                 fused_below: int | None = None, open_rows: bool | None = None, fallback_loop: bool = True,
                 program_spans: int | None = None):
        self.open_rows, self.fallback_loop = open_rows, fallback_loop
        self.stats_block = stats_block
        self.fused_below = FUSED_BELOW if fused_below is None else fused_below  # read here: tools/ab_kernels.py --set
        self.program_spans = program_spans
        self.position_warps = position_warps
        self.position_maxnreg = POSITION_MAXNREG
        self.stats_span = stats_span or STATS_SPAN // STATS_BLOCK * stats_block  # 4 tiles a span
        if self.stats_span % stats_block:  # a span ends at a tile's end (verify_stats.span_stats, several a program)
            raise ValueError(f"stats_span {self.stats_span} is not a multiple of stats_block {stats_block}")
        self.draw_block = draw_block
        self.programs = programs
        self.filter_span = filter_span
        self.plain = GumbelMaxSampler(block=draw_block, programs=programs, filter_span=filter_span, open_rows=open_rows)

    def prepare(self, batch) -> VerifyState | PlainState:
        """Host work: expand parameters to rows, index maps, preallocated scratch and outputs. Returns a
        :class:`VerifyState` (a :class:`PlainState` of :attr:`plain` when no request has drafts; a
        ``pipeline.PipelineState`` around one with pipeline inputs or logprob requests); only its scratch and
        outputs change between launches, so ``launch`` can be replayed in a CUDA graph."""
        batch = SamplingBatch.of(batch)
        if pipeline.wanted(batch):
            return pipeline.prepare(self, batch, self.filter_span)
        host = host_batch(batch)
        if host.max_drafts == 0 and (batch.draft_logits is None or not batch.draft_logits.shape[0]):
            return self.plain.prepare(batch)  # a plain sample: the plain sampler's launches, no position launch
        logits = batch.logits if batch.logits.stride(1) == 1 else batch.logits.contiguous()
        device = logits.device
        n, v = logits.shape
        r = batch.num_requests
        i32 = dict(dtype=torch.int32, device=device)
        f32 = dict(dtype=torch.float32, device=device)
        vidx = host.draft_row_index()
        nv = int((vidx >= 0).sum())
        draft = batch.draft_logits
        if draft is not None:
            draft = draft.to(device)
            if draft.stride(1) != 1:
                draft = draft.contiguous()
            if draft.shape[0] != nv:
                raise ValueError(f"draft_logits has {draft.shape[0]} rows, expected {nv} (N - R)")
        nbs = max(1, triton.cdiv(v, self.stats_span))
        routes = torch.tensor([ROUTE_CODE[name] for name in host.expected_routes()], dtype=torch.int8)
        rs = max(r, 1)
        params = prepare_params(batch, device, self.filter_span, check=draft is None, check_top_k=False)
        fallback = check = round_draw = open_scratch = None
        if params.any_check:
            rows = host.row_to_request()
            any_min_p = bool(((host.min_p[rows] != 0) & (params.check.cpu() != 0)).any())
            fallback = Fallback.allocate(rows, v, any_min_p, self.filter_span, device)
            # every round launched: a residual draw misses the set more often than 1 - p (launched_rounds)
            check = CheckScratch.allocate(r, n, v, device, self.filter_span)
            round_draw = round_draw_scratch(r, v, self.draw_block, device, self.programs)
            if self.open_rows is not False:  # a residual draw's miss is not bounded by 1 - p: VERIFY_MISS a request
                misses = (VERIFY_MISS,) * len(params.check_miss)
                open_scratch = open_rows.allocate(r, v, self.filter_span, device, misses, force=bool(self.open_rows))
        loop = FilterLoop.allocate(fallback.filters, device) if fallback is not None and self.fallback_loop else None
        fused = r < self.fused_below
        # span stats per request: every position's when one launch takes them all (fused; the fallback's exact round)
        slots = nbs * max(1, host.max_drafts) if fused or params.any_check else nbs
        bounded_stats = (rs, slots) if params.any_check else (1, 1)
        return VerifyState(
            logits=logits, draft_logits=draft, params=params,
            cu=batch.cu_num_logits.to(**i32), req_temp=batch.temperature.to(**f32),
            seed=batch.seed.to(device=device, dtype=torch.int64),
            draft_tokens=batch.draft_token_ids.to(**i32),
            positions=batch.positions.to(device=device, dtype=torch.int64), vidx=vidx.to(**i32),
            smax=torch.empty((rs, slots), **f32), ssum=torch.empty((rs, slots), **f32),
            sarg=torch.empty((rs, slots), **i32),
            dmax=torch.empty((rs, slots) if draft is not None else (1, 1), **f32),
            dsum=torch.empty((rs, slots) if draft is not None else (1, 1), **f32),
            sbound=torch.empty((BOUND_PLANES, *bounded_stats), **f32),
            arrivals=torch.zeros(rs, **i32), walk=torch.zeros(rs, **i32), pend=torch.zeros(rs, **i32),
            mode=torch.empty(rs, **i32), rrow=torch.empty(rs, **i32), slot=torch.empty(rs, **i32),
            rdrow=torch.zeros(rs, **i32), rdtok=torch.zeros(rs, **i32), lse_t=torch.zeros(rs, **f32),
            lse_q=torch.zeros(rs, **f32), kept_above=torch.full((rs,), float("inf"), **f32),
            draw=DrawScratch.allocate(r, v, self.draw_block, device, self.programs, track_top=params.any_check),
            check=check, round_draw=round_draw, open=open_scratch,
            tokens=torch.full((r, host.max_drafts + 1), -1, dtype=torch.int64, device=device),
            counts=torch.zeros(r, **i32), routes=routes,
            num_stats_blocks=nbs, program_spans=self.program_spans or next(
                n for below, n in POSITION_SPANS.get(logits.element_size(), ((1 << 31, 1),)) if r < below),
            positions_launched=max(1, host.max_drafts), fused=fused, fallback=fallback, fallback_loop=loop)

    def launch(self, s: VerifyState) -> tuple[torch.Tensor, torch.Tensor]:
        """Device work only (no host sync, graph-capturable): returns ``(tokens, counts)``, tokens [R, max_k+1]
        int64 (-1 padded) and counts [R] int32, the state's preallocated buffers, overwritten by each launch."""
        if isinstance(s, pipeline.PipelineState):
            return pipeline.launch(self, s)
        if isinstance(s, PlainState):
            return self.plain.launch(s)
        if s.tokens.shape[0]:
            run_cooperative(s, lambda: self._launch_all(s), ("open", "fallback_loop"))
        return s.tokens, s.counts

    def _launch_all(self, s: VerifyState) -> None:
        """The launch sequence of ``launch`` (recorded once a state)."""
        draft = s.draft_logits if s.draft_logits is not None else s.dmax
        d_stride = draft.stride(0) if s.draft_logits is not None else 0
        p = s.params
        launch_params(s.logits, p)
        self._positions(s, draft, d_stride, p.cut_val, p.cut_idx, exact=False)
        cut = (p.cut_val, p.cut_idx)
        if s.fallback is not None:  # undecided top-p tests: the exact cuts of the pending requests' rows
            launch_fallback(s.fallback, s.logits, s.cu, p, s.walk, s.pend, s.fallback_loop)
            cut = (s.fallback.cut_val, s.fallback.cut_idx)
            if s.tokens.shape[1] > 1:
                self._positions(s, draft, d_stride, *cut, exact=True)
        self._draw(s, draft, d_stride, s.mode, *cut, s.draw)
        if s.check is not None:  # top-p draw rows: sample-and-check (replay_kernels/draw/sample_check.py)
            def draw_open(mode, cut_val, cut_idx, rows):
                self._draw(s, draft, d_stride, mode, cut_val, cut_idx, s.round_draw, rows)

            settle = None if s.open is None else open_rows.launcher(
                s.open, s.check, s.draw, s.logits, s.rrow, s.slot, s.rdtok, p, s.seed, s.positions, s.tokens)
            launch_rounds(s.check, draw_open, s.logits, s.mode, s.rrow, s.slot, p, s.tokens, s.draw.top, s.rdtok,
                          s.seed, s.positions, cut=cut, settle=settle, kept_above=s.kept_above)

    def _draw(self, s: VerifyState, draft, d_stride: int, mode, cut_val, cut_idx, d: DrawScratch,
              rows: tuple | None = None) -> None:
        """One launch of the draw kernel over the R requests' plans (``mode``), under the bounds ``cut_*``;
        ``rows`` = (open_rows, open_len): only those requests (grid (d.row_slots, SPLITS))."""
        p = s.params
        grid, list_rows, list_len = d.launch_over(s.tokens.shape[0], rows)
        launch(
            _draw_kernel, grid, s.logits, s.logits.stride(0), draft, d_stride,
            mode, s.rrow, s.slot, s.rdrow, s.rdtok, s.lse_t, s.lse_q,
            p.temp_div, cut_val, cut_idx, s.req_temp, s.seed, s.positions,
            d.part_max, d.part_arg, d.arrivals, d.row_best, s.counts, s.counts, s.tokens, s.tokens.stride(0),
            d.part_top, d.top, list_rows, list_len, s.logits.shape[1], s.tokens.shape[1], d.span, d.splits,
            HAS_DRAFT=s.draft_logits is not None, TOP=d.track_top, SHARE=d.share, PRUNE=d.prune,
            LIST=rows is not None, BLOCK=d.block, HASHES=d.hashes, TILES=d.tiles, CHUNK=REDUCE_CHUNK,
            num_warps=d.warps, maxnreg=d.maxnreg)

    def _positions(self, s: VerifyState, draft, d_stride: int, cut_val, cut_idx, exact: bool) -> None:
        """One ``_position_kernel`` launch per draft position, or one for them all (``s.fused``; and always for
        ``exact``, the pending requests' round after the fallback)."""
        p = s.params
        fused = s.fused or exact
        slots = s.positions_launched if fused else 1
        bounded = (s.fallback is not None) and not exact
        maxnreg = BOUND_MAXNREG if bounded else None if exact else self.position_maxnreg  # exact: uncapped
        spans = 1 if bounded else s.program_spans
        grid = (s.tokens.shape[0], triton.cdiv(s.num_stats_blocks, spans), 1 if exact else slots)
        for i in range(1 if fused else s.positions_launched):  # the fused launch triggers late (measured faster:
            # docs/KERNELS.md "When a kernel lets the next one start"); the exact round by the next launch
            launch(_position_kernel, grid, i, s.cu, s.req_temp, s.seed, s.draft_tokens, s.positions, s.vidx,
                   s.logits, s.logits.stride(0), draft, d_stride, p.temp_div, cut_val, cut_idx, p.check, p.top_p,
                   s.smax, s.ssum, s.sarg, s.dmax, s.dsum, s.sbound, s.sbound.stride(0), s.arrivals, s.walk, s.pend,
                   s.tokens, s.tokens.stride(0), s.counts, s.mode, s.rrow, s.slot, s.rdrow, s.rdtok, s.lse_t, s.lse_q,
                   s.kept_above, s.logits.shape[1], s.num_stats_blocks, slots, HAS_DRAFT=s.draft_logits is not None,
                   BOUNDED=bounded, EXACT=exact, ALL=fused, SPAN=self.stats_span, BLOCK=self.stats_block,
                   CHUNK=WALK_CHUNK, SPANS=spans, num_warps=self.position_warps, maxnreg=maxnreg,
                   trigger=PDL_LATE if s.fused else None)
