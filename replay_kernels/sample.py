"""Plain-sample impls (k = 0): ``serial-scan`` and ``gumbel-max``, plus the shared draw kernels.

Both emit, for every request without drafts, the token of the ``mrv2``
contract: greedy requests (temperature 0) take the argmax of the raw row (first
index on ties); the others take ``argmax(processed + gumbel_noise(seed, pos, v))``
with the noise computed in-kernel (``replay_kernels.rng.gumbel_noise``), so they
emit the same tokens as the ``reference`` impl. Requests with drafts (k > 0)
are refused (route ``refused``, count 0, with a note): use ``stochastic``.

Kernels
-------
``_draw_block_kernel`` grid ``(R, cdiv(V, BLOCK))``: one block of one row per
program; computes the (optionally residual) processed scores plus noise, writes
the block max and its left-most index. ``_draw_reduce_kernel`` grid ``(R,)``
reduces the block maxima (strictly greater across blocks, so the first block
wins ties) and writes ``tokens[r, slot[r]]``. One pass over the logits of
each drawn row. ``stochastic`` reuses both for its resample / bonus draws.

``_serial_scan_kernel`` grid ``(R,)``: one program per row and a scalar loop
over the whole vocabulary (the slow engine kernel: one thread per row). One
pass over the logits, V dependent scalar steps.

Sampling parameters (temperature, min-p, top-k, top-p) come from
:mod:`replay_kernels.params` (a filter bound per row, applied on the fly).

API (both impls)::

    state = impl.prepare(step)        # host work; device tensors + preallocated outputs
    tokens, counts = impl.launch(state)   # device work only: no host sync, graph-capturable
    result = impl.sample(step)        # prepare + launch + routes -> SampleResult
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from replay_harness.step import ROUTE_CODE, SampleResult, Step, expected_route

from .params import RowParams, host_step, launch_params, load_processed, prepare_params
from .rng import gumbel_noise

# Draw modes (one per request).
MODE_NONE = 0  # nothing to draw (refused request, or greedy verify that stopped on a mismatch)
MODE_GREEDY = 1  # argmax of the raw row
MODE_TARGET = 2  # Gumbel-max over the processed target row
MODE_RESIDUAL = 3  # Gumbel-max over the residual after rejecting ``draft``

DRAW_BLOCK = 2048
REDUCE_CHUNK = 128


@triton.jit
def _draw_block_kernel(logits_ptr, l_stride, draft_ptr, d_stride,
                       mode_ptr, row_ptr, drow_ptr, dtok_ptr, lse_t_ptr, lse_q_ptr,
                       temp_div_ptr, cut_val_ptr, cut_idx_ptr, req_temp_ptr, seed_ptr, pos_ptr,
                       bmax_ptr, barg_ptr, V, NB,
                       HAS_DRAFT: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    b = tl.program_id(1)
    mode = tl.load(mode_ptr + r)
    if mode != 0:
        row = tl.load(row_ptr + r)
        offs = b * BLOCK + tl.arange(0, BLOCK)
        valid = offs < V
        row_base = logits_ptr + row.to(tl.int64) * l_stride
        if mode == 1:
            raw = tl.load(row_base + offs, mask=valid, other=float("-inf")).to(tl.float32)
            score = tl.where(raw != raw, float("-inf"), raw)
        else:
            t = tl.load(temp_div_ptr + row)
            cv = tl.load(cut_val_ptr + row)
            ci = tl.load(cut_idx_ptr + row)
            x = load_processed(row_base, offs, V, t, cv, ci)
            if mode == 3:
                d = tl.load(dtok_ptr + r)
                if HAS_DRAFT:
                    temp = tl.load(req_temp_ptr + r)
                    drow = tl.load(drow_ptr + r)
                    q = tl.load(draft_ptr + drow.to(tl.int64) * d_stride + offs, mask=valid,
                                other=float("-inf")).to(tl.float32)
                    log_q = tl.math.div_rn(q, temp) - tl.load(lse_q_ptr + r)
                    log_p = x - tl.load(lse_t_ptr + r)
                    ratio = tl.exp(log_q - log_p)
                    # log1p(-ratio), accurate for small ratio.
                    y = 1.0 - ratio
                    l1p = tl.where(y == 1.0, -ratio, tl.log(y) * (-ratio) / (y - 1.0))
                    x = tl.where(ratio < 1.0, log_p + l1p, float("-inf"))
                else:
                    x = tl.where(offs == d, float("-inf"), x)
            seed = tl.load(seed_ptr + r)
            pos = tl.load(pos_ptr + row)
            score = x + gumbel_noise(seed, pos, offs)
            score = tl.where(valid & (score == score), score, float("-inf"))
        m, a = tl.max(score, axis=0, return_indices=True)
        tl.store(bmax_ptr + r * NB + b, m)
        tl.store(barg_ptr + r * NB + b, b * BLOCK + a)


@triton.jit
def _draw_reduce_kernel(mode_ptr, slot_ptr, bmax_ptr, barg_ptr, tokens_ptr, tok_stride, NB,
                        CHUNK: tl.constexpr):
    r = tl.program_id(0)
    mode = tl.load(mode_ptr + r)
    if mode != 0:
        best = tl.full((), float("-inf"), tl.float32)
        best_idx = tl.zeros((), tl.int32)
        for start in range(0, NB, CHUNK):
            offs = start + tl.arange(0, CHUNK)
            m = tl.load(bmax_ptr + r * NB + offs, mask=offs < NB, other=float("-inf"))
            a = tl.load(barg_ptr + r * NB + offs, mask=offs < NB, other=0)
            cm, ci = tl.max(m, axis=0, return_indices=True)
            ca = tl.sum(tl.where(tl.arange(0, CHUNK) == ci, a, 0), axis=0)
            better = cm > best
            best_idx = tl.where(better, ca, best_idx)
            best = tl.where(better, cm, best)
        slot = tl.load(slot_ptr + r)
        tl.store(tokens_ptr + r * tok_stride + slot, best_idx.to(tl.int64))


@triton.jit
def _serial_scan_kernel(logits_ptr, l_stride, mode_ptr, row_ptr, temp_div_ptr, cut_val_ptr, cut_idx_ptr,
                        seed_ptr, pos_ptr, tokens_ptr, tok_stride, V):
    r = tl.program_id(0)
    mode = tl.load(mode_ptr + r)
    if mode != 0:
        row = tl.load(row_ptr + r)
        row_base = logits_ptr + row.to(tl.int64) * l_stride
        t = tl.load(temp_div_ptr + row)
        cv = tl.load(cut_val_ptr + row)
        ci = tl.load(cut_idx_ptr + row)
        seed = tl.load(seed_ptr + r)
        pos = tl.load(pos_ptr + row)
        greedy = mode == 1
        best = tl.full((), float("-inf"), tl.float32)
        best_idx = tl.zeros((), tl.int32)
        zero = tl.zeros((), tl.int32)
        for v0 in range(0, V):
            v = v0 + zero  # a tensor under the interpreter too
            raw = tl.load(row_base + v).to(tl.float32)
            if greedy:
                s = raw
            else:
                x = tl.math.div_rn(raw, t)
                keep = (x > cv) | ((x == cv) & (v >= ci))
                x = tl.where(keep, x, float("-inf"))
                s = x + gumbel_noise(seed, pos, v)
            better = s > best  # NaN never wins: read as -inf
            best_idx = tl.where(better, v, best_idx)
            best = tl.where(better, s, best)
        tl.store(tokens_ptr + r * tok_stride, best_idx.to(tl.int64))


# ---------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------


@dataclass
class PlainState:
    """Everything ``launch`` needs, on the step's device (built by ``prepare``).

    logits [N, V] (engine dtype, contiguous rows); params: RowParams;
    mode/row/slot [R] int32 (draw mode, logits row, output slot = 0);
    seed [R] int64; positions [N] int64; tokens [R, max_k+1] int64; counts [R] int32;
    bmax/barg [R, NB] block maxima scratch (gumbel-max only); routes [R] int8 (host);
    notes: list[str].
    """

    logits: torch.Tensor
    params: RowParams
    mode: torch.Tensor
    row: torch.Tensor
    slot: torch.Tensor
    seed: torch.Tensor
    positions: torch.Tensor
    tokens: torch.Tensor
    counts: torch.Tensor
    counts_init: torch.Tensor
    bmax: torch.Tensor
    barg: torch.Tensor
    num_blocks: int
    routes: torch.Tensor
    notes: list[str] = field(default_factory=list)
    dummy_i32: torch.Tensor | None = None
    dummy_f32: torch.Tensor | None = None


class _PlainSampler:
    rng_contract = "mrv2"
    requires_cuda = False
    name = "plain"

    def __init__(self, block: int = DRAW_BLOCK):
        self.block = block

    def prepare(self, step: Step) -> PlainState:
        """Host work: row parameters, draw plan and preallocated outputs (k > 0 requests refused)."""
        logits = step.logits if step.logits.stride(1) == 1 else step.logits.contiguous()
        device = logits.device
        host = host_step(step)
        r_count = step.num_requests
        ks = host.num_drafts.tolist()
        temps = host.temperature.tolist()
        cu = host.cu_num_logits.tolist()
        modes, routes, refused = [], [], []
        for r in range(r_count):
            if ks[r] > 0:
                modes.append(MODE_NONE)
                routes.append(ROUTE_CODE["refused"])
                refused.append(int(host.request_ids[r]))
            else:
                modes.append(MODE_GREEDY if temps[r] == 0.0 else MODE_TARGET)
                routes.append(ROUTE_CODE[expected_route(temps[r], 0)])
        notes = []
        if refused:
            shown = ", ".join(str(x) for x in refused[:8]) + (" ..." if len(refused) > 8 else "")
            notes.append(f"{self.name} handles plain-sample steps only (k = 0); refused {len(refused)} "
                         f"request(s) with drafts ({shown}); use stochastic for speculative steps")
        nb = max(1, triton.cdiv(step.vocab_size, self.block))
        i32 = dict(dtype=torch.int32, device=device)
        counts_init = torch.tensor([0 if m == MODE_NONE else 1 for m in modes], **i32)
        return PlainState(
            logits=logits, params=prepare_params(step, device),
            mode=torch.tensor(modes, **i32), row=torch.tensor(cu[:-1], **i32),
            slot=torch.zeros(r_count, **i32), seed=step.seed.to(device=device, dtype=torch.int64),
            positions=step.positions.to(device=device, dtype=torch.int64),
            tokens=torch.full((r_count, host.max_drafts + 1), -1, dtype=torch.int64, device=device),
            counts=torch.zeros(r_count, **i32), counts_init=counts_init,
            bmax=torch.empty((r_count, nb), dtype=torch.float32, device=device),
            barg=torch.empty((r_count, nb), **i32), num_blocks=nb,
            routes=torch.tensor(routes, dtype=torch.int8), notes=notes,
            dummy_i32=torch.zeros(1, **i32), dummy_f32=torch.zeros(1, dtype=torch.float32, device=device))

    def launch(self, state: PlainState) -> tuple[torch.Tensor, torch.Tensor]:
        """Device work only (graph-capturable): reset outputs, filter bounds, then the impl's draw."""
        state.tokens.fill_(-1)
        state.counts.copy_(state.counts_init)
        if state.mode.numel() == 0:
            return state.tokens, state.counts
        launch_params(state.logits, state.params)
        self._draw(state)
        return state.tokens, state.counts

    def _draw(self, state: PlainState) -> None:
        raise NotImplementedError

    def sample(self, step: Step) -> SampleResult:
        state = self.prepare(step)
        tokens, counts = self.launch(state)
        return SampleResult(tokens=tokens.cpu(), counts=counts.cpu(), routes=state.routes, notes=list(state.notes))


class GumbelMaxSampler(_PlainSampler):
    """Parallel Gumbel-max: each row split over ``cdiv(V, block)`` programs, then a tiny reduce kernel."""

    name = "gumbel-max"
    description = "parallel Gumbel-max plain sampler (k = 0), grid (rows, vocab blocks) + reduce, Triton"

    def _draw(self, state: PlainState) -> None:
        """Block draws over a grid (rows, vocab blocks), then the reduce (first block on ties)."""
        p, r = state.params, state.mode.numel()
        _draw_block_kernel[(r, state.num_blocks)](
            state.logits, state.logits.stride(0), state.dummy_f32, 0,
            state.mode, state.row, state.dummy_i32, state.dummy_i32, state.dummy_f32, state.dummy_f32,
            p.temp_div, p.cut_val, p.cut_idx, state.dummy_f32, state.seed, state.positions,
            state.bmax, state.barg, state.logits.shape[1], state.num_blocks, HAS_DRAFT=False, BLOCK=self.block,
            num_warps=8)
        _draw_reduce_kernel[(r,)](state.mode, state.slot, state.bmax, state.barg, state.tokens,
                                  state.tokens.stride(0), state.num_blocks, CHUNK=REDUCE_CHUNK)


class SerialScanSampler(_PlainSampler):
    """One program per row, scalar loop over the whole vocabulary (reproduces the slow engine kernel)."""

    name = "serial-scan"
    description = "serial one-thread-per-row Gumbel-max scan (k = 0), the slow engine kernel, Triton"

    def _draw(self, state: PlainState) -> None:
        """One program per row, scalar loop over the whole vocabulary."""
        p = state.params
        _serial_scan_kernel[(state.mode.numel(),)](
            state.logits, state.logits.stride(0), state.mode, state.row, p.temp_div, p.cut_val, p.cut_idx,
            state.seed, state.positions, state.tokens, state.tokens.stride(0), state.logits.shape[1],
            num_warps=1)
