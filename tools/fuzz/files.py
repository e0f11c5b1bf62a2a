"""What the fuzz case builders share: the limits the run sets, a built :class:`Case`, raw safetensors
bytes (a header that can lie) and the recording's files."""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

REPO = Path(__file__).resolve().parents[2]
MiB, GiB = 1 << 20, 1 << 30
# The limits the fuzz run sets (small, so "bounded by the limits" is a tight bound); some cases unset them
# to test the defaults (16 GiB, 16 MiB, 1,048,576 tokens) with sparse claims past those.
FUZZ_LIMITS = {"REPLAY_MAX_STEP_BYTES": 64 * MiB, "REPLAY_MAX_MANIFEST_BYTES": 1 * MiB, "REPLAY_MAX_VOCAB": 262144}
DEFAULT_LIMITS = {"REPLAY_MAX_STEP_BYTES": 16 * GiB, "REPLAY_MAX_MANIFEST_BYTES": 16 * MiB,
                  "REPLAY_MAX_VOCAB": 1 << 20}


@dataclass
class Case:
    """One built case: its kind and notes (what was done), the paths to pass to the commands, and the
    REPLAY_MAX_* values in force (None: unset, the default applies)."""

    index: int
    kind: str
    root: Path
    paths: list[str]
    limits: dict[str, int | None]
    notes: list[str] = field(default_factory=list)
    chmods: list[tuple[Path, int]] = field(default_factory=list)  # applied last (a 000 folder blocks writes)
    argv: list[list[str]] | None = None  # command lines run instead of the read commands (tools/fuzz/hostile_kinds.py)
    exclude: list[str] = field(default_factory=list)  # snapshot paths ("./out") a command may legitimately change
    pgid_file: Path | None = None  # where an exec program appends its process group (orphans are looked for)
    stdout: str | None = None  # a failing stdout / stderr (tools/fuzz/streams.py), for every command of the case
    env: dict[str, str] = field(default_factory=dict)  # variables set for every command (torchrun's)
    env_child: dict[str, str] = field(default_factory=dict)  # more, for a child process only
    allowed: frozenset = frozenset()  # exit codes the case's kind makes legitimate (3: a real stdout failure)
    race: tuple[str, str] | None = None  # two entries of root exchanged again and again while a command runs
    signal: tuple[int, str] | None = None  # (SIGINT or SIGTERM, "tmp" or "timer"): sent mid-command (racing.py)
    post: object = None  # post(case, res) -> problems: what the output must be after a command (racing.py)
    cwd: str | None = None  # the folder a command runs from (``replay_check(".")``)


# ----------------------------------------------------------------------------- raw safetensors
def split(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def join(header: dict | bytes, body: bytes, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw) if length is None else length) + raw + body


def load(f: Path) -> tuple[dict[str, torch.Tensor], dict]:
    data = f.read_bytes()
    return st_load(data), split(data)[0].get("__metadata__", {})


def save(f: Path, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    f.write_bytes(st_save({k: v.contiguous() for k, v in tensors.items()}, metadata=meta or None))


def steps_of(rec: Path) -> list[Path]:
    """The step files that are regular files (a FIFO or a symlink is never read back by a builder)."""
    return sorted(p for p in (rec / "steps").glob("step-*.safetensors") if p.is_file() and not p.is_symlink())


def manifest_of(rec: Path) -> dict:
    return json.loads((rec / "manifest.json").read_text())


def write_manifest(rec: Path, manifest: dict) -> None:
    (rec / "manifest.json").write_text(json.dumps(manifest, indent=2))


def limit_of(case: Case, name: str) -> int:
    value = case.limits.get(name)
    return DEFAULT_LIMITS[name] if value is None else value
