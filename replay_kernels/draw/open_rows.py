"""What sample-and-check's first check leaves open, settled in one cooperative launch.

From four requests a checked plain step (and a verify step's top-p draws) runs the launch sequence of
:mod:`replay_kernels.draw.sample_check`: first draw, first check, then (draw, check) rounds over the requests still
open and the finish loop. When few requests are expected open (:data:`OPEN_ROW_SHAPES`), the first check lists
every request it leaves open (its list 0) and :func:`_open_rows_kernel` settles them all in one launch: grid
(S, P), slot s taking entries s, s + S, ... one after another, its P programs drawing and checking each with
the one launch's loop (``one_launch.settle_row``: same spans, partial sums and verdicts as the check kernel),
behind a barrier counter a slot. Each redraw is floored by the first draw's partials (``one_launch.floor_of``):
only spans where a lane may reach the best partial still drawn pay the noise's logs; a redraw at the row's
largest value that one lane holds (the first draw's ``top[1]``) is that lane, kept without its check. Same tokens
as the rounds and the finish loop (tests/test_one_launch.py).

All S x P programs must be resident at once (they wait for each other): :func:`slots` launches as many slots as
the device holds (``one_launch.resident_programs``), and the launch is cooperative, so a grid the driver cannot
hold is refused, never left to hang (``launches.run_cooperative`` then runs the rounds). Under
``TRITON_INTERPRET=1`` P = 1. Bytes: each open row again from L2 or DRAM, V x 4 B a draw and a check; the first
draw's partials (8 B each) and their tokens' values (4 B) a draw in every program of the row; 12 B of partials a
span a round.
"""
from __future__ import annotations

import math
from typing import Sequence

import triton
import triton.language as tl

from . import one_launch
from .draw import MODE_NONE, MODE_RESIDUAL
from ..shared.launches import PDL_LATE, compiled_kernel, launch, pdl_wait
from .one_launch import OneLaunchScratch, interpreting, settle_row
from ..shared.partials import held_top, last_to_arrive
from ..shared.rng import murmur3_row_key

OPEN_ROW_SLOTS = 16  # slots allocated for the open-row launch, at most (it launches as many as are resident)
# The open-row launch's shape by how many requests the first check is expected to leave open (the sum of the
# checked requests' miss bounds, RowParams.check_miss): (most expected, programs a row, register cap). Each
# shape's limit is the slots an H200 holds at once (122 programs at 168 registers: 3 a SM, 3 slots; 61 at 128:
# 4 a SM, 8 slots; tools/kernel_resources.py); more expected than the last: the launched rounds. Measured (H200,
# CUDA graphs, SYNTHETIC top-p 0.9, 5 steps; 2026-12-03): against the rounds, R = 8
# (0.8 expected) 43.0 -> 39.0 µs with 122 programs (61: 47.0), R = 64 (6.4) 92.4 -> 84.8 with 61 (122: 97.3),
# R = 256 (25.6) 232.1 -> 248.0 with 61: there the rounds.
OPEN_ROW_SHAPES = ((3.0, 122, 168), (8.0, 61, 128))


@triton.jit
def _open_rows_kernel(logits_ptr, l_stride, mode_ptr, row_ptr, slot_ptr, dtok_ptr, temp_ptr, lbound_ptr,
                      cut_val_ptr, cut_idx_ptr, topk_ptr, topp_ptr, seed_ptr, pos_ptr, top_ptr, top_rows, tokens_ptr,
                      tok_stride, list_ptr, len_ptr, first_max_ptr, first_arg_ptr, FIRST_SPLITS, part_max_ptr,
                      part_arg_ptr, pall_ptr, plow_ptr, pcnt_ptr, sync_ptr, exits_ptr, V, DRAW_SPLITS, CHECK_SPLITS,
                      DRAW_BLOCK: tl.constexpr, CHECK_SPAN: tl.constexpr, CHECK_BLOCK: tl.constexpr,
                      CHUNK: tl.constexpr, PDL: tl.constexpr = False):
    """Grid (S, P): the requests a first check left open (``list[:len]``, sample_check's list 0), settled in
    one launch. Slot s takes entries ``s, s + S, ...`` one after the other, its P programs drawing and checking
    each (``one_launch.settle_row``) from the bound the check left (``cut_val / cut_idx``: ``(x_c, c + 1)``)
    and the row's largest value ``top[r]`` (``top`` [2, top_rows]: the first draw's; ``top[1, r]`` 1 where one
    lane holds it: a redraw at that value is kept without its check); a RESIDUAL request leaves its rejected draft
    ``dtok[r]`` out, as the finish loop does. Each redraw is pruned below the best first-draw partial still drawn
    (``one_launch.floor_of`` of ``first_max / first_arg`` [R, FIRST_SPLITS]). Program 0 of the slot writes the token to
    ``tokens[r, slot[r]]`` and sets ``mode[r]`` to NONE. The last program of a slot resets its barrier counter,
    the last of all the list's length (``exits[S]``)."""
    pdl_wait(PDL)
    s = tl.program_id(0)
    q = tl.program_id(1)
    S = tl.num_programs(0)
    P = tl.num_programs(1)
    arrivals = P
    for j in range(s, tl.load(len_ptr), S):
        r = tl.load(list_ptr + j)
        mode = tl.load(mode_ptr + r)
        row = tl.load(row_ptr + r)
        base = logits_ptr + row.to(tl.int64) * l_stride
        t = tl.load(temp_ptr + row)
        M = tl.load(top_ptr + r)
        skip = tl.load(dtok_ptr + r, mask=mode == MODE_RESIDUAL, other=-1)  # the rejected draft, left out
        held = held_top(top_ptr, top_rows, r, skip, base, t, M)
        # first = 0, M given: the top / held partials are never stored, so part_max / part_arg stand in for them
        token, arrivals = settle_row(base, V, mode, t, tl.load(lbound_ptr + row),
                                     tl.load(cut_val_ptr + row), tl.load(cut_idx_ptr + row),
                                     murmur3_row_key(tl.load(seed_ptr + r), tl.load(pos_ptr + row)), skip,
                                     tl.load(topk_ptr + row), tl.load(topp_ptr + row), mode != MODE_NONE,
                                     M, tl.zeros((), tl.int32), held.to(tl.int32),
                                     (first_max_ptr, first_arg_ptr, r * FIRST_SPLITS, FIRST_SPLITS), q, P, s,
                                     arrivals, sync_ptr, part_max_ptr, part_arg_ptr, part_max_ptr, part_arg_ptr,
                                     pall_ptr, plow_ptr, pcnt_ptr, DRAW_SPLITS, CHECK_SPLITS, DRAW_BLOCK, CHECK_SPAN,
                                     CHECK_BLOCK, CHUNK, False, True)
        if q == 0:
            tl.store(tokens_ptr + r * tok_stride + tl.load(slot_ptr + r), token.to(tl.int64))
            tl.store(mode_ptr + r, MODE_NONE)
    if last_to_arrive(exits_ptr, s, P):
        tl.store(sync_ptr + s, 0)
    if last_to_arrive(exits_ptr, S, S * P):
        tl.store(len_ptr, 0)


def shape(miss: Sequence[float], force: bool = False) -> tuple | None:
    """(programs a row, register cap) of the open-row launch for checked requests of miss bounds ``miss``
    (OPEN_ROW_SHAPES by their sum), or None: the launched rounds (``force``: the last shape instead)."""
    expected = math.fsum(miss)
    for limit, programs, maxnreg in OPEN_ROW_SHAPES:
        if expected <= limit:
            return programs, maxnreg
    return OPEN_ROW_SHAPES[-1][1:] if force else None


def allocate(num_requests: int, vocab: int, check_span: int, device, miss: Sequence[float],
             force: bool = False) -> OneLaunchScratch | None:
    """Scratch of :func:`launcher` for a step of ``num_requests`` requests whose checked requests miss
    their set with chances at most ``miss``: up to OPEN_ROW_SLOTS slots of the programs :func:`shape`
    gives (one program a slot under ``TRITON_INTERPRET=1``), or None (the launched rounds)."""
    programs_cap = shape(miss, force)
    if programs_cap is None:
        return None
    return OneLaunchScratch.allocate(min(max(num_requests, 1), OPEN_ROW_SLOTS), vocab, check_span, device,
                                     programs=1 if interpreting() else programs_cap[0], maxnreg=programs_cap[1])


def launcher(s: OneLaunchScratch, cs, first, logits, row, slot, dtok, params, seed, positions, tokens):
    """A callable that launches :func:`_open_rows_kernel` over the requests sample-and-check's first check left
    open (``cs``: its CheckScratch; the check appends them to list 0), or None when not one slot of P programs
    is resident at once (then the launched rounds run). ``first``: the first draw's DrawScratch (its partials
    floor the redraws; ``top[0]``: each row's largest processed value, ``top[1]``: whether one lane holds it);
    ``row`` / ``slot`` / ``dtok`` [R] int32: each request's draw row, token slot and rejected draft; ``tokens``
    [R, W] int64. The grid is (S, P) with S
    the most slots, up to the allocated ones, whose programs are all resident (cooperative: a grid the driver
    cannot hold at once is refused, not hung)."""
    args = (logits, logits.stride(0), cs.mode, row, slot, dtok, params.temp_div, params.cut_val, cs.cut_val,
            cs.cut_idx, params.top_k, params.top_p, seed, positions, first.top, first.top.shape[-1], tokens,
            tokens.stride(0), cs.open_rows[0], cs.open_len[0:1], first.part_max, first.part_arg, first.splits,
            s.part_max, s.part_arg, s.pall, s.plow, s.pcnt, s.sync, s.exits, logits.shape[1], s.draw_splits,
            s.check_splits)
    options = one_launch.launch_options(s)
    grid = (slots(s, args, options, logits.device), s.programs)
    if grid[0] == 0:
        return None
    return lambda: launch(_open_rows_kernel, grid, *args, trigger=PDL_LATE, **options)  # measured: KERNELS.md PDL


def slots(s: OneLaunchScratch, args: tuple, options: dict, device) -> int:
    """The open-row launch's slots: the allocated ones (``s.sync``), fewer when the device cannot hold that many
    slots of ``s.programs`` programs at once (``one_launch.resident_programs`` of the compiled kernel); 0 when not one
    slot fits, or off a CUDA device (one program a slot always fits: the interpreter)."""
    allocated = s.sync.numel()
    if s.programs == 1:
        return allocated
    if interpreting() or device.type != "cuda":
        return 0
    compiled = compiled_kernel(_open_rows_kernel, (allocated, s.programs), args, options, PDL_LATE)
    return min(allocated, one_launch.resident_programs(compiled, device) // s.programs)
