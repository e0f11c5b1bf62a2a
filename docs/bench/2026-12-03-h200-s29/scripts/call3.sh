#!/usr/bin/env bash
# Twenty-ninth session, call 3: programmatic dependent launch (launches.PDL: the draw, check, position and
# fallback-listing kernels launched with launch_pdl, their programs waiting in pdl_wait for the kernel before)
# on top of the floored open-row redraws; base = scratch/s29base (git archive 4d82581), nopdl = the tree with
# launches.PDL=False. GPU tests of every kernel first (test_kernels -m gpu, then test_one_launch: the loops' round caps).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s29/scripts/call3.sh", carry=["scratch/s29base"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py -p no:cacheprovider > $G/gpu_test_kernels.txt 2>&1
echo "gpu test_kernels rc=$? $(tail -1 $G/gpu_test_kernels.txt)"
timeout 100 python3 -m pytest -q -m gpu tests/test_one_launch.py -p no:cacheprovider > $G/gpu_test_one_launch.txt 2>&1
echo "gpu test_one_launch rc=$? $(tail -1 $G/gpu_test_one_launch.txt)"
V="--variant base=scratch/s29base/replay_kernels --variant tree=replay_kernels --variant nopdl=replay_kernels"
SET=(--set "nopdl:launches.PDL=False")
timeout 190 python3 tools/ab_kernels.py --kernels --steps 20 --cases "SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=64$" \
  $V "${SET[@]}" 2>&1 | grep -v -i warn > $G/ab64.txt
echo "ab64 rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab64.txt | head -20; grep "^\*" $G/ab64.txt | head -20
timeout 150 python3 tools/ab_kernels.py --kernels --steps 5 --cases "SYNTHETIC plain R=1$,SYNTHETIC plain R=64$,SYNTHETIC plain R=256$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,SYNTHETIC top-p 0.9 R=1$,SYNTHETIC verify k=4 top-p 0.9 R=8$,Qwen2.5-derived verify k=4 R=64$" \
  $V "${SET[@]}" 2>&1 | grep -v -i warn > $G/ab_more.txt
echo "ab more rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab_more.txt | head -20; grep "^\*" $G/ab_more.txt | head -30
