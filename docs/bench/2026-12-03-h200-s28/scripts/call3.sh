#!/usr/bin/env bash
# Twenty-eighth session, call 3: the accept tests' span stats loaded in one round trip (verify_stats.bound_sums:
# every plane of a bounded row at once; global_lse: maxima and sums together up to CHUNK spans), the bounded
# launches capped at 64 registers (unc: uncapped, 69), against base (scratch/s28base = git archive e23cd0f);
# the verify cases without top-p (global_lse changed: tokens must stay equal); Nsight Compute of the open-row launch.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s28/scripts/call3.sh", carry=["scratch/s28base"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py -p no:cacheprovider > $G/gpu_test_kernels.txt 2>&1
echo "gpu test_kernels rc=$? $(tail -1 $G/gpu_test_kernels.txt)"
timeout 150 python3 tools/ab_kernels.py --kernels --per-step --steps 20 --cases "SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  --variant base=scratch/s28base/replay_kernels --variant tree=replay_kernels --variant unc=replay_kernels \
  --set "unc:stochastic.BOUND_MAXNREG=None" 2>&1 | grep -v -i warn > $G/ab64.txt
echo "ab64 rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab64.txt | head; grep "^\*" $G/ab64.txt | grep -v "step" | head
grep "rows listed: " $G/ab64.txt | grep -v " 0 rows" | head -20
timeout 130 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,Qwen2.5-derived verify k=4 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=8$" \
  --variant base=scratch/s28base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab_verify.txt
echo "ab verify rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab_verify.txt | head; grep "^\*" $G/ab_verify.txt | head
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --metrics smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct"
timeout 90 $NCU $S --kernel-name regex:_open_rows_kernel --launch-skip 2 --launch-count 1 \
  python3 tools/ncu_target.py --impl gumbel-max --R 64 --k 0 --top-p 0.9 > $G/ncu_open_rows.txt 2>&1
echo "ncu open rows rc=$?"
grep -E "Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued|inst_executed|dram__bytes|hit_rate|Grid Size|Stall|Issued Warp|No Eligible|Active Warps" $G/ncu_open_rows.txt | head -30
