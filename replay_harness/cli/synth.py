"""`replay synth`: derive production-shape steps (R, k, V) from a real recording (replay_harness.recording.derive)."""
from __future__ import annotations

import typer

from replay_harness.cli.common import (JsonFileOpt, JsonOpt, LegacyStepsOpt, NumStepsOpt, check_json_file, num_steps,
                                       out, print_json)

DEFAULT_STEPS = 2


def synth(
    source: str = typer.Argument(..., metavar="RECORDING", help="A real recording to take logits rows from."),
    out_path: str = typer.Option(..., "--out", metavar="FOLDER", help="Folder for the derived recording."),
    batch: int = typer.Option(..., "--batch", metavar="R", help="Requests per step (R)."),
    drafts: int = typer.Option(0, "--drafts", metavar="K", help="Drafts per request (k; 0 = plain samples)."),
    vocab: int = typer.Option(..., "--vocab", metavar="V", help="Vocabulary size (up to 262,144)."),
    count: NumStepsOpt(DEFAULT_STEPS, "Steps to derive") = None,
    steps: LegacyStepsOpt = None,
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the resampling and the request seeds."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing recording at --out (written "
                                   "beside it, swapped in once complete; never one that shares a file with "
                                   "the input)."),
    as_json: JsonOpt = False,
    json_file: JsonFileOpt = None,
) -> None:
    """Build DERIVED steps at a production shape (R, k, V) from a real recording's logits rows.

    Rows are tiled; each row keeps its 64 largest logits and their probabilities, the rest is extended by
    resampling the row's own values (tail mass kept). The output is labelled derived/synthetic; emitted
    tokens are empty (compare impls with each other). It runs on the CPU on purpose (no --device): the
    resampling uses torch's CPU generator, so the same options give the same bytes on every machine.
    --num-steps is a count (--steps, its former spelling, still works and warns: --steps selects steps in
    run and verify).

    Example: replay synth fixtures/real-founding --out /tmp/v248k --batch 64 --drafts 4 --vocab 248320
    """
    from pathlib import Path

    from replay_harness.guarded import Inputs
    from replay_harness.limits import check_special_output
    from replay_harness.recording.derive import write_derived
    from replay_harness.recording.store import Recording
    from replay_harness.recording.swap import claim_replace, write_replacing

    steps = num_steps(count, steps, DEFAULT_STEPS, "synth")
    check_special_output(out_path, "--out")  # a FIFO or a device: never opened, never replaced
    claim = claim_replace(out_path, Inputs([source]), overwrite=overwrite)  # the input by place or identity
    check_json_file(json_file, [source, out_path])
    written: dict = {}

    def write(staged: str) -> None:  # beside --out, swapped in once complete (never delete first)
        write_derived(source, staged, batch=batch, drafts=drafts, vocab=vocab, steps=steps, seed=seed, overwrite=True)
        written.update(Recording(staged).manifest)  # read before the swap: --out's path may name another by then

    write_replacing(claim, write)
    manifest = written
    if as_json or json_file:
        print_json(manifest, json_file=json_file, stdout=as_json)  # --json: the derived manifest
    if not as_json:
        d = manifest["derived"]
        out.print(f"wrote {Path(out_path)}: {steps} derived/synthetic step(s), R={batch} k={drafts} V={vocab} from "
                  f"{d['from']} (V={d['from_vocab_size']}); {d['argmax_draft_rows']} draft row(s) use the row argmax")
