#!/usr/bin/env bash
# Twenty-eighth session, call 2: the exact round on grid (R, NB, 1) (a pending request's positions looped in each
# program; was (R, NB, max_k)) with the one-pass bounded stats, against base (scratch/s28base = git archive
# e23cd0f replay_kernels); two bounded tiles in flight (a2: capped at 64 registers, a2u: uncapped, 72); GPU tests.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s28/scripts/call2.sh", carry=["scratch/s28base"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
for f in test_kernels test_filter_loop test_one_launch test_ex2; do
  timeout 120 python3 -m pytest -q -m gpu tests/$f.py -p no:cacheprovider > $G/gpu_$f.txt 2>&1
  echo "gpu $f rc=$? $(tail -1 $G/gpu_$f.txt)"
done
timeout 200 python3 tools/ab_kernels.py --kernels --per-step --steps 20 --cases "SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  --variant base=scratch/s28base/replay_kernels --variant tree=replay_kernels --variant a2=replay_kernels \
  --variant a2u=replay_kernels --set "a2:verify_stats.BOUND_AHEAD=tl.constexpr(2)" --set "a2:stochastic.BOUND_MAXNREG=64" \
  --set "a2u:verify_stats.BOUND_AHEAD=tl.constexpr(2)" 2>&1 | grep -v -i warn > $G/ab64.txt
echo "ab64 rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab64.txt | head; grep "^\*" $G/ab64.txt | grep -v "step" | head
grep "rows listed: " $G/ab64.txt | grep -v " 0 rows" | head -20
timeout 150 python3 tools/ab_kernels.py --kernels --per-step --steps 10 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 R=64$,SYNTHETIC top-p 0.9 R=64$" \
  --variant base=scratch/s28base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab8.txt
echo "ab8 rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab8.txt | head; grep "^\*" $G/ab8.txt | grep -v "step" | head
timeout 120 python3 tools/ab_kernels.py --kernels --per-step --steps 4 --cases "SYNTHETIC verify k=4 top-p 0.9 R=256$" \
  --variant base=scratch/s28base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab256.txt
echo "ab256 rc=$?"; grep -E "^\||DIFFER|Error|differ|^\*" $G/ab256.txt | head -12
