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
  (and it maps into the new vocabulary), else the row's argmax (marked in the manifest). A pool row's draft and
  position are those the row scored: in a draft tree (``verify_method`` tree, docs/FIXTURES.md "Draft trees") row
  ``cu[r] + 1 + m`` is node m's and scores m's children, so it takes the token of m's first child (-1 for a leaf:
  its argmax) and the position ``P0 + depth(m)`` (the root's row: node 0's token, P0), not the token and position
  that the tree layout keeps on that row (node m + 1's). Derived steps are chains (standard verification, no
  ``tree_parent``), as from every source.
* per-request sampling parameters come from the source request that owned the request's first
  pool row; seeds are fresh (seeded), request ids are ``1000 * (step + 1) + r``.

The output recording says ``synthetic: true`` and carries ``derived`` in its manifest (kind
"derived/synthetic", the source path, its digest and synthetic flag, the shape, the seed, the
method). No engine ever ran these steps: the emitted tensors hold the **reference's** tokens, counts
and routes (the torch oracle, on the CPU, computed once here), and the manifest says so with
``expected_tokens: "reference"`` and the reference's RNG contract (docs/FIXTURES.md). ``replay run``
compares an impl with them, so a replay of a derived corpus runs at the speed of the disk instead of
the speed of the CPU oracle (docs/SCALE.md). ``expected=False`` writes empty answers (counts 0, routes
unknown) as before; ``replay run`` then runs the reference itself.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from replay_harness.errors import UsageError
from replay_harness.limits import MAX_STEP_BYTES, check_output, enforce
from replay_harness.recording.schema import VERIFY_METHODS
from replay_harness.recording.store import Emitted, Recording, RecordingWriter
from replay_harness.recording.step import Step

HEAD = 64
MAX_VOCAB = 262144
MAX_DRAFTS = 16
CHUNK_ROWS = 64  # output rows finished at a time in resize_rows
METHOD = ("tile real rows; keep the top-64 logits of each row; extend/trim the rest by resampling the row's own "
          "values, shifted to keep the tail's probability mass")


def _pool(source: Recording, need: int) -> dict[str, torch.Tensor]:
    """Up to ``need`` rows of the source in recorded order (cycled later), with per-row owner parameters.

    Returns logits [P, V_src] (source dtype), draft [P] int64 (-1 = none) and positions [P] int64 as each row scored
    them (:func:`scored_by_row`), and the owner's temperature/top_k/top_p/min_p [P].
    """
    parts: dict[str, list[torch.Tensor]] = {n: [] for n in ("logits", "draft", "positions", "temperature",
                                                             "top_k", "top_p", "min_p")}
    have = 0
    for record in source:
        s = record.step
        owner = s.row_to_request()
        draft, positions = scored_by_row(s)
        parts["logits"].append(s.logits)
        parts["draft"].append(draft)
        parts["positions"].append(positions)
        for n in ("temperature", "top_k", "top_p", "min_p"):
            parts[n].append(getattr(s, n)[owner])
        have += s.logits.shape[0]
        if have >= need:
            break
    if not have:
        raise UsageError(f"{source.path}: the source recording has no steps to derive from")
    return {n: torch.cat(v) for n, v in parts.items()}


def scored_by_row(step: Step) -> tuple[torch.Tensor, torch.Tensor]:
    """(draft [N] int64, positions [N] int64): per row, the draft it verified first (-1: none) and the position of
    the token drawn from it. A chain's rows hold them already; a tree request's rows are re-read (module docstring)."""
    draft, positions = step.draft_token_ids.long().clone(), step.positions.long().clone()
    if step.verify_method is None or step.tree_parent is None:
        return draft, positions
    tree = VERIFY_METHODS.index("tree")
    cu = step.cu_num_logits.long().tolist()
    for r in torch.nonzero(step.verify_method.long() == tree).flatten().tolist():
        a, b = cu[r], cu[r + 1]
        parents = step.tree_parent[a:b - 1].long().tolist()
        tokens = step.draft_token_ids[a:b - 1].long().tolist()
        p0 = int(step.positions[a])
        depth: list[int] = []
        first_child = [-1] * (len(parents) + 1)  # index m + 1: node m's first child (index 0: the root's)
        for i, parent in enumerate(parents):
            depth.append(1 if parent < 0 else depth[parent] + 1)
            if first_child[parent + 1] < 0:
                first_child[parent + 1] = i
        for m in range(-1, len(parents)):
            child = first_child[m + 1]
            draft[a + 1 + m] = tokens[child] if child >= 0 else -1
            positions[a + 1 + m] = p0 + (depth[m] if m >= 0 else 0)
    return draft, positions


def _row_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows x [m, V_src] float32 -> (is_head [m, V_src] bool, lse_bulk [m] float32, head_min [m] float32).

    is_head marks each row's ``HEAD`` largest logits (NaN counts as -inf); lse_bulk is the logsumexp of
    the other entries (-inf when there are none / all are -inf); head_min is the smallest head logit.
    """
    head_idx = torch.topk(torch.nan_to_num(x, nan=float("-inf")), min(HEAD, x.shape[1]), dim=1).indices
    is_head = torch.zeros_like(x, dtype=torch.bool)
    is_head.scatter_(1, head_idx, True)
    lse_bulk = torch.logsumexp(x.masked_fill(is_head, float("-inf")), dim=1)
    head_min = x.masked_fill(~is_head, float("inf")).min(dim=1).values
    return is_head, lse_bulk, head_min


def _sorted_bulk(x: torch.Tensor, is_head: torch.Tensor) -> torch.Tensor:
    """Each row's bulk values sorted ascending: float32 [m, nb] (nb = V_src - HEAD), or [m, 1] of -inf if nb = 0."""
    nb = x.shape[1] - min(HEAD, x.shape[1])
    if nb == 0:
        return torch.full((x.shape[0], 1), float("-inf"))
    return torch.sort(x.masked_fill(is_head, float("inf")), dim=1).values[:, :nb]


def _trim(x: torch.Tensor, is_head: torch.Tensor, vocab: int) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Keep each row's head plus its lowest-id bulk tokens, ``vocab`` in all (ids renumbered in order).

    Returns (kept logits [m, vocab] float32, kept head mask [m, vocab] bool, per-row kept source ids int64).
    """
    head_n = min(HEAD, x.shape[1])
    kept = torch.empty(x.shape[0], vocab, dtype=torch.float32)
    head_mask = torch.empty(x.shape[0], vocab, dtype=torch.bool)
    id_maps = []
    for j in range(x.shape[0]):
        keep = is_head[j].clone()
        keep[torch.nonzero(~is_head[j]).flatten()[: vocab - head_n]] = True
        ids = torch.nonzero(keep).flatten()
        id_maps.append(ids)
        kept[j] = x[j, ids]
        head_mask[j] = is_head[j, ids]
    return kept, head_mask, id_maps


def _shift_bulk(out: torch.Tensor, head_pos: torch.Tensor, lse_bulk: torch.Tensor, head_min: torch.Tensor) -> None:
    """Shift the bulk entries (all but columns head_pos, int64 [c, h]) of rows out [c, V] float32 in place by one
    constant per row so the bulk's logsumexp is lse_bulk [c] again; the shift is capped so no bulk value passes
    head_min [c]. Head entries keep their exact values."""
    bulk = out.clone().scatter_(1, head_pos, float("-inf"))
    shift = lse_bulk - torch.logsumexp(bulk, dim=1)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    bulk_max = bulk.max(dim=1).values
    del bulk
    cap = torch.where(torch.isfinite(bulk_max) & torch.isfinite(head_min), head_min - bulk_max,
                      torch.full_like(shift, float("inf")))
    shift = torch.minimum(shift, cap.clamp(min=0.0))
    head = out.gather(1, head_pos)
    out.add_(shift[:, None]).scatter_(1, head_pos, head)


def resize_rows(rows: torch.Tensor, vocab: int, gen: torch.Generator,
                index: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """Rows [m, V_src] (any float dtype) -> float32 [n, vocab] keeping each row's distribution shape.

    Output row j is built from ``rows[index[j]]`` (index: int64 [n], default ``arange(m)``); the per-row work
    (head, bulk statistics, sorted bulk, kept ids) is done once per source row, the resampled bulk values
    (``torch.randint`` [n, vocab - V_src]) are drawn for every output row. Returns (rows, id_maps): id_maps is
    None when token ids keep their meaning (vocab >= V_src), else a list of n sorted int64 tensors: kept
    source ids, so new id = position in that list.
    """
    x = rows.float()
    v_src = x.shape[1]
    index = torch.arange(x.shape[0]) if index is None else index
    n = index.numel()
    is_head, lse_bulk, head_min = _row_stats(x)
    pick = sorted_bulk = id_maps = None
    if vocab >= v_src:
        base, base_head = x, is_head
        if vocab > v_src:
            sorted_bulk = _sorted_bulk(x, is_head)
            pick = torch.randint(0, sorted_bulk.shape[1], (n, vocab - v_src), generator=gen)
    else:
        base, base_head, kept_ids = _trim(x, is_head, vocab)
        id_maps = [kept_ids[i] for i in index.tolist()]
    out = torch.empty(n, vocab, dtype=torch.float32)
    width = base.shape[1]
    head_pos = base_head.nonzero()[:, 1].view(base.shape[0], -1)  # [m, HEAD] columns of each row's head
    for a in range(0, n, CHUNK_ROWS):  # row chunks keep the [rows, vocab] temporaries small
        src = index[a:a + CHUNK_ROWS]
        chunk = out[a:a + CHUNK_ROWS]
        chunk[:, :width] = base[src]
        if pick is not None:
            chunk[:, width:] = torch.gather(sorted_bulk[src], 1, pick[a:a + CHUNK_ROWS])
        _shift_bulk(chunk, head_pos[src], lse_bulk[src], head_min[src])
    return out, id_maps


def derive_steps(source: Recording, *, batch: int, drafts: int, vocab: int, steps: int = 2,
                 seed: int = 0, dtype: torch.dtype | None = None) -> Iterator[tuple[Step, dict]]:
    """``steps`` DERIVED steps of ``batch`` requests with ``drafts`` drafts each at vocabulary ``vocab``.

    Yields (step, info) with info = {"argmax_drafts": rows whose draft is the row argmax because the pool
    row had no recorded draft}. Logits keep the source dtype unless ``dtype`` is given.
    """
    check_shape(batch, drafts, vocab, steps)
    check_vocab(source, vocab)
    rows_per_step = batch * (drafts + 1)
    pool = _pool(source, rows_per_step * steps)
    p = pool["logits"].shape[0]
    out_dtype = dtype or pool["logits"].dtype
    gen = torch.Generator().manual_seed(seed)
    for s in range(steps):
        sel = (torch.arange(rows_per_step) + s * rows_per_step) % p
        used, where = torch.unique(sel, return_inverse=True)  # at most min(p, rows_per_step) distinct pool rows
        logits, id_maps = resize_rows(pool["logits"][used], vocab, gen, where)
        src_draft = pool["draft"][sel]
        argmax = logits.argmax(dim=1)
        logits = logits.to(out_dtype)  # drops the float32 copy while the step is used
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
            logits=logits,
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


def check_vocab(source: Recording, vocab: int) -> None:
    """Trimming keeps each row's head: below the source's V, ``vocab`` must hold HEAD tokens."""
    if vocab < min(HEAD, source.vocab_size):
        raise UsageError(f"--vocab {vocab}: below the source's V = {source.vocab_size} it must be at least {HEAD} "
                         f"(each row's top-{HEAD} logits are kept)")


def write_derived(source_path: str | Path, out: str | Path, *, batch: int, drafts: int, vocab: int, steps: int = 2,
                  seed: int = 0, overwrite: bool = False, expected: bool = True) -> Path:
    """Write :func:`derive_steps` as a recording labelled derived/synthetic; returns its path. ``expected``:
    store the reference's answer to every step (module docstring).

    ``out`` may not be, hold or lie inside the source (refused before anything is written or deleted)."""
    from replay_harness.impls.reference import ReferenceSampler

    check_shape(batch, drafts, vocab, steps)
    check_output(out, [source_path], "--out")
    source = Recording(source_path)
    check_vocab(source, vocab)
    derived = {"kind": "derived/synthetic", "from": str(source.path), "from_digest": source.manifest.get("digest"),
               "from_synthetic": source.synthetic, "from_vocab_size": source.vocab_size, "batch": batch,
               "drafts": drafts, "vocab_size": vocab, "steps": steps, "seed": seed, "method": METHOD}
    argmax_rows = 0
    reference = ReferenceSampler() if expected else None
    contract = reference.rng_contract if expected else source.rng_contract
    with RecordingWriter(out, vocab_size=vocab, rng_contract=contract, synthetic=True,
                         source={"synthetic": True, "derived": derived}, overwrite=overwrite) as w:
        if expected:
            w.manifest["expected_tokens"] = "reference"
        for step, info in derive_steps(source, batch=batch, drafts=drafts, vocab=vocab, steps=steps, seed=seed):
            argmax_rows += info["argmax_drafts"]
            if reference is not None:
                got = reference.sample(step)
                answer = Emitted(tokens=got.tokens.to(torch.int32), counts=got.counts.to(torch.int32),
                                 routes=got.routes.to(torch.int8))
            else:
                answer = Emitted(tokens=torch.full((batch, drafts + 1), -1, dtype=torch.int32),
                                 counts=torch.zeros(batch, dtype=torch.int32))
            w.write_step(step, answer, meta={"synthetic": True, "derived": True})
            del step  # free this step's logits before the next one is built
        derived["argmax_draft_rows"] = argmax_rows
        w.manifest["derived"] = derived
    return Path(out)
