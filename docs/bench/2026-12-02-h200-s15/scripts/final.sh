#!/usr/bin/env bash
# Fifteenth session, third device call: the final bench on the tree (held-once check, compiled-launcher replay),
# then Nsight Compute of the verify fallback's search rounds on a step that lists rows.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT; mkdir -p /tmp/f/bench /tmp/f/ncu
OUT=/tmp/f/bench timeout 340 bash tools/run_gpu_bench.sh --vocab 248320 --top-p 1.0,0.9 --budget-s 140 > /tmp/f/bench/stdout.txt 2>&1; echo "bench rc=$?"
tail -45 /tmp/f/bench/stdout.txt
cat > /tmp/f/ncu/rounds_step.py <<'PY'
from replay_harness.bench.kernels.cases import Inputs
from replay_kernels.stochastic import StochasticSampler
impl = StochasticSampler()
state = impl.prepare(Inputs.make(248320, 64, 4, seed=644, device="cuda").step(0.9))
for _ in range(2):
    impl.launch(state)
import torch; torch.cuda.synchronize()
PY
timeout 140 ncu --kernel-name regex:_round_kernel --launch-skip 13 --launch-count 8 --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section WarpStateStats python3 /tmp/f/ncu/rounds_step.py \
  > /tmp/f/ncu/ncu_rounds.txt 2>&1; echo "ncu rc=$?"
grep -E "Duration|DRAM Through|Compute \(SM\)|Achieved Occ|Grid Size|Stall|Warp Cycles Per Issued" /tmp/f/ncu/ncu_rounds.txt | head -60
tar czf $R/final.tgz -C /tmp/f .
