#!/usr/bin/env bash
# Twentieth session, call 4: the draw kernel's rows with nothing to draw (MODE_NONE: refused requests, rows drawn by
# the top-k solve from their candidates) take no atomic and store nothing: their program 0 writes the count and the
# pads, the others exit (the draw kernel cost 9.2 us at R = 64 with every program exiting, call 3). `base` =
# scratch/s20a = this session's tree before that change (call 3's `tree`). Then the GPU tests.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s20/scripts/call4.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c4; mkdir -p $G
timeout 200 python3 tools/ab_kernels.py --kernels --steps 2 \
  --cases "Qwen2.5-derived top-k,SYNTHETIC top-k 50 + top-p 0.9 R=,SYNTHETIC top-k 50 R=64,SYNTHETIC plain R=1,SYNTHETIC plain R=256,SYNTHETIC verify k=4 R=64" \
  --variant base=scratch/s20a/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c4.tgz -C $G .
timeout 170 python3 -m pytest -q -m gpu --durations=4 tests/test_topk_gather.py tests/test_kernels.py \
  tests/test_sample_check.py tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -7 $G/gpu_tests.txt
tar czf $OUT/c4.tgz -C $G .
