"""Candidates a gathered top-k row has (values at or above its k-th largest block maximum), by block size, on the
steps ab_kernels derives from the real recordings (R = 64, V = 248,320) and on the SYNTHETIC bench rows (CPU).

    python3 docs/bench/2026-12-02-h200-s20/scripts/candidates.py     # from the repo root, package installed
"""
import torch

from replay_harness.bench.kernels.cases import Inputs
from replay_harness.recording.derive import derive_steps
from replay_harness.recording.store import Recording

V, R, K = 248320, 64, 50
rows = {}
for src in ("fixtures/real-draft-model", "fixtures/real-mixed"):
    step, _ = next(derive_steps(Recording(src), batch=R, drafts=0, vocab=V, steps=1))
    x = step.logits.float() / step.temperature.float().clamp_min(1e-6)[:, None]
    rows[src] = torch.nan_to_num(x, nan=float("-inf"))
rows["SYNTHETIC"] = Inputs.make(V, R, 0, seed=Inputs.seed_of(V, R, 0), device="cpu").step(0.9, K).logits.float()
for name, x in rows.items():
    for blk in (64, 128, 256, 512):
        nb = -(-V // blk)
        padded = torch.full((x.shape[0], nb * blk), float("-inf"))
        padded[:, :V] = x
        l0 = padded.view(x.shape[0], nb, blk).amax(-1).sort(-1, descending=True).values[:, K - 1]
        n = (x >= l0[:, None]).sum(-1)
        print(f"{name} blocks of {blk}: candidates min {n.min().item()} median {n.median().item()} "
              f"max {n.max().item()}; rows over 64: {(n > 64).sum().item()}, over 128: {(n > 128).sum().item()}")
