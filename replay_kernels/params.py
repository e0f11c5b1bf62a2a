"""``apply_sampling_params`` in Triton, without materialising processed logits.

The oracle (``replay_harness.sampling_params.apply_sampling_params``) turns each
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

The filter kernel ``_filter_kernel`` computes ``(cut_val, cut_idx)`` for the
rows that use min-p, top-k or top-p; one program per row, looping over the
vocabulary in blocks of ``FILTER_BLOCK``:

1. one pass: row maximum ``M`` (NaN read as -inf); min-p bound ``L = M + log(min_p)``
   (``log(min_p)`` is computed by torch in :func:`prepare_params`, exactly as the oracle).
2. top-k (k < V): the k-th largest value, found by an ``NC``-way search over the
   monotone int32 key of the fp32 bit pattern (one pass per search round; 16-way
   search: ceil(32 / 4) = 8 rounds at most, fewer when the key range is narrow).
   ``L = max(L, kth)``: ties at the k-th value are all kept, as in the oracle.
3. top-p (p < 1): one pass for ``S = sum exp(x - M)`` over kept values, then a
   16-way search (<= 8 passes) for the smallest kept value ``v*`` whose ascending
   cumulative mass ``sum_{x <= v*} exp(x - M) / S`` exceeds ``1 - p`` (or the row
   maximum if none does), then one pass counting the tie group at ``v*`` and
   its lower mass. If the group has m > 1 members the oracle's stable sort drops
   its first ``n_drop`` members (lowest ids), computed in closed form; their cut
   index comes from one more search over token ids (<= ceil(log16 V) passes,
   only when ``n_drop > 0``).

Passes over a filtered row: 1 (max) + <= 8 (top-k) + 1 + <= 8 + 1 (top-p)
[+ <= 5 for top-p ties]; in practice the key range after the first round
is narrow, see docs/KERNELS.md.

Known, documented differences from the oracle (near-ties, see near_tie.py):
the cumulative mass is a blocked fp32 sum, not the oracle's sequential cumsum,
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

from replay_harness.sampling_params import needs_processing, normalized_top_k
from replay_harness.step import Step

FILTER_BLOCK = 1024
SEARCH_WAYS = 16

MODE_TOPK = 0
MODE_TOPP = 1
MODE_IDX = 2


# ---------------------------------------------------------------------------
# Device helpers shared by every kernel that reads logits
# ---------------------------------------------------------------------------


@triton.jit
def load_scaled(row_ptr, offs, V, t):
    """float32 ``div_rn(logits, t)`` for lanes ``offs`` (lanes >= V read -inf)."""
    x = tl.load(row_ptr + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    return tl.math.div_rn(x, t)


@triton.jit
def keep_mask(x, offs, cut_val, cut_idx):
    """True where the processed value survives the row's filter bound."""
    return (x > cut_val) | ((x == cut_val) & (offs >= cut_idx))


@triton.jit
def load_processed(row_ptr, offs, V, t, cut_val, cut_idx):
    """Processed target logits (temperature, min-p, top-k, top-p) of lanes ``offs``.

    NaN and lanes >= V come back as -inf.
    """
    x = load_scaled(row_ptr, offs, V, t)
    return tl.where(keep_mask(x, offs, cut_val, cut_idx), x, float("-inf"))


@triton.jit
def _float_key(x):
    """Monotone int32 key of an fp32 value (-0.0 is read as +0.0; no NaN allowed)."""
    x = tl.where(x == 0.0, 0.0, x)
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def _key_to_float(key):
    key = key.to(tl.int32)
    bits = tl.where(key < 0, key ^ 0x7FFFFFFF, key)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _load_clean(row_ptr, offs, V, t):
    x = load_scaled(row_ptr, offs, V, t)
    return tl.where(x != x, float("-inf"), x)


@triton.jit
def _search(row_ptr, V, t, lo, hi, L, M, S, omp, kk, vstar, ndrop,
            MODE: tl.constexpr, BLOCK: tl.constexpr, NC: tl.constexpr):
    """Largest c in [lo, hi] with Q(c) true (Q monotone decreasing, Q(lo) true).

    Each round evaluates Q at NC candidates in one pass over the row.
    MODE_TOPK: Q(c) = #{x : key(x) >= c} >= kk
    MODE_TOPP: Q(c) = sum_{x >= L, key(x) < c} exp(x - M) / S <= omp
    MODE_IDX:  Q(c) = #{v < c : x[v] == vstar} <= ndrop
    """
    j = tl.arange(0, NC).to(tl.int64)
    while lo < hi:
        cands = lo + ((hi - lo) * (j + 1) + (NC - 1)) // NC
        cnt = tl.zeros([NC], dtype=tl.int32)
        mass = tl.zeros([NC], dtype=tl.float32)
        for start in range(0, V, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            valid = offs < V
            x = _load_clean(row_ptr, offs, V, t)
            if MODE == 0:
                key = _float_key(x).to(tl.int64)
                hit = valid[:, None] & (key[:, None] >= cands[None, :])
                cnt += tl.sum(hit.to(tl.int32), axis=0)
            elif MODE == 1:
                key = _float_key(x).to(tl.int64)
                e = tl.where(valid & (x >= L) & (x > float("-inf")), tl.exp(x - M), 0.0)
                hit = key[:, None] < cands[None, :]
                mass += tl.sum(tl.where(hit, e[:, None], 0.0), axis=0)
            else:
                hit = (valid & (x == vstar))[:, None] & (offs.to(tl.int64)[:, None] < cands[None, :])
                cnt += tl.sum(hit.to(tl.int32), axis=0)
        if MODE == 0:
            q = cnt >= kk
        elif MODE == 1:
            q = (mass / S) <= omp
        else:
            q = cnt <= ndrop
        new_lo = tl.max(tl.where(q, cands, lo), axis=0)
        new_hi = tl.min(tl.where(q, hi, cands - 1), axis=0)
        lo = new_lo
        hi = new_hi
    return lo


@triton.jit
def _filter_kernel(logits_ptr, stride, rows_ptr, temp_ptr, logminp_ptr, topk_ptr, topp_ptr,
                   cut_val_ptr, cut_idx_ptr, V,
                   BLOCK: tl.constexpr, NC: tl.constexpr):
    pid = tl.program_id(0)
    row = tl.load(rows_ptr + pid)
    t = tl.load(temp_ptr + row)
    logminp = tl.load(logminp_ptr + row)
    kk = tl.load(topk_ptr + row)
    p = tl.load(topp_ptr + row)
    row_ptr = logits_ptr + row.to(tl.int64) * stride

    # Pass 1: row maximum.
    M = tl.full((), float("-inf"), tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        M = tl.maximum(M, tl.max(_load_clean(row_ptr, offs, V, t), axis=0))
    # min-p (log(min_p) = -inf when off).
    L = M + logminp
    L = tl.where(L != L, float("-inf"), L)
    key_ninf = _float_key(tl.full((), float("-inf"), tl.float32)).to(tl.int64)
    key_M = _float_key(M).to(tl.int64)
    zero_f = tl.zeros((), tl.float32)
    zero_i = tl.zeros((), tl.int32)
    # top-k: the k-th largest value.
    if kk < V:
        c = _search(row_ptr, V, t, key_ninf, key_M, L, M, zero_f + 1.0, zero_f, kk, zero_f, zero_i,
                    0, BLOCK, NC)
        L = tl.maximum(L, _key_to_float(c))
    cut_val = L
    cut_idx = zero_i
    if (p < 1.0) & (M > float("-inf")):
        omp = 1.0 - p
        S = zero_f
        for start in range(0, V, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            x = _load_clean(row_ptr, offs, V, t)
            S += tl.sum(tl.where((x >= L) & (x > float("-inf")), tl.exp(x - M), 0.0), axis=0)
        c = _search(row_ptr, V, t, _float_key(L).to(tl.int64), key_M, L, M, S, omp, kk, zero_f, zero_i,
                    1, BLOCK, NC)
        vstar = _key_to_float(c)
        # Tie group at v*: its size and the mass strictly below it.
        m = zero_i
        below = zero_f
        for start in range(0, V, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            valid = offs < V
            x = _load_clean(row_ptr, offs, V, t)
            m += tl.sum((valid & (x == vstar)).to(tl.int32), axis=0)
            below += tl.sum(tl.where((x >= L) & (x < vstar) & (x > float("-inf")), tl.exp(x - M), 0.0), axis=0)
        cut_val = vstar
        if m > 1:
            pv = tl.exp(vstar - M) / S
            ndrop_f = tl.floor((omp - below / S) / pv)
            ndrop_f = tl.minimum(tl.maximum(ndrop_f, 0.0), (m - 1).to(tl.float32))
            ndrop = ndrop_f.to(tl.int32)
            if ndrop > 0:
                ci = _search(row_ptr, V, t, tl.zeros((), tl.int64), (V - 1) + tl.zeros((), tl.int64),
                             L, M, S, omp, kk, vstar, ndrop, 2, BLOCK, NC)
                cut_idx = ci.to(tl.int32)
    tl.store(cut_val_ptr + row, cut_val)
    tl.store(cut_idx_ptr + row, cut_idx)


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
    cut_val    float32  filter bound, written by :func:`launch_params` (-inf = keep all)
    cut_idx    int32    filter tie index, written by :func:`launch_params`
    filter_rows int32 [F] rows whose bound must be computed (min-p / top-k / top-p)
    num_filter_rows: int F (host int, fixed at prepare time)
    """

    temp_div: torch.Tensor
    log_min_p: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    cut_val: torch.Tensor
    cut_idx: torch.Tensor
    filter_rows: torch.Tensor
    num_filter_rows: int


def host_step(step: Step) -> Step:
    """The step with every small field on the CPU (logits and draft logits stay where they are)."""
    import dataclasses

    fields = {f.name: getattr(step, f.name) for f in dataclasses.fields(step)}
    for name, value in fields.items():
        if name not in ("logits", "draft_logits") and isinstance(value, torch.Tensor):
            fields[name] = value.cpu()
    return Step(**fields)


def prepare_params(step: Step, device: torch.device | str | None = None) -> RowParams:
    """Host work: expand each request's parameters to its rows (bonus row included).

    Greedy requests and requests that need no processing are left alone
    (temp_div 1, no filter), as the oracle does.
    """
    device = step.logits.device if device is None else device
    step = host_step(step)
    v = step.vocab_size
    rows = step.row_to_request()
    active = needs_processing(step)[rows]
    temp = step.temperature.float()[rows]
    min_p = step.min_p.float()[rows]
    top_p = step.top_p.float()[rows]
    k = normalized_top_k(step.top_k, v)[rows]
    temp_div = torch.where(active & (temp != 1), temp, torch.ones_like(temp))
    use_min_p = active & (min_p != 0)
    # log(min_p) with torch on the step's device, exactly as the oracle computes it.
    log_min_p = torch.where(use_min_p.to(device), torch.log(min_p.to(device)),
                            torch.full((rows.numel(),), float("-inf"), device=device))
    use_filter = active & (use_min_p | (k != v) | (top_p != 1))
    k = torch.where(active, k, torch.full_like(k, v))
    top_p = torch.where(active, top_p, torch.ones_like(top_p))
    n = rows.numel()
    filter_rows = torch.nonzero(use_filter).flatten().to(torch.int32)
    return RowParams(
        temp_div=temp_div.to(device), log_min_p=log_min_p.float(), top_k=k.to(torch.int32).to(device),
        top_p=top_p.to(device), cut_val=torch.full((n,), float("-inf"), dtype=torch.float32, device=device),
        cut_idx=torch.zeros(n, dtype=torch.int32, device=device), filter_rows=filter_rows.to(device),
        num_filter_rows=int(filter_rows.numel()))


def launch_params(logits: torch.Tensor, rp: RowParams) -> None:
    """Device work: write ``rp.cut_val`` / ``rp.cut_idx`` for the filtered rows (no host sync)."""
    if rp.num_filter_rows == 0:
        return
    _filter_kernel[(rp.num_filter_rows,)](
        logits, logits.stride(0), rp.filter_rows, rp.temp_div, rp.log_min_p, rp.top_k, rp.top_p,
        rp.cut_val, rp.cut_idx, logits.shape[1], BLOCK=FILTER_BLOCK, NC=SEARCH_WAYS, num_warps=8)


def apply_sampling_params(step: Step, block: int = 1024) -> torch.Tensor:
    """[N, V] float32 processed logits, the Triton twin of the oracle (for tests and tools).

    The samplers never call this: they apply the same bound on the fly.
    """
    logits = step.logits.contiguous()
    rp = prepare_params(step)
    launch_params(logits, rp)
    n, v = logits.shape
    out = torch.empty((n, v), dtype=torch.float32, device=logits.device)
    if n:
        _apply_kernel[(n, triton.cdiv(v, block))](logits, logits.stride(0), rp.temp_div, rp.cut_val, rp.cut_idx,
                                                  out, v, BLOCK=block)
    return out
