"""Sample-and-check of a small plain step in one launch: draw, check and redraw behind per-row barriers.

Same tokens as the launch sequence of :mod:`replay_kernels.draw.sample_check` (first draw, first check, the
launched rounds, the finish loop: five to nine launches, each with its own fixed cost). Here the ``P``
programs of a row, all resident at once, meet at a barrier instead of a kernel boundary. Measured on an H200
(CUDA graph, 2026-12-02): top-p 0.9 R = 1 13.2 -> 8.5 µs when the draw is the
row's peak held once (about 13.0 when the check runs), top-k 50 R = 1 17.8 -> 8.5, top-p 0.9 R = 3 18.1 ->
10.5. Program ``(r, q)`` of grid ``(R, P)``:

1. draws the spans ``q, q + P, ...`` of ``DRAW_BLOCK`` lanes of row r above its bound ``(cv, ci)`` (the
   prepared filter bound, then ``(x_c, c + 1)`` after a miss): each span's best ``(score, index)`` and, in the
   first round, its largest processed value; then waits until all P programs of the row have stored theirs;
2. reduces the partials (every program, the same order): the drawn token ``c`` (largest score, first
   index) and, in the first round, the row's largest processed value ``M``; a row without a check is done,
   and so is a first draw that is the only lane holding ``M`` (any top-p keeps the top of the order, any
   top-k > 0 its largest value: the first check kernel's rule, ``draw.held_once``, here from exact counts; in
   the open-row launch, any redraw at the given ``M`` that the first draw found one lane holding);
3. a check row: sums the check spans ``q, q + P, ...`` of ``CHECK_SPAN`` lanes (``sample_check._span_check``,
   at the same span, tile and warps as the split check kernel, so the same partial sums), waits for the row,
   and adds them as the check kernel does (``sample_check._verdict``): kept -> done, else the bound becomes
   ``(x_c, c + 1)`` and the row goes back to 1.

Every program of a row reaches the same verdicts from the same partials, so they leave the loop together;
program 0 writes the token, the count and the -1 pads, and the last program to leave resets the row's barrier
counter (a count of arrivals that only grows within a launch: barrier i waits for ``i * P``).

Residency: a program waits for the others of its row, so all ``R x P`` programs must be resident at once, or
the launch never ends. :func:`resident_programs` computes what the compiled kernel's registers, threads and
shared memory allow on the device; :func:`fits` says whether ``R x P`` does (the plain sampler takes this
kernel below ONE_LAUNCH_BELOW requests when it fits, the launch sequence otherwise). The launch is cooperative
(``launch_cooperative_grid``): a grid that cannot be resident anyway (a wrong count, SMs held by another
process) is refused by the driver, never started to hang, and the plain sampler then runs the sequence. Under
``TRITON_INTERPRET=1`` the programs run one after the other, so a barrier of P > 1 programs would wait
forever: there P = 1, one program a row that loops over every span (same spans, same partials, same tokens),
and a barrier of one program passes at once.

Bytes (R = 1, fp32): the row read once from DRAM by the draw (V x 4 B), each check and redraw again from L2;
12 B of partials a draw span and a check span a round.

The same loop (:func:`settle_row`) settles the requests the launch sequence's first check leaves open, from
four requests: :mod:`replay_kernels.draw.open_rows`; there each draw is floored by the first draw's partials
(:func:`floor_of`), and its programs do not keep their scores in registers.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .draw import MODE_GREEDY, MODE_NONE, MODE_TARGET
from ..shared.interpret import interpreting
from ..shared.launches import PDL_LATE, compiled_kernel, launch, pdl_wait
from ..filters.bound_rules import keep_mask
from ..filters.params import process_loaded
from ..shared.partials import block_argmax, block_max, last_to_arrive, token_value
from ..shared.rng import gumbel_upper_bound, murmur3_finish, murmur3_row_key, noised_score
from .sample_check import CHECK_BLOCK, CHECK_WARPS, _span_check, _verdict

ONE_LAUNCH_BELOW = 4  # requests; at R = 4 its 488 programs do not fit an H200 (396) anyway
DRAW_BLOCK = 2048     # lanes of a draw span: one tile a program, like the plain draw below 8 rows (draw.DRAW_SHAPES)
REDUCE_CHUNK = 128    # partials reduced per step
ONE_LAUNCH_MAXNREG = 168  # 3 programs an SM; compiles to 159 unspilled (uncapped: 210, 2 an SM; triton 3.6, sm_90)


@triton.jit
def row_barrier(sync_ptr, r, target):
    """Wait until ``target`` arrivals are counted for row ``r``, this program's included: its stores before the
    call are then visible to the row's programs, and theirs to it (``acq_rel`` arrival; volatile reads while
    waiting, then one ``acquire``)."""
    tl.debug_barrier()
    n = tl.atomic_add(sync_ptr + r, 1, sem="acq_rel", scope="gpu") + 1
    if n < target:  # each thread reads until it sees the count (the count only grows until every thread is out)
        seen = tl.load(sync_ptr + r, volatile=True)
        while seen < target:
            seen = tl.load(sync_ptr + r, volatile=True)
        tl.atomic_add(sync_ptr + r, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _span_raw(base, lo, V, BLOCK: tl.constexpr):
    """Lanes ``[lo, lo + BLOCK)`` of one row as stored (-inf from V on: a span at or past V loads nothing)."""
    offs = lo + tl.arange(0, BLOCK)
    return tl.load(base + offs, mask=offs < V, other=float("-inf"))


@triton.jit
def _span_scores(raw, lo, V, mode, t, L, ci, key, skip, thr, BLOCK: tl.constexpr):
    """(processed values, scores) of lanes ``[lo, lo + BLOCK)`` of one row (``raw``: :func:`_span_raw`), float32
    ``[BLOCK]``: GREEDY the raw values (NaN as -inf), which are their own scores; TARGET (or RESIDUAL) the values
    under the bound ``(L, ci)``, lane ``skip`` left out (a one-hot residual's rejected draft; -1: none), and their
    Gumbel-max scores. All -inf (no logs paid) for a span with nothing kept, and, given a floor ``thr`` > -inf, for
    a span where no ``x + gumbel_upper_bound(h)`` reaches it: none of its scores can."""
    offs = lo + tl.arange(0, BLOCK)
    valid = offs < V
    if mode == MODE_GREEDY:
        x = raw.to(tl.float32)
        x = tl.where(x != x, float("-inf"), x)
        score = x
    else:
        x = process_loaded(raw, offs, t, L, ci)
        if skip >= 0:
            x = tl.where(offs == skip, float("-inf"), x)
        score = tl.full((BLOCK,), float("-inf"), tl.float32)
        h = murmur3_finish(key, offs)
        reach = tl.max(x + gumbel_upper_bound(h), axis=0)  # -inf when nothing is kept (the bound is finite)
        if (reach > float("-inf")) & (reach >= thr):  # one reduction: anything kept, and the floor reached
            score = noised_score(x, h, valid)
    return x, score


@triton.jit
def _store_span(x, score, s, cv, ci, part_max_ptr, part_arg_ptr, part_top_ptr, part_held_ptr, base, first,
                BLOCK: tl.constexpr):
    """Store span ``s``'s partials at ``base + s``: over its lanes above the bound ``(cv, ci)``, the best score and
    the first index holding it ((-inf, 0) when none is above it) and, in the first round only (two reductions
    fewer in the others), the largest processed value and the lanes holding it (-inf, 0)."""
    offs = s * BLOCK + tl.arange(0, BLOCK)
    keep = keep_mask(x, offs, cv, ci)
    best, arg = tl.max(tl.where(keep, score, float("-inf")), axis=0, return_indices=True)
    tl.store(part_max_ptr + base + s, best)
    tl.store(part_arg_ptr + base + s, tl.where(best > float("-inf"), s * BLOCK + arg, 0))
    if first != 0:
        top = tl.max(tl.where(keep, x, float("-inf")), axis=0)
        held = tl.sum(tl.where(keep & (x == top), 1, 0), axis=0)
        tl.store(part_top_ptr + base + s, top)
        tl.store(part_held_ptr + base + s, tl.where(top > float("-inf"), held, 0))


@triton.jit
def _held_once(top_ptr, held_ptr, base, NB, M, CHUNK: tl.constexpr):
    """Whether exactly one lane of the row holds its largest processed value ``M``: the lanes holding each
    span's top, added over the spans whose top is ``M``."""
    n = tl.zeros((), tl.int32)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ok = offs < NB
        at_top = tl.load(top_ptr + base + offs, mask=ok, other=float("-inf"), cache_modifier=".cg") == M
        n += tl.sum(tl.where(at_top, tl.load(held_ptr + base + offs, mask=ok, other=0, cache_modifier=".cg"), 0),
                    axis=0)
    return n == 1


@triton.jit
def settle_row(base, V, mode, t, L, cv0, ci0, key, skip, kk, p, checked, M, first, held, floors, q, P, b, arrivals,
               sync_ptr, part_max_ptr, part_arg_ptr, part_top_ptr, part_held_ptr, pall_ptr, plow_ptr, pcnt_ptr,
               DRAW_SPLITS, CHECK_SPLITS, DRAW_BLOCK: tl.constexpr, CHECK_SPAN: tl.constexpr,
               CHECK_BLOCK: tl.constexpr, CHUNK: tl.constexpr, ONE_SPAN: tl.constexpr, FLOOR: tl.constexpr):
    """Steps 1-3 of the module docstring for one row, by program ``q`` of its ``P``, until its token is kept:
    returns (token, arrivals). ``L``: the prepared bound's value (min-p only on a check row: the sums keep
    x >= L); ``(cv0, ci0)``: the row's bound on entry (the prepared one, or after a miss ``(x_c, c + 1)``);
    ``first`` 1: the first round also reduces the row's largest value ``M`` (else ``M`` is given); ``held`` 1 (with
    ``M`` given): one lane of the row holds ``M`` (the first draw's ``top[1]``, and a left-out draft below ``M``), so
    a draw whose value is ``M`` is that lane, the top of the order, kept without its check; ``floors``
    (``FLOOR``; not with ``ONE_SPAN``, whose scores are kept from one unpruned draw): the row's partials of an
    earlier draw, so each draw scores only the spans where a lane may reach the best of them still drawn
    (:func:`floor_of`, computed after the program's first span is loaded: its loads in flight with the span's); its
    best is exact when it reaches that floor, and the draw is made again unpruned when it does not (a floor that was
    not one: never a wrong token); ``b``: the barrier counter and the partials' slot
    (``b x DRAW_SPLITS`` / ``b x CHECK_SPLITS``); ``arrivals``: the count the next barrier waits for."""
    tl.static_assert(not (ONE_SPAN and FLOOR), "a floor prunes each draw; ONE_SPAN keeps one unpruned draw's scores")
    thr = tl.full((), float("-inf"), tl.float32)
    refloor = tl.zeros((), tl.int32)  # FLOOR: the next draw's floor is still to compute
    if FLOOR:
        refloor += 1
    if ONE_SPAN:  # scored once: later rounds are masked maxima of these scores
        x1, score1 = _span_scores(_span_raw(base, q * DRAW_BLOCK, V, DRAW_BLOCK), q * DRAW_BLOCK, V, mode, t, cv0,
                                  ci0, key, skip, thr, DRAW_BLOCK)
    cv = cv0
    ci = ci0
    token = tl.zeros((), tl.int32)
    done = tl.zeros((), tl.int32)
    draws = tl.zeros((), tl.int32)
    while (done == 0) & (draws <= V + 1):  # a miss drops a token at least, and one draw is made again at most:
        draws += 1  # V + 2 draws bound the loop whatever a verdict says (a NaN one included)
        if ONE_SPAN:
            _store_span(x1, score1, q, cv, ci, part_max_ptr, part_arg_ptr, part_top_ptr, part_held_ptr,
                        b * DRAW_SPLITS, first, DRAW_BLOCK)
        else:
            for s in range(q, DRAW_SPLITS, P):
                raw = _span_raw(base, s * DRAW_BLOCK, V, DRAW_BLOCK)
                if FLOOR:
                    if refloor != 0:  # (the first span) the floor's loads in flight with the span's
                        thr = floor_of(floors, base, t, cv, ci, skip, CHUNK)
                        refloor = 0
                x, score = _span_scores(raw, s * DRAW_BLOCK, V, mode, t, cv0, ci0, key, skip, thr, DRAW_BLOCK)
                _store_span(x, score, s, cv, ci, part_max_ptr, part_arg_ptr, part_top_ptr, part_held_ptr,
                            b * DRAW_SPLITS, first, DRAW_BLOCK)
        row_barrier(sync_ptr, b, arrivals)
        arrivals += P
        best, token = block_argmax(part_max_ptr, part_arg_ptr, b * DRAW_SPLITS, DRAW_SPLITS, CHUNK)
        done = 1
        if best < thr:  # nothing reached the floor, so pruned lanes might have won: the draw again, unpruned
            done = 0
            thr = float("-inf")
            row_barrier(sync_ptr, b, arrivals)  # every program has read the partials the next draw overwrites
            arrivals += P
        elif checked:
            xc = token_value(base, token, t)
            done = 0
            if first != 0:  # the row's largest processed value under the prepared bound; a first draw that
                # is its only lane is kept by any top-p and any top-k > 0 (the first check kernel's rule)
                M = block_max(part_top_ptr, b * DRAW_SPLITS, DRAW_SPLITS, CHUNK)
                first = 0
                if (xc == M) & (kk > 0):
                    done = _held_once(part_top_ptr, part_held_ptr, b * DRAW_SPLITS, DRAW_SPLITS, M,
                                      CHUNK).to(tl.int32)
            elif (held != 0) & (xc == M) & (kk > 0):  # the one lane at the given M: the same rule, counted before
                done = 1
            if done == 0:
                for s in range(q, CHECK_SPLITS, P):
                    s_all, s_low, cnt = _span_check(base, s * CHECK_SPAN,
                                                    tl.minimum(s * CHECK_SPAN + CHECK_SPAN, V), V, t, L, xc,
                                                    token, kk, p, M, CHECK_BLOCK)
                    tl.store(pall_ptr + b * CHECK_SPLITS + s, s_all)
                    tl.store(plow_ptr + b * CHECK_SPLITS + s, s_low)
                    tl.store(pcnt_ptr + b * CHECK_SPLITS + s, cnt)
                row_barrier(sync_ptr, b, arrivals)
                arrivals += P
                done = _verdict(pall_ptr, plow_ptr, pcnt_ptr, b * CHECK_SPLITS, CHECK_SPLITS, xc, kk,
                                p).to(tl.int32)
                cv = xc
                ci = token + 1
                if FLOOR:  # a miss: the next draw floored anew under its bound (with its first span's load)
                    refloor = 1
    return token, arrivals


@triton.jit
def floor_of(floors, row_base, t, cv, ci, skip, CHUNK: tl.constexpr):
    """The best of a row's first-draw partials ``floors`` = (max_ptr, arg_ptr, base, NB): NB (score, token) pairs
    at ``base`` whose token a redraw under the bound ``(cv, ci)`` still draws (not the left-out draft ``skip``);
    -inf when none is. The redraw scores that token the same, so its best reaches this floor (``settle_row``
    checks that it does). A partial is the best its program scored, so the floor is mostly near the redraw's own
    best: few spans then pay the logs."""
    max_ptr, arg_ptr, base, NB = floors
    floor = tl.full((), float("-inf"), tl.float32)
    for start in range(0, NB, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        m = tl.load(max_ptr + base + offs, mask=offs < NB, other=float("-inf"))
        a = tl.load(arg_ptr + base + offs, mask=offs < NB, other=0)
        x = process_loaded(tl.load(row_base + a, mask=m > float("-inf"), other=float("-inf")), a, t, cv, ci)
        floor = tl.maximum(floor, tl.max(tl.where((x > float("-inf")) & (a != skip), m, float("-inf")), axis=0))
    return floor


@triton.jit
def _one_launch_kernel(logits_ptr, l_stride, mode_ptr, row_ptr, temp_ptr, cut_val_ptr, cut_idx_ptr, check_ptr,
                       topk_ptr, topp_ptr, seed_ptr, pos_ptr, count_src_ptr, counts_ptr, tokens_ptr, tok_stride,
                       part_max_ptr, part_arg_ptr, part_top_ptr, part_held_ptr, pall_ptr, plow_ptr, pcnt_ptr,
                       sync_ptr, exits_ptr, V, W, DRAW_SPLITS, CHECK_SPLITS, DRAW_BLOCK: tl.constexpr,
                       CHECK_SPAN: tl.constexpr, CHECK_BLOCK: tl.constexpr, CHUNK: tl.constexpr,
                       ONE_SPAN: tl.constexpr, PDL: tl.constexpr = False):
    """Grid (R, P): the whole sample-and-check of request r by its P programs (module docstring). ``ONE_SPAN``
    (P = DRAW_SPLITS): each program's one draw span is scored once and kept in registers, so a redraw is a
    masked maximum; else each round scores its spans again (the same scores)."""
    pdl_wait(PDL)
    r = tl.program_id(0)
    q = tl.program_id(1)
    P = tl.num_programs(1)
    mode = tl.load(mode_ptr + r)
    token = tl.zeros((), tl.int32)
    if mode != MODE_NONE:
        row = tl.load(row_ptr + r)
        checked = (mode == MODE_TARGET) & (tl.load(check_ptr + row) != 0)
        L = tl.load(cut_val_ptr + row)  # the prepared bound: min-p only on a check row (sums keep x >= L)
        token, _ = settle_row(logits_ptr + row.to(tl.int64) * l_stride, V, mode, tl.load(temp_ptr + row), L, L,
                              tl.load(cut_idx_ptr + row),
                              murmur3_row_key(tl.load(seed_ptr + r), tl.load(pos_ptr + row)),
                              tl.full((), -1, tl.int32), tl.load(topk_ptr + row), tl.load(topp_ptr + row), checked,
                              tl.full((), float("-inf"), tl.float32), tl.full((), 1, tl.int32),
                              tl.zeros((), tl.int32), (part_max_ptr, part_arg_ptr, 0, 0), q, P, r, P,
                              sync_ptr, part_max_ptr, part_arg_ptr, part_top_ptr, part_held_ptr, pall_ptr, plow_ptr,
                              pcnt_ptr, DRAW_SPLITS, CHECK_SPLITS, DRAW_BLOCK, CHECK_SPAN, CHECK_BLOCK, CHUNK,
                              ONE_SPAN, False)
        if last_to_arrive(exits_ptr, r, P):
            tl.store(sync_ptr + r, 0)  # every program of the row has left its last barrier
    if q == 0:
        count = tl.load(count_src_ptr + r)
        if mode != MODE_NONE:
            tl.store(tokens_ptr + r * tok_stride, token.to(tl.int64))
        for j in range(count, W):
            tl.store(tokens_ptr + r * tok_stride + j, -1)
        tl.store(counts_ptr + r, count)


# ---------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------


@dataclass
class OneLaunchScratch:
    """Per-launch state of :func:`_one_launch_kernel` for R requests: draw partials part_max / part_arg /
    part_top / part_held [R, draw_splits] float32 / int32 / float32 / int32 (a span's best score, its index, its
    largest processed value, the lanes holding that value), check partials pall / plow / pcnt [R, check_splits]
    float32 / float32 / int32, barrier counters ``sync`` [R] and exit counters ``exits`` [R + 1] int32 (zero
    between launches; the last counts every program of the open-row launch); ``programs``: P, the grid's second
    dimension; ``maxnreg``: the kernel's register cap. The open-row launch uses it with R = its slots
    (:func:`replay_kernels.draw.open_rows.allocate`)."""

    part_max: torch.Tensor
    part_arg: torch.Tensor
    part_top: torch.Tensor
    part_held: torch.Tensor
    pall: torch.Tensor
    plow: torch.Tensor
    pcnt: torch.Tensor
    sync: torch.Tensor
    exits: torch.Tensor
    draw_block: int
    draw_splits: int
    check_span: int
    check_splits: int
    programs: int
    maxnreg: int = ONE_LAUNCH_MAXNREG

    @classmethod
    def allocate(cls, num_requests: int, vocab: int, check_span: int, device, draw_block: int | None = None,
                 programs: int | None = None, maxnreg: int = ONE_LAUNCH_MAXNREG) -> "OneLaunchScratch":
        """``programs`` None: one program a draw span (P = draw splits), 1 under ``TRITON_INTERPRET=1``;
        ``draw_block`` None: DRAW_BLOCK; ``maxnreg``: the register cap of the launch that uses it."""
        r = max(num_requests, 1)
        draw_block = draw_block or DRAW_BLOCK
        draw_splits = max(1, triton.cdiv(vocab, draw_block))
        check_splits = max(1, triton.cdiv(vocab, check_span))
        if programs is None:
            programs = 1 if interpreting() else draw_splits
        f32 = dict(dtype=torch.float32, device=device)
        i32 = dict(dtype=torch.int32, device=device)
        return cls(part_max=torch.empty((r, draw_splits), **f32), part_arg=torch.empty((r, draw_splits), **i32),
                   part_top=torch.empty((r, draw_splits), **f32), part_held=torch.empty((r, draw_splits), **i32),
                   pall=torch.empty((r, check_splits), **f32),
                   plow=torch.empty((r, check_splits), **f32), pcnt=torch.empty((r, check_splits), **i32),
                   sync=torch.zeros(r, **i32), exits=torch.zeros(r + 1, **i32), draw_block=draw_block,
                   draw_splits=draw_splits, check_span=check_span, check_splits=check_splits,
                   programs=max(1, min(programs, draw_splits)), maxnreg=maxnreg)


def _args(s: OneLaunchScratch, logits, mode, row, params, seed, positions, counts_init, counts, tokens) -> tuple:
    return (logits, logits.stride(0), mode, row, params.temp_div, params.cut_val, params.cut_idx, params.check,
            params.top_k, params.top_p, seed, positions, counts_init, counts, tokens, tokens.stride(0), s.part_max,
            s.part_arg, s.part_top, s.part_held, s.pall, s.plow, s.pcnt, s.sync, s.exits, logits.shape[1],
            tokens.shape[1], s.draw_splits, s.check_splits)


def launch_options(s: OneLaunchScratch) -> dict:
    """Constexprs and launch options the one launch and the open-row launch share for the scratch ``s``."""
    return dict(DRAW_BLOCK=s.draw_block, CHECK_SPAN=s.check_span, CHECK_BLOCK=min(s.check_span, CHECK_BLOCK),
                CHUNK=REDUCE_CHUNK, num_warps=CHECK_WARPS, maxnreg=s.maxnreg, launch_cooperative_grid=True)


def _one_launch_options(s: OneLaunchScratch) -> dict:
    """:func:`launch_options` and ``ONE_SPAN`` (P = draw splits: a program's one span scored once, kept in
    registers). The open-row launch never keeps them: its floored redraws cost less than the registers."""
    return dict(launch_options(s), ONE_SPAN=s.programs == s.draw_splits)


def warps_by_registers(regs: int, sm_registers: int = 65536) -> int:
    """Warps of ``regs`` registers a thread an SM's registers hold, as an H100 / H200 allocates them: four
    partitions of a quarter of the SM's registers, a warp taking ``ceil(regs / 8) * 8 * 32`` of one (never more
    than the hardware holds; tools/kernel_resources.py uses the same count)."""
    return 4 * (sm_registers // 4 // (triton.cdiv(max(regs, 1), 8) * 8 * 32))


def resident_programs(compiled, device) -> int:
    """How many programs of ``compiled`` (a Triton compiled kernel) the device holds at once: per SM the fewest
    that its registers (:func:`warps_by_registers`), threads, shared memory (1 KiB reserved a block) and 32
    blocks allow, times the SMs."""
    props = torch.cuda.get_device_properties(device)
    compiled._init_handles()  # loads the module (once); sets n_regs
    warps = compiled.metadata.num_warps
    by_regs = warps_by_registers(compiled.n_regs, props.regs_per_multiprocessor) // warps
    by_threads = props.max_threads_per_multi_processor // (32 * warps)
    by_smem = props.shared_memory_per_multiprocessor // (compiled.metadata.shared + 1024)
    return props.multi_processor_count * min(by_regs, by_threads, by_smem, 32)


def fits(s: OneLaunchScratch, logits, mode, row, params, seed, positions, counts_init, counts, tokens) -> bool:
    """Whether every program of the launch is resident at once (always under the interpreter: P = 1)."""
    if s.programs == 1:
        return True
    if interpreting() or logits.device.type != "cuda":
        return False
    grid = (mode.numel(), s.programs)
    compiled = compiled_kernel(_one_launch_kernel, grid, _args(s, logits, mode, row, params, seed, positions,
                                                               counts_init, counts, tokens), _one_launch_options(s),
                               PDL_LATE)  # the kernel launch_one launches
    return mode.numel() * s.programs <= resident_programs(compiled, logits.device)


def launch_one(s: OneLaunchScratch, logits, mode, row, params, seed, positions, counts_init, counts, tokens) -> None:
    """The one launch: grid (R, P). ``mode`` / ``row`` [R] int32 (draw mode, logits row; output slot 0),
    ``seed`` [R] int64, ``positions`` [N] int64, ``counts_init`` / ``counts`` [R] int32, ``tokens`` [R, W] int64."""
    launch(_one_launch_kernel, (mode.numel(), s.programs),
           *_args(s, logits, mode, row, params, seed, positions, counts_init, counts, tokens),
           trigger=PDL_LATE, **_one_launch_options(s))  # its sequence's last launch (plain.PlainSampler)
