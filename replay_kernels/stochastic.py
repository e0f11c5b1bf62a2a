"""``stochastic``: the Model Runner V2 speculative verify step in Triton.

Per request r (rows ``cu[r] .. cu[r] + k_r``, the last is the bonus row), in one
set of launches for the whole batch, greedy and stochastic requests mixed:

* temperature 0 (``greedy-verify`` / ``greedy-sample``): emit the raw row's
  argmax (first index on ties) for each draft position, stop at the first draft
  that differs (or is a -1 placeholder); if all pass, emit the bonus row's argmax.
* otherwise (``stochastic-verify`` / ``random-sample``): accept draft d iff
  ``log p(d) > log u + log q(d)`` with ``u = accept_uniform(seed, pos)`` and
  ``log q = 0`` without draft logits; a placeholder ends verification. On
  rejection, Gumbel-max from the residual ``max(p - q, 0)`` (one-hot: p with d
  removed); after all accepted, Gumbel-max from the bonus row. Noise is
  ``gumbel_noise(seed, pos[row], token)``, computed in-kernel.
* k = 0 is the bonus draw alone.

Target rows go through ``apply_sampling_params`` on the fly (replay_kernels.params).

Kernels, grids and bytes (N rows, R requests, V vocabulary, 4 B per fp32 logit)
--------------------------------------------------------------------------------
0. the split-row filter passes of ``replay_kernels.filters`` (only rows of requests with
   min-p/top-k/top-p): 1 + a bounded number of search passes per filtered row.
1. ``_stats_kernel`` grid ``(N - R, cdiv(V, SPAN))``: reads the verify rows
   once ((N - R) V x 4 B; bonus rows are not read) and the draft logits once when
   present; each program scans a span of ``STATS_TILES`` tiles (online max and
   sum-exp) and writes 12 B of span stats: the raw max + left-most argmax for
   greedy rows, the processed max and sum-exp for stochastic rows, the same for
   the draft logits / temperature.
2. ``_walk_kernel`` grid ``(R,)``: the accept walk; reads only the block stats, the
   target and draft logit of each drafted token, and the RNG; writes the accepted
   tokens, the counts and a draw plan (mode, row, slot, LSEs).
3. ``draw._draw_kernel`` grid ``(R, SPLITS)``: reads the R resample / bonus rows once
   (R V x 4 B, plus the rejected draft row with draft logits), pruned Gumbel-max or
   argmax, writes the drawn token and the -1 pads.

Total: about one pass over the logits (N V x 4 B) in three launches (four with filters).

API::

    state = StochasticSampler().prepare(step)   # host work, preallocated device buffers
    tokens, counts = StochasticSampler().launch(state)  # device only, no host sync, graph-capturable
    result = StochasticSampler().sample(step)   # prepare + launch + routes -> SampleResult
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from replay_harness.impls.contract import LaunchSampler
from replay_harness.recording.step import ROUTE_CODE, Step

from .draw import (MODE_GREEDY, MODE_NONE, MODE_RESIDUAL, MODE_TARGET, REDUCE_CHUNK,
                   DrawScratch, _draw_kernel, block_argmax)
from .filters import FILTER_SPAN
from .params import RowParams, host_step, launch_params, load_processed, prepare_params
from .rng import accept_uniform

STATS_BLOCK = 4096  # elements per tile
STATS_TILES = 1     # tiles per program (4 measured 6% slower on the H200: fewer loads in flight per SM)
WALK_CHUNK = 64


@triton.jit
def _online(m, acc, x):
    """Running (max, sum of exp(x - max)) after adding the tile ``x`` (one rescale per tile)."""
    m_new = tl.maximum(m, tl.max(x, axis=0))
    if m_new > float("-inf"):
        acc = acc * tl.exp(m - m_new) + tl.sum(tl.where(x > float("-inf"), tl.exp(x - m_new), 0.0), axis=0)
    return m_new, acc


@triton.jit
def _stats_kernel(logits_ptr, l_stride, draft_ptr, d_stride, vrow_ptr, row_req_ptr, req_temp_ptr,
                  temp_div_ptr, cut_val_ptr, cut_idx_ptr,
                  smax_ptr, ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr, V, NB,
                  HAS_DRAFT: tl.constexpr, SPAN: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0)  # verify-row index == draft_logits row
    b = tl.program_id(1)  # span of the row
    row = tl.load(vrow_ptr + i)
    temp = tl.load(req_temp_ptr + tl.load(row_req_ptr + row))
    row_base = logits_ptr + row.to(tl.int64) * l_stride
    out = i.to(tl.int64) * NB + b
    lo = b * SPAN
    hi = tl.minimum(lo + SPAN, V)
    if temp == 0.0:
        best = tl.full((), float("-inf"), tl.float32)
        best_idx = lo
        for start in range(lo, hi, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            raw = tl.load(row_base + offs, mask=offs < hi, other=float("-inf")).to(tl.float32)
            m, a = tl.max(tl.where(raw != raw, float("-inf"), raw), axis=0, return_indices=True)
            if m > best:
                best = m
                best_idx = start + a
        tl.store(smax_ptr + out, best)
        tl.store(sarg_ptr + out, best_idx)
    else:
        t = tl.load(temp_div_ptr + row)
        cv = tl.load(cut_val_ptr + row)
        ci = tl.load(cut_idx_ptr + row)
        m = tl.full((), float("-inf"), tl.float32)
        s = tl.zeros((), tl.float32)
        qm = tl.full((), float("-inf"), tl.float32)
        qs = tl.zeros((), tl.float32)
        for start in range(lo, hi, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            m, s = _online(m, s, load_processed(row_base, offs, hi, t, cv, ci))
            if HAS_DRAFT:
                q = tl.load(draft_ptr + i.to(tl.int64) * d_stride + offs, mask=offs < hi,
                            other=float("-inf")).to(tl.float32)
                q = tl.math.div_rn(q, temp)
                qm, qs = _online(qm, qs, tl.where(q != q, float("-inf"), q))
        tl.store(smax_ptr + out, m)
        tl.store(ssum_ptr + out, s)
        if HAS_DRAFT:
            tl.store(dmax_ptr + out, qm)
            tl.store(dsum_ptr + out, qs)


@triton.jit
def _global_lse(max_ptr, sum_ptr, base, NB, CHUNK: tl.constexpr):
    """log-sum-exp of a row from its block (max, sum-exp) stats."""
    gm = tl.full((), float("-inf"), tl.float32)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        gm = tl.maximum(gm, tl.max(tl.load(max_ptr + base + offs, mask=offs < NB, other=float("-inf")), axis=0))
    tot = tl.zeros((), tl.float32)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        m = tl.load(max_ptr + base + offs, mask=offs < NB, other=float("-inf"))
        s = tl.load(sum_ptr + base + offs, mask=offs < NB, other=0.0)
        tot += tl.sum(tl.where(m > float("-inf"), s * tl.exp(m - gm), 0.0), axis=0)
    return gm + tl.log(tot)


@triton.jit
def _walk_kernel(cu_ptr, req_temp_ptr, seed_ptr, dtok_row_ptr, pos_ptr, vidx_ptr,
                 logits_ptr, l_stride, draft_ptr, d_stride, temp_div_ptr, cut_val_ptr, cut_idx_ptr,
                 smax_ptr, ssum_ptr, sarg_ptr, dmax_ptr, dsum_ptr,
                 tokens_ptr, tok_stride, counts_ptr,
                 mode_ptr, rrow_ptr, slot_ptr, rdrow_ptr, rdtok_ptr, lse_t_ptr, lse_q_ptr, NB,
                 HAS_DRAFT: tl.constexpr, CHUNK: tl.constexpr):
    r = tl.program_id(0)
    start = tl.load(cu_ptr + r)
    k = tl.load(cu_ptr + r + 1) - start - 1
    temp = tl.load(req_temp_ptr + r)
    seed = tl.load(seed_ptr + r)
    greedy = temp == 0.0
    i = tl.zeros((), tl.int32)
    done = tl.zeros((), tl.int32)
    mode = tl.zeros((), tl.int32) + MODE_NONE
    rrow = start + k
    slot = k
    rdrow = tl.zeros((), tl.int32)
    rdtok = tl.zeros((), tl.int32)
    lse_t = tl.zeros((), tl.float32)
    lse_q = tl.zeros((), tl.float32)
    while (i < k) & (done == 0):
        row = start + i
        d = tl.load(dtok_row_ptr + row)
        vi = tl.load(vidx_ptr + row)
        base = vi.to(tl.int64) * NB
        if greedy:
            _, best = block_argmax(smax_ptr, sarg_ptr, base, NB, CHUNK)
            tl.store(tokens_ptr + r * tok_stride + i, best.to(tl.int64))
            if (d < 0) | (best != d):
                done = 1
                slot = i
        else:
            if d < 0:
                done = 1
                mode = MODE_TARGET + tl.zeros((), tl.int32)  # at the placeholder's row
                rrow = row
                slot = i
            else:
                row_base = logits_ptr + row.to(tl.int64) * l_stride
                t = tl.load(temp_div_ptr + row)
                cv = tl.load(cut_val_ptr + row)
                ci = tl.load(cut_idx_ptr + row)
                xd = tl.load(row_base + d).to(tl.float32)
                xd = tl.math.div_rn(xd, t)
                xd = tl.where((xd > cv) | ((xd == cv) & (d >= ci)), xd, float("-inf"))
                lt = _global_lse(smax_ptr, ssum_ptr, base, NB, CHUNK)
                log_p = xd - lt
                lq = tl.zeros((), tl.float32)
                log_q = tl.zeros((), tl.float32)
                if HAS_DRAFT:
                    lq = _global_lse(dmax_ptr, dsum_ptr, base, NB, CHUNK)
                    qd = tl.load(draft_ptr + vi.to(tl.int64) * d_stride + d).to(tl.float32)
                    log_q = tl.math.div_rn(qd, temp) - lq
                u = accept_uniform(seed, tl.load(pos_ptr + row))
                if log_p > tl.log(u) + log_q:
                    tl.store(tokens_ptr + r * tok_stride + i, d.to(tl.int64))
                else:
                    done = 1
                    mode = MODE_RESIDUAL + tl.zeros((), tl.int32)
                    rrow = row
                    slot = i
                    rdrow = vi
                    rdtok = d
                    lse_t = lt
                    lse_q = lq
        i += 1
    if done == 0:
        mode = tl.where(greedy, MODE_GREEDY, MODE_TARGET)  # bonus / plain draw
    tl.store(mode_ptr + r, mode)
    tl.store(rrow_ptr + r, rrow)
    tl.store(slot_ptr + r, slot)
    tl.store(rdrow_ptr + r, rdrow)
    tl.store(rdtok_ptr + r, rdtok)
    tl.store(lse_t_ptr + r, lse_t)
    tl.store(lse_q_ptr + r, lse_q)
    tl.store(counts_ptr + r, slot + 1)


@dataclass
class VerifyState:
    """Everything ``StochasticSampler.launch`` needs, on the step's device.

    logits [N, V] engine dtype; draft_logits [N-R, V] or None; params: RowParams ([N] rows);
    cu [R+1] int32; req_temp [R] f32; seed [R] int64; draft_tokens [N] int32;
    positions [N] int64; row_req [N] int32; vidx [N] int32 (draft/verify row per
    logits row, -1 on bonus rows); vrows [N-R] int32 (logits row of each verify row);
    block stats smax/ssum/sarg/dmax/dsum [N-R, NB_stats]; draw plan mode/rrow/slot/
    rdrow/rdtok [R] int32, lse_t/lse_q [R] f32; draw: DrawScratch (partials and arrival counters);
    outputs tokens [R, max_k+1] int64, counts [R] int32; routes [R] int8 (host).
    """

    logits: torch.Tensor
    draft_logits: torch.Tensor | None
    params: RowParams
    cu: torch.Tensor
    req_temp: torch.Tensor
    seed: torch.Tensor
    draft_tokens: torch.Tensor
    positions: torch.Tensor
    row_req: torch.Tensor
    vidx: torch.Tensor
    vrows: torch.Tensor
    smax: torch.Tensor
    ssum: torch.Tensor
    sarg: torch.Tensor
    dmax: torch.Tensor
    dsum: torch.Tensor
    mode: torch.Tensor
    rrow: torch.Tensor
    slot: torch.Tensor
    rdrow: torch.Tensor
    rdtok: torch.Tensor
    lse_t: torch.Tensor
    lse_q: torch.Tensor
    draw: DrawScratch
    tokens: torch.Tensor
    counts: torch.Tensor
    routes: torch.Tensor
    num_stats_blocks: int


class StochasticSampler(LaunchSampler):
    """MRV2 verify (greedy and stochastic per request) + plain sample, all in Triton."""

    name = "stochastic"
    description = ("MRV2 speculative verify in Triton: greedy + stochastic accept per request, residual "
                   "resample, bonus draw, apply_sampling_params on the expanded batch, in-kernel RNG")
    rng_contract = "mrv2"
    requires_cuda = False

    def __init__(self, stats_block: int = STATS_BLOCK, draw_block: int | None = None, programs: int | None = None,
                 filter_span: int = FILTER_SPAN, stats_span: int | None = None):
        self.stats_block = stats_block
        self.stats_span = stats_span or STATS_TILES * stats_block
        self.draw_block = draw_block
        self.programs = programs
        self.filter_span = filter_span

    def prepare(self, step: Step) -> VerifyState:
        """Host work: expand parameters to rows, index maps, preallocated scratch and outputs.

        Returns a :class:`VerifyState`; nothing in it changes between launches
        except the scratch and output buffers, so ``launch`` can be replayed in a CUDA graph.
        """
        logits = step.logits if step.logits.stride(1) == 1 else step.logits.contiguous()
        device = logits.device
        host = host_step(step)
        n, v = logits.shape
        r = step.num_requests
        i32 = dict(dtype=torch.int32, device=device)
        f32 = dict(dtype=torch.float32, device=device)
        vidx = host.draft_row_index()
        vrows = torch.nonzero(vidx >= 0).flatten()
        nv = int(vrows.numel())
        draft = step.draft_logits
        if draft is not None:
            draft = draft.to(device)
            if draft.stride(1) != 1:
                draft = draft.contiguous()
            if draft.shape[0] != nv:
                raise ValueError(f"draft_logits has {draft.shape[0]} rows, expected {nv} (N - R)")
        nbs = max(1, triton.cdiv(v, self.stats_span))
        routes = torch.tensor([ROUTE_CODE[name] for name in host.expected_routes()], dtype=torch.int8)
        ns = max(nv, 1)
        return VerifyState(
            logits=logits, draft_logits=draft, params=prepare_params(step, device, self.filter_span),
            cu=step.cu_num_logits.to(**i32), req_temp=step.temperature.to(**f32),
            seed=step.seed.to(device=device, dtype=torch.int64),
            draft_tokens=step.draft_token_ids.to(**i32),
            positions=step.positions.to(device=device, dtype=torch.int64),
            row_req=host.row_to_request().to(**i32), vidx=vidx.to(**i32), vrows=vrows.to(**i32),
            smax=torch.empty((ns, nbs), **f32), ssum=torch.empty((ns, nbs), **f32),
            sarg=torch.empty((ns, nbs), **i32),
            dmax=torch.empty((ns, nbs) if draft is not None else (1, 1), **f32),
            dsum=torch.empty((ns, nbs) if draft is not None else (1, 1), **f32),
            mode=torch.empty(max(r, 1), **i32), rrow=torch.empty(max(r, 1), **i32),
            slot=torch.empty(max(r, 1), **i32), rdrow=torch.empty(max(r, 1), **i32),
            rdtok=torch.empty(max(r, 1), **i32), lse_t=torch.empty(max(r, 1), **f32),
            lse_q=torch.empty(max(r, 1), **f32),
            draw=DrawScratch.allocate(r, v, self.draw_block, device, self.programs),
            tokens=torch.full((r, host.max_drafts + 1), -1, dtype=torch.int64, device=device),
            counts=torch.zeros(r, **i32), routes=routes,
            num_stats_blocks=nbs)

    def launch(self, s: VerifyState) -> tuple[torch.Tensor, torch.Tensor]:
        """Device work only (no host sync, graph-capturable): returns ``(tokens, counts)``.

        tokens [R, max_k+1] int64 (-1 padded) and counts [R] int32 are the
        state's preallocated buffers, overwritten by each launch.
        """
        r = s.tokens.shape[0]
        if r == 0:
            return s.tokens, s.counts
        v = s.logits.shape[1]
        has_draft = s.draft_logits is not None
        draft = s.draft_logits if has_draft else s.dmax
        d_stride = draft.stride(0) if has_draft else 0
        p = s.params
        launch_params(s.logits, p)
        nv = s.vrows.numel()
        if nv:
            _stats_kernel[(nv, s.num_stats_blocks)](
                s.logits, s.logits.stride(0), draft, d_stride, s.vrows, s.row_req, s.req_temp,
                p.temp_div, p.cut_val, p.cut_idx, s.smax, s.ssum, s.sarg, s.dmax, s.dsum,
                v, s.num_stats_blocks, HAS_DRAFT=has_draft, SPAN=self.stats_span, BLOCK=self.stats_block,
                num_warps=8)
        _walk_kernel[(r,)](
            s.cu, s.req_temp, s.seed, s.draft_tokens, s.positions, s.vidx,
            s.logits, s.logits.stride(0), draft, d_stride, p.temp_div, p.cut_val, p.cut_idx,
            s.smax, s.ssum, s.sarg, s.dmax, s.dsum, s.tokens, s.tokens.stride(0), s.counts,
            s.mode, s.rrow, s.slot, s.rdrow, s.rdtok, s.lse_t, s.lse_q, s.num_stats_blocks,
            HAS_DRAFT=has_draft, CHUNK=WALK_CHUNK, num_warps=1)
        d = s.draw
        _draw_kernel[(r, d.splits)](
            s.logits, s.logits.stride(0), draft, d_stride,
            s.mode, s.rrow, s.slot, s.rdrow, s.rdtok, s.lse_t, s.lse_q,
            p.temp_div, p.cut_val, p.cut_idx, s.req_temp, s.seed, s.positions,
            d.part_max, d.part_arg, d.arrivals, s.counts, s.counts, s.tokens, s.tokens.stride(0),
            d.part_top, d.top, v, s.tokens.shape[1], d.span, d.splits,
            HAS_DRAFT=has_draft, TOP=False, BLOCK=d.block, CHUNK=REDUCE_CHUNK, num_warps=d.warps)
        return s.tokens, s.counts
