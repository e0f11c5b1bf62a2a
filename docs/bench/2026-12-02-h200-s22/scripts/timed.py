"""Phase times of the one launch (programs (0, q) of an R = 1 top-p step, globaltimer): a diagnostic.

scratch/s22timed/replay_kernels = the tree's replay_kernels with timed.patch applied (globaltimer stores after
each phase of one_launch._one_launch_kernel); run from the repo root on the GPU machine."""
import sys, torch
sys.path.insert(0, "scratch/s22timed")
import replay_kernels
assert "scratch" in replay_kernels.__file__
from replay_kernels import one_launch
from replay_kernels.gumbel_max import GumbelMaxSampler
from replay_harness.bench.kernels.cases import Inputs
for blk in (2048, 1024):
    for top_p in (0.9, 0.5):
        one_launch.DRAW_BLOCK = blk
        step = Inputs.make(248320, 1, 0, seed=0, device="cuda").step(top_p, 0)
        one_launch.TIMES = torch.zeros((512, 8), dtype=torch.int64, device="cuda")
        impl = GumbelMaxSampler()
        st = impl.prepare(step)
        for _ in range(20):
            impl.launch(st)
        torch.cuda.synchronize()
        t = one_launch.TIMES[: st.one.programs].cpu().double()
        t0 = t[:, 0].min()
        rel = (t - t0) / 1000.0
        names = ["start", "scored", "barrier1", "argmax", "checked", "barrier2", "verdict", "end"]
        print(f"block {blk} top-p {top_p} P={st.one.programs}: µs from the first program's start (min / median / max over programs)")
        for k, n in enumerate(names):
            col = rel[:, k]
            if k in (4,):
                col = col[: st.one.check_splits]
            print(f"  {n:9s} {col.min():7.2f} {col.median():7.2f} {col.max():7.2f}")
