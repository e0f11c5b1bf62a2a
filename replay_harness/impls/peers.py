"""The peers as impls: ``vllm-mrv2`` (vLLM Model Runner V2's own Triton samplers) and ``flashinfer``.

Neither peer's code is in this repository. They are loaded at run time, from an
installed package (``pip install vllm``, ``pip install flashinfer-python``) or from a
peers folder (a ``gpu_env.py`` that loads them: ``.peers``, or the folder named by
``REPLAY_PEERS``); a peer that cannot be loaded makes ``--impl NAME`` exit 3 with the
reason and how to install it.

* ``vllm-mrv2`` (``rng_contract = "mrv2"``, compared token for token): vLLM's own sampling pipeline on the step
  (impls/vllm_pipeline.py: the grammar mask, its logits processors on the engine state built from the step's
  histories, temperature, min-p, top-k / top-p), then its sampler: ``gumbel_sample`` when the step has no
  drafts, else ``rejection_sample``, which handles greedy and stochastic requests, ragged k and -1
  placeholders itself; then its ``compute_topk_scores`` for the requests that ask logprobs. ``prepare`` builds
  the engine state; ``launch`` runs the pipeline, the sampler and the logprobs.
* ``flashinfer`` (``rng_contract = "flashinfer-philox"``: one Philox stream per launch,
  so compared statistically by ``replay verify`` and timed by ``replay bench``, never
  token for token): greedy requests take the processed argmax walk at prepare time (no
  noise, so nothing to launch); plain stochastic
  requests ``sampling_from_logits`` on the processed rows; stochastic verify requests
  ``chain_speculative_sampling`` on softmax probabilities (one-hot draft probabilities
  without draft logits), one launch per draft count, a request with a -1 placeholder
  at draft i verified as a request of i drafts (its bonus row is then the placeholder
  row, as the contract says). The launch's (seed, offset) come from the step's seeds
  and positions, so the same step gives the same tokens.
"""
from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from replay_harness.errors import EnvironmentProblem
from replay_harness.impls.contract import LaunchSampler
from replay_harness.impls.vllm_pipeline import EngineState, engine_state, logprob_result, process, topk_scores
from replay_harness.oracle.sampling_params import apply_sampling_params, needs_processing
from replay_harness.oracle.walk import verify_request
from replay_harness.recording.step import ROUTE_CODE, SampleResult, Step, expected_route
from replay_kernels.shared.interpret import interpreting

PEERS_ENV = "REPLAY_PEERS"


def peers_dir() -> str:
    """The peers folder: ``$REPLAY_PEERS``, else ``.peers`` in the working directory."""
    return os.environ.get(PEERS_ENV, ".peers")


# what a user installs for each peer, from its wheel on PyPI
INSTALL = {"vllm-mrv2": "pip install vllm", "flashinfer": "pip install flashinfer-python"}


def _gpu_env(folder: str, peer: str = "vllm-mrv2"):
    if not Path(folder, "gpu_env.py").exists():
        raise EnvironmentProblem(f"peer {peer} unavailable: its package is not installed and there is no peers "
                                 f"folder ({folder}/gpu_env.py not found); install it from its wheel with "
                                 f"`{INSTALL[peer]}` (CUDA machine), or set {PEERS_ENV} to a peers folder")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import gpu_env

    return gpu_env


@lru_cache(maxsize=None)
def load_vllm(folder: str | None = None) -> tuple[Any, Any]:
    """(gumbel_sample, rejection_sample) of vLLM MRV2; EnvironmentProblem (exit 3) when unavailable."""
    try:
        from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample
        from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample

        kernels = gumbel_sample, rejection_sample
    except ImportError:
        gpu_env = _gpu_env(folder or peers_dir())
        try:
            kernels = gpu_env.load_vllm_mrv2(folder or peers_dir())
        except Exception as e:  # noqa: BLE001 - any failure is "peer unavailable", with its reason
            raise EnvironmentProblem(f"peer vllm-mrv2 unavailable: {type(e).__name__}: {e}") from None
    if interpreting():
        # The interpreter has no libdevice.log1p: give vLLM's residual kernel log(1 + x) instead (moves the
        # residual by rounding only; such differences are near-ties, replay_harness.oracle.near_tie).
        from vllm.v1.worker.gpu.spec_decode import rejection_sampler_utils

        rejection_sampler_utils.tldevice = types.SimpleNamespace(log1p=_interpreter_log1p)
    return kernels


@triton.jit
def _interpreter_log1p(x):
    return tl.log(1.0 + x)


@lru_cache(maxsize=None)
def load_flashinfer(folder: str | None = None, allow_jit: bool = True) -> Any:
    """The flashinfer module (CUDA only); EnvironmentProblem (exit 3) when unavailable."""
    if not torch.cuda.is_available():
        raise EnvironmentProblem("peer flashinfer unavailable: it needs a CUDA GPU")
    if folder is None and not Path(peers_dir(), "gpu_env.py").exists():
        try:  # installed from its wheel (pip install flashinfer-python)
            import flashinfer

            return flashinfer
        except ImportError:
            pass
    gpu_env = _gpu_env(folder or peers_dir(), "flashinfer")
    try:
        return gpu_env.load_flashinfer(folder or peers_dir(), allow_jit=allow_jit)
    except Exception as e:  # noqa: BLE001
        raise EnvironmentProblem(f"peer flashinfer unavailable: {type(e).__name__}: {e}") from None


def _routes(step: Step) -> torch.Tensor:
    ks, temps = step.num_drafts.tolist(), step.temperature.tolist()
    return torch.tensor([ROUTE_CODE[expected_route(t, k)] for t, k in zip(temps, ks)], dtype=torch.int8)


def vllm_layout(step: Step) -> dict[str, torch.Tensor]:
    """vLLM MRV2's index arguments (on the step's device): idx [R] int32, exp_idx [N] int32 (row ->
    request), local [N] int32 (row index inside its request), draft_sampled [N] int32 (draft i of request r
    at row cu[r] + i + 1; ours sit at cu[r] + i, so shifted by one row, 0 at each request's first row)."""
    dev = step.logits.device
    cu = step.cu_num_logits.to(device=dev, dtype=torch.long)
    rows = torch.repeat_interleave(torch.arange(step.num_requests, device=dev), cu.diff()).to(torch.int32)
    local = (torch.arange(rows.numel(), device=dev) - cu[rows.long()]).to(torch.int32)
    ds = torch.cat([torch.zeros(1, dtype=torch.int32, device=dev), step.draft_token_ids.to(dev, torch.int32)[:-1]])
    ds[cu[:-1]] = 0
    return dict(idx=torch.arange(step.num_requests, dtype=torch.int32, device=dev), exp_idx=rows, local=local,
                draft_sampled=ds)


@dataclass
class VllmState:
    """What ``VllmMrv2Sampler.launch`` needs: the raw target rows (the step's own logits, or a copy of them when
    the grammar mask will be written into them), vLLM's index arguments and engine state
    (impls/vllm_pipeline.py), the draft logits in vLLM's [R, k_max, V] layout, whether the step has no drafts
    (vLLM's plain Sampler: ``gumbel_sample``), the output width, the routes [R] int8 (host), and what the last
    launch computed for the logprobs (vLLM's LogprobsTensors, one a logprobs_mode group)."""

    step: Step
    raw: torch.Tensor
    layout: dict[str, torch.Tensor]
    engine: EngineState
    draft_logits: torch.Tensor | None
    plain: bool
    width: int
    routes: torch.Tensor
    scores: list[Any] = field(default_factory=list)


class VllmMrv2Sampler(LaunchSampler):
    name = "vllm-mrv2"
    description = "peer: vLLM Model Runner V2's processors, gumbel_sample / rejection_sample, logprobs (mrv2 contract)"
    rng_contract = "mrv2"
    keeps_inputs = True  # the grammar mask goes into a copy; every other write lands in vLLM's own buffers

    def __init__(self):
        self.gumbel_sample, self.rejection_sample = load_vllm()

    def _draft_logits(self, step: Step, lay: dict[str, torch.Tensor], k_max: int) -> torch.Tensor | None:
        """[R, k_max, V] draft logits in vLLM's per-request layout (zeros where a request has fewer drafts)."""
        if step.draft_logits is None:
            return None
        out = torch.zeros(step.num_requests, k_max, step.vocab_size, dtype=step.draft_logits.dtype,
                          device=step.logits.device)
        d_idx = step.draft_row_index().to(step.logits.device)
        verify_rows = torch.nonzero(d_idx >= 0).flatten()
        out[lay["exp_idx"][verify_rows].long(), lay["local"][verify_rows].long()] = \
            step.draft_logits.to(step.logits.device)[d_idx[verify_rows].long()]
        return out

    def prepare(self, step: Step) -> VllmState:
        """Host work: index maps, vLLM's engine state from the step's histories (its bincount included: vLLM runs
        it when a request is added), the draft layout. The pipeline itself runs in ``launch``."""
        keep = ("logits", "draft_logits", "grammar_bitmask")
        host = Step(**{f: (v.cpu() if isinstance(v, torch.Tensor) and f not in keep else v)
                       for f, v in vars(step).items()})
        lay = vllm_layout(step)
        engine = engine_state(host, step, lay)
        raw = step.logits if engine.grammar is None else step.logits.clone()
        if interpreting() and raw.dtype != torch.float32:
            # Triton's interpreter loads masked bf16 / fp16 lanes with a wrong `other` (vLLM's rank kernel counted
            # its padding): its kernels read float32 copies there, the same values. A GPU reads the raw dtype.
            raw = raw.float()
        plain = step.max_drafts == 0
        return VllmState(step=step, raw=raw.contiguous(), layout=lay, engine=engine, plain=plain,
                         draft_logits=None if plain else self._draft_logits(step, lay, max(step.max_drafts, 1)),
                         width=step.max_drafts + 1, routes=_routes(host))

    def launch(self, s: VllmState) -> tuple[torch.Tensor, torch.Tensor]:
        """Device work only: vLLM's pipeline (grammar mask, processors, temperature, min-p, top-k / top-p), its
        sampler (``gumbel_sample`` without drafts, else ``rejection_sample``), its logprobs; -1 past each count."""
        step, lay, r, e = s.step, s.layout, s.step.num_requests, s.engine
        temperature = step.temperature.float()
        target = process(s.raw, e, lay, temperature)
        if s.plain:  # vLLM's Sampler: the processed rows carry the temperature already
            tokens = self.gumbel_sample(target, lay["exp_idx"], temperature, step.seed, step.positions,
                                        not e.processing, False)
            sampled, num = tokens.long().view(r, 1), torch.ones(r, dtype=torch.int32, device=tokens.device)
        else:
            sampled, num = self.rejection_sample(
                target.contiguous(), s.draft_logits, e.input_ids, step.cu_num_logits.to(torch.int32),
                step.positions, lay["idx"], lay["exp_idx"], lay["local"], temperature, step.seed,
                max(step.max_drafts, 1))
        if e.logprob_groups:
            s.scores = topk_scores(s.raw, target, sampled, num, e, lay)
        sampled = sampled[:, :s.width].long()
        keep = torch.arange(s.width, device=sampled.device)[None, :] < num[:, None].long()
        return torch.where(keep, sampled, torch.full_like(sampled, -1)), num.to(torch.int32)

    def result(self, state: VllmState, tokens: torch.Tensor, counts: torch.Tensor) -> SampleResult:
        out = super().result(state, tokens, counts)
        if state.engine.logprob_groups:
            for name, value in logprob_result(state.step, state.engine, state.scores, out.tokens,
                                              out.counts).items():
                setattr(out, name, value)
        return out


@dataclass
class FlashInferGroup:
    """Requests verified together by one FlashInfer call: those with k drafts (after placeholders).
    reqs [B] int64, rows [B, k+1] int64 (target rows), dids [B, k] int32, dprobs [B, k, V] float32."""

    k: int
    reqs: torch.Tensor
    rows: torch.Tensor
    dids: torch.Tensor | None
    dprobs: torch.Tensor | None
    offset: int


@dataclass
class FlashInferState:
    """``FlashInferSampler.launch``'s inputs: the target rows (raw logits when no request needs processing),
    the greedy requests' tokens and counts (decided at prepare time: no RNG), the stochastic groups, the
    launch's Philox seed, preallocated outputs tokens [R, max_k+1] int64 and counts [R] int32, routes (host)."""

    target: torch.Tensor
    whole_plain: bool
    groups: list[FlashInferGroup]
    seed: int
    tokens_init: torch.Tensor
    counts_init: torch.Tensor
    tokens: torch.Tensor
    counts: torch.Tensor
    routes: torch.Tensor


class FlashInferSampler(LaunchSampler):
    name = "flashinfer"
    description = "peer: FlashInfer sampling_from_logits / chain_speculative_sampling (own Philox RNG; CUDA)"
    rng_contract = "flashinfer-philox"
    requires_cuda = True

    def __init__(self):
        self.fi = load_flashinfer()

    def prepare(self, step: Step) -> FlashInferState:
        """Host work: greedy requests walked (no noise), stochastic requests grouped by draft count,
        draft probabilities (one-hot, or softmax of the draft logits / T), outputs preallocated."""
        host = step.to("cpu")
        r, dev = step.num_requests, step.logits.device
        processing = bool(needs_processing(host).any()) or step.logits.dtype != torch.float32
        target = (apply_sampling_params(step) if processing else step.logits).contiguous()
        cu, temps, drafts = host.cu_num_logits.tolist(), host.temperature.tolist(), host.draft_token_ids.tolist()
        tokens = torch.full((r, step.max_drafts + 1), -1, dtype=torch.int64)
        counts = torch.zeros(r, dtype=torch.int32)
        by_k: dict[int, list[int]] = {}
        for i in range(r):
            ds = drafts[cu[i]:cu[i + 1] - 1]
            if temps[i] == 0.0:
                out = verify_request(target[cu[i]:cu[i + 1]].float().cpu(), ds, [0] * len(ds + [0]), 0.0, 0, None)
                tokens[i, :len(out)] = torch.tensor(out)
                counts[i] = len(out)
            else:  # a placeholder ends verification at its row, which then is the bonus row
                by_k.setdefault(ds.index(-1) if -1 in ds else len(ds), []).append(i)
        groups, offset = [], 0
        for k, reqs in sorted(by_k.items()):
            rows = torch.tensor([[cu[i] + j for j in range(k + 1)] for i in reqs], device=dev)
            dids = torch.tensor([drafts[cu[i]:cu[i] + k] for i in reqs], dtype=torch.int32, device=dev) if k else None
            groups.append(FlashInferGroup(k=k, reqs=torch.tensor(reqs, device=dev), rows=rows, dids=dids,
                                          dprobs=self._draft_probs(step, reqs, k, dids) if k else None,
                                          offset=offset))
            offset += 4 * (k + 1) * step.vocab_size
        # one row a request: the target is the batch as it stands (a request whose first draft is a placeholder is
        # drawn at k = 0 too, but from the first of its rows)
        whole_plain = len(groups) == 1 and groups[0].k == 0 and len(by_k[0]) == r and target.shape[0] == r
        return FlashInferState(
            target=target, whole_plain=whole_plain, groups=groups,
            seed=(int(host.seed.sum()) * 1_000_003 + int(host.positions.sum())) % (1 << 62),
            tokens_init=tokens.to(dev), counts_init=counts.to(dev), tokens=tokens.to(dev), counts=counts.to(dev),
            routes=_routes(host))

    def launch(self, s: FlashInferState) -> tuple[torch.Tensor, torch.Tensor]:
        """Device work only: one FlashInfer call per group, scattered into the outputs."""
        s.tokens.copy_(s.tokens_init)
        s.counts.copy_(s.counts_init)
        for g in s.groups:
            if g.k == 0:
                logits = s.target if s.whole_plain else s.target[g.rows[:, 0]]
                tok = self.fi.sampling_from_logits(logits, seed=s.seed, offset=g.offset)
                s.tokens[g.reqs, 0] = tok.long()
                s.counts[g.reqs] = 1
                continue
            probs = self.fi.softmax(s.target[g.rows.flatten()]).view(len(g.reqs), g.k + 1, -1)
            emitted, _, num = self.fi.chain_speculative_sampling(g.dprobs, g.dids, probs, seed=s.seed,
                                                                 offset=g.offset)
            s.tokens[g.reqs, :g.k + 1] = emitted.long()
            s.counts[g.reqs] = num.to(torch.int32) + 1
        return s.tokens, s.counts

    def _draft_probs(self, step: Step, reqs: list[int], k: int, dids: torch.Tensor) -> torch.Tensor:
        """[B, k, V] float32 draft probabilities: softmax(draft_logits / T), or one-hot on the drafted ids."""
        if step.draft_logits is None:
            out = torch.zeros(len(reqs), k, step.vocab_size, dtype=torch.float32, device=step.logits.device)
            return out.scatter_(2, dids.long().unsqueeze(-1), 1.0)
        d_idx = step.draft_row_index().tolist()
        cu = step.cu_num_logits.tolist()
        rows = torch.tensor([[d_idx[cu[i] + j] for j in range(k)] for i in reqs], device=step.logits.device)
        temps = step.temperature.to(step.logits.device).float()[torch.tensor(reqs, device=step.logits.device)]
        dl = step.draft_logits.to(step.logits.device).float()[rows] / temps[:, None, None]
        return torch.softmax(dl, dim=-1).contiguous()
