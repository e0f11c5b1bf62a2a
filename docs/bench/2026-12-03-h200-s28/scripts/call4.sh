#!/usr/bin/env bash
# Twenty-eighth session, call 4 (tree = HEAD fdd441e with scripts/xd_from_span.patch applied; not adopted): the
# accept test takes the draft and its processed value from the span program
# that arrives last (stochastic._position_span; was loaded again after the arrival), against base (scratch/s28base
# = git archive e23cd0f) and the call-3 tree (scratch/s28a = git archive fdd441e); verify controls; GPU tests.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s28/scripts/call4.sh", carry=["scratch/s28base", "scratch/s28a"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call4; mkdir -p $G
timeout 170 python3 tools/ab_kernels.py --kernels --per-step --steps 20 --cases "SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  --variant base=scratch/s28base/replay_kernels --variant c3=scratch/s28a/replay_kernels --variant tree=replay_kernels \
  2>&1 | grep -v -i warn > $G/ab64.txt
echo "ab64 rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab64.txt | head; grep "^\*" $G/ab64.txt | grep -v "step" | head
grep "rows listed: " $G/ab64.txt | grep -v " 0 rows" | head -20
timeout 170 python3 tools/ab_kernels.py --kernels --steps 10 \
  --cases "SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,Qwen2.5-derived verify k=4 R=64$,Qwen2.5-derived verify k=4 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=8$" \
  --variant base=scratch/s28base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab_verify.txt
echo "ab verify rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab_verify.txt | head -12; grep "^\*" $G/ab_verify.txt | head -12
timeout 80 python3 -m pytest -q -m gpu tests/test_filter_loop.py tests/test_one_launch.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$? $(tail -1 $G/gpu_tests.txt)"
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels.py -p no:cacheprovider > $G/gpu_test_kernels.txt 2>&1
echo "gpu test_kernels rc=$? $(tail -1 $G/gpu_test_kernels.txt)"
