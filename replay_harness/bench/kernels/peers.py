"""The peers timed next to our kernels: FlashInfer (CUDA only) and vLLM Model Runner V2's Triton samplers.

Both come from the carried peers folder (``.peers``, made by its prepare.sh): its ``gpu_env.py`` loads
them without installing anything. A peer that cannot be loaded is skipped with the reason, never fatal.
"""
from __future__ import annotations

import time

PEERS = ("flashinfer", "vllm")


class Peers:
    """Loaded peer entry points (None when unavailable) and one status line per peer."""

    def __init__(self):
        self.fi = None  # the flashinfer module
        self.gumbel_sample = None  # vLLM MRV2 plain sampler
        self.rejection_sample = None  # vLLM MRV2 verify
        self.status: dict[str, str] = {}

    def load(self, peers_dir: str, *, cuda: bool, allow_jit: bool = True, skip: bool = False) -> "Peers":
        """Load both peers through :mod:`replay_harness.impls.peers`; a peer that fails is skipped, with why."""
        from replay_harness.errors import EnvironmentProblem
        from replay_harness.impls.peers import load_flashinfer, load_vllm

        if skip:
            self.status = {p: "skipped (--no-peers)" for p in PEERS}
            return self
        if not cuda:
            self.status["flashinfer"] = "skipped (needs a CUDA GPU)"
        else:
            t = time.time()
            try:
                self.fi = load_flashinfer(peers_dir, allow_jit)
                self.status["flashinfer"] = f"FlashInfer {getattr(self.fi, '__version__', '?')} ({time.time() - t:.1f}s)"
            except EnvironmentProblem as e:
                self.status["flashinfer"] = f"UNAVAILABLE: {e}"
        try:
            self.gumbel_sample, self.rejection_sample = load_vllm(peers_dir)
            self.status["vllm"] = "vLLM MRV2 gumbel_sample / rejection_sample" + ("" if cuda else " (Triton interpreter)")
        except EnvironmentProblem as e:
            self.status["vllm"] = f"UNAVAILABLE: {e}"
        return self
