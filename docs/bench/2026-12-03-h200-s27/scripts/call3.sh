#!/usr/bin/env bash
# Twenty-seventh session, call 3: the filter loop (tree: call 2's, 8 slots of 16 programs, steps by program 0
# between barriers) against: redund (scratch/redund: the later settle / setup steps run by every program of a slot
# with no barrier after them, 15 barriers a row instead of 19) and cap (the tree capped at 128 registers: two
# programs an SM, 8 slots of 31); each step with its listed rows; verify + top-p R = 256 against the launch
# sequence (base: scratch/s27base = git archive b18a8e0 replay_kernels, 4 steps); then every fixture through
# stochastic against reference on CUDA.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s27/scripts/call3.sh", carry=["scratch/s27base", "scratch/redund"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
timeout 230 python3 tools/ab_kernels.py --kernels --per-step --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  --variant tree=replay_kernels --variant redund=scratch/redund/replay_kernels --variant cap=replay_kernels \
  --set "cap:filter_loop.LOOP_MAXNREG=128" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab.txt | head; grep "^\*" $G/ab.txt | grep -v "step" | head; grep "rows listed: " $G/ab.txt | grep -v " 0 rows" | head -30
timeout 150 python3 tools/ab_kernels.py --kernels --per-step --steps 4 --cases "SYNTHETIC verify k=4 top-p 0.9 R=256$" \
  --variant base=scratch/s27base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab256.txt
echo "ab256 rc=$?"; grep -E "^\||DIFFER|Error|differ|^\*" $G/ab256.txt | head -12
OUT=$G/checks SKIP_KERNEL_TESTS=1 SKIP_IMPL_TESTS=1 timeout 190 bash tools/run_gpu_checks.sh > /dev/null 2>&1
echo "checks rc=$?"; grep -E "^==== exit|== done" $G/checks/log.txt
