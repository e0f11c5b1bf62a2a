#!/usr/bin/env bash
# Thirtieth session, call 2: the check kernel takes its spans last first (program (r, j) checks span SPLITS - 1 - j),
# so it starts on what the draw read last, still in L2 (the tree of the call; not adopted, reverted: the patch is the
# one line `s = SPLITS - 1 - tl.program_id(1)` in sample_check._check_kernel, passed for tl.program_id(1)), against
# base (scratch/s30base = git archive 9146e3c).
# Warm-L2 graphs (ab_kernels default) and graphs with the L2 evicted before each launch (--cold: the step's kernels
# reuse only what the step itself read); per-kernel device times with PDL off (profiler times of PDL kernels include
# their wait); Nsight Compute of the first check, natural L2 state (--cache-control none, application replay).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s30/scripts/call2.sh", carry=["scratch/s30base"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
AB="python3 tools/ab_kernels.py --variant base=scratch/s30base/replay_kernels --variant tree=replay_kernels"
timeout 200 $AB --steps 10 \
  --cases "SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC verify k=4 R=64$,SYNTHETIC top-k 50 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$" \
  2>&1 | grep -v -i warn > $G/ab_warm.txt
echo "ab warm rc=$?"; grep -E "^\||DIFFER|Error" $G/ab_warm.txt | head -20
timeout 170 $AB --cold --steps 10 \
  --cases "SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  2>&1 | grep -v -i warn > $G/ab_cold.txt
echo "ab cold rc=$?"; grep -E "^\||DIFFER|Error" $G/ab_cold.txt | head -20
timeout 60 $AB --kernels --set "base:launches.PDL=False" --set "tree:launches.PDL=False" \
  --cases "SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  2>&1 | grep -v -i warn > $G/ab_kernels_nopdl.txt
echo "ab kernels rc=$?"; grep -E "^\*" $G/ab_kernels_nopdl.txt
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed"
for v in base tree; do
  P=$PWD; [ $v = base ] && P=$PWD/scratch/s30base:$PWD
  PYTHONPATH=$P timeout 60 $NCU --cache-control none --replay-mode application $M --kernel-name regex:_check_kernel \
    --launch-skip 2 --launch-count 1 python3 tools/ncu_target.py --impl gumbel-max --R 64 --k 0 --top-p 0.9 \
    > $G/ncu_check_$v.txt 2>&1
  echo "ncu check $v rc=$?"; grep -E "gpu__time|dram__|lts__|sm__thr" $G/ncu_check_$v.txt
done
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels.py -p no:cacheprovider > $G/gpu_test_kernels.txt 2>&1
echo "gpu test_kernels rc=$? $(tail -1 $G/gpu_test_kernels.txt)"
