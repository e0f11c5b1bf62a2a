"""Fixture format v1: one directory per recording, one safetensors file per step.

    REC/manifest.json                 schema "replay.recording/1", vocab size, RNG contract, provenance
    REC/steps/step-000000.safetensors one step: tensors of replay_harness.recording.step.Step plus what the engine emitted

Writing streams: the manifest is written first, every step file is written to a
temporary name, fsynced and renamed, so a crash loses at most the step in flight.
Reading is lazy: a step is memory-mapped when asked for. docs/FIXTURES.md is the
normative description; :mod:`replay_harness.recording.schema` tables its names, dtypes
and shapes, :mod:`~replay_harness.recording.validate` checks a step's content, and this
module is the one place that reads and writes the files.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors import safe_open
from safetensors.torch import save as st_save

from replay_harness.errors import InputError
from replay_harness.limits import (MAX_MANIFEST_BYTES, MAX_STEP_BYTES, MAX_VOCAB, enforce, os_reason, read_regular,
                                   regular_file)
from replay_harness.recording import digest as registry
from replay_harness.recording.digest import canonical_json, recording_digest, tensor_digest
from replay_harness.recording.schema import (MANIFEST, METADATA_KEY, OPTIONAL_FIELDS, RECORDING_SCHEMA,
                                             RECORDING_SCHEMA_ID, SCHEMA_MAJOR, SCHEMA_MINOR, STEP_FIELDS, STEP_RE,
                                             STEP_SCHEMA, STEP_SCHEMA_ID, STEPS_DIR, step_file_name)
from replay_harness.recording.step import Step
from replay_harness.recording.validate import check_step

__all__ = ["Emitted", "StepRecord", "RecordingWriter", "Recording", "step_tensors", "step_from_tensors",
           "step_metadata", "encode_step", "load_step_file", "check_step_file", "canonical_json", "tensor_digest"]


@dataclass
class Emitted:
    """What the engine emitted in a step (the recorded answer).

    tokens [R, max_k+1] int32 (-1 padded), counts [R] int32, routes [R] int8 or None.
    """

    tokens: torch.Tensor
    counts: torch.Tensor
    routes: torch.Tensor | None = None


@dataclass
class StepRecord:
    """A step as read from disk: inputs, the engine's answer, and where it came from."""

    index: int
    file: Path
    step: Step
    emitted: Emitted
    meta: dict[str, Any]


_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read the process umask (os.umask can only be read by setting it)


TMP_SUFFIX = ".tmp"  # temp files are ".<name>.<random>.tmp" beside their target (an orphan: a killed writer)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, rename over ``path``, fsync the folder.

    The file gets the mode a plain ``open()`` would give (0666 minus the umask), not mkstemp's 0600,
    so a recording can be shared like any other file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def step_tensors(step: Step, emitted: Emitted | None = None) -> dict[str, torch.Tensor]:
    """The tensors of one step file by their fixture names (contiguous, on the CPU; schema.FIELDS order).

    Without ``emitted``: the inputs only (the step files sent to external impls).
    """
    out = {name: getattr(step, name) for name in STEP_FIELDS}
    if step.draft_logits is not None:
        out["draft_logits"] = step.draft_logits
    if emitted is not None:
        out["emitted_tokens"], out["emitted_counts"] = emitted.tokens, emitted.counts
        if emitted.routes is not None:
            out["emitted_routes"] = emitted.routes
    return {k: v.detach().cpu().contiguous() for k, v in out.items()}


def step_from_tensors(tensors: dict[str, torch.Tensor]) -> Step:
    """The :class:`Step` held by a step file's tensors (the required inputs must be there)."""
    return Step(**{k: tensors[k] for k in STEP_FIELDS}, **{k: tensors.get(k) for k in OPTIONAL_FIELDS})


def step_metadata(index: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``replay`` metadata of step ``index``'s file: schema, step index, then ``extra`` keys."""
    return {"schema": STEP_SCHEMA_ID, "step": index, **(extra or {})}


def encode_step(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> bytes:
    """The bytes of a step file: safetensors with ``meta`` as canonical JSON under the one metadata key."""
    return st_save(tensors, metadata={METADATA_KEY: canonical_json(meta)})


def load_step_file(file: str | os.PathLike) -> tuple[dict[str, torch.Tensor], str | None]:
    """Every tensor of a step file (memory-mapped) and its raw ``replay`` metadata string (None if absent).

    Raises what safetensors raises on a bad file; :meth:`Recording.read_tensors` turns that into an InputError.
    """
    with safe_open(str(file), framework="pt") as f:
        raw_meta = (f.metadata() or {}).get(METADATA_KEY)
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return tensors, raw_meta


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


def _claimed_bytes(header: dict) -> int:
    """The data bytes a safetensors JSON header claims: the largest end offset, or the tensors' sizes."""
    claimed = 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        offsets, shape = info.get("data_offsets"), info.get("shape")
        if isinstance(offsets, list) and offsets and all(isinstance(o, int) for o in offsets):
            claimed = max(claimed, *offsets)
        if isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape):
            n = _DTYPE_BYTES.get(info.get("dtype"), 1)
            for d in shape:
                n *= d
            claimed = max(claimed, n)
    return claimed


def check_step_file(file: Path, index: int) -> None:
    """Before a step file is opened by safetensors: a regular file (not a FIFO, device or socket), within
    REPLAY_MAX_STEP_BYTES on disk and as its header claims, with logits V within REPLAY_MAX_VOCAB.

    Reads only the 8-byte length and the JSON header (itself capped like a manifest); a header safetensors
    would reject anyway is left to it (the caller reports that as an unreadable file)."""
    size = regular_file(file, step=index)
    enforce(MAX_STEP_BYTES, size, file, step=index, claim="file size")
    try:
        with open(file, "rb") as f:
            n = int.from_bytes(f.read(8), "little") if size >= 8 else -1
            if not 0 < n <= size - 8:
                return
            enforce(MAX_MANIFEST_BYTES, n, file, step=index, field="__header__", claim="JSON header size")
            header = json.loads(f.read(n).decode("utf-8"))
    except OSError as e:
        raise InputError(file, f"cannot read ({os_reason(e)})", step=index) from None
    except (ValueError, RecursionError):
        return
    if not isinstance(header, dict):
        return
    enforce(MAX_STEP_BYTES, 8 + n + _claimed_bytes(header), file, step=index, field="__header__",
            claim="size its header claims")
    shape = header.get("logits", {}).get("shape") if isinstance(header.get("logits"), dict) else None
    if isinstance(shape, list) and len(shape) == 2 and isinstance(shape[1], int):
        enforce(MAX_VOCAB, shape[1], file, step=index, field="logits", claim="vocabulary size V")


class RecordingWriter:
    """Streams steps into a new recording directory.

    >>> with RecordingWriter(path, vocab_size=V, source={"engine": "mine"}) as w:
    ...     w.write_step(step, emitted)

    The manifest is written first with ``complete: false`` and rewritten on a
    clean close with the step count and the recording digest.
    """

    def __init__(self, path: str | os.PathLike, *, vocab_size: int, rng_contract: str = "mrv2",
                 source: dict[str, Any] | None = None, synthetic: bool = False, overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() and any(self.path.iterdir()) and not overwrite:
            raise InputError(self.path, "output folder exists and is not empty (pass --overwrite to replace it)")
        if overwrite and (self.path / MANIFEST).exists():
            for f in (self.path / STEPS_DIR).glob("*.safetensors"):
                f.unlink()
        (self.path / STEPS_DIR).mkdir(parents=True, exist_ok=True)
        self.manifest: dict[str, Any] = {
            "schema": RECORDING_SCHEMA_ID, "schema_minor": SCHEMA_MINOR,
            "vocab_size": int(vocab_size), "rng_contract": rng_contract, "synthetic": bool(synthetic),
            "source": source or {}, "complete": False, "num_steps": 0, "digest": None,
        }
        self._digests: list[str] = []
        self._write_manifest()

    def _write_manifest(self) -> None:
        _atomic_write(self.path / MANIFEST, (json.dumps(self.manifest, indent=2, sort_keys=True) + "\n").encode())

    def write_step(self, step: Step, emitted: Emitted, meta: dict[str, Any] | None = None) -> Path:
        """Validate and write one step atomically; returns the file written."""
        index = len(self._digests)
        tensors = step_tensors(step, emitted)
        step_meta = step_metadata(index, meta)
        file = self.path / STEPS_DIR / step_file_name(index)
        problems = [p for p in check_step(tensors, self.manifest["vocab_size"], file=file, step=index)
                    if not p.warning]  # an all -inf row (warned by validate) is still recorded
        if problems:
            raise problems[0]
        _atomic_write(file, encode_step(tensors, step_meta))
        self._digests.append(tensor_digest(tensors, step_meta))
        return file

    def close(self) -> None:
        self.manifest.update(complete=True, num_steps=len(self._digests),
                             digest=recording_digest(self._digests))
        self._write_manifest()

    def __enter__(self) -> "RecordingWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()


def _short(value: Any, limit: int = 60) -> str:
    """repr(value), cut to ``limit`` characters (error messages stay one short line)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def _read_manifest(mpath: Path) -> dict[str, Any]:
    """The manifest as a JSON object, or an InputError naming it (never another exception)."""
    data = read_regular(mpath, MAX_MANIFEST_BYTES)
    try:
        manifest = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(mpath, "not valid JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise InputError(mpath, f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except (ValueError, RecursionError) as e:  # integers over Python's digit limit, absurd nesting
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e).split(":")[0]
        raise InputError(mpath, f"not valid JSON ({reason})") from None
    if not isinstance(manifest, dict):
        raise InputError(mpath, "not a JSON object", field="schema")
    return manifest


def _parse_schema(value: Any, expected: str, file: Path, field: str, step: int | None = None) -> None:
    if not isinstance(value, str) or "/" not in value or value.split("/")[0] != expected:
        raise InputError(file, f"not a replay recording (schema {_short(value)}, expected "
                               f"'{expected}/{SCHEMA_MAJOR}')", step=step, field=field)
    major = value.split("/", 1)[1]
    if major != str(SCHEMA_MAJOR):
        raise InputError(file, f"unknown schema major version {_short(major)}; this replay reads version "
                               f"{SCHEMA_MAJOR}", step=step, field=field)


class Recording:
    """A recording on disk, read lazily: ``len(rec)``, ``rec[i]``, ``for r in rec``."""

    def __init__(self, path: str | os.PathLike, *, nan: str = "error", neg_inf: str = "warn"):
        self.path = Path(path)
        self.nan = nan  # "error" or "warn": what a NaN in the logits is
        self.neg_inf = neg_inf  # "warn" or "error": what an all -inf logits row is
        if not self.path.exists():
            raise InputError(self.path, "no such file or folder")
        if self.path.is_file():
            raise InputError(self.path, f"not a recording folder (expected a folder holding {MANIFEST})")
        mpath = self.path / MANIFEST
        if not mpath.exists():
            raise InputError(mpath, "missing: not a replay recording folder")
        self.manifest = _read_manifest(mpath)
        _parse_schema(self.manifest.get("schema"), RECORDING_SCHEMA, mpath, "schema")
        vocab = self.manifest.get("vocab_size")
        if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab <= 0:
            raise InputError(mpath, f"must be a positive integer, got {_short(vocab)}", field="vocab_size")
        enforce(MAX_VOCAB, vocab, mpath, field="vocab_size", claim="vocab_size")
        self.vocab_size = vocab
        if not isinstance(self.manifest.get("source", {}), dict):  # readers look keys up in it
            raise InputError(mpath, f"must be a JSON object, got {_short(self.manifest['source'])}", field="source")
        self.rng_contract = str(self.manifest.get("rng_contract", "mrv2"))
        self.synthetic = bool(self.manifest.get("synthetic", False))
        files = []
        for f in self._step_dir_entries():
            m = STEP_RE.match(f.name)
            if m:
                files.append((int(m.group(1)), len(f.name), f.name, f))
        files.sort()  # by step index, not by name (step-1000000 follows step-999999); 6 digits first
        files = [(index, f) for index, _, _, f in files]
        for expected, (index, f) in enumerate(files):
            if index < expected:
                raise InputError(f, f"a second file for step {index} ({step_file_name(index)} exists)",
                                 step=index)
            if index != expected:
                raise InputError(f, f"step files are not consecutive: expected step-{expected:06d}", step=expected)
        self.files = [f for _, f in files]
        # will close_problems compare the steps with the manifest's digest? Then reads remember step digests
        self.needs_digest = self.manifest.get("complete") is True and isinstance(self.manifest.get("digest"), str)
        if self.manifest.get("complete") is True and self.manifest.get("num_steps") is not None:
            declared = self.manifest["num_steps"]
            if isinstance(declared, bool) or not isinstance(declared, int) or declared < 0:
                raise InputError(mpath, f"must be a non-negative integer, got {_short(declared)}", field="num_steps")
            if declared != len(self.files):
                raise InputError(mpath, f"the closed recording declares {declared} steps but {len(self.files)} "
                                        f"step files are present (a step file was lost or added)", field="num_steps")

    def _step_dir_entries(self) -> list[Path]:
        """The entries of steps/ (none when it does not exist); InputError when it cannot be listed."""
        steps = self.path / STEPS_DIR
        if not steps.exists():
            return []
        try:
            return [steps / name for name in os.listdir(steps)]
        except OSError as e:
            raise InputError(steps, f"cannot list the step files ({os_reason(e)})") from None

    def temp_files(self) -> list[Path]:
        """Temp files a killed writer left behind (``.<name>.<random>.tmp`` in the folder and steps/), sorted."""
        found = [p for p in self.path.iterdir() if p.name.startswith(".") and p.name.endswith(TMP_SUFFIX)]
        found += [p for p in self._step_dir_entries() if p.name.startswith(".") and p.name.endswith(TMP_SUFFIX)]
        return sorted(p for p in found if p.is_file() and not p.is_symlink())

    @property
    def has_engine_tokens(self) -> bool:
        """Does the recording hold what an engine emitted? Not when its manifest says ``engine_tokens:
        false`` or it was derived (``replay synth``: emitted tokens empty, no engine ran those steps)."""
        return self.manifest.get("engine_tokens") is not False and "derived" not in self.manifest

    @property
    def name(self) -> str:
        return self.path.name

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[StepRecord]:
        for i in range(len(self)):
            yield self[i]

    def read_tensors(self, index: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Raw tensors and metadata of one step (memory-mapped), schema checked, content not."""
        file = self.files[index]
        check_step_file(file, index)
        try:
            tensors, raw_meta = load_step_file(file)
        except Exception as e:  # safetensors raises its own error types for bad headers and short files
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise InputError(file, f"unreadable safetensors file (truncated or corrupt: {reason})", step=index) from None
        try:
            meta = json.loads(raw_meta) if raw_meta is not None else None
        except (ValueError, RecursionError):  # JSONDecodeError, over-long integers, deep nesting
            raise InputError(file, f"the '{METADATA_KEY}' metadata is not valid JSON", step=index,
                             field="__metadata__") from None
        if not isinstance(meta, dict):
            raise InputError(file, f"missing the '{METADATA_KEY}' metadata: not a replay step", step=index,
                             field="__metadata__")
        _parse_schema(meta.get("schema"), STEP_SCHEMA, file, "__metadata__.schema", step=index)
        if meta.get("step") != index or isinstance(meta.get("step"), bool):
            raise InputError(file, f"says step {_short(meta.get('step'))}, but the file name says step {index}",
                             step=index, field="__metadata__.step")
        return tensors, meta

    def __getitem__(self, index: int) -> StepRecord:
        """Step ``index``, read and schema checked. For a closed recording, the step digest of what was read
        is remembered too (recording/digest.py), so the digest check need not read the step again."""
        if not 0 <= index < len(self):
            raise IndexError(index)
        file = self.files[index]
        key = registry.file_key(file) if self.needs_digest else None  # before the read (digest.file_key)
        tensors, meta = self.read_tensors(index)
        if key is not None and registry.known(key) is None:
            registry.remember(key, tensor_digest(tensors, meta))  # hashlib drops the GIL: parallel in read-ahead
        problems = [p for p in check_step(tensors, self.vocab_size, file=file, step=index, nan=self.nan,
                                          neg_inf=self.neg_inf) if not p.warning]
        if problems:
            raise problems[0]
        emitted = Emitted(tensors["emitted_tokens"], tensors["emitted_counts"], tensors.get("emitted_routes"))
        return StepRecord(index=index, file=file, step=step_from_tensors(tensors), emitted=emitted, meta=meta)

    def step_digest(self, index: int, quiet: bool = False) -> str | None:
        """The content digest of step ``index``: the one remembered when it was read (recording/digest.py) if
        the file has not changed since, else read, hashed and remembered now. An unreadable step raises its
        InputError (``quiet``: gives None)."""
        key = registry.file_key(self.files[index])
        digest = registry.known(key)
        if digest is None:
            try:
                digest = tensor_digest(*self.read_tensors(index))
            except InputError:
                if quiet:
                    return None
                raise
            registry.remember(key, digest)
        return digest

    def digest(self) -> str:
        """Recording digest: sha256 of the per-step canonical digests, in step order (steps read since their
        file last changed are not hashed again: :meth:`step_digest`)."""
        return recording_digest(self.step_digest(i) for i in range(len(self)))
