#!/usr/bin/env python3
"""The sampling pipeline on the GPU: what its rules cost ``stochastic``, and vLLM's own pipeline beside it (issue 64).

GPU (one H100 / H200; tools/run_gpu_pipeline.sh runs it with the peers' vLLM files carried):
    python3 tools/pipeline_bench.py --out "$OUT"
CPU smoke (TRITON_INTERPRET=1, tiny shape):
    python3 tools/pipeline_bench.py --vocab 257 --requests 4 --steps 2 --device cpu --out /tmp/pipeline_smoke

1. **Steps** (SYNTHETIC: DERIVED from the real rows of ``--source`` by recording/derive.py, the rows resized to
   ``--vocab``, ``--dtype``): ``--steps`` steps for each R of ``--requests``, every request verifying ``--drafts``
   drafts (one-hot).
2. **Rules** (SYNTHETIC, recording/synthetic.add_pipeline: chosen so each one changes tokens): penalties, logit
   bias, allowed ids, bad words, min-tokens, a grammar bitmask and logprobs, the histories (prompt + output)
   lengthened to ``--history`` tokens a request (random ids before the generated tail, which the bad words and
   min-tokens are keyed to). Four variants of each step: *base* (no rule), *grammar* (the bitmask only), *sparse*
   (penalties, logit bias and bad words over the histories: the issue's first cost target), *rules* (every rule). The logprob requests of a timed step share one mode (``--logprobs-mode``: vLLM's is engine-wide).
3. **Check**, on every rules step and on step 0 with the four logprobs modes mixed: ``stochastic`` against
   ``vllm-mrv2`` (both through get_impl): tokens and counts equal (a difference that is a floating-point near-tie,
   oracle/near_tie.py, is counted apart), logprobs / top-n ids / ranks by compare/logprobs.py (1e-4).
4. **Timing** (bench/timing.time_calls, as `replay bench`: CUDA events, each call behind its own sleep, inputs
   rotated past 2 x L2 and L2 flushed before the timed rounds, the sides interleaved call by call; ``--repeats``
   calls a step a side): the ``launch`` of ``stochastic`` on rules, base and grammar; of ``vllm-mrv2`` on rules
   (vLLM's pipeline: the grammar mask, its processors, temperature, ``rejection_sample``, ``compute_topk_scores``);
   and the peer's grammar stand-in alone (the kit has no vLLM grammar kernel; impls/vllm_pipeline.py). Per step
   each side's median; the ratios step by step; over the steps their median and the worst step. Targets:
   sparse / base <= 1.1, grammar / base <= 1.1, stochastic / vLLM <= 0.6 (rules / base is reported beside them:
   every rule at once, logprobs included, has no target).

Writes under ``--out`` after each R: pipeline.json (every figure), pipeline_calls.csv (every timed call, µs),
pipeline_checks.csv (every request checked), pipeline.md (the table). Exit 0; 1 a check failed (the figures are
still written); 2 bad option; 3 an impl unavailable (the message says why).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIDES = ("stochastic rules", "stochastic base", "stochastic grammar", "vllm-mrv2 rules", "vllm grammar stand-in",
         "stochastic sparse")
MODES = ("raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits")


def parse(argv: list[str] | None):
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=248_320)
    ap.add_argument("--requests", type=int, nargs="+", default=[64, 256], help="R of each shape")
    ap.add_argument("--drafts", type=int, default=4, help="drafts each request verifies (k)")
    ap.add_argument("--steps", type=int, default=8, help="steps a shape (the medians are over them)")
    ap.add_argument("--history", type=int, default=4096, help="prompt + output tokens a request")
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    ap.add_argument("--source", default=str(REPO / "fixtures" / "real-draft-model"), help="recording whose rows "
                    "are derived (replay synth's method)")
    ap.add_argument("--logprobs-mode", choices=MODES, default="raw_logprobs", help="the timed steps' one mode")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls a step a side (20; 3 on the CPU)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls first (3; 1 on the CPU)")
    ap.add_argument("--device", default=None, help="cuda (default when there is one) or cpu")
    ap.add_argument("--seed", type=int, default=64)
    ap.add_argument("--out", default="/tmp/pipeline_out")
    args = ap.parse_args(argv)
    cpu = args.device == "cpu" or (args.device is None and not torch.cuda.is_available())
    args.repeats = args.repeats if args.repeats is not None else 3 if cpu else 20
    args.warmup = args.warmup if args.warmup is not None else 1 if cpu else 3
    if args.steps < 1 or args.repeats < 1 or args.warmup < 0 or args.history < 2 or args.drafts < 0 \
            or min(args.requests) < 1:
        ap.exit(2, "pipeline_bench: --steps, --repeats, --requests >= 1, --warmup, --drafts >= 0, --history >= 2\n")
    return args


def lengthen(gen, step, history: int):
    """``step`` with each request's prompt + output grown to ``history`` tokens (a quarter output): random ids
    before the existing ones, so the tails the rules are keyed to stay; min-tokens moves with the output."""
    import torch

    def ragged(lists):  # values [*] int32 and their prefix sum [R+1] int32
        sizes = torch.tensor([0] + [len(x) for x in lists])
        return torch.tensor([t for x in lists for t in x], dtype=torch.int32), torch.cumsum(sizes, 0).to(torch.int32)

    cu_p, cu_o = step.cu_prompt_token_ids.tolist(), step.cu_output_token_ids.tolist()
    prompts, outputs, grown = [], [], []
    for r in range(step.num_requests):
        p, o = step.prompt_token_ids[cu_p[r]:cu_p[r + 1]].tolist(), step.output_token_ids[cu_o[r]:cu_o[r + 1]].tolist()
        o_len = max(len(o), history // 4)
        p_len = max(len(p), history - o_len)
        rand = lambda n: torch.randint(0, step.vocab_size, (n,), generator=gen).tolist()  # noqa: E731
        prompts.append(rand(p_len - len(p)) + p)
        outputs.append(rand(o_len - len(o)) + o)
        grown.append(o_len - len(o))
    fields = {}
    fields["prompt_token_ids"], fields["cu_prompt_token_ids"] = ragged(prompts)
    fields["output_token_ids"], fields["cu_output_token_ids"] = ragged(outputs)
    if step.min_tokens is not None:
        grown_t = torch.tensor(grown, dtype=torch.int32)
        fields["min_tokens"] = torch.where(step.min_tokens > 0, step.min_tokens + grown_t, step.min_tokens)
    return dataclasses.replace(step, **fields)


def variants(gen, base, history: int, mode: int):
    """(rules, grammar-only, mixed-modes, sparse) variants of a derived step (module docstring, 2)."""
    import torch

    from replay_harness.recording.synthetic import add_pipeline

    rules = lengthen(gen, add_pipeline(gen, base), history)
    r = base.num_requests
    timed = dataclasses.replace(rules, logprobs_mode=torch.full((r,), mode, dtype=torch.int8))
    grammar = dataclasses.replace(base, grammar_bitmask=rules.grammar_bitmask, has_grammar=rules.has_grammar)
    keep = ("repetition_penalty", "frequency_penalty", "presence_penalty", "prompt_token_ids", "cu_prompt_token_ids",
            "output_token_ids", "cu_output_token_ids", "logit_bias_ids", "logit_bias_values", "cu_logit_bias",
            "bad_words_token_ids", "cu_bad_words_token_ids", "bad_words_lengths", "cu_bad_words_lengths")
    sparse = dataclasses.replace(base, **{f: getattr(rules, f) for f in keep})
    asked = torch.tensor([[2, 0, 3, 5][i % 4] for i in range(r)], dtype=torch.int32)
    mixed = dataclasses.replace(rules, logprobs=asked, logprobs_mode=torch.arange(r, dtype=torch.int8) % 4)
    return timed, grammar, mixed, sparse


def check(step, impls, device, label: str, rows: list[dict]) -> dict:
    """stochastic against vllm-mrv2 on one step (module docstring, 3); appends a row a request to ``rows``."""
    import torch

    from replay_harness.compare.logprobs import OutputCounts, compare_outputs
    from replay_harness.impls.contract import place
    from replay_harness.oracle.near_tie import is_near_tie

    ours, theirs = (impls[n].sample(place(step, impls[n], device)) for n in ("stochastic", "vllm-mrv2"))
    out = dict(requests=step.num_requests, tokens=int(theirs.counts.sum()), token_mismatches=0, near_ties=0,
               logprob_divergences=0, logprob_slots=0, logprobs_missing=0, first_problem=None)
    counts = OutputCounts()
    cpu_step = step.to("cpu")
    for r in range(step.num_requests):
        a, b = ours.tokens[r], theirs.tokens[r]
        equal = torch.equal(a, b) and int(ours.counts[r]) == int(theirs.counts[r])
        slots = int(torch.nonzero(a != b)[0]) if not torch.equal(a, b) else min(int(ours.counts[r]),
                                                                              int(theirs.counts[r]))
        verdict = "equal"
        if not equal:
            near, margin = is_near_tie(cpu_step, r, slots)
            verdict = f"near-tie ({margin:.2g})" if near else f"MISMATCH at {slots} (margin {margin:.3g})"
            out["near_ties" if near else "token_mismatches"] += 1
            if not near and out["first_problem"] is None:
                out["first_problem"] = f"request {r}: stochastic {a.tolist()} vllm-mrv2 {b.tolist()}"
        diffs = compare_outputs(0, cpu_step, ours, theirs, r, slots, 0, counts)
        out["logprob_divergences"] += len(diffs)
        if diffs and out["first_problem"] is None:
            out["first_problem"] = f"request {r} slot {diffs[0].position}: {diffs[0].kind}: {diffs[0].detail}"
        rows.append(dict(check=label, request=r, verdict=verdict, stochastic=a.tolist(), vllm=b.tolist(),
                         logprob_divergences="; ".join(f"{d.position}:{d.kind}" for d in diffs)))
    out.update(logprob_slots=counts.logprob_slots, logprobs_missing=counts.logprobs_missing)
    out["ok"] = not (out["token_mismatches"] or out["logprob_divergences"] or out["logprobs_missing"])
    return out


def copies_of(step, n: int):
    """``n`` copies of the step's large tensors (rotation: each call reads its own, as bench/ab.py's)."""
    big = ("logits", "draft_logits", "grammar_bitmask")
    return [dataclasses.replace(step, **{f: getattr(step, f).clone() for f in big if getattr(step, f) is not None})
            for _ in range(n)]


def time_step(steps: dict, impls, device, args, calls_csv: list[dict], shape: str, index: int) -> dict:
    """Every side's µs on one step's variants, interleaved (module docstring, 4); medians a side."""
    import torch

    from replay_harness.bench.timing import flush_l2, l2_bytes, rotation_count, time_calls
    from replay_harness.impls.vllm_pipeline import apply_grammar_bits

    l2 = l2_bytes(device)
    step_bytes = steps["rules"].logits.numel() * steps["rules"].logits.element_size()
    n = rotation_count(step_bytes, l2, warm_l2=False)
    with torch.inference_mode():
        on = {key: steps[key].to(device) for key in ("rules", "base", "grammar", "sparse")}
        calls = {}
        for side in SIDES[:4] + SIDES[5:]:  # each side its own copies: no side reads what another just pulled into L2
            name, variant = side.split()
            impl = impls[name]
            states = [impl.prepare(s) for s in copies_of(on[variant], n)]
            calls[side] = [(lambda st=st, impl=impl: impl.launch(st)) for st in states]
            if name == "vllm-mrv2":
                grammar = [st.engine.grammar for st in states]
                raws = [st.raw for st in states]
                calls[SIDES[4]] = [(lambda raw=raw, g=g: apply_grammar_bits(raw, *g)) for raw, g in zip(raws, grammar)
                                   if g is not None]
        if not calls[SIDES[4]]:
            del calls[SIDES[4]]
        clocks = {k: "cuda-events" if device.type == "cuda" else "cpu-wall" for k in calls}
        flush = (lambda: flush_l2(device, 2 * l2)) if l2 else None
        times, busy = time_calls(calls, clocks, args.repeats, args.warmup, flush)
    for side, xs in times.items():
        calls_csv.extend(dict(shape=shape, step=index, side=side, call=i, us=round(x, 3)) for i, x in enumerate(xs))
    del calls, on
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {side: dict(median_us=statistics.median(xs), device_busy=busy[side], rotation=n)
            for side, xs in times.items()}


def med_worst(xs: list[float], worst=max) -> dict:
    return {"median": statistics.median(xs), "worst": worst(xs), "steps": len(xs)} if xs else {}


def summarize(steps: list[dict]) -> dict:
    """Ratios step by step, then their median and the worst step."""
    us = lambda s, side: s["timing"][side]["median_us"]  # noqa: E731
    out = {"rules_over_base": med_worst([us(s, SIDES[0]) / us(s, SIDES[1]) for s in steps]),
           "sparse_over_base": med_worst([us(s, SIDES[5]) / us(s, SIDES[1]) for s in steps]),
           "grammar_over_base": med_worst([us(s, SIDES[2]) / us(s, SIDES[1]) for s in steps]),
           "stochastic_over_vllm": med_worst([us(s, SIDES[0]) / us(s, SIDES[3]) for s in steps])}
    if all(SIDES[4] in s["timing"] for s in steps):
        out["stochastic_over_vllm_less_grammar_stand_in"] = med_worst(
            [us(s, SIDES[0]) / (us(s, SIDES[3]) - us(s, SIDES[4])) for s in steps])
    for side in SIDES:
        if all(side in s["timing"] for s in steps):
            out[side + " us"] = med_worst([us(s, side) for s in steps])
    out["checks_ok"] = all(c["ok"] for s in steps for c in s["checks"].values())
    return out


def table(res: dict) -> str:
    def mw(d: dict, fmt: str = ".2f") -> str:
        return f"{d['median']:{fmt}} ({d['worst']:{fmt}})" if d else "-"

    lines = [f"# Sampling pipeline: stochastic with and without the rules, and vLLM MRV2's pipeline",
             "", f"{res['env'].get('gpu')} ({res['env'].get('device')}), torch {res['env']['torch']}, triton "
             f"{res['env']['triton']}, commit {res['env']['commit']}, {res['env']['date']}. SYNTHETIC steps derived "
             f"from {Path(res['args']['source']).name}: V = {res['args']['vocab']:,}, {res['args']['dtype']}, k = "
             f"{res['args']['drafts']}, histories of {res['args']['history']:,} tokens, logprobs mode "
             f"{res['args']['logprobs_mode']}; median over the steps (worst step).", "",
             "| R | sparse / base (<= 1.1) | grammar / base (<= 1.1) | stochastic / vLLM (<= 0.6) | "
             "stochastic / (vLLM - grammar stand-in) | rules / base | stochastic rules µs | base µs | vLLM µs | "
             "stand-in µs | checks |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = ["", "vLLM: `vllm-mrv2`'s launch (the grammar mask by the peer's own torch stand-in: the kit has no vLLM "
             "grammar kernel; vLLM's processors, temperature, min-p, rejection_sample, compute_topk_scores). "
             "The column without the stand-in takes all of its time off vLLM's: a bound in vLLM's favour."]
    for shape in res["shapes"]:
        s = shape["summary"]
        bad = [f"{c}: {v['first_problem']}" for st in shape["steps"] for c, v in st["checks"].items() if not v["ok"]]
        ties = sum(v["near_ties"] for st in shape["steps"] for v in st["checks"].values())
        lines.append(f"| {shape['R']} | {mw(s['sparse_over_base'])} | {mw(s['grammar_over_base'])} | "
                     f"{mw(s['stochastic_over_vllm'])} | {mw(s.get('stochastic_over_vllm_less_grammar_stand_in', {}))} "
                     f"| {mw(s['rules_over_base'])} | {mw(s.get(SIDES[0] + ' us', {}), '.1f')} | {mw(s.get(SIDES[1] + ' us', {}), '.1f')} | "
                     f"{mw(s.get(SIDES[3] + ' us', {}), '.1f')} | {mw(s.get(SIDES[4] + ' us', {}), '.1f')} | "
                     f"{'ok' if s['checks_ok'] else 'FAILED'} ({ties} near-ties) |")
        lines.extend(f"  - {b}" for b in bad[:5])
    return "\n".join(lines + notes) + "\n"


def write(res: dict, out: Path, calls_csv: list[dict], check_rows: list[dict]) -> None:
    (out / "pipeline.json").write_text(json.dumps(res, indent=1, default=str))
    for name, rows in (("pipeline_calls.csv", calls_csv), ("pipeline_checks.csv", check_rows)):
        if rows:
            with open(out / name, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    (out / "pipeline.md").write_text(table(res))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
    from replay_harness.bench.environment import environment
    from replay_harness.errors import ReplayError
    from replay_harness.impls import get_impl
    from replay_harness.recording.derive import derive_steps
    from replay_harness.recording.store import Recording

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("pipeline_bench: --device cuda, but torch sees no CUDA GPU", file=sys.stderr)
        return 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        impls = {name: get_impl(name) for name in ("stochastic", "vllm-mrv2")}
        source = Recording(args.source)
    except ReplayError as e:
        print(f"pipeline_bench: {e}", file=sys.stderr)
        return e.exit_code
    res = dict(args=vars(args), env=environment(device), shapes=[])
    calls_csv: list[dict] = []
    check_rows: list[dict] = []
    gen = torch.Generator().manual_seed(args.seed)
    mode = MODES.index(args.logprobs_mode)
    for r_count in args.requests:
        shape = dict(R=r_count, V=args.vocab, k=args.drafts, dtype=args.dtype, steps=[])
        res["shapes"].append(shape)
        t0 = time.time()
        derived = derive_steps(source, batch=r_count, drafts=args.drafts, vocab=args.vocab, steps=args.steps,
                               seed=args.seed + r_count, dtype=getattr(torch, args.dtype))
        for i, (base, _) in enumerate(derived):
            rules, grammar, mixed, sparse = variants(gen, base, args.history, mode)
            label = f"R={r_count} step {i}"
            checks = {"rules": check(rules, impls, device, label, check_rows)}
            if i == 0:
                checks["mixed modes"] = check(mixed, impls, device, label + " mixed modes", check_rows)
            timing = time_step({"rules": rules, "base": base, "grammar": grammar, "sparse": sparse}, impls, device,
                               args, calls_csv, f"R={r_count}", i)
            shape["steps"].append(dict(step=i, checks=checks, timing=timing))
            print(f"{label}: " + ", ".join(f"{k} {v['median_us']:.1f} us" for k, v in timing.items())
                  + "; checks " + ", ".join(f"{c} {'ok' if v['ok'] else 'FAILED: ' + str(v['first_problem'])}"
                                            for c, v in checks.items()), file=sys.stderr, flush=True)
            del rules, grammar, mixed, sparse, base
        shape["summary"] = summarize(shape["steps"])
        shape["seconds"] = round(time.time() - t0, 1)
        write(res, out, calls_csv, check_rows)
    print(table(res))
    return 0 if all(s["summary"]["checks_ok"] for s in res["shapes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
