"""Fuzz corruptions of a step file's content: truncated and flipped bytes, a garbled or lying safetensors
header (huge shapes and offsets, sparse files claiming more than the step limit), a big-but-legal sparse
step, wrong dtypes / shapes / fields / values per replay_harness/recording/schema.py, NaN and inf, bad
``replay`` metadata. Each is ``kind(case, rec, rng)``; it writes and appends a note to ``case.notes``."""
from __future__ import annotations

import json
import struct

import torch
from safetensors.torch import save as st_save

from tools.fuzz.files import FUZZ_LIMITS, GiB, MiB, join, limit_of, load, manifest_of, save, split, steps_of, write_manifest


def truncated_step(case, rec, rng):
    f = rng.choice(steps_of(rec))
    data = f.read_bytes()
    n = rng.choice([0, 1, 7, 8, 9, 16, len(data) // 2, len(data) - 1, rng.randrange(len(data))])
    f.write_bytes(data[:n])
    case.notes.append(f"{f.name} cut to {n} of {len(data)} bytes")


def garbled_bytes(case, rec, rng):
    f = rng.choice(steps_of(rec))
    data = bytearray(f.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    lo, hi = rng.choice([(0, 8), (8, 8 + n), (8 + n, len(data)), (0, len(data))])
    hi = max(hi, lo + 1)
    for _ in range(rng.choice([1, 2, 8, 64])):
        i = rng.randrange(lo, min(hi, len(data)))
        data[i] = rng.randrange(256)
    f.write_bytes(bytes(data))
    case.notes.append(f"{f.name}: bytes flipped in [{lo}, {hi})")


JSON_JUNK = '{}[]":,0123456789-+eE.ntrufals\\\x00\xff \n'


def garbled_header_json(case, rec, rng):
    f = rng.choice(steps_of(rec))
    header, body = split(f.read_bytes())
    text = json.dumps(header)
    for _ in range(rng.choice([1, 3, 10])):
        i = rng.randrange(len(text))
        text = text[:i] + "".join(rng.choice(JSON_JUNK) for _ in range(rng.randrange(1, 5))) + text[i + rng.randrange(4):]
    f.write_bytes(join(text.encode("utf-8", "surrogatepass"), body))
    case.notes.append(f"{f.name}: header JSON garbled")


HUGE = [2 ** 31, 2 ** 32 + 1, 2 ** 40, 2 ** 62, 2 ** 63 - 1, 2 ** 64 + 5, -1, 0, 1.5, "7", None, [3], 10 ** 30]


def huge_shape_claim(case, rec, rng):
    f = rng.choice(steps_of(rec))
    header, body = split(f.read_bytes())
    name = rng.choice(["logits", "draft_logits", "positions", "cu_num_logits", "emitted_tokens",
                       rng.choice(sorted(k for k in header if k != "__metadata__"))])
    info = header.setdefault(name, {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})
    how = rng.choice(["shape", "offsets", "both", "length"])
    if how in ("shape", "both"):
        info["shape"] = [rng.choice(HUGE) if rng.random() < 0.7 else d for d in info.get("shape", [1])] or [rng.choice(HUGE)]
    if how in ("offsets", "both"):
        info["data_offsets"] = [rng.choice([0, 2 ** 40, -5]), rng.choice(HUGE)]
    length = rng.choice([2 ** 63, 2 ** 40, 2 ** 24 + 3, len(body) + 10 ** 6]) if how == "length" else None
    f.write_bytes(join(header, body, length))
    case.notes.append(f"{f.name}: '{name}' claims {how} {info.get('shape')} {info.get('data_offsets')} length={length}")


def sparse_oversize(case, rec, rng):
    """A step file whose size on disk (sparse) and header claim exceed the step limit in force."""
    if rng.random() < 0.3:
        case.limits = {k: None for k in FUZZ_LIMITS}  # the defaults: claim more than 16 GiB
    cap = limit_of(case, "REPLAY_MAX_STEP_BYTES")
    f = rng.choice(steps_of(rec))
    tensors, meta = load(f)
    rows, vocab = tensors["logits"].shape
    claimed_v = cap // (4 * rows) + rng.choice([1, 1000, 10 ** 6])
    tensors["logits"] = torch.zeros(rows, 1, dtype=torch.float32)
    data = st_save(tensors, metadata=meta or None)
    header, body = split(data)
    end = header["logits"]["data_offsets"][1]
    header["logits"].update(shape=[rows, claimed_v])
    grow = rows * claimed_v * 4 - rows * 4
    for name, info in header.items():
        if name != "__metadata__" and info["data_offsets"][0] >= end:
            info["data_offsets"] = [o + grow for o in info["data_offsets"]]
    header["logits"]["data_offsets"][1] += grow
    start = header["logits"]["data_offsets"][0]
    raw = join(header, b"")
    tail = body[end:]
    with open(f, "wb") as out:
        out.write(raw + body[:start])
        if rng.random() < 0.7:  # a real sparse file of the claimed size, else a short file that only claims it
            out.seek(len(raw) + start + rows * claimed_v * 4)
        out.write(tail)
    case.notes.append(f"{f.name}: logits claim [{rows}, {claimed_v}] ({rows * claimed_v * 4 / GiB:.2f} GiB), "
                      f"file {f.stat().st_size} bytes, step limit {cap}")


def sparse_within_limit(case, rec, rng):
    """A legal but big step: step 0's logits widened to [N, V'] zeros (sparse on disk) within the step and
    vocab limits in force, the manifest's vocab_size raised to V'; the other steps removed. Measures the RSS
    a command needs for a step near the limit."""
    cap, vcap = limit_of(case, "REPLAY_MAX_STEP_BYTES"), limit_of(case, "REPLAY_MAX_VOCAB")
    files = steps_of(rec)
    for f in files[1:]:
        f.unlink()
    f = files[0]
    tensors, meta = load(f)
    tensors.pop("draft_logits", None)
    rows = tensors["logits"].shape[0]
    vocab = min(vcap, int(cap * rng.uniform(0.3, 0.95)) // (4 * rows))
    vocab = max(vocab, tensors["logits"].shape[1])
    tensors["logits"] = torch.zeros(rows, 1, dtype=torch.float32)
    header, body = split(st_save(tensors, metadata=meta or None))
    end = header["logits"]["data_offsets"][1]
    grow = rows * vocab * 4 - rows * 4
    for name, info in header.items():
        if name != "__metadata__" and info["data_offsets"][0] >= end:
            info["data_offsets"] = [o + grow for o in info["data_offsets"]]
    header["logits"].update(shape=[rows, vocab])
    header["logits"]["data_offsets"][1] += grow
    start = header["logits"]["data_offsets"][0]
    raw = join(header, b"")
    with open(f, "wb") as out:
        out.write(raw + body[:start])
        out.seek(len(raw) + start + rows * vocab * 4)
        out.write(body[end:])
    manifest = manifest_of(rec)
    manifest.update(vocab_size=vocab, complete=False, num_steps=1, digest=None)
    write_manifest(rec, manifest)
    case.notes.append(f"{f.name}: legal logits [{rows}, {vocab}] zeros, {rows * vocab * 4 / MiB:.0f} MiB sparse")


def _edit_step(rec, rng, edit) -> str:
    f = rng.choice(steps_of(rec))
    tensors, meta = load(f)
    what = edit(tensors, meta)
    save(f, tensors, meta)
    return f"{f.name}: {what}"


FIELDS = ["logits", "cu_num_logits", "draft_token_ids", "positions", "temperature", "top_k", "top_p", "min_p",
          "seed", "request_ids", "draft_logits", "emitted_tokens", "emitted_counts", "emitted_routes"]
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


def wrong_dtype(case, rec, rng):
    def edit(t, meta):
        name = rng.choice([n for n in FIELDS if n in t])
        dtype = rng.choice([d for d in DTYPES if d != t[name].dtype])
        t[name] = t[name].to(dtype)
        return f"{name} as {dtype}"
    case.notes.append(_edit_step(rec, rng, edit))


def wrong_shape(case, rec, rng):
    def edit(t, meta):
        name = rng.choice([n for n in FIELDS if n in t])
        x = t[name]
        how = rng.choice(["drop", "add", "flatten", "unsqueeze", "scalar", "empty", "transpose"])
        if how == "drop" and x.numel():
            x = x.reshape(-1)[:-1] if x.dim() <= 1 else x[:-1]
        elif how == "add":
            x = torch.cat([x, x[:1]]) if x.dim() and x.shape[0] else x.reshape(-1)
        elif how == "flatten":
            x = x.reshape(-1)
        elif how == "unsqueeze":
            x = x.unsqueeze(rng.randrange(x.dim() + 1))
        elif how == "scalar":
            x = x.reshape(-1)[0].clone() if x.numel() else torch.zeros((), dtype=x.dtype)
        elif how == "empty":
            x = x[:0]
        elif how == "transpose" and x.dim() == 2:
            x = x.t().contiguous()
        t[name] = x.contiguous()
        return f"{name} {how} -> {list(x.shape)}"
    case.notes.append(_edit_step(rec, rng, edit))


def missing_or_extra_field(case, rec, rng):
    def edit(t, meta):
        if rng.random() < 0.5:
            name = rng.choice([n for n in FIELDS if n in t])
            del t[name]
            return f"{name} removed"
        name = rng.choice(["logit_bias_ids", "repetition_penalty", "bad_words_ids", "junk", "Logits", "__x__"])
        t[name] = torch.zeros(rng.choice([0, 1, 3]), dtype=rng.choice(DTYPES))
        return f"{name} added"
    case.notes.append(_edit_step(rec, rng, edit))


def nonfinite_rows(case, rec, rng):
    def edit(t, meta):
        name = rng.choice(["logits", "logits", "draft_logits", "temperature", "top_p", "min_p"])
        name = name if name in t else "logits"
        x = t[name].clone()
        value = rng.choice([float("nan"), float("-inf"), float("inf")])
        if x.dim() == 2 and x.shape[0]:
            row = rng.randrange(x.shape[0])
            if rng.random() < 0.5:
                x[row] = value  # a whole row
            else:
                x[row, rng.randrange(x.shape[1])] = value
        elif x.numel():
            x[rng.randrange(x.numel())] = value
        t[name] = x
        return f"{name} gets {value}"
    case.notes.append(_edit_step(rec, rng, edit))


def bad_values(case, rec, rng):
    def edit(t, meta):
        name = rng.choice([n for n in FIELDS if n in t and t[n].numel() and not t[n].is_floating_point()]
                          + ["temperature", "top_p", "min_p"])
        x = t[name].clone().reshape(-1)
        info = torch.iinfo(x.dtype) if not x.is_floating_point() and x.dtype != torch.bool else None
        pool = [-1, -2, 10 ** 6, 2 ** 31 - 1] if info is None else [info.min, info.max, -1, -7, 0, 10 ** 6 % info.max]
        if x.is_floating_point():
            pool = [-1.0, 0.0, 2.0, 1e30, -0.0]
        x[rng.randrange(x.numel())] = rng.choice(pool)
        if name == "request_ids" and x.numel() > 1:
            x[1] = x[0]
        t[name] = x.reshape(t[name].shape)
        return f"{name} bad value"
    case.notes.append(_edit_step(rec, rng, edit))


def bad_step_metadata(case, rec, rng):
    f = rng.choice(steps_of(rec))
    tensors, meta = load(f)
    replay = json.loads(meta.get("replay", "{}"))
    how = rng.choice(["step", "schema", "missing", "garbage", "type", "deep"])
    if how == "step":
        replay["step"] = rng.choice([replay.get("step", 0) + 1, -1, True, "0", None, 2 ** 70])
    elif how == "schema":
        replay["schema"] = rng.choice(["replay.step/2", "other/1", "", 7, None, "replay.step"])
    if how == "missing":
        meta = {}
    elif how == "garbage":
        meta = {"replay": rng.choice(["{", "", "[]", "null", "1" * 5000, "\udcff"[:0] + "{\"a\":"])}
    elif how == "type":
        meta = {"replay": json.dumps(rng.choice([[1], 3, "x", None]))}
    elif how == "deep":
        meta = {"replay": "[" * 100000 + "]" * 100000}
    else:
        meta = {"replay": json.dumps(replay)}
    save(f, tensors, meta)
    case.notes.append(f"{f.name}: metadata {how}")
