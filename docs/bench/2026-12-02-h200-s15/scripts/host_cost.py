"""Where the host time of an eager launch goes: empty kernels of 5 and 36 arguments, then impl.launch(state)
of a few shapes (host time of 200 launches without a sync, and to the sync), cProfile of 100 launches."""
import cProfile, pstats, time, io, sys
import torch, triton, triton.language as tl
from replay_harness.bench.kernels.cases import Inputs
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_kernels.stochastic import StochasticSampler

@triton.jit
def _empty5(a, b, c, d, n):
    pass

@triton.jit
def _empty37(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20,
             a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, n0, n1, n2, n3, n4, B: tl.constexpr):
    pass

def host_us(fn, n=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    total = (time.perf_counter() - t) / n * 1e6
    return host, total

x = torch.zeros(1024, device="cuda")
print("empty kernel, 5 args: host %.1f µs/launch (to sync %.1f)" % host_us(lambda: _empty5[(1,)](x, x, x, x, 7)))
args = [x] * 31 + [1, 2, 3, 4, 5]
print("empty kernel, 36 args: host %.1f µs/launch (to sync %.1f)" % host_us(lambda: _empty37[(1,)](*args, B=64)))
print("torch x.add_(1): host %.1f (to sync %.1f)" % host_us(lambda: x.add_(1)))
print("slice x[3:4]: host %.1f" % host_us(lambda: x[3:4])[0])

for name, impl, (R, k), top_p in [("gumbel-max top-p 1.0", GumbelMaxSampler(), (1, 0), 1.0),
                           ("stochastic verify top-p 1.0", StochasticSampler(), (64, 4), 1.0),
                           ("gumbel-max top-p 0.9", GumbelMaxSampler(), (1, 0), 0.9),
                           ("gumbel-max top-p 0.9", GumbelMaxSampler(), (64, 0), 0.9),
                           ("stochastic verify top-p 0.9", StochasticSampler(), (1, 4), 0.9)]:
    inp = Inputs.make(248320, R, k, seed=Inputs.seed_of(248320, R, k), device="cuda")
    state = impl.prepare(inp.step(top_p))
    host, total = host_us(lambda: impl.launch(state), 200)
    print(f"{name} R={R} k={k}: launch host {host:.1f} µs, to sync {total:.1f} µs")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(100):
        impl.launch(state)
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    print(s.getvalue())
