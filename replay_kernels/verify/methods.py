"""``stochastic`` on a step whose requests name a verification method other than the standard one (block, FLy)
or whose RNG contract is ``mrv2-fp64``: the kernels of method_rows.py and method_walk.py, then one draw.

A batch that needs neither never comes here (the sampler's own state and launches: stochastic.py). Here every
request of the batch is verified under its own method (standard requests token-wise, as the oracle's
``methods.verify_with``), greedy and stochastic mixed, k = 0 included (its bonus draw alone). The launches, in
order (R requests, N rows, V vocabulary, P = max k, NB = cdiv(V, STATS_SPAN)):

1. the filter passes of the requests' own min-p / top-k / top-p (``filters.params.launch_params``; exact cuts, no
   sample-and-check);
2. ``method_rows._row_stats_kernel`` grid (R, NB, P): every verify row read once (and its draft row);
3. ``method_rows._row_scalars_kernel`` grid (R,): the per-row scalars (a few loads a row);
4. block requests with draft logits: ``method_rows._block_mass_kernel`` grid (R, NB, P): rows after the first
   of each such request read again with their draft rows;
5. FLy requests that can defer: ``method_rows._entropy_rows_kernel`` grid (1,), the top-k search of
   ``filters.filters.launch_filters`` over the listed rows (1 stats pass + 8 rounds + 3 small steps), and
   ``method_rows._entropy_kernel`` grid (G, NB): only rows rejected token-wise that may defer are listed;
6. ``method_walk._walk_kernel`` grid (R,): accepted drafts, counts, draw plans;
7. one draw: ``draw.draw._draw_kernel`` (``mrv2``) or ``draw.draw64._draw64_kernel`` (``mrv2-fp64``), grid
   (R, SPLITS), each plan's row read once.

Bytes: the verify rows once (+ draft rows), block's second pass over its later rows, FLy's listed rows about ten
times, the R draw rows once: at most 3 N V x 4 B plus the filter passes, where the standard walk reads only the rows
it reaches. Steps of these methods are rare; the standard path is untouched.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from .. import pipeline
from ..batch import ROUTE_CODE, KernelSampler, SamplingBatch
from ..draw.draw import REDUCE_CHUNK, DrawScratch, _draw_kernel
from ..draw.draw64 import REDUCE64_CHUNK, Draw64Scratch, _draw64_kernel
from ..filters.filters import FILTER_SPAN, FilterScratch, launch_filters
from ..filters.params import RowParams, host_batch, launch_params, prepare_params
from ..shared.launches import launch, run_recorded
from .method_rows import (_block_mass_kernel, _entropy_kernel, _entropy_rows_kernel, _row_scalars_kernel,
                          _row_stats_kernel)
from .method_walk import _walk_kernel
from .stochastic import STATS_BLOCK, STATS_SPAN, WALK_CHUNK

METHODS = ("standard", "block", "fly")  # the verify_method codes this module implements, in code order
ENTROPY_GRID_ROWS = 8  # programs along rows of the FLy entropy launches (few rows are listed)
LIST_BLOCK = 1024


@dataclass
class MethodInputs:
    """The method fields of a step, host tensors: verify_method [R] integer codes of :data:`METHODS` (None: all
    standard); fly_window [R] int, fly_entropy_threshold [R] float, fly_entropy_top_k [R] int (None without FLy
    requests); fp64: the draws use the ``mrv2-fp64`` contract's float64 noise."""

    verify_method: torch.Tensor | None = None
    fly_window: torch.Tensor | None = None
    fly_entropy_threshold: torch.Tensor | None = None
    fly_entropy_top_k: torch.Tensor | None = None
    fp64: bool = False

    def wanted(self) -> bool:
        """Whether a batch under these inputs needs this module (else the standard path is exact)."""
        return self.fp64 or (self.verify_method is not None and bool((self.verify_method != 0).any()))


@dataclass
class MethodState:
    """Everything :func:`launch_methods` needs, on the step's device: the batch's tensors (logits [N, V], draft
    logits [N - R, V] or a dummy, cu [R+1], req_temp [R], seed [R] int64, draft_tokens [N], positions [N] int64,
    vidx [N]), params (RowParams, exact cuts), per request method / fly_w / fly_k [R] int32, fly_thr [R] f32; span
    stats smax / ssum / gmax / dmax / dsum [R, P x NB] f32, garg int32; per-row scalars lse_t / lse_q / lp / lq / c
    [N] f32, arg / acc / need [N] int32, end [R] int32; block mass [R, P x NB] f32 (or a dummy); FLy: erows [F]
    int32 (listed rows), eslot [N] int32, fly_k_rows [N] int32, lmp_off [N] f32 (-inf), topp_one [N] f32 (1), ev /
    ei [N] (the top-k bound), efilters (FilterScratch) and epart [F, NB] f32, egt / eeq [F, NB] int32 (or None
    without FLy); the plan mode / rrow / slot / rdrow / rdtok [R] int32, plse_t / plse_q [R] f32; draw
    (DrawScratch or Draw64Scratch); outputs tokens [R, P + 1] int64, counts [R] int32; routes [R] int8 (host)."""

    logits: torch.Tensor
    draft: torch.Tensor
    has_draft: bool
    params: RowParams
    cu: torch.Tensor
    req_temp: torch.Tensor
    seed: torch.Tensor
    draft_tokens: torch.Tensor
    positions: torch.Tensor
    vidx: torch.Tensor
    method: torch.Tensor
    fly_w: torch.Tensor
    fly_k: torch.Tensor
    fly_thr: torch.Tensor
    stats: dict
    rows: dict
    end: torch.Tensor
    mass: torch.Tensor | None
    fly: dict | None
    plan: dict
    draw: DrawScratch | Draw64Scratch
    fp64: bool
    tokens: torch.Tensor
    counts: torch.Tensor
    routes: torch.Tensor
    num_blocks: int
    max_k: int
    launches: list | None = None


class MethodSampler(KernelSampler):
    """The verification methods' sampler for one set of :class:`MethodInputs` (``stochastic``'s name and
    contract; replay_harness/impls/kernel_impls.py makes one a step). ``filter_span``: the filter passes' span."""

    name = "stochastic"

    def __init__(self, inputs: MethodInputs | None = None, filter_span: int = FILTER_SPAN,
                 draw_block: int | None = None, programs: int | None = None):
        self.inputs = inputs or MethodInputs()
        self.filter_span, self.draw_block, self.programs = filter_span, draw_block, programs

    def prepare(self, batch) -> "MethodState | pipeline.PipelineState":
        """Host work: per-request method codes, scratch and outputs (graph-static: only scratch and outputs change
        between launches). With pipeline inputs or logprob requests: ``pipeline.PipelineState`` around one."""
        batch = SamplingBatch.of(batch)
        if pipeline.wanted(batch):
            return pipeline.prepare(self, batch, self.filter_span)
        host = host_batch(batch)
        logits = batch.logits if batch.logits.stride(1) == 1 else batch.logits.contiguous()
        device = logits.device
        n, v = logits.shape
        r = batch.num_requests
        rs = max(r, 1)
        k = host.num_drafts
        max_k = host.max_drafts
        p_slots = max(1, max_k)
        nb = max(1, triton.cdiv(v, STATS_SPAN))
        i32 = dict(dtype=torch.int32, device=device)
        f32 = dict(dtype=torch.float32, device=device)
        has_draft = batch.draft_logits is not None and batch.draft_logits.shape[0] > 0
        draft = batch.draft_logits.to(device).contiguous() if has_draft else torch.zeros((1, 1), **f32)
        inp = self.inputs
        method = (torch.zeros(r, dtype=torch.int32) if inp.verify_method is None
                  else inp.verify_method.to(torch.int32).cpu())
        if bool(((method < 0) | (method >= len(METHODS))).any()):
            raise ValueError(f"verify_method codes outside 0..{len(METHODS) - 1}: {method.tolist()}")
        fly = method == METHODS.index("fly")
        zeros = torch.zeros(r, dtype=torch.int32)
        fly_w = torch.where(fly, inp.fly_window.to(torch.int32).cpu(), zeros) if bool(fly.any()) else zeros
        fly_k = (torch.where(fly, inp.fly_entropy_top_k.to(torch.int64).cpu().clamp(max=v), v).to(torch.int32)
                 if bool(fly.any()) else zeros + v)
        fly_thr = (torch.where(fly, inp.fly_entropy_threshold.float().cpu(), 0.0) if bool(fly.any())
                   else torch.zeros(r))
        params = prepare_params(batch, device, self.filter_span, check=False, check_top_k=False)
        stats = {name: torch.empty((rs, p_slots * nb), **f32) for name in ("smax", "ssum", "gmax")}
        stats["garg"] = torch.empty((rs, p_slots * nb), **i32)
        for name in ("dmax", "dsum"):
            stats[name] = torch.empty((rs, p_slots * nb) if has_draft else (1,), **f32)
        nn = max(n, 1)
        rows = {name: torch.zeros(nn, **f32) for name in ("lse_t", "lse_q", "lp", "lq", "c")}
        rows.update({name: torch.zeros(nn, **i32) for name in ("arg", "acc", "need")})
        stochastic_block = (method == METHODS.index("block")) & (host.temperature != 0) & (k > 1)
        mass = torch.empty((rs, p_slots * nb), **f32) if has_draft and bool(stochastic_block.any()) else None
        # FLy rows that may defer: draft positions i with i + W < k of a FLy request
        cu = host.cu_num_logits.long()
        cand = [int(cu[q]) + i for q in range(r) if bool(fly[q]) for i in range(max(0, int(k[q]) - int(fly_w[q])))]
        fly_scratch = None
        if cand:
            f = len(cand)
            row_req = host.row_to_request()
            fly_k_rows = fly_k[row_req].to(torch.int32)
            fly_scratch = dict(
                erows=torch.zeros(f, **i32), eslot=torch.full((nn,), -1, **i32), fly_k_rows=fly_k_rows.to(device),
                lmp_off=torch.full((nn,), float("-inf"), **f32), topp_one=torch.ones(nn, **f32),
                ev=torch.full((nn,), float("-inf"), **f32), ei=torch.zeros(nn, **i32),
                filters=FilterScratch.allocate(f, v, device, any_topk=True, any_topp=False, any_bound=False,
                                               span=self.filter_span, grid_rows=min(f, ENTROPY_GRID_ROWS), listed=0),
                epart=torch.zeros((f, nb), **f32), egt=torch.zeros((f, nb), **i32), eeq=torch.zeros((f, nb), **i32))
        plan = {name: torch.zeros(rs, **i32) for name in ("mode", "rrow", "slot", "rdrow", "rdtok")}
        plan.update({name: torch.zeros(rs, **f32) for name in ("plse_t", "plse_q")})
        draw = (Draw64Scratch.allocate(r, v, device) if inp.fp64
                else DrawScratch.allocate(r, v, self.draw_block, device, self.programs))
        return MethodState(
            logits=logits, draft=draft, has_draft=has_draft, params=params, cu=batch.cu_num_logits.to(**i32),
            req_temp=batch.temperature.to(**f32), seed=batch.seed.to(device=device, dtype=torch.int64),
            draft_tokens=batch.draft_token_ids.to(**i32), positions=batch.positions.to(device=device,
                                                                                       dtype=torch.int64),
            vidx=host.draft_row_index().to(**i32), method=method.to(**i32), fly_w=fly_w.to(**i32),
            fly_k=fly_k.to(**i32), fly_thr=fly_thr.to(**f32), stats=stats, rows=rows, end=torch.zeros(rs, **i32),
            mass=mass, fly=fly_scratch, plan=plan, draw=draw, fp64=inp.fp64,
            tokens=torch.full((r, max_k + 1), -1, dtype=torch.int64, device=device), counts=torch.zeros(r, **i32),
            routes=torch.tensor([ROUTE_CODE[name] for name in host.expected_routes()], dtype=torch.int8),
            num_blocks=nb, max_k=max_k)

    def launch(self, s) -> tuple[torch.Tensor, torch.Tensor]:
        """Device work only (graph-capturable): ``(tokens, counts)``, tokens [R, max_k + 1] int64 (-1 padded)."""
        if isinstance(s, pipeline.PipelineState):
            return pipeline.launch(self, s)
        if s.tokens.shape[0]:
            run_recorded(s, lambda: launch_methods(s))
        return s.tokens, s.counts


def is_method_state(state) -> bool:
    """Whether ``state`` is :class:`MethodSampler`'s (alone or inside a pipeline state)."""
    return isinstance(getattr(state, "inner", state), MethodState)


def launch_methods(s: MethodState) -> None:
    """The launch sequence of the module docstring (recorded once a state)."""
    p, st, rw, pl = s.params, s.stats, s.rows, s.plan
    r, v = s.tokens.shape[0], s.logits.shape[1]
    nb, slots = s.num_blocks, max(1, s.max_k)
    ls, ds = s.logits.stride(0), s.draft.stride(0) if s.has_draft else 0
    launch_params(s.logits, p)
    if s.max_k:
        launch(_row_stats_kernel, (r, nb, slots), s.cu, s.req_temp, s.vidx, s.logits, ls, s.draft, ds, p.temp_div,
               p.cut_val, p.cut_idx, st["smax"], st["ssum"], st["gmax"], st["garg"], st["dmax"], st["dsum"], v, nb,
               slots, HAS_DRAFT=s.has_draft, SPAN=STATS_SPAN, BLOCK=STATS_BLOCK, num_warps=4)
        launch(_row_scalars_kernel, (r,), s.cu, s.req_temp, s.method, s.fly_w, s.seed, s.draft_tokens, s.positions,
               s.vidx, s.logits, ls, s.draft, ds, p.temp_div, p.cut_val, p.cut_idx, st["smax"], st["ssum"],
               st["gmax"], st["garg"], st["dmax"], st["dsum"], rw["lse_t"], rw["lse_q"], rw["lp"], rw["lq"],
               rw["c"], rw["arg"], rw["acc"], rw["need"], s.end, nb, slots, HAS_DRAFT=s.has_draft,
               CHUNK=WALK_CHUNK, num_warps=1)
    if s.mass is not None:
        launch(_block_mass_kernel, (r, nb, slots), s.cu, s.req_temp, s.method, s.end, s.vidx, s.logits, ls, s.draft,
               ds, p.temp_div, p.cut_val, p.cut_idx, rw["lse_t"], rw["lse_q"], rw["c"], s.mass, v, nb, slots,
               SPAN=STATS_SPAN, BLOCK=STATS_BLOCK, num_warps=4)
    fl = s.fly
    if fl is not None:
        fs = fl["filters"]
        launch(_entropy_rows_kernel, (1,), rw["need"], fl["erows"], fs.count, fl["eslot"], s.logits.shape[0],
               fl["erows"].numel(), BLOCK=LIST_BLOCK, num_warps=4)
        launch_filters(s.logits, fl["erows"], p.temp_div, fl["lmp_off"], fl["fly_k_rows"], fl["topp_one"], fl["ev"],
                       fl["ei"], fs)
        launch(_entropy_kernel, (fs.grid_rows, nb), fl["erows"], fs.count, s.logits, ls, p.temp_div, p.cut_val,
               p.cut_idx, rw["lse_t"], fl["ev"], fl["epart"], fl["egt"], fl["eeq"], v, nb, SPAN=STATS_SPAN,
               BLOCK=STATS_BLOCK, num_warps=4)
    mass = s.mass if s.mass is not None else rw["lse_t"]
    ent = fl if fl is not None else dict(eslot=rw["arg"], ev=rw["lse_t"], epart=rw["lse_t"], egt=rw["arg"],
                                         eeq=rw["arg"])
    launch(_walk_kernel, (r,), s.cu, s.req_temp, s.method, s.fly_w, s.fly_thr, s.fly_k, s.seed, s.draft_tokens,
           s.positions, s.vidx, rw["lp"], rw["lse_t"], rw["lse_q"], rw["c"], rw["arg"], rw["acc"], rw["need"], s.end,
           mass, ent["eslot"], ent["ev"], ent["epart"], ent["egt"], ent["eeq"], s.tokens, s.tokens.stride(0),
           s.counts, pl["mode"], pl["rrow"], pl["slot"], pl["rdrow"], pl["rdtok"], pl["plse_t"], pl["plse_q"], nb,
           slots, HAS_DRAFT=s.has_draft, CHUNK=WALK_CHUNK, num_warps=1)
    _draw(s)


def _draw(s: MethodState) -> None:
    """The one draw launch over the R plans: the float64 draw under ``mrv2-fp64``, else the standard draw kernel
    (no sample-and-check: every row's cut is exact)."""
    p, pl, d = s.params, s.plan, s.draw
    r, v, w = s.tokens.shape[0], s.logits.shape[1], s.tokens.shape[1]
    ds = s.draft.stride(0) if s.has_draft else 0
    common = (s.logits, s.logits.stride(0), s.draft, ds, pl["mode"], pl["rrow"], pl["slot"], pl["rdrow"],
              pl["rdtok"], pl["plse_t"], pl["plse_q"], p.temp_div, p.cut_val, p.cut_idx, s.req_temp, s.seed,
              s.positions, d.part_max, d.part_arg, d.arrivals)
    if s.fp64:
        launch(_draw64_kernel, (r, d.splits), *common, s.counts, s.tokens, s.tokens.stride(0), v, w, d.span,
               d.splits, HAS_DRAFT=s.has_draft, BLOCK=d.block, CHUNK=REDUCE64_CHUNK, num_warps=4)
        return
    grid, list_rows, list_len = d.launch_over(r, None)
    launch(_draw_kernel, grid, *common, d.row_best, s.counts, s.counts, s.tokens, s.tokens.stride(0), d.part_top,
           d.top, list_rows, list_len, v, w, d.span, d.splits, HAS_DRAFT=s.has_draft, TOP=False, SHARE=d.share,
           PRUNE=d.prune, LIST=False, BLOCK=d.block, HASHES=d.hashes, TILES=d.tiles, CHUNK=REDUCE_CHUNK,
           num_warps=d.warps, maxnreg=d.maxnreg)
