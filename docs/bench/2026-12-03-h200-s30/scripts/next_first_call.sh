#!/usr/bin/env bash
# For the next session's first GPU call, at the thirtieth session's HEAD: the sample-and-check GPU tests call 3 cut
# (and the held-once test, now built on the test's device, on CUDA) and the new launch_pdl test; then the two cases at the 2x line over 20 steps
# with their denominators, the tree against `hoist` = the tree with hoist_tail_loads.patch (the draw tail's row
# parameters loaded before the partials, in flight with them; compiles for sm_90 at 96 registers, 5,784 SASS).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s30/scripts/next_first_call.sh")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/first; mkdir -p $G
timeout 200 python3 -m pytest -q tests/test_sample_check.py -m "gpu" -p no:cacheprovider > $G/gpu_test_sample_check.txt 2>&1
echo "gpu test_sample_check rc=$? $(tail -1 $G/gpu_test_sample_check.txt)"
timeout 40 python3 -m pytest -q -m gpu tests/test_launches.py -p no:cacheprovider > $G/gpu_test_launches.txt 2>&1
echo "gpu test_launches (launch_pdl reaches the backend) rc=$? $(tail -1 $G/gpu_test_launches.txt)"
timeout 60 python3 -m pytest -q tests/test_sample_check.py -k "draw_tail or held_once" -p no:cacheprovider > $G/gpu_test_tail.txt 2>&1
echo "tail tests on cuda rc=$? $(tail -1 $G/gpu_test_tail.txt)"
rm -rf scratch/hoist && mkdir -p scratch/hoist && cp -r replay_kernels scratch/hoist/ \
  && patch -s -d scratch/hoist -p1 < docs/bench/2026-12-03-h200-s30/scripts/hoist_tail_loads.patch || exit 1
timeout 250 python3 tools/ab_kernels.py --steps 20 --variant tree=replay_kernels --variant hoist=scratch/hoist/replay_kernels \
  --cases "SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt
