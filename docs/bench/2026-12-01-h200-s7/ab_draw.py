"""A/B of draw-kernel variants (shared row best, launch shapes) on synthetic and real-derived steps (GPU).

Kept as the record of docs/BENCHMARKS.md's seventh-session A/B (ab-draw-*.txt). It ran on that session's
working tree, whose _draw_kernel took an experimental constexpr ``draw.SHARE_BEST`` (0: no shared best;
1: per-lane tests against each thread's own read; 2: the block-reduced threshold), since removed: the kept
kernel is variant 2, always on. Run then as:
    python3 ab_draw.py /tmp/real_rows/qwen-R256k0 /tmp/real_rows/qwen-R64k4 /tmp/real_rows/qwen-R256k4 \
        /tmp/real_rows/smol-R256k0      # recordings from `replay synth` (tools/run_gpu_real_rows.sh)
"""
import sys, statistics, torch
from triton.testing import do_bench_cudagraph, do_bench
from replay_kernels import draw
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler
from replay_harness.bench.kernels.cases import Inputs
from replay_harness.recording.store import Recording

V = 248320
cases = []
for R, k in [(1, 0), (64, 0), (256, 0), (8, 4), (64, 4), (256, 4)]:
    cases.append((f"synthetic R={R} k={k}", Inputs.make(V, R, k, seed=7000 + 10 * R + k, device="cuda").step(1.0)))
for path in sys.argv[1:]:
    cases.append((path.rsplit("/", 1)[-1], Recording(path)[0].step.to("cuda")))
DEFAULT = draw.DRAW_SHAPES
variants = {"base": (0, None), "lane": (1, None), "uniform": (2, None)}
for w, b, p in [(1, 256, 16384), (1, 512, 8192), (1, 512, 16384)]:
    for sh in (0, 1, 2):
        variants[f"share{sh} w{w} b{b} p{p}"] = (sh, ((1 << 31, b, w, p),))


def build(step, share, shapes):
    draw.DRAW_SHAPES = shapes or DEFAULT
    draw.SHARE_BEST = share
    plain = int(step.num_drafts.max()) == 0
    impl = GumbelMaxSampler() if plain else StochasticSampler()
    st = impl.prepare(step)
    return impl, st


for name, step in cases:
    built = {}
    for vn, (share, shapes) in variants.items():
        impl, st = build(step, share, shapes)
        draw.SHARE_BEST = share
        impl.launch(st); torch.cuda.synchronize()
        toks = impl.launch(st)[0].clone()
        for _ in range(20):
            if not torch.equal(impl.launch(st)[0], toks):
                print(f"!!!! {name} {vn}: NOT REPEATABLE", flush=True)
                break
        built[vn] = (impl, st, share, toks)
    base = built["base"][3]
    res = {vn: ([], []) for vn in built}
    for rnd in range(2):
        for vn, (impl, st, share, toks) in built.items():
            draw.SHARE_BEST = share
            res[vn][0].append(do_bench_cudagraph(lambda: impl.launch(st), rep=60) * 1e3)
            res[vn][1].append(do_bench(lambda: impl.launch(st), warmup=5, rep=60) * 1e3)
    print(f"\n== {name}: R={step.num_requests} drafts={int(step.num_drafts.max())} logits {tuple(step.logits.shape)} "
          f"{step.logits.dtype} draft_logits={step.draft_logits is not None}")
    for vn, (g, e) in res.items():
        eq = bool(torch.equal(built[vn][3], base))
        print(f"  {vn:28s} graph {statistics.median(g):8.1f} us {['%.1f' % x for x in g]}  eager-cold "
              f"{statistics.median(e):8.1f} us  tokens==base {eq}")
    del built
    torch.cuda.empty_cache()
