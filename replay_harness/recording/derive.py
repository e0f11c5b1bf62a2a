"""``replay synth``: DERIVED (synthetic) steps at production shapes, built from the rows of a real recording.

A recording from a small model (V = 49,152, a handful of requests) cannot show how a sampler
behaves at R = 256 requests, k = 4 drafts and V = 248,320. :func:`derive_steps` builds such steps
from the recording's own logits rows, so the values keep the shape of real model output:

* **rows are tiled**: all logits rows of the source, in recorded order, form a pool; request r of
  derived step s takes ``k + 1`` consecutive pool rows (cyclically), so real rows repeat when the
  derived batch needs more rows than the source has.
* **each row is resized to V** keeping its distribution shape: the row's ``HEAD`` (64) largest
  logits keep their token ids and their exact probabilities; the other entries (the "bulk") are
  extended by resampling the row's own bulk values (with replacement, seeded, -inf entries
  included in proportion), then shifted by one constant so the bulk's total probability mass is
  unchanged. So top-1/top-k probabilities, the tail mass and the tail's value histogram survive;
  the tail is spread over more tokens. When V is smaller than the source vocabulary, the head plus
  the lowest-id bulk tokens are kept (ids renumbered in order) and the bulk shifted the same way
  (the shift is capped so no bulk value rises above the head).
* **drafts**: a verify row takes the draft the engine recorded at that pool row when there was one
  (and it maps into the new vocabulary), else the row's argmax (marked in the manifest).
* per-request sampling parameters come from the source request that owned the request's first
  pool row; seeds are fresh (seeded), request ids are ``1000 * (step + 1) + r``.

The output recording says ``synthetic: true`` and carries ``derived`` in its manifest (kind
"derived/synthetic", the source path, its digest and synthetic flag, the shape, the seed, the
method). Emitted tokens are empty (counts 0, no routes): no engine ever ran these steps; compare
impls with each other (``--against reference``), not with "recorded".
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from replay_harness.errors import UsageError
from replay_harness.limits import MAX_STEP_BYTES, check_output, enforce
from replay_harness.recording.store import Emitted, Recording, RecordingWriter
from replay_harness.recording.step import Step

HEAD = 64
MAX_VOCAB = 262144
MAX_DRAFTS = 16
METHOD = ("tile real rows; keep the top-64 logits of each row; extend/trim the rest by resampling the row's own "
          "values, shifted to keep the tail's probability mass")


def _pool(source: Recording, need: int) -> dict[str, torch.Tensor]:
    """Up to ``need`` rows of the source in recorded order (cycled later), with per-row owner parameters.

    Returns logits [P, V_src] (source dtype), draft [P] int64 (-1 = none), positions [P] int64, and the
    owner's temperature/top_k/top_p/min_p [P].
    """
    parts: dict[str, list[torch.Tensor]] = {n: [] for n in ("logits", "draft", "positions", "temperature",
                                                             "top_k", "top_p", "min_p")}
    have = 0
    for record in source:
        s = record.step
        owner = s.row_to_request()
        parts["logits"].append(s.logits)
        parts["draft"].append(s.draft_token_ids.long())
        parts["positions"].append(s.positions.long())
        for n in ("temperature", "top_k", "top_p", "min_p"):
            parts[n].append(getattr(s, n)[owner])
        have += s.logits.shape[0]
        if have >= need:
            break
    if not have:
        raise UsageError(f"{source.path}: the source recording has no steps to derive from")
    return {n: torch.cat(v) for n, v in parts.items()}


def resize_rows(rows: torch.Tensor, vocab: int, gen: torch.Generator) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """Rows [n, V_src] (any float dtype) -> float32 [n, vocab] keeping each row's distribution shape.

    Returns (rows, id_maps): id_maps is None when token ids keep their meaning (vocab >= V_src), else a
    list of per-row sorted int64 tensors: kept source ids, so new id = position in that list.
    """
    x = rows.float()
    n, v_src = x.shape
    head_n = min(HEAD, v_src)
    head_idx = torch.topk(torch.nan_to_num(x, nan=float("-inf")), head_n, dim=1).indices
    is_head = torch.zeros_like(x, dtype=torch.bool)
    is_head.scatter_(1, head_idx, True)
    bulk = x.masked_fill(is_head, float("-inf"))
    lse_bulk = torch.logsumexp(bulk, dim=1)  # -inf when the bulk is empty / all -inf
    head_min = x.masked_fill(~is_head, float("inf")).min(dim=1).values
    if vocab >= v_src:
        extra = vocab - v_src
        out = torch.empty(n, vocab, dtype=torch.float32)
        out[:, :v_src] = x
        if extra:
            # bulk values of each row, sorted ascending (head entries removed): resample positions uniformly
            nb = v_src - head_n
            sorted_bulk = torch.sort(x.masked_fill(is_head, float("inf")), dim=1).values[:, :max(nb, 1)]
            if nb == 0:
                sorted_bulk = torch.full((n, 1), float("-inf"))
                nb = 1
            pick = torch.randint(0, nb, (n, extra), generator=gen)
            out[:, v_src:] = torch.gather(sorted_bulk, 1, pick)
        new_bulk_mask = torch.ones(n, vocab, dtype=torch.bool)
        new_bulk_mask[:, :v_src] = ~is_head
        id_maps = None
    else:
        out = torch.empty(n, vocab, dtype=torch.float32)
        new_bulk_mask = torch.ones(n, vocab, dtype=torch.bool)
        id_maps = []
        for j in range(n):
            keep = is_head[j].clone()
            non_head = torch.nonzero(~is_head[j]).flatten()[: vocab - head_n]
            keep[non_head] = True
            ids = torch.nonzero(keep).flatten()
            id_maps.append(ids)
            out[j] = x[j, ids]
            new_bulk_mask[j] = ~is_head[j, ids]
    new_lse = torch.logsumexp(out.masked_fill(~new_bulk_mask, float("-inf")), dim=1)
    shift = lse_bulk - new_lse
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    bulk_max = out.masked_fill(~new_bulk_mask, float("-inf")).max(dim=1).values
    cap = torch.where(torch.isfinite(bulk_max) & torch.isfinite(head_min), head_min - bulk_max,
                      torch.full_like(shift, float("inf")))
    shift = torch.minimum(shift, cap.clamp(min=0.0))
    out = torch.where(new_bulk_mask, out + shift[:, None], out)
    return out, id_maps


def derive_steps(source: Recording, *, batch: int, drafts: int, vocab: int, steps: int = 2,
                 seed: int = 0, dtype: torch.dtype | None = None) -> Iterator[tuple[Step, dict]]:
    """``steps`` DERIVED steps of ``batch`` requests with ``drafts`` drafts each at vocabulary ``vocab``.

    Yields (step, info) with info = {"argmax_drafts": rows whose draft is the row argmax because the pool
    row had no recorded draft}. Logits keep the source dtype unless ``dtype`` is given.
    """
    check_shape(batch, drafts, vocab, steps)
    rows_per_step = batch * (drafts + 1)
    pool = _pool(source, rows_per_step * steps)
    p = pool["logits"].shape[0]
    out_dtype = dtype or pool["logits"].dtype
    gen = torch.Generator().manual_seed(seed)
    for s in range(steps):
        sel = (torch.arange(rows_per_step) + s * rows_per_step) % p
        logits, id_maps = resize_rows(pool["logits"][sel], vocab, gen)
        src_draft = pool["draft"][sel]
        argmax = logits.argmax(dim=1)
        draft = src_draft.clone()
        if id_maps is not None:  # renumber recorded drafts; a draft that fell out of the vocabulary -> argmax
            for j, ids in enumerate(id_maps):
                if draft[j] >= 0:
                    at = int(torch.searchsorted(ids, draft[j]))
                    draft[j] = at if at < ids.numel() and int(ids[at]) == int(draft[j]) else -1
        no_draft = draft < 0
        draft = torch.where(no_draft, argmax, draft)
        is_bonus = torch.zeros(rows_per_step, dtype=torch.bool)
        is_bonus[drafts::drafts + 1] = True
        draft[is_bonus] = -1
        first = torch.arange(batch) * (drafts + 1)
        owner = sel[first]
        step = Step(
            logits=logits.to(out_dtype),
            cu_num_logits=torch.arange(0, rows_per_step + 1, drafts + 1, dtype=torch.int32),
            draft_token_ids=draft.to(torch.int32),
            positions=pool["positions"][sel].clone(),
            temperature=pool["temperature"][owner].clone(), top_k=pool["top_k"][owner].clone(),
            top_p=pool["top_p"][owner].clone(), min_p=pool["min_p"][owner].clone(),
            seed=torch.randint(-2**62, 2**62, (batch,), generator=gen, dtype=torch.int64),
            request_ids=torch.arange(batch, dtype=torch.int64) + 1000 * (s + 1))
        yield step, {"argmax_drafts": int((no_draft & ~is_bonus).sum())}


def check_shape(batch: int, drafts: int, vocab: int, steps: int) -> None:
    if batch < 1:
        raise UsageError(f"--batch {batch}: must be >= 1")
    if not 0 <= drafts <= MAX_DRAFTS:
        raise UsageError(f"--drafts {drafts}: must be in [0, {MAX_DRAFTS}]")
    if not 2 <= vocab <= MAX_VOCAB:
        raise UsageError(f"--vocab {vocab}: must be in [2, {MAX_VOCAB}]")
    if steps < 1:
        raise UsageError(f"--steps {steps}: must be >= 1")
    # built in float32 before any allocation is made: R * (k+1) rows of V logits
    enforce(MAX_STEP_BYTES, batch * (drafts + 1) * vocab * 4, f"--batch {batch} --drafts {drafts} --vocab {vocab}",
            claim="size of a derived step's float32 logits")


def write_derived(source_path: str | Path, out: str | Path, *, batch: int, drafts: int, vocab: int, steps: int = 2,
                  seed: int = 0, overwrite: bool = False) -> Path:
    """Write :func:`derive_steps` as a recording labelled derived/synthetic; returns its path.

    ``out`` may not be, hold or lie inside the source (refused before anything is written or deleted)."""
    check_shape(batch, drafts, vocab, steps)
    check_output(out, [source_path], "--out")
    source = Recording(source_path)
    derived = {"kind": "derived/synthetic", "from": str(source.path), "from_digest": source.manifest.get("digest"),
               "from_synthetic": source.synthetic, "from_vocab_size": source.vocab_size, "batch": batch,
               "drafts": drafts, "vocab_size": vocab, "steps": steps, "seed": seed, "method": METHOD}
    argmax_rows = 0
    with RecordingWriter(out, vocab_size=vocab, rng_contract=source.rng_contract, synthetic=True,
                         source={"synthetic": True, "derived": derived}, overwrite=overwrite) as w:
        for step, info in derive_steps(source, batch=batch, drafts=drafts, vocab=vocab, steps=steps, seed=seed):
            argmax_rows += info["argmax_drafts"]
            empty = Emitted(tokens=torch.full((batch, drafts + 1), -1, dtype=torch.int32),
                            counts=torch.zeros(batch, dtype=torch.int32))
            w.write_step(step, empty, meta={"synthetic": True, "derived": True})
        derived["argmax_draft_rows"] = argmax_rows
        w.manifest["derived"] = derived
    return Path(out)
