"""Content digests of steps and recordings (docs/FIXTURES.md, "Content digest").

A step digest depends on content only (names, dtypes, shapes, bytes, metadata), never on the
safetensors header layout, so two writers of the same content agree. Written by ``store`` on close,
checked by ``validate``.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

import torch


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys, no spaces, ASCII only: the form metadata is stored and hashed in."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def tensor_digest(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> str:
    """sha256 over canonical content: sorted names, dtype, shape, little-endian bytes, canonical metadata.

    Independent of the safetensors header layout, so two files with the same
    content have the same digest whatever wrote them.
    """
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{str(t.dtype).removeprefix('torch.')}|{list(t.shape)}|".encode())
        # reshape(-1) first: a 0-dim tensor cannot be viewed as bytes directly
        h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b"")
    h.update(canonical_json(meta).encode())
    return h.hexdigest()


def recording_digest(step_digests: Iterable[str]) -> str:
    """The recording digest: sha256 of the step digests' hex strings, concatenated in step order."""
    return hashlib.sha256("".join(step_digests).encode()).hexdigest()
