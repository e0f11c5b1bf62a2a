#!/usr/bin/env bash
# Twenty-sixth session, call 4 (the last): base = scratch/s26base (git archive 893b62a replay_kernels); lvl =
# scratch/lvl (call 3's tree: residual held once + the rejection's kept_above); tree = lvl + the fallback's exact
# round in one position launch (ALL) instead of one a position. Tokens compared. Then the GPU kernel tests and
# every fixture through stochastic against reference on CUDA (tools/run_gpu_checks.sh, impl tests skipped).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s26/scripts/call4.sh", carry=["scratch/lvl", "scratch/s26base"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call4; mkdir -p $G
timeout 170 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$" \
  --variant base=scratch/s26base/replay_kernels --variant lvl=scratch/lvl/replay_kernels \
  --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab.txt | head -20; grep "^\*" $G/ab.txt | grep "top-p" | head -20
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
OUT=$G/checks SKIP_KERNEL_TESTS=1 SKIP_IMPL_TESTS=1 timeout 200 bash tools/run_gpu_checks.sh > /dev/null 2>&1
echo "checks rc=$?"; grep -E "^==== exit|== done" $G/checks/log.txt
