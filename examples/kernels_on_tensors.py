"""The kernels of ``replay_kernels`` called on plain tensors, as an engine would call them: no recording, no Step.

One speculative batch in Model Runner V2's expanded layout (4 requests: greedy and stochastic, with and without
drafts, with top-k / top-p / min-p, one-hot and with draft logits), sampled with ``rejection_sample``; the plain
requests' rows again with ``gumbel_sample``; the verify batch once more through ``prepare_rejection_sample`` with
new logits written in place (what a CUDA-graph replay does). Every token is checked against the project's torch
reference of MRV2's semantics (``replay_harness.oracle``: ``apply_sampling_params`` then ``verify_request``).

    TRITON_INTERPRET=1 python examples/kernels_on_tensors.py        # on the CPU (Triton's interpreter), seconds
    python examples/kernels_on_tensors.py --device cuda              # on a GPU

Exit 0 when every token matches, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before replay_kernels (and triton) are imported

from replay_kernels.api import gumbel_sample, prepare_rejection_sample, rejection_sample  # noqa: E402
from replay_kernels.batch import SamplingBatch  # noqa: E402

V = 300
# per request: drafts k, temperature, top-k, top-p, min-p, seed
REQUESTS = [(3, 1.0, 0, 0.9, 0.0, 11), (0, 0.7, 20, 1.0, 0.0, 12), (2, 0.0, 0, 1.0, 0.0, 13), (0, 1.3, 0, 1.0, 0.05, 14)]


def make_batch(device: str, seed: int = 0) -> dict:
    """Tensors of one step: peaked random logits, drafts that are the row's argmax most of the time."""
    g = torch.Generator().manual_seed(seed)
    ks = [r[0] for r in REQUESTS]
    n = sum(k + 1 for k in ks)
    logits = torch.randn(n, V, generator=g) * 3
    logits[torch.arange(n), torch.randint(0, V, (n,), generator=g)] += 6  # one peak a row
    cu = torch.tensor([0] + [sum(k + 1 for k in ks[:i + 1]) for i in range(len(ks))], dtype=torch.int32)
    drafts = torch.full((n,), -1, dtype=torch.int32)
    for r, k in enumerate(ks):
        for i in range(k):
            row = int(cu[r]) + i
            top = int(logits[row].argmax())
            drafts[row] = top if torch.rand((), generator=g) < 0.7 else int(torch.randint(0, V, (), generator=g))
    t = dict(device=device)
    return dict(
        target_logits=logits.to(**t), draft_token_ids=drafts.to(**t), cu_num_logits=cu.to(**t),
        pos=torch.arange(100, 100 + n, dtype=torch.int64, device=device),
        temperature=torch.tensor([r[1] for r in REQUESTS], dtype=torch.float32, device=device),
        seed=torch.tensor([r[5] for r in REQUESTS], dtype=torch.int64, device=device),
        top_k=torch.tensor([r[2] for r in REQUESTS], dtype=torch.int32, device=device),
        top_p=torch.tensor([r[3] for r in REQUESTS], dtype=torch.float32, device=device),
        min_p=torch.tensor([r[4] for r in REQUESTS], dtype=torch.float32, device=device),
        draft_logits=None)


def reference(b: dict) -> list[list[int]]:
    """Each request's tokens under the project's torch reference of MRV2 (the oracle), on the CPU."""
    from replay_harness.oracle.sampling_params import apply_sampling_params
    from replay_harness.oracle.walk import verify_request

    cpu = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
    batch = SamplingBatch(logits=cpu["target_logits"], cu_num_logits=cpu["cu_num_logits"],
                          draft_token_ids=cpu["draft_token_ids"], positions=cpu["pos"],
                          temperature=cpu["temperature"], top_k=cpu["top_k"], top_p=cpu["top_p"],
                          min_p=cpu["min_p"], seed=cpu["seed"], draft_logits=cpu["draft_logits"])
    processed = apply_sampling_params(batch)  # the oracle reads the same attributes a Step has
    cu, d_idx, out = batch.cu_num_logits.tolist(), batch.draft_row_index(), []
    for r in range(batch.num_requests):
        a, e = cu[r], cu[r + 1]
        dl = None if batch.draft_logits is None or e - a == 1 else batch.draft_logits[d_idx[a:e - 1]]
        out.append(verify_request(processed[a:e], batch.draft_token_ids[a:e - 1].tolist(),
                                  batch.positions[a:e].tolist(), float(batch.temperature[r]), int(batch.seed[r]), dl))
    return out


def emitted(sampled: torch.Tensor, num_sampled: torch.Tensor) -> list[list[int]]:
    return [sampled[r, :int(n)].tolist() for r, n in enumerate(num_sampled.cpu())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    device = ap.parse_args(argv).device
    ok = True

    b = make_batch(device)
    b["draft_logits"] = None
    sampled, num_sampled = rejection_sample(**b)
    got, want = emitted(sampled.cpu(), num_sampled), reference(b)
    print(f"rejection_sample, one-hot drafts:  {got}\n  reference:                       {want}")
    ok &= got == want

    n, r_count = b["target_logits"].shape[0], b["cu_num_logits"].numel() - 1
    g = torch.Generator().manual_seed(1)
    b["draft_logits"] = (b["target_logits"].cpu()[:n - r_count] + torch.randn(n - r_count, V, generator=g)).to(device)
    sampled, num_sampled = rejection_sample(**b)
    got, want = emitted(sampled.cpu(), num_sampled), reference(b)
    print(f"rejection_sample, draft logits:    {got}\n  reference:                       {want}")
    ok &= got == want

    # the plain requests (k = 0) on their own rows: gumbel_sample, one row a request
    plain = [r for r, req in enumerate(REQUESTS) if req[0] == 0]
    rows = b["cu_num_logits"][torch.tensor(plain, device=device)].long()
    tokens = gumbel_sample(b["target_logits"][rows], b["temperature"][plain], b["seed"][plain], b["pos"][rows],
                           top_k=b["top_k"][plain], top_p=b["top_p"][plain], min_p=b["min_p"][plain])
    want_plain = [want[r][0] for r in plain]
    print(f"gumbel_sample:                     {tokens.tolist()}\n  reference:                       {want_plain}")
    ok &= tokens.tolist() == want_plain

    # prepared once, launched after the next step's logits, drafts and positions were written in place
    b["draft_logits"] = None
    prepared = prepare_rejection_sample(**b)
    fresh = make_batch(device, seed=2)
    for name in ("target_logits", "draft_token_ids"):
        b[name].copy_(fresh[name])
    b["pos"].add_(7)
    sampled, num_sampled = prepared.launch()
    got, want = emitted(sampled.cpu(), num_sampled), reference(b)
    print(f"prepared, inputs replaced in place: {got}\n  reference:                       {want}")
    ok &= got == want

    print("tokens equal to the reference" if ok else "TOKENS DIFFER from the reference")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
