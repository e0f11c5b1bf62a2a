"""Corrupted recordings, one per case: ``build_case(root, seed, index)`` copies a committed fixture to
``root/rec`` and breaks it one way (its *kind*, by rotation over :data:`KINDS`; one case in four stacks a
second content corruption). Seeded by (seed, index) alone, so a case rebuilds exactly from its number.

Every corruption writes real files: truncations, flipped bytes, safetensors headers that lie (huge shapes,
offsets, sparse files claiming GiBs past REPLAY_MAX_STEP_BYTES), wrong dtypes / shapes / fields / values per
replay_harness/recording/schema.py, NaN and -inf rows, broken or oversize manifests, FIFOs, symlinks (to
/dev/zero, to a FIFO, loops, dangling), files and folders without permission, temp-file leftovers,
duplicate / missing / stray step indices, and big-but-legal sparse steps (to bound peak RSS); and attacks
beyond the recording (tools/fuzz/hostile_kinds.py): control characters in names and strings, special files
as output paths, `synth --overwrite` onto its own input, hostile `exec:` programs; and on the command line
(tools/fuzz/cli_kinds.py): failing stdout / stderr, torchrun's variables, `bench --plot-from` special files and
hostile CSVs, hostile `--steps` / `--trials`; and on the write path (tools/fuzz/write_kinds.py): bind mounts and
read-only folders, symlink races, signals mid-write, the plugin's ``--replay-update``, `record --model` paths.
"""
from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

from tools.fuzz.cli_kinds import hostile_steps, plot_from, stdout_failure, torchrun_env
from tools.fuzz.files import FUZZ_LIMITS, REPO, Case, MiB, steps_of
from tools.fuzz.folder_kinds import (bad_manifest, fifo_in_place, oversize_manifest, step_indices, symlinks,
                                     tmp_leftovers, unreadable, valid)
from tools.fuzz.hostile_kinds import control_chars, exec_hostile, special_output, synth_overwrite
from tools.fuzz.write_kinds import mounts, plugin_update, readonly_output, record_model, signal_write, symlink_race
from tools.fuzz.step_kinds import (bad_step_metadata, bad_values, garbled_bytes, garbled_header_json, huge_shape_claim,
                                   missing_or_extra_field, nonfinite_rows, sparse_oversize, sparse_within_limit,
                                   truncated_step, wrong_dtype, wrong_shape)

__all__ = ["Case", "FUZZ_LIMITS", "KINDS", "MiB", "REPO", "build_case", "fixtures"]


def fixtures() -> list[Path]:
    """The committed recordings (folders holding manifest.json), synthetic ones listed 3 times (they are
    small, so fast), sorted for reproducibility."""
    found = sorted(p.parent for p in (REPO / "fixtures").glob("**/manifest.json"))
    return [p for p in found for _ in range(3 if "synthetic" in str(p) else 1)]


KINDS = {f.__name__.replace("_", "-"): f for f in (
    truncated_step, garbled_bytes, garbled_header_json, huge_shape_claim, sparse_oversize, sparse_within_limit,
    wrong_dtype, wrong_shape, missing_or_extra_field, nonfinite_rows, bad_values, bad_step_metadata, bad_manifest,
    oversize_manifest, fifo_in_place, symlinks, unreadable, tmp_leftovers, step_indices, valid,
    control_chars, special_output, synth_overwrite, exec_hostile, stdout_failure, torchrun_env, plot_from,
    hostile_steps, mounts, readonly_output, symlink_race, signal_write, plugin_update, record_model)}
STACKABLE = ("truncated-step", "garbled-bytes", "wrong-dtype", "wrong-shape", "nonfinite-rows", "bad-values",
             "bad-step-metadata", "bad-manifest", "tmp-leftovers", "step-indices", "missing-or-extra-field")


NOT_STACKED = ("valid", "sparse-within-limit", "sparse-oversize", "oversize-manifest", "fifo-in-place", "symlinks",
               "control-chars", "special-output", "synth-overwrite", "exec-hostile", "stdout-failure", "torchrun-env",
               "plot-from", "hostile-steps", "mounts", "readonly-output", "symlink-race", "signal-write",
               "plugin-update", "record-model")


def case_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"replay-fuzz/{seed}/{index}")


def build_case(root: Path, seed: int, index: int) -> Case:
    """Build case ``index`` of run ``seed`` under ``root`` (created; must not exist)."""
    rng = case_rng(seed, index)
    kind = list(KINDS)[index % len(KINDS)]
    base = rng.choice(fixtures())
    root.mkdir(parents=True)
    rec = root / "rec"
    shutil.copytree(base, rec)
    for p in [rec, *rec.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    case = Case(index, kind, root, [str(rec)], dict(FUZZ_LIMITS), notes=[f"from {base.relative_to(REPO)}"])
    KINDS[kind](case, rec, rng)
    if rng.random() < 0.25 and kind not in NOT_STACKED and steps_of(rec):
        extra = rng.choice(STACKABLE)
        try:
            KINDS[extra](case, rec, rng)
            case.kind += "+" + extra
        except Exception as e:  # the first corruption left nothing the second can parse
            case.notes.append(f"({extra} skipped: {type(e).__name__})")
    if rng.random() < 0.05 and case.argv is None:
        case.paths = case.paths * 2  # the same recording named twice
    for path, mode in sorted(case.chmods, key=lambda c: -len(c[0].parts)):  # inside a folder before the folder
        if os.path.lexists(path):  # a stacked corruption may have removed it
            os.chmod(path, mode)
    return case
