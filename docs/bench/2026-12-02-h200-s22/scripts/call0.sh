#!/usr/bin/env bash
# Twenty-second session, call 0: sample-and-check in one launch (replay_kernels/one_launch.py) for small plain
# steps. GPU tests first (a barrier that never opens would hang: each command has a timeout), then the A/B
# against `base` = scratch/s22base = `git archive 134e8a1 replay_kernels` (the five-launch sequence) with the
# one launch allowed up to R = 7 (`one8`), then ncu of the one launch at R = 1.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s22/scripts/call0.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c0; mkdir -p $G
nvidia-smi -L
timeout 200 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -8
tar czf $OUT/c0.tgz -C $G .
timeout 280 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.5 R=1$,SYNTHETIC top-p 0.9 R=2$,SYNTHETIC top-p 0.9 R=4$,SYNTHETIC top-p 0.9 R=8$,top-k 50 R=1$,top-k 50 R=2$,derived top-p 0.9 R=1$" \
  --variant base=scratch/s22base/replay_kernels \
  --variant one8=replay_kernels --set "one8:one_launch.ONE_LAUNCH_BELOW=8" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c0.tgz -C $G .
timeout 45 ncu --section SpeedOfLight --section LaunchStats --section Occupancy --kernel-name regex:_one_launch_kernel \
  --launch-skip 2 --launch-count 1 python3 tools/ncu_target.py --impl gumbel-max --R 1 --top-p 0.9 > $G/ncu_one.txt 2>&1
echo "ncu rc=$?"; grep -E "Duration|DRAM Throughput|Compute \(SM\)|Registers|Achieved Occ|Theoretical Occ" $G/ncu_one.txt
tar czf $OUT/c0.tgz -C $G .
