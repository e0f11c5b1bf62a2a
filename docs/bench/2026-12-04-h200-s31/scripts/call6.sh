#!/usr/bin/env bash
# (The variants come from make_variants.sh; run it first.)
# Thirty-first session, call 6 (carry scratch): what lands (settle_row: the floor's loads in flight with the first
# span's, the first-round-only reductions skipped later, a redraw span's two tests in one reduction; the barrier as
# it was) against the base (878e9fb) over 20 steps, the draws without filters in the same run; GPU tests of the one
# launch and the open rows.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s31/scripts/call6.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call6; mkdir -p $G
C="SYNTHETIC plain R=1$,SYNTHETIC top-p 0.9 R=1$,SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$"
timeout 300 python3 tools/ab_kernels.py --steps 20 --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --cases "$C" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt
timeout 150 python3 -m pytest -q -m gpu tests/test_one_launch.py -p no:cacheprovider > $G/gpu_test_one_launch.txt 2>&1
echo "gpu test_one_launch rc=$? $(tail -1 $G/gpu_test_one_launch.txt)"
