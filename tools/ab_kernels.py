#!/usr/bin/env python3
"""A/B of the kernels: copies of ``replay_kernels`` raced on the standard cases, tokens compared (GPU).

    git archive ce670c5 replay_kernels | tar -x -C scratch/base        # a baseline copy (any commit)
    python3 tools/ab_kernels.py --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \\
        [--set 'small:draw.sample_check.ROUND_DRAW_SHAPES=((1 << 31, 512, 1, 4096, True, None),)'] [--cases top-p]

Each ``--variant NAME=DIR`` loads the package in DIR under its own module name (so two versions of a kernel
live in one process); ``--set NAME:MODULE.ATTR=EXPR`` then overrides a module constant of that copy (a shape
table, a tile; MODULE is its path in the copy, ``draw.sample_check``, or ``sample_check`` in a copy from before the
subpackages), evaluated with the module's globals. The first variant is the reference: every other
variant's tokens and counts must equal its tokens in every case (exit 1 otherwise: a pruning or tie bug).
Timing: each case is prepared once per variant, then ``--rounds`` rounds, variants interleaved in each, of
``time_graph`` (16 launches in one CUDA graph, warm L2, median µs per launch; ``--cold``: the L2 evicted before
each launch, ``time_graph(cold=True)``); the table gives the median of
the rounds and its ratio to the reference. Cases: the SYNTHETIC bench rows
(``replay_harness.bench.kernels.cases.Inputs``, seeded by (V, R, k) like the bench) and steps derived from
the real recordings (``fixtures/real-draft-model``: Qwen2.5; ``fixtures/real-mixed``: SmolLM2), widened to
V = 248,320 (a real case with ``top_p`` < 1 sets every request to it, at the recorded temperatures).
``--steps N`` times N SYNTHETIC steps a case instead of one (seeds ``seed_of(V, R, k) + i``): a cell is then
the median over the steps of each step's median, with the range over the steps (a verify step with top-p costs
far more when its exact-cut fallback has rows to search, and the bench's one step may have none).
``--cases`` keeps the cases whose label contains one of its comma-separated words (a word ending in ``$``: whose
label ends with the rest, so ``R=2$`` is not ``R=256``); ``--kernels`` adds each
variant's device time per kernel (of the first step). A ``--set`` reaches what is read at call time (a shape
table used when a sampler is prepared), not a name another module imported at load time.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import statistics
import sys

V = 248320
CASES = [  # (label, source, R, k, top_p[, top_k])
    ("Qwen2.5-derived plain R=256", "fixtures/real-draft-model", 256, 0, 1.0),
    ("Qwen2.5-derived plain R=64", "fixtures/real-draft-model", 64, 0, 1.0),
    ("Qwen2.5-derived verify k=4 R=256", "fixtures/real-draft-model", 256, 4, 1.0),
    ("Qwen2.5-derived verify k=4 R=128", "fixtures/real-draft-model", 128, 4, 1.0),
    ("Qwen2.5-derived verify k=4 R=64", "fixtures/real-draft-model", 64, 4, 1.0),
    ("Qwen2.5-derived verify k=4 R=32", "fixtures/real-draft-model", 32, 4, 1.0),
    ("Qwen2.5-derived verify k=4 R=8", "fixtures/real-draft-model", 8, 4, 1.0),
    ("Qwen2.5-derived top-p 0.9 R=256", "fixtures/real-draft-model", 256, 0, 0.9),
    ("Qwen2.5-derived top-p 0.9 R=64", "fixtures/real-draft-model", 64, 0, 0.9),
    ("Qwen2.5-derived top-p 0.9 R=1", "fixtures/real-draft-model", 1, 0, 0.9),
    ("Qwen2.5-derived top-p 0.9 R=3", "fixtures/real-draft-model", 3, 0, 0.9),
    ("SmolLM2-derived top-p 0.9 R=1", "fixtures/real-mixed", 1, 0, 0.9),
    ("SmolLM2-derived plain R=256", "fixtures/real-mixed", 256, 0, 1.0),
    ("Qwen2.5-derived top-k 50 + top-p 0.9 R=64", "fixtures/real-draft-model", 64, 0, 0.9, 50),
    ("SmolLM2-derived top-k 50 + top-p 0.9 R=64", "fixtures/real-mixed", 64, 0, 0.9, 50),
    ("SYNTHETIC plain R=1", None, 1, 0, 1.0),
    ("SYNTHETIC plain R=8", None, 8, 0, 1.0),
    ("SYNTHETIC plain R=12", None, 12, 0, 1.0),
    ("SYNTHETIC plain R=64", None, 64, 0, 1.0),
    ("SYNTHETIC plain R=256", None, 256, 0, 1.0),
    ("SYNTHETIC top-p 0.9 R=1", None, 1, 0, 0.9),
    ("SYNTHETIC top-p 0.5 R=1", None, 1, 0, 0.5),
    ("SYNTHETIC top-p 0.9 R=2", None, 2, 0, 0.9),
    ("SYNTHETIC top-p 0.9 R=3", None, 3, 0, 0.9),
    ("SYNTHETIC top-p 0.9 R=4", None, 4, 0, 0.9),
    ("SYNTHETIC top-p 0.9 R=8", None, 8, 0, 0.9),
    ("SYNTHETIC top-p 0.9 R=16", None, 16, 0, 0.9),
    ("SYNTHETIC top-p 0.9 R=32", None, 32, 0, 0.9),
    ("SYNTHETIC top-p 0.9 R=64", None, 64, 0, 0.9),
    ("SYNTHETIC top-p 0.9 R=256", None, 256, 0, 0.9),
    ("SYNTHETIC verify k=4 R=1", None, 1, 4, 1.0),
    ("SYNTHETIC verify k=4 R=8", None, 8, 4, 1.0),
    ("SYNTHETIC verify k=4 R=32", None, 32, 4, 1.0),
    ("SYNTHETIC verify k=4 R=64", None, 64, 4, 1.0),
    ("SYNTHETIC verify k=4 R=256", None, 256, 4, 1.0),
    ("SYNTHETIC verify k=4 top-p 0.9 R=8", None, 8, 4, 0.9),
    ("SYNTHETIC verify k=4 top-p 0.9 R=64", None, 64, 4, 0.9),
    ("SYNTHETIC verify k=4 top-p 0.9 R=256", None, 256, 4, 0.9),
    ("SYNTHETIC top-k 50 + top-p 0.9 R=1", None, 1, 0, 0.9, 50),
    ("SYNTHETIC top-k 50 + top-p 0.9 R=64", None, 64, 0, 0.9, 50),
    ("SYNTHETIC top-k 50 + top-p 0.9 R=256", None, 256, 0, 0.9, 50),
    ("SYNTHETIC top-k 50 R=1", None, 1, 0, 1.0, 50),
    ("SYNTHETIC top-k 50 R=2", None, 2, 0, 1.0, 50),
    ("SYNTHETIC top-k 50 R=3", None, 3, 0, 1.0, 50),
    ("SYNTHETIC top-k 50 R=4", None, 4, 0, 1.0, 50),
    ("SYNTHETIC top-k 50 R=8", None, 8, 0, 1.0, 50),
    ("SYNTHETIC top-k 50 R=32", None, 32, 0, 1.0, 50),
    ("SYNTHETIC top-k 50 R=64", None, 64, 0, 1.0, 50),
    ("SYNTHETIC top-k 50 R=256", None, 256, 0, 1.0, 50),
    ("SYNTHETIC verify k=4 top-k 50 R=64", None, 64, 4, 1.0, 50),
    ("SYNTHETIC verify k=4 top-k 50 + top-p 0.9 R=64", None, 64, 4, 0.9, 50),
]


def load_variant(name: str, path: str):
    """The package in ``path`` imported as ``_ab_<name>`` (its relative imports resolve inside the copy)."""
    path = os.path.abspath(path)
    if not os.path.isfile(os.path.join(path, "__init__.py")):
        raise SystemExit(f"ab_kernels: {path}: not a package directory (no __init__.py)")
    pkg = f"_ab_{name}"
    spec = importlib.util.spec_from_file_location(pkg, os.path.join(path, "__init__.py"),
                                                  submodule_search_locations=[path])
    module = importlib.util.module_from_spec(spec)
    sys.modules[pkg] = module
    spec.loader.exec_module(module)
    return pkg


def apply_set(pkg: str, assignment: str) -> None:
    """``MODULE.ATTR=EXPR`` on the copy ``pkg``: the expression is evaluated with that module's globals."""
    target, _, expr = assignment.partition("=")
    module_name, _, attr = target.strip().rpartition(".")
    module = importlib.import_module(f"{pkg}.{module_name}")
    if not hasattr(module, attr):
        raise SystemExit(f"ab_kernels: {module_name} has no {attr}")
    setattr(module, attr, eval(expr, vars(module)))  # noqa: S307 (a developer's command line)


def copy_module(pkg: str, module: str):
    """Module ``module`` (``draw.gumbel_max``) of the copy ``pkg``; in a copy from before the modules were grouped
    into subpackages (issue 57: a baseline of an older commit), the flat module of the same name."""
    if not os.path.isdir(os.path.join(sys.modules[pkg].__path__[0], module.partition(".")[0])):
        module = module.rpartition(".")[2]
    return importlib.import_module(f"{pkg}.{module}")


def make_step(source: str | None, R: int, k: int, top_p: float, i: int = 0, top_k: int = 0):
    import torch

    from replay_harness.bench.kernels.cases import Inputs
    from replay_harness.recording.derive import derive_steps
    from replay_harness.recording.store import Recording

    if source is None:
        return Inputs.make(V, R, k, seed=Inputs.seed_of(V, R, k) + i, device="cuda").step(top_p, top_k)
    step, _ = next(derive_steps(Recording(source), batch=R, drafts=k, vocab=V, steps=1))
    if top_p < 1.0:  # the recorded temperatures, every request at this top-p
        step.top_p = torch.full_like(step.top_p, top_p)
    if top_k:  # and at this top-k
        step.top_k = torch.full_like(step.top_k, top_k)
    return step.to("cuda")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=DIR",
                    help="a copy of the replay_kernels package to race (the first is the reference)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME:MODULE.ATTR=EXPR",
                    help="override a module constant of one variant")
    ap.add_argument("--cases", default="", help="comma-separated words; keep the cases whose label has one "
                    "(ending in $: whose label ends with it)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1,
                    help="SYNTHETIC steps a case (different seeds); cells give the median and range over them")
    ap.add_argument("--per-step", action="store_true",
                    help="also each step's median per variant, with the rows a verify listed for its exact-cut "
                    "fallback")
    ap.add_argument("--cold", action="store_true",
                    help="evict the L2 before every launch in the graph (a read of 2 x L2, its time subtracted): "
                         "a step's kernels then reuse only what the step itself read")
    ap.add_argument("--kernels", action="store_true",
                    help="also each variant's device time per kernel (torch.profiler, 10 launches), after the table")
    args = ap.parse_args()

    import torch

    from replay_harness.bench.timing import time_graph

    if not torch.cuda.is_available():
        print("ab_kernels: needs a CUDA device", file=sys.stderr)
        return 2
    variants = {}
    for spec in args.variant:
        name, _, path = spec.partition("=")
        if not name.isidentifier() or not path:
            raise SystemExit(f"ab_kernels: --variant {spec!r}: expected NAME=DIR")
        variants[name] = load_variant(name, path)
    for spec in args.set:
        name, _, assignment = spec.partition(":")
        if name not in variants:
            raise SystemExit(f"ab_kernels: --set {spec!r}: no variant {name!r}")
        apply_set(variants[name], assignment)
    impls = {name: (copy_module(pkg, "draw.gumbel_max").GumbelMaxSampler,
                    copy_module(pkg, "verify.stochastic").StochasticSampler) for name, pkg in variants.items()}
    words = [w.strip() for w in args.cases.split(",") if w.strip()]
    cases = [c for c in CASES if not words or any(c[0].endswith(w[:-1]) if w.endswith("$") else w in c[0]
                                                  for w in words)]
    names = list(variants)
    ref = names[0]
    l2 = "L2 evicted before each launch" if args.cold else "warm L2"
    print(f"# ab_kernels on {torch.cuda.get_device_name()}, torch {torch.__version__}; CUDA graphs of 16 launches "
          f"({l2}), {args.rounds} rounds interleaved, median µs per launch (ratio to {ref})\n")
    print("| case | " + " | ".join(names) + " | tokens |")
    print("|---|" + "---:|" * len(names) + "---|")
    differ = 0
    kernel_lines, step_lines = [], []
    for label, source, R, k, top_p, *top_k in cases:
        per_step = {n: [] for n in names}
        same = True
        for i in range(args.steps if source is None else 1):
            step = make_step(source, R, k, top_p, i, *top_k)
            states, outs = {}, {}
            for name in names:
                impl = impls[name][0 if k == 0 else 1]()
                states[name] = (impl, impl.prepare(step))
                tokens, counts = impl.launch(states[name][1])[:2]
                outs[name] = (tokens.clone(), counts.clone())
            same &= all(torch.equal(outs[ref][j], outs[n][j]) for n in names for j in range(2))
            times = {n: [] for n in names}
            for _ in range(args.rounds):
                for name in names:
                    impl, state = states[name]
                    times[name].append(time_graph(lambda: impl.launch(state), 16, 50.0, args.cold)[0])
            for n in names:
                per_step[n].append(statistics.median(times[n]))
            if args.per_step:
                fallback = getattr(states[ref][1], "fallback", None)
                listed = f", {int(fallback.filters.count)} rows listed" if fallback is not None else ""
                step_lines.append(f"{label} step {i}{listed}: "
                                  + ", ".join(f"{n} {per_step[n][-1]:.1f}" for n in names))
            if args.kernels and i == 0:
                from profile_kernels import kernel_times  # tools/profile_kernels.py, next to this script

                for name in names:
                    impl, state = states[name]
                    per, total = kernel_times(lambda: impl.launch(state), 10)
                    top = sorted(per.items(), key=lambda kv: -kv[1][0])
                    kernel_lines.append(f"{label}, {name}: {total / 10:.1f} = " + " + ".join(
                        f"{kernel} {t / 10:.1f} (x{calls / 10:g})" for kernel, (t, calls) in top))
            del states, outs, step
            torch.cuda.empty_cache()
        differ += not same
        med = {n: statistics.median(v) for n, v in per_step.items()}
        spread = {n: f" [{min(v):.1f}-{max(v):.1f}]" if len(v) > 1 else "" for n, v in per_step.items()}
        cells = " | ".join(f"{med[n]:.1f}" + ("" if n == ref else f" ({med[n] / med[ref]:.3f})") + spread[n]
                           for n in names)
        steps = f" ({len(per_step[ref])} steps)" if len(per_step[ref]) > 1 else ""
        print(f"| {label}{steps} | {cells} | {'same' if same else 'DIFFER'} |", flush=True)
    if step_lines:
        print("\nEach step's median µs a launch:\n")
        print("\n".join(f"* {line}" for line in step_lines))
    if kernel_lines:
        print("\nDevice µs per launch by kernel (calls per launch):\n")
        print("\n".join(f"* {line}" for line in kernel_lines))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
