"""Hypothesis strategies for the hardening tests: SYNTHETIC recordings and the ways to break them.

Structure (request count, ragged k per request incl. k = 0, dtype, sampling parameters incl. edge
values, placeholder drafts, -inf entries) is drawn by hypothesis, so it shrinks to a small example;
the bulk tensor values come from a seeded torch.Generator (drawing them element by element would be
slow and shrink badly). Every recording written here is SYNTHETIC (``synthetic: true``).
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from hypothesis import strategies as st

from replay_harness.recording.store import Emitted, RecordingWriter
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.step import Step

INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1
LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass
class RequestSpec:
    k: int                # drafts (0: a plain sample)
    temperature: float    # 0 = greedy
    top_k: int            # 0 = off; may be >= V (also off)
    top_p: float          # in (0, 1]
    min_p: float          # in [0, 1]
    seed: int             # int64
    position: int         # position of the request's first row


@dataclass
class StepSpec:
    requests: list[RequestSpec]
    content_seed: int     # seeds the logits / drafts generator
    draft_logits: bool
    neg_inf: bool         # mask some tokens with -inf (never a whole row)
    placeholders: bool    # some verify rows carry the placeholder draft -1


@dataclass
class RecordingSpec:
    vocab_size: int
    dtype: torch.dtype
    steps: list[StepSpec]
    routes: bool          # record emitted_routes (optional in the format)


def request_specs(vocab_size: int) -> st.SearchStrategy[RequestSpec]:
    """One request; parameters mix ordinary values with the documented edges."""
    return st.builds(
        RequestSpec,
        k=st.integers(0, 4),
        temperature=st.one_of(st.sampled_from([0.0, 0.0, 1e-3, 0.5, 1.0, 2.0, 50.0]),
                              st.floats(0.05, 5.0)),
        top_k=st.sampled_from([0, 0, 1, 2, vocab_size - 1, vocab_size, vocab_size + 7, 2 ** 31 - 1]),
        top_p=st.one_of(st.sampled_from([1.0, 1.0, 1e-6, 0.5, 0.999]), st.floats(1e-4, 1.0)),
        min_p=st.sampled_from([0.0, 0.0, 0.05, 0.5, 1.0]),
        seed=st.one_of(st.sampled_from([INT64_MIN, -1, 0, 1, INT64_MAX]), st.integers(INT64_MIN, INT64_MAX)),
        position=st.one_of(st.sampled_from([0, 1, 2 ** 31 - 3, 2 ** 32 - 2, 2 ** 40]), st.integers(0, 100_000)),
    )


@st.composite
def recording_specs(draw, max_steps: int = 3, max_requests: int = 4) -> RecordingSpec:
    vocab_size = draw(st.sampled_from([2, 3, 17, 64, 211]))
    steps = draw(st.lists(st.builds(
        StepSpec,
        requests=st.lists(request_specs(vocab_size), min_size=1, max_size=max_requests),
        content_seed=st.integers(0, 2 ** 31 - 1),
        draft_logits=st.booleans(), neg_inf=st.booleans(), placeholders=st.booleans()),
        min_size=1, max_size=max_steps))
    return RecordingSpec(vocab_size=vocab_size, dtype=draw(st.sampled_from(LOGIT_DTYPES)), steps=steps,
                         routes=draw(st.booleans()))


def build_step(spec: StepSpec, vocab_size: int, dtype: torch.dtype, index: int) -> Step:
    """The Step a StepSpec describes (request ids unique within the step)."""
    gen = torch.Generator().manual_seed(spec.content_seed)
    reqs = spec.requests
    r, v = len(reqs), vocab_size
    k = torch.tensor([q.k for q in reqs])
    n = int((k + 1).sum())
    cu = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(k + 1, 0)]).to(torch.int32)
    logits = torch.randn(n, v, generator=gen) * 3.0
    if spec.neg_inf and v > 1:
        mask = torch.rand(n, v, generator=gen) < 0.4
        mask[torch.arange(n), logits.argmax(1)] = False  # at least one finite logit per row
        logits[mask] = float("-inf")
    logits = logits.to(dtype)
    bonus = (cu[1:] - 1).long()
    wide = logits.float()
    drafts = torch.where(torch.rand(n, generator=gen) < 0.6, wide.argmax(1),
                         torch.randint(0, v, (n,), generator=gen)).to(torch.int32)
    if spec.placeholders:
        drafts[torch.rand(n, generator=gen) < 0.3] = -1
    drafts[bonus] = -1
    positions = torch.cat([torch.arange(q.position, q.position + q.k + 1) for q in reqs]).to(torch.int64)
    draft_logits = None
    if spec.draft_logits:
        verify = torch.ones(n, dtype=torch.bool)
        verify[bonus] = False
        draft_logits = (torch.nan_to_num(wide[verify], neginf=-30.0)
                        + torch.randn(n - r, v, generator=gen)).to(dtype)
    return Step(
        logits=logits, cu_num_logits=cu, draft_token_ids=drafts, positions=positions,
        temperature=torch.tensor([q.temperature for q in reqs], dtype=torch.float32),
        top_k=torch.tensor([q.top_k for q in reqs], dtype=torch.int32),
        top_p=torch.tensor([q.top_p for q in reqs], dtype=torch.float32),
        min_p=torch.tensor([q.min_p for q in reqs], dtype=torch.float32),
        seed=torch.tensor([q.seed for q in reqs], dtype=torch.int64),
        request_ids=torch.arange(r, dtype=torch.int64) + 100 * index,
        draft_logits=draft_logits)


def write_spec(path: Path, spec: RecordingSpec) -> list[tuple[Step, Emitted]]:
    """Write ``spec`` as a SYNTHETIC recording whose emitted tokens come from the reference."""
    written = []
    with RecordingWriter(path, vocab_size=spec.vocab_size, synthetic=True,
                         source={"synthetic": True, "generator": "tests/hardening_strategies.py"}) as w:
        for i, s in enumerate(spec.steps):
            step = build_step(s, spec.vocab_size, spec.dtype, i)
            res = ReferenceSampler().sample(step)
            emitted = Emitted(res.tokens.to(torch.int32), res.counts, res.routes if spec.routes else None)
            w.write_step(step, emitted, meta={"synthetic": True})
            written.append((step, emitted))
    return written


# ----------------------------------------------------------------------------- raw safetensors bytes
def split_safetensors(data: bytes) -> tuple[dict, bytes]:
    """(header JSON object, tensor bytes) of a well-formed safetensors file."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def join_safetensors(header: dict | bytes | str, body: bytes, length: int | None = None) -> bytes:
    """A safetensors file from a header (object, or raw JSON text/bytes) and a body; ``length`` overrides
    the 8-byte header length (to lie about it)."""
    raw = header if isinstance(header, bytes) else (header if isinstance(header, str) else json.dumps(header)).encode()
    if length is None:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw) if length is None else length) + raw + body


SAFETENSORS_DTYPES = ("BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64",
                      "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64")
