"""What the plain-sample impls (k = 0) share: the draw plan and the prepare / launch / sample frame.

``gumbel-max`` (:mod:`replay_kernels.draw.gumbel_max`) and ``serial-scan``
(:mod:`replay_kernels.draw.serial_scan`) emit, for every request without drafts, the
token of the ``mrv2`` contract: greedy requests (temperature 0) take the argmax
of the raw row (first index on ties); the others take
``argmax(processed + gumbel_noise(seed, pos, v))``, so they emit the same tokens
as ``reference``. Requests with drafts (k > 0) are refused (route ``refused``,
count 0, with a note): use ``stochastic``. Sampling parameters come from
:mod:`replay_kernels.filters.params` (a filter bound per row, applied on the fly).

API (both impls; ``batch``: a :class:`replay_kernels.batch.SamplingBatch` or any object with its attributes)::

    state = impl.prepare(batch)           # host work; device tensors + preallocated outputs
    tokens, counts = impl.launch(state)   # device work only: no host sync, graph-capturable
    result = impl.sample(batch)           # prepare + launch -> Sampled (tokens, counts, routes, notes)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .. import pipeline
from ..batch import ROUTE_CODE, KernelSampler, SamplingBatch, route_of
from ..filters.candidate_draw import CandidateDraw
from .draw import MODE_GREEDY, MODE_NONE, MODE_TARGET, DrawScratch
from ..filters.filters import FILTER_SPAN
from ..shared.launches import run_cooperative
from . import one_launch, open_rows
from ..filters.params import RowParams, host_batch, launch_params, prepare_params
from .sample_check import CheckScratch, launch_rounds, round_draw_scratch

# Rows with top-k and no top-p: sample-and-check in steps of fewer requests than this, else their gathered bound
# (replay_kernels/filters/topk_gather.py) when k allows it (else checked). Both exact, no sums: the same tokens
# either way. Measured crossover (H200, 2026-12-02): checked faster at R = 1, 2; gathered from R = 4.
CHECK_TOP_K_BELOW = 4


@dataclass
class PlainState:
    """Everything ``launch`` needs, on the step's device (built by ``prepare``).

    logits [N, V] (engine dtype, contiguous rows); params: RowParams;
    mode/row/slot [R] int32 (draw mode, logits row, output slot = 0);
    seed [R] int64; positions [N] int64; tokens [R, max_k+1] int64; counts [R] int32;
    counts_init [R] int32 (1, or 0 for refused requests); draw: DrawScratch; routes [R] int8 (host);
    draw_mode [R] int32: the plan the first draw follows (``mode``, or with ``draw_candidates`` a copy whose gathered
    requests the gather draws: candidate_draw.CandidateDraw);
    check: CheckScratch of sample-and-check (None when no row uses it); round_draw: the DrawScratch of
    its later draws (``sample_check.round_draw_scratch``: few rows are still open); one: the scratch of the
    same in one launch (:mod:`replay_kernels.draw.one_launch`; None when the step does not qualify), used when its
    programs fit on the device at once (decided when the launches are recorded), else the sequence above;
    open: the scratch of the open-row launch that settles what the first check leaves open
    (``open_rows.launcher``; None: the launched rounds and the finish loop);
    notes: list[str]; launches: the launch sequence, recorded on the first launch
    (:mod:`replay_kernels.shared.launches`); dummy_i32 / dummy_f32 [1]: placeholders for the draw kernel's unused
    pointers.
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
    draw: DrawScratch
    routes: torch.Tensor
    dummy_i32: torch.Tensor
    dummy_f32: torch.Tensor
    draw_mode: torch.Tensor | None = None
    check: CheckScratch | None = None
    round_draw: DrawScratch | None = None
    one: one_launch.OneLaunchScratch | None = None
    open: one_launch.OneLaunchScratch | None = None
    notes: list[str] = field(default_factory=list)
    launches: list | None = None


class PlainSampler(KernelSampler):
    """prepare / launch / sample of a plain sampler; subclasses write ``_draw(state, mode, cut_val, cut_idx,
    scratch, rows=None)``.

    ``sample_check``: top-k or top-p rows are drawn then checked (:mod:`replay_kernels.draw.sample_check`)
    instead of searching their bound first; the subclass's draw must honour the plan it is given.
    ``draw_candidates``: rows whose top-k bound is gathered are drawn from their candidates by the gather
    (:class:`replay_kernels.filters.candidate_draw.CandidateDraw`), not by the subclass's draw.
    ``one_launch`` (with ``sample_check``; steps without gathered rows): the draw, checks and redraws in one
    launch (:mod:`replay_kernels.draw.one_launch`): None below ONE_LAUNCH_BELOW requests and not under the
    interpreter, True whenever its programs fit (one a row under the interpreter), False never. Same tokens.
    ``open_rows`` (with ``sample_check``): the rows the first check leaves open are settled by one
    cooperative launch (``open_rows.launcher``) instead of the launched rounds and the finish loop:
    None when few are expected to be (``open_rows.OPEN_ROW_SHAPES``), True always, False never. Same tokens.
    """

    rng_contract = "mrv2"
    sample_check = False
    draw_candidates = False

    def __init__(self, block: int | None = None, programs: int | None = None, filter_span: int = FILTER_SPAN,
                 one_launch: bool | None = None, open_rows: bool | None = None):
        self.block = block
        self.programs = programs
        self.filter_span = filter_span
        self.one_launch = one_launch
        self.open_rows = open_rows

    def prepare(self, batch) -> PlainState:
        """Host work: row parameters, draw plan and preallocated outputs (k > 0 requests refused). A batch with the
        sampling pipeline's inputs or logprob requests: a :class:`replay_kernels.pipeline.PipelineState` around
        this state (prepared on its float32 rows)."""
        batch = SamplingBatch.of(batch)
        if pipeline.wanted(batch):
            return pipeline.prepare(self, batch, self.filter_span)
        logits = batch.logits if batch.logits.stride(1) == 1 else batch.logits.contiguous()
        device = logits.device
        host = host_batch(batch)
        r_count = batch.num_requests
        ks = host.num_drafts.tolist()
        temps = host.temperature.tolist()
        modes, routes, refused = [], [], []
        for r in range(r_count):
            if ks[r] > 0:
                modes.append(MODE_NONE.value)
                routes.append(ROUTE_CODE["refused"])
                refused.append(int(host.request_ids[r]))
            else:
                modes.append(MODE_GREEDY.value if temps[r] == 0.0 else MODE_TARGET.value)
                routes.append(ROUTE_CODE[route_of(temps[r], 0)])
        notes = []
        if refused:
            shown = ", ".join(str(x) for x in refused[:8]) + (" ..." if len(refused) > 8 else "")
            notes.append(f"{self.name} handles plain-sample steps only (k = 0); refused {len(refused)} "
                         f"request(s) with drafts ({shown}); use stochastic for speculative steps")
        i32 = dict(dtype=torch.int32, device=device)
        params = prepare_params(batch, device, self.filter_span, check=self.sample_check,
                                gather_top_k=r_count >= CHECK_TOP_K_BELOW)
        check = round_draw = open_scratch = None
        if params.any_check:
            check = CheckScratch.allocate(r_count, logits.shape[0], batch.vocab_size, device, self.filter_span,
                                          params.check_miss)
            round_draw = round_draw_scratch(r_count, batch.vocab_size, self.block, device, self.programs)
            if self.open_rows is not False:
                open_scratch = open_rows.allocate(r_count, batch.vocab_size, self.filter_span, device,
                                                  params.check_miss, force=bool(self.open_rows))
        one = None
        if self._wants_one_launch(params, r_count):
            one = one_launch.OneLaunchScratch.allocate(r_count, batch.vocab_size, self.filter_span, device,
                                                       draw_block=self.block)
        state = PlainState(
            logits=logits, params=params, check=check, round_draw=round_draw, one=one, open=open_scratch,
            mode=torch.tensor(modes, **i32), row=torch.tensor(host.cu_num_logits.tolist()[:-1], **i32),
            slot=torch.zeros(r_count, **i32), seed=batch.seed.to(device=device, dtype=torch.int64),
            positions=batch.positions.to(device=device, dtype=torch.int64),
            tokens=torch.full((r_count, host.max_drafts + 1), -1, dtype=torch.int64, device=device),
            counts=torch.zeros(r_count, **i32),
            counts_init=torch.tensor([0 if m == MODE_NONE.value else 1 for m in modes], **i32),
            draw=DrawScratch.allocate(r_count, batch.vocab_size, self.block, device, self.programs,
                                      track_top=params.any_check),
            routes=torch.tensor(routes, dtype=torch.int8), notes=notes,
            dummy_i32=torch.zeros(1, **i32), dummy_f32=torch.zeros(1, dtype=torch.float32, device=device))
        state.draw_mode = state.mode
        if self.draw_candidates and params.gather is not None:
            state.draw_mode = state.mode.clone()
            requests = host.row_to_request()[params.gather.rows.cpu().long()].tolist()
            req = [q if modes[q] == MODE_TARGET.value else -1 for q in requests]
            params.gather.draw = CandidateDraw(req=torch.tensor(req, **i32), seed=state.seed,
                                               positions=state.positions, tokens=state.tokens, mode=state.draw_mode,
                                               done=MODE_NONE.value, open=MODE_TARGET.value)
        return state

    def launch(self, state: PlainState) -> tuple[torch.Tensor, torch.Tensor]:
        """Device work only (graph-capturable): filter bounds (filtered rows only), then the impl's draw,
        which writes every token, count and -1 pad of the outputs; with sample-and-check rows, the
        check passes, the (draw, check) rounds and the finish loop (a fixed launch sequence), or the one launch.
        A cooperative launch the driver refuses (its grid cannot be resident) falls back to the sequence."""
        if isinstance(state, pipeline.PipelineState):
            return pipeline.launch(self, state)
        if state.mode.numel():
            run_cooperative(state, lambda: self._launch_all(state), ("one", "open"))
        return state.tokens, state.counts

    def _wants_one_launch(self, params, num_requests: int) -> bool:
        """Whether the step may take the one launch (``one_launch``; its programs must still fit)."""
        if not (self.sample_check and params.any_check and params.gather is None) or self.one_launch is False:
            return False
        return self.one_launch or (num_requests < one_launch.ONE_LAUNCH_BELOW and not one_launch.interpreting())

    def _launch_all(self, state: PlainState) -> None:
        """The launch sequence of ``launch`` (recorded once a state)."""
        p = state.params
        launch_params(state.logits, p)
        one = (state.one, state.logits, state.mode, state.row, p, state.seed, state.positions, state.counts_init,
               state.counts, state.tokens)
        if state.one is not None and one_launch.fits(*one):
            one_launch.launch_one(*one)
            return
        self._draw(state, state.draw_mode, p.cut_val, p.cut_idx, state.draw)
        if state.check is not None:
            def draw_open(mode, cut_val, cut_idx, rows):
                self._draw(state, mode, cut_val, cut_idx, state.round_draw, rows)

            settle = None if state.open is None else open_rows.launcher(
                state.open, state.check, state.draw, state.logits, state.row, state.slot, state.dummy_i32, p,
                state.seed, state.positions, state.tokens)
            launch_rounds(state.check, draw_open, state.logits, state.mode, state.row, state.slot, p,
                          state.tokens, state.draw.top, state.dummy_i32, state.seed, state.positions, settle=settle)

    def _draw(self, state: PlainState, mode: torch.Tensor, cut_val: torch.Tensor, cut_idx: torch.Tensor,
              scratch: DrawScratch, rows: tuple | None = None) -> None:
        """One draw over the plan ``mode`` under the bounds ``cut_*``; ``rows`` = (open_rows, open_len): only
        those requests (grid (scratch.row_slots, SPLITS))."""
        raise NotImplementedError
