"""Checks one step's tensors against fixture schema v1 (docs/FIXTURES.md), and a whole recording.

``check_step`` returns every problem it finds, each an ``InputError`` naming
file, step and field; loaders raise the first, ``replay validate`` lists them all.
Names, dtypes and shapes come from :data:`replay_harness.recording.schema.FIELDS`;
the value rules (ranges, ordering, NaN) are written here.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from replay_harness.errors import InputError
from replay_harness.recording.digest import ALGORITHMS, HEX_DIGITS, algorithm_of, recording_digest, tensor_digest
from replay_harness.recording.validate_pipeline import check_pipeline
from replay_harness.recording.schema import (FIELDS, KNOWN_FIELDS, MANIFEST, MANIFEST_KEYS,
                                             OPTIONAL_MANIFEST_KEYS, ROUTE_CODE, ROUTES, UNKNOWN_ROUTE,
                                             UNSUPPORTED_FIELDS, Field)

# Checked fields in the order their problems are listed: single-dtype fields first, then the float ones
# (logits, draft_logits); within each, table order.
_TYPED = sorted((f for f in FIELDS if f.dtypes), key=lambda f: len(f.dtypes) > 1)
# Shape checks after logits [N, V] and cu_num_logits [R+1] fixed N and R: the shape groups in the order
# their problems are listed, with what the message says the dims are.
_SHAPE_NOTES = {("N",): "one per logits row", ("R",): "one per request", ("R", "K+1"): "R, max_k+1",
                ("N-R", "V"): "one per verify row", ("R+1",): "a prefix sum over requests",
                ("N", "W"): "one bitmask row per logits row, ceil(V/32) words",
                ("R", "K+1", "W"): "R, max_k+1, ceil(V/32) words"}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _expected_dtypes(field: Field) -> str:
    """``int32`` or ``float32, bfloat16 or float16``."""
    names = [_dtype_name(d) for d in field.dtypes]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


NEG_INF_ROW = "all -inf row"  # how the warning (or, with neg_inf="error", the error) of such a row begins


def is_neg_inf_row(problem: InputError) -> bool:
    """Is ``problem`` the report of an all -inf logits row (one per row: they are counted by it)?"""
    return problem.field == "logits" and problem.message.startswith(NEG_INF_ROW)


def check_step(t: dict[str, torch.Tensor], vocab_size: int, *, file: Path, step: int,
               nan: str = "error", neg_inf: str = "warn",
               row_max: dict[str, torch.Tensor] | None = None) -> list[InputError]:
    """All schema violations of one step; ``nan`` is "error" or "warn" for NaN logits, ``neg_inf`` the same
    for a logits row that is all -inf (every token masked: one problem per row, docs/FIXTURES.md).

    The float rows (``logits``, ``draft_logits``) may be on a CUDA device, the other tensors on the CPU; the
    one pass over the rows then runs there. ``row_max``: their row maxima (``amax(1)``), when the caller
    computed them already (the Recorder, on the device before its copy): then no row is read here unless
    one holds a NaN."""
    out: list[InputError] = []

    def bad(field: str, message: str, warning: bool = False) -> None:
        out.append(InputError(file, message, step=step, field=field, warning=warning))

    def failed() -> bool:  # an error so far (a warning, e.g. an unknown name, never stops the checks after it)
        return any(not p.warning for p in out)

    for name in UNSUPPORTED_FIELDS:
        if name in t:
            bad(name, "a name minor 1 reserved and the format did not adopt (docs/FIXTURES.md, 'The sampling "
                      "pipeline': bad_words_token_ids, allowed_token_ids)")
    for name in sorted(set(t) - KNOWN_FIELDS):
        bad(name, "unknown tensor name for schema v1", warning=True)
    for f in FIELDS:
        if f.required and f.name not in t:
            bad(f.name, "required tensor is missing")
    for f in _TYPED:
        if f.name in t and t[f.name].dtype not in f.dtypes:
            bad(f.name, f"wrong dtype {_dtype_name(t[f.name].dtype)}, expected {_expected_dtypes(f)}")
    if failed():
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
    if failed():
        return out
    k = cu_l[1:] - cu_l[:-1] - 1
    dims = {"N": n, "R": r, "V": vocab_size, "N-R": n - r, "K+1": int(k.max()) + 1, "R+1": r + 1,
            "W": (vocab_size + 31) // 32}
    for shape, note in _SHAPE_NOTES.items():
        expected = tuple(dims[d] for d in shape)
        for f in FIELDS:
            if f.shape == shape and f.name in t and f.name != "cu_num_logits" and t[f.name].shape != expected:
                bad(f.name, f"shape {list(t[f.name].shape)}, expected {list(expected)} ({note})")
    if failed():
        return out

    # One pass per tensor: a row's max is NaN if it holds a NaN, +inf if it holds +inf (and no NaN), -inf iff
    # every entry is -inf. Only a tensor with a NaN takes the slower scans (a +inf beside a NaN is reported too).
    neg_inf_rows = None
    for name in ("logits", "draft_logits"):
        if name in t:
            x = t[name]
            given = (row_max or {}).get(name)
            maxima = given if given is not None and given.shape == x.shape[:1] else x.amax(1)
            has_nan = bool(torch.isnan(maxima).any())
            if has_nan:
                row = int(torch.nonzero(torch.isnan(maxima))[0])
                bad(name, f"NaN at row {row}", warning=(nan == "warn"))
            if bool(torch.isposinf(x if has_nan else maxima).any()):
                bad(name, "+inf logit (only -inf is allowed, for masked tokens)")
            if name == "logits":
                neg_inf_rows = torch.isneginf(x).all(1) if has_nan else torch.isneginf(maxima)
    for row in torch.nonzero(neg_inf_rows).flatten().cpu().tolist():
        bad("logits", f"{NEG_INF_ROW} {row}: every token masked (the reference emits token 0 there, as vLLM "
                      "does; --neg-inf-rows error rejects it)", warning=(neg_inf != "error"))
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
    if not failed():
        check_pipeline(t, k, vocab_size, bad)
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
            return
        # count 0 means refused: a refused route emits nothing, and nothing emitted is a refusal (or unknown)
        refused = routes == ROUTE_CODE["refused"]
        wrong = (refused & (counts != 0)) | ((counts == 0) & ~refused & (routes != UNKNOWN_ROUTE))
        if bool(wrong.any()):
            rr = int(torch.nonzero(wrong)[0])
            bad("emitted_routes", f"request {rr}: route {ROUTES[int(routes[rr])]} with emitted_counts "
                                  f"{int(counts[rr])} (count 0 if and only if the route is refused, or -1 unknown)")


def _manifest_value_problem(kind: str, value) -> str | None:
    """Why ``value`` is not of manifest kind ``kind`` (schema.ManifestKey), or None."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind == "count" and not (is_int and value >= 0):
        return "must be an integer >= 0"
    if kind == "positive" and not (is_int and value >= 1):
        return "must be an integer >= 1"
    if kind in ("name", "schema") and not (isinstance(value, str) and value):
        return "must be a non-empty string"
    if kind == "bool" and not isinstance(value, bool):
        return "must be true or false"
    if kind == "object" and not isinstance(value, dict):
        return "must be a JSON object"
    if kind == "digest" and not (isinstance(value, str) and len(value) in HEX_DIGITS.values()
                                 and all(c in "0123456789abcdef" for c in value)):
        return "must be lowercase hex characters (64 for sha256, 32 for xxh3-128)"
    if kind == "algorithm" and not (isinstance(value, str) and value in ALGORITHMS):
        return f"must be one of {', '.join(sorted(ALGORITHMS))}"
    if kind == "expected" and value != "reference":
        return 'must be "reference"'
    return None


def check_manifest(manifest: dict, file: Path, required: bool = True) -> list[InputError]:
    """Every missing or mistyped key of ``manifest.json`` (schema.MANIFEST_KEYS; schema.OPTIONAL_MANIFEST_KEYS
    only when present; unknown keys are allowed). ``required=False`` (the readers, ``Recording``): only the keys
    that are present, each of its kind.

    ``num_steps`` and ``digest`` are checked only when ``complete`` is true."""
    out: list[InputError] = []
    closed = manifest.get("complete") is True
    for key in MANIFEST_KEYS + OPTIONAL_MANIFEST_KEYS:
        if key.closed and not closed:
            continue
        if key.name not in manifest:
            if required and key not in OPTIONAL_MANIFEST_KEYS:
                out.append(InputError(file, "required key is missing" + (" (the recording is closed)" if key.closed
                                                                         else ""), field=key.name))
            continue
        why = _manifest_value_problem(key.kind, manifest[key.name])
        if why:
            out.append(InputError(file, f"{why}, got {json.dumps(manifest[key.name])[:60]}", field=key.name))
    digest, algorithm = manifest.get("digest"), algorithm_of(manifest)
    if closed and isinstance(digest, str) and not out and len(digest) != HEX_DIGITS[algorithm]:
        out.append(InputError(file, f"{len(digest)} hex characters, but a {algorithm} digest has "
                                    f"{HEX_DIGITS[algorithm]} (digest_algorithm)", field="digest"))
    return out


def close_problems(rec, digests: list[str] | None = None) -> list[InputError]:
    """Warnings about how an opened ``Recording`` was closed: not cleanly (``complete`` false), or a content
    digest that does not match the steps. ``digests``: the steps' tensor digests when the caller has them;
    else a step's digest is the one remembered when it was read (``Recording.__getitem__``, any torchrun rank;
    recording/digest.py) if the file has not changed since, and the other steps are read once more. A step
    that cannot be read skips the digest check."""
    manifest = rec.path / MANIFEST
    if not rec.manifest.get("complete", False):
        return [InputError(manifest, f"recording did not close cleanly; {len(rec)} finished steps are "
                           "readable", field="complete", warning=True)]
    if not isinstance(rec.manifest.get("digest"), str):
        return []
    if digests is None:
        try:
            digests = [rec.step_digest(i) for i in range(len(rec))]
        except InputError:
            return []
    if len(digests) == len(rec) and recording_digest(digests, rec.digest_algorithm) != rec.manifest["digest"]:
        # a warning: a foreign writer may canonicalize its metadata JSON differently (docs/FIXTURES.md)
        return [InputError(manifest, "content digest does not match the steps: a step file changed after the "
                           "recording was closed (or its writer computes the digest differently)", field="digest",
                           warning=True)]
    return []


def check_recording(rec, nan: str = "error", neg_inf: str = "warn") -> list[InputError]:
    """Every problem of an opened ``Recording``: each step's schema, the clean-close flag and, for a closed
    recording, its content digest (a step file edited, swapped or bit-flipped after close: a warning).

    Warnings (``p.warning``) leave the recording usable; errors make ``replay validate`` exit 2.
    """
    manifest = rec.path / MANIFEST
    problems: list[InputError] = check_manifest(rec.manifest, manifest)
    digests: list[str] = []
    for i in range(len(rec)):
        try:
            tensors, meta = rec.read_tensors(i)
        except InputError as e:
            problems.append(e)
            continue
        problems.extend(check_step(tensors, rec.vocab_size, file=rec.files[i], step=i, nan=nan, neg_inf=neg_inf))
        digests.append(tensor_digest(tensors, meta, rec.digest_algorithm))
    return problems + close_problems(rec, digests)
