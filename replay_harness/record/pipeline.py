"""The record pipeline: options in, a recording on disk and a summary out (`replay record`,
tools/make_fixtures.py).

:func:`run_record` checks the options (before the model loads: seconds), loads the model and the
drafter, decodes the requests together with :func:`replay_harness.record.decode.decode` and writes every
step through :class:`replay_harness.recording.recorder.Recorder`. It prints nothing but one stderr
warning; what a front end shows while it runs (a spinner, a progress bar) it passes in as the
``loading`` and ``decoding`` hooks of :func:`run_record`.
"""
from __future__ import annotations

import secrets
import sys
import time
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

import torch

from replay_harness.compare.runner import load_impl, resolve_device
from replay_harness.errors import UsageError
from replay_harness.limits import check_output
from replay_harness.record.drafters import DRAFTERS, make_drafter
from replay_harness.record.decode import Request, SamplingParams, decode
from replay_harness.record.method_options import MethodText, Methods, probe_step, read_methods
from replay_harness.record.model import load_model
from replay_harness.record.sampling_options import PipelineParams, PipelineText, read_pipeline, resolve
from replay_harness.record.tree import check_tree_pipeline
from replay_harness.record.weights import HUB_REPO_ID, PACKAGED, hub_file, versions
from replay_harness.recording.recorder import Recorder
from replay_harness.recording.schema import DRAFT_SAMPLING, ROUTE_CODE

DEFAULT_PROMPTS = (
    # Repetitive on purpose: prompt-lookup (n-gram) drafting needs earlier matches to propose anything.
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday,",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
)


@dataclass
class RecordOptions:
    """What to record (the options of `replay record`, same names and defaults).

    Per-request values (``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed``) are text as on the
    command line: one value for every request, or one per request, comma separated ("0,1.0"). ``pipeline``:
    the sampling pipeline's options as the command line gives them (penalties, bias, allowed ids, bad words,
    min-tokens, logprobs, grammar: :mod:`replay_harness.record.sampling_options`); ``methods``: the verification
    methods, draft sampling and RNG contract (:mod:`replay_harness.record.method_options`).
    """

    prompts: list[str] = field(default_factory=list)  # empty: DEFAULT_PROMPTS
    steps: int = 20                   # decode steps (sampler calls)
    max_bytes: int | None = None      # stop once the step files would exceed this many bytes
    every: int = 1                    # record steps 0, every, 2*every, ...
    batch: int | None = None          # requests decoded together (default: len(prompts); prompts cycle)
    temperature: str = "1.0"          # 0 = greedy
    top_k: str = "0"                  # 0 = off
    top_p: str = "1.0"                # 1 = off
    min_p: str = "0.0"                # 0 = off
    seed: str | None = None           # int64 per request (None: random, recorded in the fixture)
    drafter: str = "ngram"            # a name in replay_harness.record.drafters.DRAFTERS
    num_drafts: int = 3               # K: drafts per request and step, at most (0 = no speculative decoding)
    early_exit_layers: int | None = None
    draft_model: str | None = None
    impl: str = "reference"           # the registry impl sampling in the loop
    impl_timeout: float | None = None  # --impl-timeout: seconds an exec: impl may take per step
    out_path: str | None = None       # default: recordings/record-<time>
    overwrite: bool = False
    model: str = "smollm2-135m"        # a Hugging Face Hub repo id, a local folder or .gguf, or a built-in name
    gguf_file: str | None = None      # a GGUF file inside the --model folder or Hub repo
    draft_gguf_file: str | None = None  # the same for --draft-model
    dtype: str = "float32"            # model compute dtype; logits are recorded in it
    stop_at_eos: bool = True
    kv_cache: bool = True             # False (--no-kv-cache): every forward reruns the whole context
    pipeline: PipelineText = field(default_factory=PipelineText)  # --repetition-penalty ... --regex
    methods: MethodText = field(default_factory=MethodText)  # --verify-method ... --rng-contract
    extra_source: dict[str, Any] = field(default_factory=dict)  # merged into the manifest's source
    inputs: list[str] = field(default_factory=list)  # more files read (--prompts-file): --out may not touch them


def _quiet_loading(model: str) -> ContextManager[None]:
    return nullcontext()


@contextmanager
def _quiet_decoding(steps: int) -> Iterator[Callable[[int], None]]:
    yield lambda recorded: None


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


def _int64(text: str) -> int:
    value = int(text, 0)
    if not -(2 ** 63) <= value < 2 ** 63:
        raise ValueError(text)
    return value


def _requests(opts: RecordOptions) -> tuple[list[str], list[SamplingParams], list[PipelineParams]]:
    """The prompts (cycled to the batch size) and each request's sampling parameters and pipeline options;
    UsageError when an option cannot be read or is out of range."""
    texts = list(opts.prompts) or list(DEFAULT_PROMPTS)
    n = opts.batch or len(texts)
    texts = [texts[i % len(texts)] for i in range(n)]
    temps = parse_list("--temperature", opts.temperature, n, float)
    ks = parse_list("--top-k", opts.top_k, n, int)
    ps = parse_list("--top-p", opts.top_p, n, float)
    mps = parse_list("--min-p", opts.min_p, n, float)
    seeds = parse_list("--seed", opts.seed, n, _int64) if opts.seed is not None else \
        [secrets.randbits(63) for _ in range(n)]
    for name, values, ok in (("--temperature", temps, lambda x: x >= 0), ("--top-k", ks, lambda x: x >= 0),
                             ("--top-p", ps, lambda x: 0 < x <= 1), ("--min-p", mps, lambda x: 0 <= x <= 1)):
        bad = [v for v in values if not ok(v)]
        if bad:
            raise UsageError(f"{name}: {bad[0]} is out of range")
    return texts, [SamplingParams(*p) for p in zip(temps, ks, ps, mps, seeds)], read_pipeline(opts.pipeline, n)


def _out_folder(opts: RecordOptions) -> Path:
    """The recording folder, refused before the model loads (seconds) rather than after; never one that is,
    holds or lies inside an input (the model folder or file, the draft model, ``opts.inputs``)."""
    out = Path(opts.out_path or f"recordings/record-{time.strftime('%Y%m%d-%H%M%S')}")
    check_output(out, [opts.model, opts.draft_model, *opts.inputs, *opts.pipeline.inputs()], "--out",
                 overwrite=opts.overwrite)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is a file, not a folder (name a new or empty folder)")
    if out.exists() and out.is_dir() and any(out.iterdir()) and not opts.overwrite:
        raise UsageError(f"--out {out}: folder exists and is not empty (pass --overwrite to replace it)")
    return out


def _check_methods(methods: Methods, sampler, impl: str) -> str | None:
    """The contract the steps carry (None: the impl's, as before); UsageError, before the model loads, when the
    loop's impl does not implement the contract asked for or refuses the methods asked for (``stochastic`` verifies
    standard, block and FLy under mrv2 and mrv2-fp64; ``gumbel-max`` takes plain samples under mrv2; trees: record
    them with --impl reference)."""
    if methods.rng_contract is not None and methods.rng_contract not in getattr(
            sampler, "rng_contracts", (getattr(sampler, "rng_contract", "unknown"),)):
        raise UsageError(f"--rng-contract {methods.rng_contract}: --impl {impl} implements "
                         f"{getattr(sampler, 'rng_contract', 'unknown')} (record it with --impl reference)")
    probe = probe_step(methods)
    if probe is not None:
        result = sampler.sample(probe)
        if bool((result.routes == ROUTE_CODE["refused"]).any()):
            why = "; ".join(result.notes) or "every request refused"
            raise UsageError(f"--impl {impl} does not sample what --verify-method / --rng-contract ask for ({why}): "
                             "record them with --impl reference")
    return methods.rng_contract


def _start_pipeline(lm, requests: list[Request]) -> None:
    """Resolve the requests' pipeline options against the model (token ids, bad words) and give each grammar
    request its grammar state (xgrammar, compiled against the model's tokenizer)."""
    resolve([r.pipeline for r in requests], lm.vocab_size, lm.encode)
    if any(r.pipeline.grammar is not None for r in requests):
        from replay_harness.record.grammar import Grammars

        grammars = Grammars(lm.tokenizer, lm.vocab_size, sorted(lm.eos_token_ids))
        for r in requests:
            if r.pipeline.grammar is not None:
                r.grammar = grammars.start(*r.pipeline.grammar, where=f"request {r.request_id}")


def run_record(opts: RecordOptions, *, loading: Callable[[str], ContextManager[Any]] = _quiet_loading,
               decoding: Callable[[int], ContextManager[Callable[[int], None]]] = _quiet_decoding) -> dict[str, Any]:
    """Decode ``opts.prompts`` with the model and record every step; returns a JSON-able summary (the
    folder, the model, steps run and recorded, why it stopped, drafts, bytes, seconds, completions).

    ``loading(model)``: a context around the model load (the first load of a GGUF converts it, ~30 s).
    ``decoding(steps)``: a context around the decode loop, yielding a callback called after every step
    with the number of steps recorded so far. The defaults show nothing.
    """
    texts, params, pipeline = _requests(opts)
    out = _out_folder(opts)
    if opts.drafter not in DRAFTERS:
        raise UsageError(f"unknown --drafter '{opts.drafter}' ({', '.join(DRAFTERS)})")
    methods = read_methods(opts.methods, len(texts), opts.num_drafts, opts.drafter)
    check_tree_pipeline(methods.requests or [], pipeline)  # a tree request's pipeline rules are off
    t0 = time.time()
    if opts.impl_timeout is not None and not opts.impl.startswith("exec:"):
        raise UsageError("--impl-timeout is only for external impls (--impl exec:PROGRAM)")
    draft_name = opts.draft_model if opts.drafter == "draft-model" else None
    # a Hub draft model that is not there fails now, not after the target's load (seconds to minutes)
    if draft_name and draft_name not in PACKAGED and not Path(draft_name).exists() and HUB_REPO_ID.match(draft_name):
        hub_file(draft_name, opts.draft_gguf_file or "config.json", "--draft-model")
    with closing(load_impl(opts.impl, resolve_device("cpu"), None, opts.impl_timeout)) as sampler:
        asked_contract = _check_methods(methods, sampler, opts.impl)
        with loading(opts.model):
            lm = load_model(opts.model, opts.dtype, opts.gguf_file)
        draft = make_drafter(opts.drafter, lm, early_exit_layers=opts.early_exit_layers,
                             draft_model=opts.draft_model, dtype=opts.dtype, draft_gguf_file=opts.draft_gguf_file,
                             draft_sampling=methods.draft_sampling, fp64=methods.fp64)
        requests = [Request(request_id=i, prompt=t, prompt_ids=lm.encode(t), params=p, pipeline=q,
                            method=None if methods.requests is None else methods.requests[i])
                    for i, (t, p, q) in enumerate(zip(texts, params, pipeline))]
        _start_pipeline(lm, requests)
        source = {
            "engine": "replay record", "model": lm.source, "drafter": draft.describe(),
            "num_drafts": opts.num_drafts, "impl": opts.impl, "steps": opts.steps, "every": opts.every,
            "max_bytes": opts.max_bytes, "stop_at_eos": opts.stop_at_eos, "kv_cache": opts.kv_cache,
            "requests": [{"request_id": r.request_id, "prompt": r.prompt, "prompt_tokens": len(r.prompt_ids),
                          "temperature": r.params.temperature, "top_k": r.params.top_k, "top_p": r.params.top_p,
                          "min_p": r.params.min_p, "seed": r.params.seed, **r.pipeline.describe(),
                          **(r.method.describe() if r.method else {})}
                         for r in requests],
            **({} if methods.draft_sampling is None else {"draft_sampling": DRAFT_SAMPLING[methods.draft_sampling]}),
            "versions": versions(), "torch_threads": torch.get_num_threads(), **opts.extra_source,
        }
        # the manifest claims the noise contract of the impl that sampled (the built-ins: "mrv2"), or the one asked
        # for, which the impl implements (_check_methods)
        contract = asked_contract or getattr(sampler, "rng_contract", "unknown")
        with Recorder(out, lm.vocab_size, source=source, rng_contract=contract, max_bytes=opts.max_bytes,
                      every=opts.every, overwrite=opts.overwrite) as rec, decoding(opts.steps) as advance:
            t_decode = time.perf_counter()
            stats = decode(lm, draft, requests, steps=opts.steps, num_drafts=opts.num_drafts, impl=sampler,
                           recorder=rec, stop_at_eos=opts.stop_at_eos, kv_cache=opts.kv_cache,
                           on_step=lambda i, s, r, w: advance(rec.num_steps), draft_sampling=methods.draft_sampling,
                           rng_contract=asked_contract or "mrv2")
            decode_seconds = time.perf_counter() - t_decode
    if stats.grammar_refused:
        print(f"replay record: the grammar refused a token --impl {opts.impl} emitted for request(s) "
              f"{', '.join(map(str, stats.grammar_refused))}; they left the batch", file=sys.stderr)
    if stats.stopped == "max-bytes":
        print(f"replay record: --max-bytes {opts.max_bytes:,} reached after {stats.recorded} recorded step(s)"
              + ("; not even the first step fits: raise the budget" if stats.recorded == 0 else ""), file=sys.stderr)
    return {
        "out": str(out), "model": lm.name, "drafter": opts.drafter, "impl": opts.impl, "steps_run": stats.steps,
        "steps_recorded": stats.recorded, "stopped": stats.stopped, "drafted": stats.drafted,
        "accepted": stats.accepted, "emitted": stats.emitted, "bytes": rec.bytes_written,
        "seconds": time.time() - t0, "kv_cache": opts.kv_cache,
        "decode_seconds": decode_seconds,  # the decode loop alone (drafting, forwards, sampling, writing steps)
        "grammar_refused": stats.grammar_refused,
        "requests": [{"request_id": r.request_id, "temperature": r.params.temperature, "seed": r.params.seed,
                      "completion": lm.decode(r.generated)} for r in requests],
    }
