#!/usr/bin/env bash
# SCRATCH (prepared in the fourteenth session for the next one's first device call; nothing here has run).
# Before: git apply docs/bench/2026-12-01-h200-s14/scripts/held_once.patch, and
#   rm -rf scratch/base && mkdir -p scratch/base && git archive HEAD replay_kernels | tar -x -C scratch/base
# Then: run(command="timeout 580 bash docs/bench/2026-12-01-h200-s14/scripts/next_first_call.sh", carry=["scratch", ".peers"])
# 1. CUDA tests (the GPU twin of the held-once test runs under -m gpu only if one is added; the CPU test pins it);
# 2. A/B of the held-once first check (tree: capped at 80 registers; nocap: uncapped, 88) on SYNTHETIC and
#    Qwen2.5-derived top-p steps, 5 steps a SYNTHETIC case;
# 3. Nsight Compute of the verify fallback's first eight search rounds on a step that lists rows (seed 644,
#    profile_kernels' step): why a round of a few rows takes 15-27 µs.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 170 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests.txt 2>&1
rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $OUT/next.tgz -C /tmp/o .; exit 1; }
timeout 240 python3 tools/ab_kernels.py --kernels --steps 5 --cases "top-p,plain R=256" \
  --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant nocap=replay_kernels --set "nocap:sample_check.FIRST_CHECK_MAXNREG=None" \
  2>&1 | grep -v -i "warn" | tee /tmp/o/ab_held_once.txt
echo "ab rc=${PIPESTATUS[0]}"
cat > /tmp/o/rounds_step.py <<'PY'
from replay_harness.bench.kernels.cases import Inputs
from replay_kernels.stochastic import StochasticSampler
impl = StochasticSampler()
state = impl.prepare(Inputs.make(248320, 64, 4, seed=644, device="cuda").step(0.9))
for _ in range(2):
    impl.launch(state)
import torch; torch.cuda.synchronize()
PY
timeout 150 ncu --kernel-name regex:_round_kernel --launch-skip 13 --launch-count 8 --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section WarpStateStats python3 /tmp/o/rounds_step.py \
  > /tmp/o/ncu_rounds.txt 2>&1; echo "ncu rc=$?"; grep -E "Duration|DRAM Through|Compute \(SM\)|Achieved Occ|Stall|Grid Size" /tmp/o/ncu_rounds.txt | head -40
tar czf $OUT/next.tgz -C /tmp/o .
