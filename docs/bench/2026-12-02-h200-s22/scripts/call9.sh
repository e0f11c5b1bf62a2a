#!/usr/bin/env bash
# Twenty-second session, call 9: the one launch made cooperative (launch_cooperative_grid: the driver refuses a
# grid whose programs cannot all be resident instead of letting them wait at a barrier forever). GPU tests (the
# refused launch last, alone), then its cost: `head` = scratch/s22head (4eae96f, not cooperative) against the tree.
# run(command="timeout 400 bash docs/bench/2026-12-02-h200-s22/scripts/call9.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c9; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_one_launch.py -k "not too_large" -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
timeout 60 python3 -m pytest -q -m gpu tests/test_one_launch.py -k too_large -p no:cacheprovider > $G/gpu_too_large.txt 2>&1
echo "too-large test rc=$?"; tail -2 $G/gpu_too_large.txt
tar czf $OUT/c9.tgz -C $G .
timeout 120 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.9 R=3$,SYNTHETIC top-k 50 R=1$,derived top-p 0.9 R=1$" \
  --variant head=scratch/s22head/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c9.tgz -C $G .
