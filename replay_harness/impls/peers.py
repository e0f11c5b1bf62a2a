"""The peers as impls: ``vllm-mrv2`` (vLLM Model Runner V2's own Triton samplers) and ``flashinfer``.

Neither peer's code is in this repository. They are loaded at run time, from an
installed package or from the peers folder that ``../shared/peers/prepare.sh``
makes (``.peers``, or the folder named by ``REPLAY_PEERS``); a peer that cannot be
loaded makes ``--impl NAME`` exit 3 with the reason.

* ``vllm-mrv2`` (``rng_contract = "mrv2"``, compared token for token): plain steps
  without filters go to ``gumbel_sample`` on the raw logits (temperature in-kernel,
  as MRV2 samples); every other step gets its target rows processed by the oracle's
  ``apply_sampling_params`` (vLLM applies its own temperature / top-k / top-p pass
  before the sampler; those files are not part of the peer kit) and goes to
  ``rejection_sample``, which handles greedy and stochastic requests, ragged k and
  -1 placeholders itself.
* ``flashinfer`` (``rng_contract = "flashinfer-philox"``: one Philox stream per launch,
  so compared statistically by ``replay verify`` and timed by ``replay bench``, never
  token for token): greedy requests take the processed argmax walk; plain stochastic
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
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from replay_harness.errors import EnvironmentProblem
from replay_harness.impls.contract import Sampler
from replay_harness.oracle.sampling_params import apply_sampling_params, needs_processing
from replay_harness.oracle.walk import verify_request
from replay_harness.recording.step import ROUTE_CODE, SampleResult, Step, expected_route

PEERS_ENV = "REPLAY_PEERS"


def peers_dir() -> str:
    """The peers folder: ``$REPLAY_PEERS``, else ``.peers`` in the working directory."""
    return os.environ.get(PEERS_ENV, ".peers")


def _gpu_env(folder: str):
    if not Path(folder, "gpu_env.py").exists():
        raise EnvironmentProblem(f"peer unavailable: {folder}/gpu_env.py not found (run ../shared/peers/prepare.sh "
                                 f"and carry .peers, or set {PEERS_ENV})")
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

        return gumbel_sample, rejection_sample
    except ImportError:
        pass
    gpu_env = _gpu_env(folder or peers_dir())
    try:
        kernels = gpu_env.load_vllm_mrv2(folder or peers_dir())
    except Exception as e:  # noqa: BLE001 - any failure is "peer unavailable", with its reason
        raise EnvironmentProblem(f"peer vllm-mrv2 unavailable: {type(e).__name__}: {e}") from None
    if os.environ.get("TRITON_INTERPRET") == "1":
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
    gpu_env = _gpu_env(folder or peers_dir())
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


class VllmMrv2Sampler(Sampler):
    name = "vllm-mrv2"
    description = "peer: vLLM Model Runner V2 gumbel_sample / rejection_sample (mrv2 contract, token for token)"
    rng_contract = "mrv2"

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

    def sample(self, step: Step) -> SampleResult:
        r, width = step.num_requests, step.max_drafts + 1
        lay = vllm_layout(step)
        if r == 0:
            return SampleResult.empty(0, step.max_drafts)
        if step.max_drafts == 0 and not bool(needs_processing(step.to("cpu")).any()):
            tokens = self.gumbel_sample(step.logits.contiguous(), lay["exp_idx"], step.temperature.float(), step.seed,
                                        step.positions, True, False)
            return SampleResult(tokens=tokens.long().cpu().view(r, 1), counts=torch.ones(r, dtype=torch.int32),
                                routes=_routes(step.to("cpu")))
        k_max = max(step.max_drafts, 1)
        sampled, num = self.rejection_sample(
            apply_sampling_params(step).contiguous(), self._draft_logits(step, lay, k_max), lay["draft_sampled"],
            step.cu_num_logits.to(torch.int32), step.positions, lay["idx"], lay["exp_idx"], lay["local"],
            step.temperature.float(), step.seed, k_max)
        sampled, num = sampled[:, :width].long().cpu(), num.cpu().to(torch.int32)
        keep = torch.arange(width)[None, :] < num[:, None].long()
        return SampleResult(tokens=torch.where(keep, sampled, torch.full_like(sampled, -1)), counts=num,
                            routes=_routes(step.to("cpu")))


class FlashInferSampler(Sampler):
    name = "flashinfer"
    description = "peer: FlashInfer sampling_from_logits / chain_speculative_sampling (own Philox RNG; CUDA)"
    rng_contract = "flashinfer-philox"
    requires_cuda = True

    def __init__(self):
        self.fi = load_flashinfer()

    def sample(self, step: Step) -> SampleResult:
        host = step.to("cpu")
        r = step.num_requests
        result = SampleResult.empty(r, step.max_drafts)
        result.routes = _routes(host)
        if r == 0:
            return result
        processed = apply_sampling_params(step)
        cu, temps = host.cu_num_logits.tolist(), host.temperature.tolist()
        drafts = host.draft_token_ids.tolist()
        seed = int(host.seed.sum()) * 1_000_003 + int(host.positions.sum())
        offset = 0
        groups: dict[int, list[int]] = {}
        for i in range(r):
            a, b = cu[i], cu[i + 1]
            ds = drafts[a:b - 1]
            if temps[i] == 0.0:
                tokens = verify_request(processed[a:b].cpu(), ds, [0] * (b - a), 0.0, 0, None)
                result.tokens[i, :len(tokens)] = torch.tensor(tokens)
                result.counts[i] = len(tokens)
                continue
            k = ds.index(-1) if -1 in ds else len(ds)  # a placeholder ends verification at its row
            groups.setdefault(k, []).append(i)
        for k, reqs in sorted(groups.items()):
            starts = torch.tensor([cu[i] for i in reqs], device=step.logits.device)
            target_rows = starts[:, None] + torch.arange(k + 1, device=step.logits.device)[None, :]
            probs = torch.softmax(processed[target_rows], dim=-1)  # [B, k+1, V]
            if k == 0:
                tok = self.fi.sampling_from_probs(probs[:, 0].contiguous(), seed=seed, offset=offset)
                emitted, counts = tok.long().view(-1, 1), torch.ones(len(reqs), dtype=torch.int32)
            else:
                dids = torch.tensor([drafts[cu[i]:cu[i] + k] for i in reqs], dtype=torch.int32,
                                    device=step.logits.device)
                dprobs = self._draft_probs(step, reqs, k, dids)
                emitted, _, counts = self.fi.chain_speculative_sampling(dprobs, dids, probs.contiguous(), seed=seed,
                                                                        offset=offset)
                counts = counts.to(torch.int32) + 1
            offset += 4 * (k + 1) * step.vocab_size
            emitted, counts = emitted.long().cpu(), counts.cpu()
            for j, i in enumerate(reqs):
                n = int(counts[j])
                result.tokens[i, :n] = emitted[j, :n]
                result.counts[i] = n
        return result

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
