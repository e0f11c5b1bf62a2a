#!/usr/bin/env bash
# (At the time `replay_kernels` was acquire.patch applied to 878e9fb: scratch/acquire after make_variants.sh.)
# Thirty-first session, call 5 (carry scratch): the row barrier's waiting reads as ld.acquire.gpu, no acquire
# atomic after them (tree), and `merge` (the same and a redraw span's two tests, anything kept and the floor reached,
# one reduction) against the base (878e9fb); GPU tests of the kernels that wait at the barrier (the one launch, the
# open rows, the verify filter loop).
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s31/scripts/call5.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call5; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_filter_loop.py tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$? $(tail -1 $G/gpu_tests.txt)"
C="SYNTHETIC plain R=1$,SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.9 R=2$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=1$,Qwen2.5-derived top-p 0.9 R=64$"
timeout 380 python3 tools/ab_kernels.py --steps 10 --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant merge=scratch/merge/replay_kernels --cases "$C" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt
