#!/usr/bin/env bash
# (At the time `replay_kernels` was the tree with pairs.patch; to run it again: make_variants.sh, then tree=scratch/pairs/replay_kernels.)
# Thirty-first session, call 3 (carry scratch): settle_row's draw phase with two spans' loads in flight and the
# floor's loads in flight with them, the first-round-only reductions skipped in later rounds (tree), against the
# base (HEAD 878e9fb) and `single` (the same without the pairs: the floor's loads with the first span's); GPU tests
# of the one launch and the open rows; by kernel with PDL off.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s31/scripts/call3.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_one_launch.py -p no:cacheprovider > $G/gpu_test_one_launch.txt 2>&1
echo "gpu test_one_launch rc=$? $(tail -1 $G/gpu_test_one_launch.txt)"
C="SYNTHETIC top-p 0.9 R=2$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$"
V3="--variant base=scratch/base/replay_kernels --variant tree=replay_kernels --variant single=scratch/single/replay_kernels"
timeout 280 python3 tools/ab_kernels.py --steps 10 $V3 --cases "$C" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt
timeout 80 python3 tools/ab_kernels.py --steps 1 --rounds 1 --kernels $V3 --set base:launches.PDL=False \
  --set tree:launches.PDL=False --set single:launches.PDL=False \
  --cases "SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$" 2>&1 | grep -v -i warn > $G/ab_kernels_nopdl.txt
echo "ab kernels rc=$?"; grep -E "DIFFER|Error|^\* " $G/ab_kernels_nopdl.txt | cut -c1-300
