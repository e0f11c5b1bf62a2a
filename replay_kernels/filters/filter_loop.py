"""The filter passes of a few listed rows in one cooperative launch: the verify fallback's exact top-p cuts.

:func:`replay_kernels.filters.filters.launch_filters` runs a search as a sequence of launches: the stats pass, the
settle / setup steps, the search rounds (8 for top-p, a tie pass, up to 5 for the cut index): 19 launches for
the verify fallback. In a CUDA graph every one of them runs on every step, each about 1 µs even when the
fallback listed no row (most steps: a test the top-p bounds leave undecided is rare), about 23 µs a step on an
H200 (measured 2026-12-03). Here one launch of grid (G, P) does the same: slot g takes the
listed rows g, g + G, ...; its P programs run each pass over the spans ``q, q + P, ...`` with the passes'
own per-span functions (``filters.stats_span``, ``mass_span``, ``round_span``: the same partials, added in the same
order by the same settle code, so the same cuts bit for bit), meet at a barrier (``one_launch.row_barrier``)
where the sequence has a kernel boundary, and program 0 of the slot runs each settle / setup step
(``filters.step_row``) between two barriers. A step with no listed row is one launch whose programs read the
count and exit.

Residency: a program waits for the other programs of its slot, so all G x P programs must be resident at once:
:func:`loop_grid` gives each slot fewer programs (each taking more spans) when the device cannot hold them all
(``one_launch.resident_programs``), and the launch is cooperative, so a grid the driver cannot hold is refused,
never left to hang (``launches.run_cooperative`` then records the launch sequence instead). Under
``TRITON_INTERPRET=1`` P = 1 (one program a slot loops over every span; a barrier of one program passes at once).
Bytes: those of the sequence (each pass reads the listed rows' spans once); 8 B of counters a slot.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .bound_rules import KEY_ROUNDS, WAYS
from .filters import (ROUND_BLOCK, ROUND_WARPS, SEARCH_IDX, SEARCH_TOPK, SEARCH_TOPP, STEP_AFTER_STATS,
                      STEP_AFTER_TOPK, STEP_AFTER_TOPP, STEP_BEFORE_IDX, STEP_BEFORE_TOPP, STEP_FINAL, FilterScratch,
                      mass_span, round_span, stats_span, step_row)
from ..shared.interpret import interpreting
from ..draw import one_launch
from ..shared.launches import compiled_kernel, launch, pdl_wait
from ..draw.one_launch import row_barrier
from ..shared.partials import last_to_arrive

LOOP_MAXNREG = None  # register cap of the loop (None: uncapped, 255 registers and 40 B of stack on sm_90, triton 3.6)


@triton.jit
def _search(rows, f, q, P, g, arrivals, sync_ptr, F, V, ROUNDS, SPLITS: tl.constexpr, MODE: tl.constexpr,
            SPAN: tl.constexpr, BLOCK: tl.constexpr, NC: tl.constexpr):
    """``ROUNDS`` search rounds of row ``f`` by program ``q`` of its slot's ``P``, a barrier after each; round r
    reads interval buffer r % 2 and partials (r + 1) % 2 and writes the others (``launch_filters``' parity).
    ``rows``: the logits, the row lists and parameters, the intervals and partials (``round_span``'s pointers).
    Returns the barrier count reached."""
    (logits_ptr, stride, rows_ptr, temp_ptr, topk_ptr, bound_ptr, m_ptr, s_ptr, omp_ptr, vstar_ptr, ndrop_ptr, lo_ptr,
     hi_ptr, base_ptr, cnt_ptr, mass_ptr) = rows
    part = F * SPLITS * NC
    for r in range(ROUNDS):
        a = r % 2
        b = 1 - a
        for s in range(q, SPLITS, P):
            round_span(logits_ptr, stride, rows_ptr, temp_ptr, topk_ptr, bound_ptr, m_ptr, s_ptr, omp_ptr, vstar_ptr,
                       ndrop_ptr, lo_ptr + a * F, hi_ptr + a * F, base_ptr + a * F, lo_ptr + b * F, hi_ptr + b * F,
                       base_ptr + b * F, cnt_ptr + b * part, mass_ptr + b * part, cnt_ptr + a * part,
                       mass_ptr + a * part, f, s, r == 0, V, SPLITS, MODE, SPAN, BLOCK, NC)
        arrivals += P
        row_barrier(sync_ptr, g, arrivals)
    return arrivals


@triton.jit
def _step(scratch, f, q, P, g, arrivals, sync_ptr, F, V, buf_in, part_in, buf_out, SPLITS: tl.constexpr,
          STEP: tl.constexpr, HAS_BOUND_PASS: tl.constexpr, HAS_TOPP: tl.constexpr, NC: tl.constexpr):
    """``filters.step_row`` by program 0 of the slot (buffers by parity as ``launch_filters``' ``step``), then a
    barrier. ``scratch``: the kernel's row lists, parameters, partials, intervals and cuts (``step_row``'s
    pointers, in its order). Returns the barrier count reached."""
    (rows_ptr, logminp_ptr, topk_ptr, topp_ptr, pmax_ptr, psum_ptr, pcnt_ptr, bound_ptr, sum_bound_ptr, m_ptr, s0_ptr,
     s_ptr, omp_ptr, vstar_ptr, ndrop_ptr, lo_ptr, hi_ptr, base_ptr, cnt_ptr, mass_ptr, cut_val_ptr,
     cut_idx_ptr) = scratch
    if q == 0:
        part = F * SPLITS * NC
        step_row(rows_ptr, logminp_ptr, topk_ptr, topp_ptr, pmax_ptr, psum_ptr, pcnt_ptr, bound_ptr, sum_bound_ptr,
                 m_ptr, s0_ptr, s_ptr, omp_ptr, vstar_ptr, ndrop_ptr, lo_ptr + buf_in * F, hi_ptr + buf_in * F,
                 base_ptr + buf_in * F, cnt_ptr + part_in * part, mass_ptr + part_in * part, lo_ptr + buf_out * F,
                 hi_ptr + buf_out * F, base_ptr + buf_out * F, cut_val_ptr, cut_idx_ptr, f, V, SPLITS, STEP,
                 HAS_BOUND_PASS, HAS_TOPP, NC)
    arrivals += P
    row_barrier(sync_ptr, g, arrivals)
    return arrivals


@triton.jit
def _filter_loop_kernel(logits_ptr, stride, rows_ptr, count_ptr, temp_ptr, logminp_ptr, topk_ptr, topp_ptr, pmax_ptr,
                        psum_ptr, pcnt_ptr, bound_ptr, sum_bound_ptr, m_ptr, s0_ptr, s_ptr, omp_ptr, vstar_ptr,
                        ndrop_ptr, lo_ptr, hi_ptr, base_ptr, cnt_ptr, mass_ptr, cut_val_ptr, cut_idx_ptr, sync_ptr,
                        exits_ptr, F, V, key_rounds, idx_rounds, SPLITS: tl.constexpr, HAS_TOPK: tl.constexpr,
                        HAS_TOPP: tl.constexpr, HAS_BOUND: tl.constexpr, SPAN: tl.constexpr, BLOCK: tl.constexpr,
                        NC: tl.constexpr, PDL: tl.constexpr = False):
    """Grid (G, P): the passes of ``filters.launch_filters`` over the listed rows ``rows[:count]`` (module
    docstring), slot g taking rows g, g + G, ...; the last program of a slot to leave resets its barrier counter."""
    pdl_wait(PDL)
    g = tl.program_id(0)
    q = tl.program_id(1)
    G = tl.num_programs(0)
    P = tl.num_programs(1)
    arrivals = tl.zeros((), tl.int32)
    scratch = (rows_ptr, logminp_ptr, topk_ptr, topp_ptr, pmax_ptr, psum_ptr, pcnt_ptr, bound_ptr, sum_bound_ptr, m_ptr,
               s0_ptr, s_ptr, omp_ptr, vstar_ptr, ndrop_ptr, lo_ptr, hi_ptr, base_ptr, cnt_ptr, mass_ptr, cut_val_ptr,
               cut_idx_ptr)
    search = (logits_ptr, stride, rows_ptr, temp_ptr, topk_ptr, bound_ptr, m_ptr, s_ptr, omp_ptr, vstar_ptr, ndrop_ptr,
              lo_ptr, hi_ptr, base_ptr, cnt_ptr, mass_ptr)
    for f in range(g, tl.load(count_ptr), G):
        for s in range(q, SPLITS, P):
            stats_span(logits_ptr, stride, rows_ptr, temp_ptr, pmax_ptr, psum_ptr, f, s, V, SPLITS, SPAN)
        arrivals += P
        row_barrier(sync_ptr, g, arrivals)
        arrivals = _step(scratch, f, q, P, g, arrivals, sync_ptr, F, V, 1, 1, 0, SPLITS, STEP_AFTER_STATS, HAS_BOUND,
                         HAS_TOPP, NC)
        if HAS_TOPK:
            arrivals = _search(search, f, q, P, g, arrivals, sync_ptr, F, V, key_rounds, SPLITS, SEARCH_TOPK, SPAN,
                               BLOCK, NC)
            arrivals = _step(scratch, f, q, P, g, arrivals, sync_ptr, F, V, key_rounds % 2, (key_rounds - 1) % 2, 1,
                             SPLITS, STEP_AFTER_TOPK, HAS_BOUND, HAS_TOPP, NC)
        if HAS_TOPP:
            if HAS_BOUND:
                for s in range(q, SPLITS, P):
                    mass_span(logits_ptr, stride, rows_ptr, temp_ptr, sum_bound_ptr, m_ptr, psum_ptr, pcnt_ptr,
                              vstar_ptr, f, s, V, SPLITS, False, SPAN)
                arrivals += P
                row_barrier(sync_ptr, g, arrivals)
            arrivals = _step(scratch, f, q, P, g, arrivals, sync_ptr, F, V, 1, 1, 0, SPLITS, STEP_BEFORE_TOPP,
                             HAS_BOUND, HAS_TOPP, NC)
            arrivals = _search(search, f, q, P, g, arrivals, sync_ptr, F, V, key_rounds, SPLITS, SEARCH_TOPP, SPAN,
                               BLOCK, NC)
            arrivals = _step(scratch, f, q, P, g, arrivals, sync_ptr, F, V, key_rounds % 2, (key_rounds - 1) % 2, 1,
                             SPLITS, STEP_AFTER_TOPP, HAS_BOUND, HAS_TOPP, NC)
            for s in range(q, SPLITS, P):
                mass_span(logits_ptr, stride, rows_ptr, temp_ptr, sum_bound_ptr, m_ptr, psum_ptr, pcnt_ptr, vstar_ptr,
                          f, s, V, SPLITS, True, SPAN)
            arrivals += P
            row_barrier(sync_ptr, g, arrivals)
            arrivals = _step(scratch, f, q, P, g, arrivals, sync_ptr, F, V, 1, 1, 0, SPLITS, STEP_BEFORE_IDX, HAS_BOUND,
                             HAS_TOPP, NC)
            arrivals = _search(search, f, q, P, g, arrivals, sync_ptr, F, V, idx_rounds, SPLITS, SEARCH_IDX, SPAN,
                               BLOCK, NC)
            arrivals = _step(scratch, f, q, P, g, arrivals, sync_ptr, F, V, idx_rounds % 2, (idx_rounds - 1) % 2, 1,
                             SPLITS, STEP_FINAL, HAS_BOUND, HAS_TOPP, NC)
        else:
            arrivals = _step(scratch, f, q, P, g, arrivals, sync_ptr, F, V, 0, 0, 1, SPLITS, STEP_FINAL, HAS_BOUND,
                             HAS_TOPP, NC)
    if arrivals > 0:  # every program of a slot serves the same rows: all of them or none reach here with arrivals
        if last_to_arrive(exits_ptr, g, P):
            tl.store(sync_ptr + g, 0)


@dataclass
class FilterLoop:
    """Counters of :func:`_filter_loop_kernel`: ``sync`` / ``exits`` [slots] int32 (a slot's barrier count and its
    programs' exits; zero between launches); ``programs``: P, the programs a slot (the filter splits; 1 under
    ``TRITON_INTERPRET=1``)."""

    sync: torch.Tensor
    exits: torch.Tensor
    programs: int

    @classmethod
    def allocate(cls, fs: FilterScratch, device) -> "FilterLoop":
        """For the rows and the programs along rows of ``fs`` (its ``grid_rows`` slots at most)."""
        i32 = dict(dtype=torch.int32, device=device)
        return cls(sync=torch.zeros(fs.grid_rows, **i32), exits=torch.zeros(fs.grid_rows, **i32),
                   programs=1 if interpreting() else fs.splits)


def launcher(loop: FilterLoop, logits: torch.Tensor, rows: torch.Tensor, temp_div: torch.Tensor,
             log_min_p: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, cut_val: torch.Tensor,
             cut_idx: torch.Tensor, fs: FilterScratch):
    """A callable that launches the passes of ``launch_filters`` (the same arguments) as :func:`_filter_loop_kernel`,
    or None when not one slot of P programs is resident at once (then the launch sequence runs)."""
    a, b = fs.f32, fs.i32
    args = (logits, logits.stride(0), rows, fs.count, temp_div, log_min_p, top_k, top_p, a["pmax"], a["psum"],
            b["pcnt"], a["bound"], a["sum_bound"], a["m"], a["s0"], a["s"], a["omp"], a["vstar"], b["ndrop"], fs.lo,
            fs.hi, fs.base, fs.cnt, fs.mass, cut_val, cut_idx, loop.sync, loop.exits, fs.lo.shape[1],
            logits.shape[1], KEY_ROUNDS, fs.idx_rounds)
    options = dict(SPLITS=fs.splits, HAS_TOPK=fs.any_topk, HAS_TOPP=fs.any_topp, HAS_BOUND=fs.any_bound,
                   SPAN=fs.span, BLOCK=min(fs.span, ROUND_BLOCK), NC=WAYS, num_warps=ROUND_WARPS,
                   launch_cooperative_grid=True)
    if LOOP_MAXNREG is not None:
        options["maxnreg"] = LOOP_MAXNREG
    grid = loop_grid(loop, args, options, logits.device)
    if grid is None:
        return None
    return lambda: launch(_filter_loop_kernel, grid, *args, **options)


def loop_grid(loop: FilterLoop, args: tuple, options: dict, device) -> tuple[int, int] | None:
    """The loop's grid (slots, programs a slot): every allocated slot (``loop.sync``), each of ``loop.programs``
    programs, or of fewer (each taking more spans) when the device cannot hold them all at once
    (``one_launch.resident_programs`` of the compiled kernel: 255 registers, one program an SM on an H200, so
    8 slots of 16 programs instead of 4 slots of 31, which left a fifth listed row to wait for a slot); None off a
    CUDA device (one program a slot always fits: the interpreter)."""
    allocated = loop.sync.numel()
    if loop.programs == 1:
        return allocated, 1
    if interpreting() or device.type != "cuda":
        return None
    room = one_launch.resident_programs(compiled_kernel(_filter_loop_kernel, (allocated, loop.programs), args,
                                                        options), device)
    if room < allocated:
        return (room, 1) if room else None
    return allocated, min(loop.programs, room // allocated)
