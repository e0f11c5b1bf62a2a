#!/usr/bin/env bash
# Twenty-second session, call 6: the one launch keeps a first draw that is the only lane at the row maximum
# without a check (the first check kernel's rule, from exact per-span counts). `base` = scratch/s22base (134e8a1,
# the sequence); `prev` = scratch/s22prev (the one launch of call 5, without the rule); `tree` = this tree.
# GPU tests first. run(command="timeout 590 bash docs/bench/2026-12-02-h200-s22/scripts/call6.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c6; mkdir -p $G
timeout 200 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_sample_check.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -8
tar czf $OUT/c6.tgz -C $G .
timeout 300 python3 tools/ab_kernels.py --kernels --steps 10 \
  --cases "SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.5 R=1$,SYNTHETIC top-p 0.9 R=2$,SYNTHETIC top-p 0.9 R=3$,top-k 50 R=1$,top-k 50 R=3$,derived top-p 0.9 R=1$,derived top-p 0.9 R=3$" \
  --variant base=scratch/s22base/replay_kernels --variant prev=scratch/s22prev/replay_kernels \
  --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c6.tgz -C $G .
