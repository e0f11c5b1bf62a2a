"""Checks one step's tensors against fixture schema v1 (docs/FIXTURES.md).

``check_step`` returns every problem it finds, each an ``InputError`` naming
file, step and field; loaders raise the first, ``replay validate`` lists them all.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .errors import InputError
from .fixture import EMITTED_FIELDS, OPTIONAL_EMITTED, OPTIONAL_FIELDS, STEP_FIELDS, UNSUPPORTED_FIELDS
from .step import ROUTES

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
DTYPES = {
    "cu_num_logits": torch.int32, "draft_token_ids": torch.int32, "positions": torch.int64,
    "temperature": torch.float32, "top_k": torch.int32, "top_p": torch.float32, "min_p": torch.float32,
    "seed": torch.int64, "request_ids": torch.int64,
    "emitted_tokens": torch.int32, "emitted_counts": torch.int32, "emitted_routes": torch.int8,
}
PER_REQUEST = ("temperature", "top_k", "top_p", "min_p", "seed", "request_ids", "emitted_counts", "emitted_routes")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_step(t: dict[str, torch.Tensor], vocab_size: int, *, file: Path, step: int,
               nan: str = "error") -> list[InputError]:
    """All schema violations of one step; ``nan`` is "error" or "warn" for NaN logits."""
    out: list[InputError] = []

    def bad(field: str, message: str, warning: bool = False) -> None:
        out.append(InputError(file, message, step=step, field=field, warning=warning))

    for name in UNSUPPORTED_FIELDS:
        if name in t:
            bad(name, "uses penalties / logit bias / bad words, which need token histories; "
                      "schema v1 replay does not implement them yet (see docs/FIXTURES.md, 'Not yet supported')")
    known = set(STEP_FIELDS) | set(OPTIONAL_FIELDS) | set(EMITTED_FIELDS) | set(OPTIONAL_EMITTED) | set(UNSUPPORTED_FIELDS)
    for name in sorted(set(t) - known):
        bad(name, "unknown tensor name for schema v1", warning=True)
    missing = [n for n in (*STEP_FIELDS, *EMITTED_FIELDS) if n not in t]
    for name in missing:
        bad(name, "required tensor is missing")
    for name, dtype in DTYPES.items():
        if name in t and t[name].dtype != dtype:
            bad(name, f"wrong dtype {_dtype_name(t[name].dtype)}, expected {_dtype_name(dtype)}")
    for name in ("logits", "draft_logits"):
        if name in t and t[name].dtype not in FLOAT_DTYPES:
            bad(name, f"wrong dtype {_dtype_name(t[name].dtype)}, expected float32, bfloat16 or float16")
    if out and any(not p.warning for p in out):
        return out  # shapes below assume names and dtypes are right

    logits, cu = t["logits"], t["cu_num_logits"]
    if logits.ndim != 2 or logits.shape[1] != vocab_size:
        bad("logits", f"shape {list(logits.shape)}, expected [N, {vocab_size}] (vocab_size from the manifest)")
        return out
    n = logits.shape[0]
    if cu.ndim != 1 or cu.numel() < 2:
        bad("cu_num_logits", f"shape {list(cu.shape)}, expected [R+1] with R >= 1")
        return out
    r = cu.numel() - 1
    cu_l = cu.long()
    if int(cu_l[0]) != 0:
        bad("cu_num_logits", f"must start at 0, starts at {int(cu_l[0])}")
    if bool((cu_l[1:] <= cu_l[:-1]).any()):
        at = int(torch.nonzero(cu_l[1:] <= cu_l[:-1])[0]) + 1
        bad("cu_num_logits", f"not strictly increasing at index {at} (every request owns >= 1 row)")
    if int(cu_l[-1]) != n:
        bad("cu_num_logits", f"ends at {int(cu_l[-1])} but logits has {n} rows (shape mismatch)")
    if out:
        return out
    k = cu_l[1:] - cu_l[:-1] - 1
    for name in ("draft_token_ids", "positions"):
        if t[name].shape != (n,):
            bad(name, f"shape {list(t[name].shape)}, expected [{n}] (one per logits row)")
    for name in PER_REQUEST:
        if name in t and t[name].shape != (r,):
            bad(name, f"shape {list(t[name].shape)}, expected [{r}] (one per request)")
    width = int(k.max()) + 1
    if t["emitted_tokens"].shape != (r, width):
        bad("emitted_tokens", f"shape {list(t['emitted_tokens'].shape)}, expected [{r}, {width}] (R, max_k+1)")
    if "draft_logits" in t and t["draft_logits"].shape != (n - r, vocab_size):
        bad("draft_logits", f"shape {list(t['draft_logits'].shape)}, expected [{n - r}, {vocab_size}] (one per verify row)")
    if out:
        return out

    for name in ("logits", "draft_logits"):
        if name in t:
            x = t[name]
            if bool(torch.isnan(x).any()):
                row = int(torch.nonzero(torch.isnan(x).any(1))[0])
                bad(name, f"NaN at row {row}", warning=(nan == "warn"))
            if bool(torch.isposinf(x).any()):
                bad(name, "+inf logit (only -inf is allowed, for masked tokens)")
    drafts = t["draft_token_ids"].long()
    if bool((drafts >= vocab_size).any()) or bool((drafts < -1).any()):
        j = int(torch.nonzero((drafts >= vocab_size) | (drafts < -1))[0])
        bad("draft_token_ids", f"id {int(drafts[j])} at row {j} is outside [-1, {vocab_size})")
    bonus_rows = cu_l[1:] - 1
    if bool((drafts[bonus_rows] != -1).any()):
        rr = int(torch.nonzero(drafts[bonus_rows] != -1)[0])
        bad("draft_token_ids", f"bonus row {int(bonus_rows[rr])} (request {rr}) must hold -1")
    if bool((t["positions"] < 0).any()):
        bad("positions", "negative position")
    temp = t["temperature"]
    if bool(torch.isnan(temp).any()) or bool((temp < 0).any()) or bool(torch.isinf(temp).any()):
        rr = int(torch.nonzero(torch.isnan(temp) | (temp < 0) | torch.isinf(temp))[0])
        bad("temperature", f"request {rr}: {float(temp[rr])} (must be finite and >= 0)")
    top_p = t["top_p"]
    if bool((~((top_p > 0) & (top_p <= 1))).any()):
        rr = int(torch.nonzero(~((top_p > 0) & (top_p <= 1)))[0])
        bad("top_p", f"request {rr}: {float(top_p[rr])} is outside (0, 1]")
    if bool((t["top_k"] < 0).any()):
        rr = int(torch.nonzero(t["top_k"] < 0)[0])
        bad("top_k", f"request {rr}: {int(t['top_k'][rr])} is negative (0 means off)")
    min_p = t["min_p"]
    if bool((~((min_p >= 0) & (min_p <= 1))).any()):
        rr = int(torch.nonzero(~((min_p >= 0) & (min_p <= 1)))[0])
        bad("min_p", f"request {rr}: {float(min_p[rr])} is outside [0, 1]")
    if torch.unique(t["request_ids"]).numel() != r:
        bad("request_ids", "request ids are not unique within the step")
    _check_emitted(t, k, vocab_size, bad)
    return out


def _check_emitted(t: dict[str, torch.Tensor], k: torch.Tensor, vocab_size: int, bad) -> None:
    tokens, counts = t["emitted_tokens"].long(), t["emitted_counts"].long()
    if bool((counts < 0).any()) or bool((counts > k + 1).any()):
        rr = int(torch.nonzero((counts < 0) | (counts > k + 1))[0])
        bad("emitted_counts", f"request {rr}: {int(counts[rr])} is outside [0, k+1={int(k[rr]) + 1}]")
        return
    col = torch.arange(tokens.shape[1])[None, :]
    inside = col < counts[:, None]
    if bool((inside & ((tokens < 0) | (tokens >= vocab_size))).any()):
        rr = int(torch.nonzero((inside & ((tokens < 0) | (tokens >= vocab_size))).any(1))[0])
        bad("emitted_tokens", f"request {rr}: emitted id outside [0, {vocab_size})")
    if bool((~inside & (tokens != -1)).any()):
        rr = int(torch.nonzero((~inside & (tokens != -1)).any(1))[0])
        bad("emitted_tokens", f"request {rr}: slots after emitted_counts must hold -1")
    if "emitted_routes" in t:
        routes = t["emitted_routes"].long()
        if bool(((routes < -1) | (routes >= len(ROUTES))).any()):
            bad("emitted_routes", f"route code outside [-1, {len(ROUTES) - 1}]")


def check_recording(rec, nan: str = "error") -> list[InputError]:
    """Every problem of an opened ``Recording``: each step's schema, the clean-close flag and, for a closed
    recording, its content digest (a step file edited, swapped or bit-flipped after close: a warning).

    Warnings (``p.warning``) leave the recording usable; errors make ``replay validate`` exit 2.
    """
    import hashlib

    from .fixture import MANIFEST, tensor_digest

    problems: list[InputError] = []
    digests: list[str] = []
    for i in range(len(rec)):
        try:
            tensors, meta = rec.read_tensors(i)
        except InputError as e:
            problems.append(e)
            continue
        problems.extend(check_step(tensors, rec.vocab_size, file=rec.files[i], step=i, nan=nan))
        digests.append(tensor_digest(tensors, meta))
    manifest = rec.path / MANIFEST
    if not rec.manifest.get("complete", False):
        problems.append(InputError(manifest, f"recording did not close cleanly; {len(rec)} finished steps are "
                                   "readable", field="complete", warning=True))
    elif len(digests) == len(rec) and isinstance(rec.manifest.get("digest"), str):
        got = hashlib.sha256("".join(digests).encode()).hexdigest()
        if got != rec.manifest["digest"]:
            # a warning: a foreign writer may canonicalize its metadata JSON differently (docs/FIXTURES.md)
            problems.append(InputError(manifest, "content digest does not match the steps: a step file changed "
                                       "after the recording was closed (or its writer computes the digest "
                                       "differently)", field="digest", warning=True))
    return problems
