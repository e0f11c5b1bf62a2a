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
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from replay_harness.errors import InputError, UsageError
from replay_harness.guarded import claimed
from replay_harness.limits import MAX_MANIFEST_BYTES, MAX_VOCAB, enforce, os_reason, read_regular
from replay_harness.recording import digest as registry
from replay_harness.recording.digest import algorithm_of, canonical_json, recording_digest, tensor_digest
from replay_harness.recording.schema import (EMITTED_FIELDS, MANIFEST, METADATA_KEY, OPTIONAL_EMITTED,
                                             OPTIONAL_FIELDS, RECORDING_SCHEMA, RECORDING_SCHEMA_ID, SCHEMA_MAJOR,
                                             SCHEMA_MINOR, STEP_FIELDS, STEP_RE,
                                             STEP_SCHEMA, STEP_SCHEMA_ID, STEPS_DIR, step_file_name)
from replay_harness.recording.step import Step
from replay_harness.recording.stepfile import (TMP_SUFFIX, StepFileProblem, atomic_write, check_step_file, encode_step,
                                               in_digest_thread, read_step_file, write_step_file)
from replay_harness.recording.validate import check_manifest, check_step

__all__ = ["Emitted", "StepRecord", "RecordingWriter", "Recording", "step_tensors", "step_from_tensors",
           "step_metadata", "encode_step", "load_step_file", "check_step_file", "canonical_json", "tensor_digest"]


@dataclass
class Emitted:
    """What the engine emitted in a step (the recorded answer).

    tokens [R, max_k+1] int32 (-1 padded), counts [R] int32, routes [R] int8 or None; schema minor 2, each
    optional (docs/FIXTURES.md, "Emitted logprobs and kept sets"): logprobs [R, max_k+1, L] float32 and
    logprob_ids [R, max_k+1, L] int32 (column 0 the emitted token, then the top n), logprob_ranks [R, max_k+1]
    int32, kept_mask [R, max_k+1, ceil(V/32)] int32 (bit set: the token kept a finite processed logit).
    """

    tokens: torch.Tensor
    counts: torch.Tensor
    routes: torch.Tensor | None = None
    logprobs: torch.Tensor | None = None
    logprob_ids: torch.Tensor | None = None
    logprob_ranks: torch.Tensor | None = None
    kept_mask: torch.Tensor | None = None

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor]) -> "Emitted":
        """The ``emitted_*`` tensors of a step file."""
        return cls(**{name.removeprefix("emitted_"): tensors.get(name) for name in EMITTED_FIELDS + OPTIONAL_EMITTED})


@dataclass
class StepRecord:
    """A step as read from disk: inputs, the engine's answer, and where it came from."""

    index: int
    file: Path
    step: Step
    emitted: Emitted
    meta: dict[str, Any]


def step_tensors(step: Step, emitted: Emitted | None = None) -> dict[str, torch.Tensor]:
    """The tensors of one step file by their fixture names (contiguous, on the CPU; schema.FIELDS order).

    Without ``emitted``: the inputs only (the step files sent to external impls).
    """
    out = {name: getattr(step, name) for name in STEP_FIELDS}
    out.update({name: getattr(step, name) for name in OPTIONAL_FIELDS if getattr(step, name) is not None})
    if emitted is not None:
        for name in EMITTED_FIELDS + OPTIONAL_EMITTED:
            value = getattr(emitted, name.removeprefix("emitted_"))
            if value is not None:
                out[name] = value
    return {k: v.detach().cpu().contiguous() for k, v in out.items()}


def step_from_tensors(tensors: dict[str, torch.Tensor]) -> Step:
    """The :class:`Step` held by a step file's tensors (the required inputs must be there)."""
    return Step(**{k: tensors[k] for k in STEP_FIELDS}, **{k: tensors.get(k) for k in OPTIONAL_FIELDS})


def step_metadata(index: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``replay`` metadata of step ``index``'s file: schema, step index, then ``extra`` keys."""
    return {"schema": STEP_SCHEMA_ID, "step": index, **(extra or {})}


def load_step_file(file: str | os.PathLike, alloc: Callable[[int], torch.Tensor] | None = None
                   ) -> tuple[dict[str, torch.Tensor], str | None]:
    """Every tensor of a step file and its raw ``replay`` metadata string (None if absent): stepfile.read_step_file.

    Raises what safetensors raises on a bad file; :meth:`Recording.read_tensors` turns that into an InputError.
    """
    return read_step_file(file, alloc)


class RecordingWriter:
    """Streams steps into a new recording directory.

    >>> with RecordingWriter(path, vocab_size=V, source={"engine": "mine"}) as w:
    ...     w.write_step(step, emitted)

    The manifest is written first with ``complete: false`` and rewritten on a
    clean close with the step count, the recording digest (``digest_algorithm`` xxh3-128) and
    ``write_stats`` (steps, bytes, seconds in :meth:`write_step` and per phase).
    """

    def __init__(self, path: str | os.PathLike, *, vocab_size: int, rng_contract: str = "mrv2",
                 source: dict[str, Any] | None = None, synthetic: bool = False, overwrite: bool = False):
        self.path = Path(path)
        claim = claimed(self.path, "--out", folder=True)  # the check's descriptor and inputs (record, synth)
        try:
            if overwrite and claim.via_link:
                raise UsageError(f"{claim.path}: is a symlink; --overwrite does not replace what a link names (name "
                                 "the folder itself)")
            self._folder = claim.target(create=True)
        finally:
            claim.close()
        if not overwrite and self._folder.listdir():
            raise InputError(self.path, "output folder exists and is not empty (pass --overwrite to replace it)")
        if overwrite and self._folder.lstat(MANIFEST) is not None:
            self._clear_steps()
        self._steps = self._folder.subfolder(STEPS_DIR, create=True)
        self.manifest: dict[str, Any] = {
            "schema": RECORDING_SCHEMA_ID, "schema_minor": SCHEMA_MINOR,
            "vocab_size": int(vocab_size), "rng_contract": rng_contract, "synthetic": bool(synthetic),
            "source": source or {}, "complete": False, "num_steps": 0, "digest": None,
            "digest_algorithm": registry.WRITTEN,
        }
        self._digests: list[str] = []
        # what write_step did, how long it took, and where that time went (check, write, fsync, publish, digest_wait)
        self.write_stats: dict[str, Any] = {"steps": 0, "bytes": 0, "seconds": 0.0, "phases": {}}
        self._write_manifest()

    def _clear_steps(self) -> None:
        """--overwrite of a recording in place: delete its step files, relative to the folder's descriptor; a
        steps/ that is a symlink is unlinked (never followed), one that is a mount point is refused."""
        st = self._folder.lstat(STEPS_DIR)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            self._folder.delete(STEPS_DIR)
            return
        with self._folder.subfolder(STEPS_DIR, create=False) as steps:
            for name in steps.listdir():
                entry = steps.lstat(name)
                if name.endswith(".safetensors") and entry is not None and not stat.S_ISDIR(entry.st_mode):
                    steps.delete(name)

    def _write_manifest(self) -> None:
        atomic_write(self.path / MANIFEST, [(json.dumps(self.manifest, indent=2, sort_keys=True) + "\n").encode()],
                     folder=self._folder)

    def write_step(self, step: Step, emitted: Emitted, meta: dict[str, Any] | None = None,
                   row_max: dict[str, torch.Tensor] | None = None) -> Path:
        """Validate and write one step atomically (stepfile.write_step_file: one pass, digest alongside);
        returns the file written. ``row_max``: the logits' row maxima when the caller has them (computed on
        the device before the copy: validate.check_step then reads no logit on the host)."""
        start = time.perf_counter()
        index = len(self._digests)
        tensors = step_tensors(step, emitted)
        step_meta = step_metadata(index, meta)
        file = self.path / STEPS_DIR / step_file_name(index)
        problems = [p for p in check_step(tensors, self.manifest["vocab_size"], file=file, step=index,
                                          row_max=row_max)
                    if not p.warning]  # an all -inf row (warned by validate) is still recorded
        if problems:
            raise problems[0]
        stats = self.write_stats
        stats["phases"]["check"] = stats["phases"].get("check", 0.0) + time.perf_counter() - start
        self._digests.append(write_step_file(file, tensors, step_meta, self.manifest["digest_algorithm"],
                                             stats["phases"], folder=self._steps))
        stats["steps"] += 1
        stats["bytes"] += sum(t.numel() * t.element_size() for t in tensors.values())
        stats["seconds"] += time.perf_counter() - start
        return file

    def close(self, engine: dict[str, Any] | None = None) -> None:
        """Write the final manifest; ``engine``: what the recording engine saw, added to ``write_stats``."""
        stats = self.write_stats
        self.manifest.update(complete=True, num_steps=len(self._digests),
                             digest=recording_digest(self._digests, self.manifest["digest_algorithm"]),
                             write_stats={**stats, "seconds": round(stats["seconds"], 6),
                                          "phases": {k: round(v, 6) for k, v in stats["phases"].items()},
                                          "MBps": round(stats["bytes"] / stats["seconds"] / 1e6, 1)
                                          if stats["seconds"] else None, **({"engine": engine} if engine else {})})
        self._write_manifest()

    def __enter__(self) -> "RecordingWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.close()
        finally:
            self._steps.close()
            self._folder.close()


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
        problems = check_manifest(self.manifest, mpath, required=False)  # a key that is present: of its kind
        if problems:
            raise problems[0]
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

    @property
    def digest_algorithm(self) -> str:
        """The algorithm of this recording's content digests (manifest ``digest_algorithm``; absent: sha256)."""
        return algorithm_of(self.manifest)

    @property
    def has_expected_tokens(self) -> bool:
        """Does a recording without engine tokens hold the reference's tokens instead (``expected_tokens:
        "reference"``, written by ``replay synth``)? ``replay run`` then compares with them, not the oracle."""
        return self.manifest.get("expected_tokens") == "reference"

    def read_tensors(self, index: int, alloc: Callable[[int], torch.Tensor] | None = None
                     ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Raw tensors and metadata of one step (views into one buffer, ``alloc(nbytes)`` when given: see
        stepfile.read_step_file), schema checked, content not."""
        file = self.files[index]
        check_step_file(file, index)
        try:
            tensors, raw_meta = load_step_file(file, alloc)
        except StepFileProblem as e:
            raise InputError(file, str(e), step=index, field=e.field) from None
        except Exception as e:  # safetensors raises its own error types for bad headers and short files
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise InputError(file, f"unreadable safetensors file (truncated or corrupt: {reason})", step=index) from None
        try:
            meta = json.loads(raw_meta) if raw_meta is not None else None
        except (ValueError, RecursionError):  # JSONDecodeError, over-long integers, deep nesting
            raise InputError(file, f"the '{METADATA_KEY}' metadata is not valid JSON", step=index,
                             field="__metadata__") from None
        if meta is None:
            raise InputError(file, f"missing the '{METADATA_KEY}' metadata: not a replay step", step=index,
                             field="__metadata__")
        if not isinstance(meta, dict):
            raise InputError(file, f"the '{METADATA_KEY}' metadata must be a JSON object, got {_short(meta)}",
                             step=index, field="__metadata__")
        _parse_schema(meta.get("schema"), STEP_SCHEMA, file, "__metadata__.schema", step=index)
        if type(meta.get("step")) is not int or meta["step"] != index:
            raise InputError(file, f"says step {_short(meta.get('step'))}, but the file name says step {index}",
                             step=index, field="__metadata__.step")
        return tensors, meta

    def __getitem__(self, index: int) -> StepRecord:
        """Step ``index``, read and schema checked, on the CPU (:meth:`read`)."""
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.read(index)

    def read(self, index: int, staging: Any = None) -> StepRecord:
        """Step ``index``, read and schema checked. With ``staging`` (prefetch.Staging: pinned buffers and a
        CUDA stream) the file lands in a pinned buffer and the step's inputs are copied to that device; the
        emitted tensors stay on the CPU. For a closed recording, the step digest of the bytes read is computed
        on the digest thread beside the copy and the checks, and remembered (recording/digest.py), so the
        digest check need not read the step again."""
        file = self.files[index]
        algorithm = self.digest_algorithm
        key = registry.file_key(file, algorithm) if self.needs_digest else None  # before the read (digest.file_key)
        try:
            tensors, meta = self.read_tensors(index, None if staging is None else staging.take)
        except BaseException:
            if staging is not None:
                staging.releaser()()
            raise
        host, check, release = tensors, tensors, (lambda: None)
        if staging is not None:
            release = staging.releaser()
            try:
                tensors, check = staging.to_device(tensors, STEP_FIELDS + OPTIONAL_FIELDS)
            except BaseException:
                release()
                raise
        if key is not None and registry.known(key) is None:  # the host bytes read, hashed beside the checks
            registry.pending(key, in_digest_thread(tensor_digest, host, meta, algorithm), release)
        else:
            release()
        problems = [p for p in check_step(check, self.vocab_size, file=file, step=index, nan=self.nan,
                                          neg_inf=self.neg_inf) if not p.warning]
        if problems:
            raise problems[0]
        emitted = Emitted.from_tensors(tensors)
        step = step_from_tensors(tensors)
        step.rng_contract = self.rng_contract  # fixes the noise width of every draw (schema.RNG_CONTRACTS)
        return StepRecord(index=index, file=file, step=step, emitted=emitted, meta=meta)

    def step_digest(self, index: int, quiet: bool = False) -> str | None:
        """The content digest of step ``index``: the one remembered when it was read (recording/digest.py) if
        the file has not changed since, else read, hashed and remembered now. An unreadable step raises its
        InputError (``quiet``: gives None)."""
        key = registry.file_key(self.files[index], self.digest_algorithm)
        digest = registry.known(key)
        if digest is None:
            try:
                digest = tensor_digest(*self.read_tensors(index), self.digest_algorithm)
            except InputError:
                if quiet:
                    return None
                raise
            registry.remember(key, digest)
        return digest

    def digest(self) -> str:
        """Recording digest: the digest algorithm over the per-step canonical digests, in step order (steps read
        since their file last changed are not hashed again: :meth:`step_digest`)."""
        return recording_digest((self.step_digest(i) for i in range(len(self))), self.digest_algorithm)
