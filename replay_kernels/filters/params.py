"""``apply_sampling_params`` in Triton, without materialising processed logits.

Model Runner V2's ``apply_sampling_params`` (and the project's oracle of it) turns each
row into float32 logits divided by the temperature and masked by min-p, top-k
and top-p. Every one of those masks keeps a *suffix of the row in ascending
(value, index) order* (the oracle sorts stably, so equal values are ordered by
token index), so the whole filter of a row collapses to one lexicographic
lower bound ``(cut_val, cut_idx)``::

    processed[v] = x[v]   if x[v] > cut_val or (x[v] == cut_val and v >= cut_idx)
                   -inf   otherwise
    with x = div_rn(float32(logits[row]), temp_div[row])

Consumers (the stats, draw and scan kernels) apply that on the fly through
:func:`load_processed`, so no ``[N, V]`` float32 copy is ever written.
``temp_div`` is 1.0 for rows left alone (greedy requests, requests that need
no processing, and requests at temperature 1); ``x / 1.0 == x`` exactly.
Rows without filters get ``(-inf, 0)``: everything kept.

The bound of the rows that use min-p, top-k or top-p is computed by the split-row
passes of :mod:`replay_kernels.filters.filters` (row maximum and min-p bound; top-k by a
16-way search over the monotone int32 key of the fp32 bits, ties at the k-th value
kept; top-p by the sum-exp of the kept values, a 16-way search for the smallest
kept value ``v*`` whose ascending cumulative mass exceeds ``1 - p``, and the cut
inside the tie group at ``v*`` in token-id order), each pass one launch over
(filtered rows x spans of the row); rows with top-k (k up to ``gather_max_k``) by the same searches on the
values at or above their k-th largest block maximum, gathered in two passes (:mod:`replay_kernels.filters.topk_gather`).

Known, documented differences from the oracle (near-ties; docs/KERNELS.md "Filter bounds"):
the cumulative mass is a sum of per-span fp32 sums, not the oracle's sorted cumsum,
so a top-p decision whose cumulative mass is within rounding of ``1 - p`` may
differ; at ``top_p == 1`` with top-k active the oracle also drops the
lowest-ranked tokens whose fp32 softmax probability underflows to exactly 0,
we keep them (unobservable unless a draft of draft-probability < e^-80 is drafted).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..batch import SamplingBatch, needs_processing, normalized_top_k
from .bound_rules import keep_mask
from .filters import FILTER_SPAN, FilterScratch, launch_filters
from ..shared.launches import launch
from .topk_gather import GatherScratch, gather_max_k, launch_gather

GATHER_SEARCH_ROWS = 1  # programs along rows of the filter passes for gathered rows that do not fit (ROW_SOLVE off)



# ---------------------------------------------------------------------------
# Device helpers shared by every kernel that reads logits
# ---------------------------------------------------------------------------


@triton.jit
def load_processed(row_ptr, offs, V, t, cut_val, cut_idx):
    """Processed target logits (temperature, min-p, top-k, top-p) of lanes ``offs``; lanes >= V read -inf."""
    return process_loaded(tl.load(row_ptr + offs, mask=offs < V, other=float("-inf")), offs, t, cut_val, cut_idx)


@triton.jit
def process_loaded(raw, offs, t, cut_val, cut_idx):
    """float32 processed values of the loaded logits ``raw`` of lanes ``offs`` (any float dtype).

    NaN comes back as -inf. Two scalar branches: a row at ``t == 1`` skips the IEEE division (``x / 1 == x``
    exactly, NaN stays NaN), and a row without a filter bound skips the mask (the bound ``(-inf, 0)`` keeps
    every non-NaN value; NaN fails the mask), so every path gives the same values bit for bit.
    """
    x = raw.to(tl.float32)
    if t != 1.0:
        x = tl.math.div_rn(x, t)
    if cut_val == float("-inf"):
        x = tl.where(x != x, float("-inf"), x)
    else:
        x = tl.where(keep_mask(x, offs, cut_val, cut_idx), x, float("-inf"))
    return x


@triton.jit
def _apply_kernel(logits_ptr, stride, temp_ptr, cut_val_ptr, cut_idx_ptr, out_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    b = tl.program_id(1)
    offs = b * BLOCK + tl.arange(0, BLOCK)
    t = tl.load(temp_ptr + row)
    cv = tl.load(cut_val_ptr + row)
    ci = tl.load(cut_idx_ptr + row)
    x = load_processed(logits_ptr + row.to(tl.int64) * stride, offs, V, t, cv, ci)
    tl.store(out_ptr + row.to(tl.int64) * V + offs, x, mask=offs < V)


# ---------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------


@dataclass
class RowParams:
    """Per-row sampling parameters on the step's device (all ``[N]``).

    temp_div   float32  divisor applied to the row (1.0 = untouched)
    log_min_p  float32  log(min_p) for filtered rows, -inf when min-p is off
    top_k      int32    k in [1, V] (V = off)
    top_p      float32  p in (0, 1] (1 = off)
    search_top_k / search_top_p: what the filter passes search (top_k / top_p, except V / 1 on check rows)
    check      int32    1: the row's top-k or top-p is applied by sample-and-check (replay_kernels.draw.sample_check)
                        after the draw, not by the bound (which then holds min-p only)
    cut_val    float32  filter bound, written by :func:`launch_params` (-inf = keep all)
    cut_idx    int32    filter tie index, written by :func:`launch_params`
    filter_rows int32 [F] rows whose bound the filter passes search: the rows without a gather first
               (min-p, top-p, k above gather_max_k), then slots for the gathered rows that do not fit
    num_filter_rows: int F (host int, fixed at prepare time)
    filters    FilterScratch: the filter passes' scratch and stage flags (replay_kernels.filters.filters)
    gather     GatherScratch or None: the rows whose top-k bound is gathered (replay_kernels.filters.topk_gather)
    check_miss tuple[float]: per request with a check row, a bound on the chance that one draw misses
               its set (1 - top_p; 1.0 for top-k: unbounded), host floats (sets the launched rounds)
    """

    temp_div: torch.Tensor
    log_min_p: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    search_top_k: torch.Tensor
    search_top_p: torch.Tensor
    check: torch.Tensor
    any_check: bool
    cut_val: torch.Tensor
    cut_idx: torch.Tensor
    filter_rows: torch.Tensor
    num_filter_rows: int
    filters: FilterScratch
    gather: GatherScratch | None = None
    check_miss: tuple[float, ...] = ()


def host_batch(batch) -> SamplingBatch:
    """The batch (a :class:`SamplingBatch` or any object with its attributes) with every small field on the CPU."""
    return SamplingBatch.of(batch).host()


def prepare_params(batch, device: torch.device | str | None = None, filter_span: int = FILTER_SPAN,
                   check: bool = False, check_top_k: bool = True, gather_top_k: bool = False) -> RowParams:
    """Host work: expand each request's parameters to its rows (bonus row included).

    Greedy requests and requests that need no processing are left alone
    (temp_div 1, no filter), as the oracle does. ``check``: rows with top-k or top-p (not both) leave
    those to sample-and-check (plain samples); ``check_top_k=False``: top-p rows without top-k only
    (a verify decides them by bounds, replay_kernels/verify/verify_bounds.py); ``gather_top_k``: rows with top-k alone
    whose k can be gathered (``gather_max_k``) are gathered, not checked (plain samples of many requests).
    """
    device = batch.logits.device if device is None else device
    batch = host_batch(batch)
    v = batch.vocab_size
    rows = batch.row_to_request()
    active = needs_processing(batch)[rows]
    temp = batch.temperature.float()[rows]
    min_p = batch.min_p.float()[rows]
    top_p = batch.top_p.float()[rows]
    k = normalized_top_k(batch.top_k, v)[rows]
    temp_div = torch.where(active & (temp != 1), temp, torch.ones_like(temp))
    use_min_p = active & (min_p != 0)
    # log(min_p) with torch on the batch's device, exactly as the oracle computes it.
    log_min_p = torch.where(use_min_p.to(device), torch.log(min_p.to(device)),
                            torch.full((rows.numel(),), float("-inf"), device=device))
    k = torch.where(active, k, torch.full_like(k, v))
    top_p = torch.where(active, top_p, torch.ones_like(top_p))
    max_k = gather_max_k(v, filter_span)
    one_filter = ((k != v) != (top_p != 1)) if check_top_k else ((k == v) & (top_p != 1))
    if gather_top_k:
        one_filter &= ~((k != v) & (top_p == 1) & (k <= max_k))
    checked = active & one_filter if check else torch.zeros_like(active)
    search_k = torch.where(checked, torch.full_like(k, v), k)
    search_p = torch.where(checked, torch.ones_like(top_p), top_p)
    use_filter = active & (use_min_p | (search_k != v) | (search_p != 1))
    n = rows.numel()
    gathered = use_filter & (search_k != v) & (search_k <= max_k)
    searched = torch.nonzero(use_filter & ~gathered).flatten().to(torch.int32)
    gather_rows = torch.nonzero(gathered).flatten().to(torch.int32)
    filter_rows = torch.cat([searched, gather_rows])  # a gathered row's slot is written when it is appended
    topp_rows = use_filter & (search_p != 1)
    p_checked = batch.top_p.float()[torch.unique(rows[checked])].double()  # per request with a check row
    scratch = FilterScratch.allocate(
        int(filter_rows.numel()), v, device, any_topk=bool((use_filter & (search_k != v)).any()),
        any_topp=bool(topp_rows.any()), any_bound=bool((topp_rows & (use_min_p | (search_k != v))).any()),
        span=filter_span, listed=int(searched.numel()),
        grid_rows=max(int(searched.numel()), min(int(gather_rows.numel()), GATHER_SEARCH_ROWS)))
    gather = (GatherScratch.allocate(gather_rows.to(device), scratch.splits, filter_span, int(searched.numel()), device)
              if gather_rows.numel() else None)
    return RowParams(
        temp_div=temp_div.to(device), log_min_p=log_min_p.float(), top_k=k.to(torch.int32).to(device),
        top_p=top_p.to(device), search_top_k=search_k.to(torch.int32).to(device), search_top_p=search_p.to(device),
        check=checked.to(torch.int32).to(device), any_check=bool(checked.any()),
        cut_val=torch.full((n,), float("-inf"), dtype=torch.float32, device=device),
        cut_idx=torch.zeros(n, dtype=torch.int32, device=device), filter_rows=filter_rows.to(device),
        num_filter_rows=int(filter_rows.numel()), filters=scratch, gather=gather,
        check_miss=tuple(torch.where(p_checked < 1.0, 1.0 - p_checked, 1.0).tolist()))


def launch_params(logits: torch.Tensor, rp: RowParams) -> None:
    """Device work: write ``rp.cut_val`` / ``rp.cut_idx`` for the filtered rows (no host sync)."""
    if rp.gather is not None:
        launch_gather(logits, rp.gather, rp.temp_div, rp.log_min_p, rp.search_top_k, rp.search_top_p, rp.cut_val,
                      rp.cut_idx, rp.filter_rows, rp.filters.count)
    if rp.gather is None or not rp.gather.row_solve:
        launch_filters(logits, rp.filter_rows, rp.temp_div, rp.log_min_p, rp.search_top_k, rp.search_top_p,
                       rp.cut_val, rp.cut_idx, rp.filters)


def apply_sampling_params(batch, block: int = 1024, filter_span: int = FILTER_SPAN) -> torch.Tensor:
    """[N, V] float32 processed logits, the Triton twin of the oracle (for tests and tools).

    The samplers never call this: they apply the same bound on the fly.
    """
    logits = batch.logits.contiguous()
    rp = prepare_params(batch, filter_span=filter_span)
    launch_params(logits, rp)
    return apply_bounds(logits, rp, block)


def apply_bounds(logits: torch.Tensor, rp: RowParams, block: int = 1024) -> torch.Tensor:
    """[N, V] float32 processed logits under the bounds ``launch_params`` wrote to ``rp`` (contiguous ``logits``)."""
    n, v = logits.shape
    out = torch.empty((n, v), dtype=torch.float32, device=logits.device)
    if n:
        launch(_apply_kernel, (n, triton.cdiv(v, block)), logits, logits.stride(0), rp.temp_div, rp.cut_val, rp.cut_idx,
               out, v, BLOCK=block)
    return out
