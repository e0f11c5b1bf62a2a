#!/usr/bin/env bash
# Twenty-seventh session, call 2: the filter loop with every slot resident (8 slots of 16 programs: 255 registers
# hold one program an SM; call 1 ran 4 slots of 31, and a fifth listed row waited) against the launch sequence
# (base: scratch/s27base = git archive b18a8e0 replay_kernels), each step's time with its listed rows; the
# first draw of sample-and-check against the plain draw (Nsight Compute) and without its recount (norc:
# scratch/norc, a timing variant whose held-once flag skips the recount).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s27/scripts/call2.sh", carry=["scratch/s27base", "scratch/norc"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
timeout 100 python3 -m pytest -q -m gpu tests/test_filter_loop.py -p no:cacheprovider > $G/gpu_filter_loop.txt 2>&1
echo "filter_loop gpu rc=$?"; tail -2 $G/gpu_filter_loop.txt
timeout 230 python3 tools/ab_kernels.py --kernels --per-step --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  --variant base=scratch/s27base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab.txt | head; grep "^\*" $G/ab.txt | grep -v "step" | head; grep "rows listed: " $G/ab.txt | grep -v " 0 rows" | head -30
timeout 100 python3 tools/ab_kernels.py --kernels --steps 10 --cases "SYNTHETIC top-p 0.9 R=64$,SYNTHETIC plain R=64$" \
  --variant tree=replay_kernels --variant norc=scratch/norc/replay_kernels 2>&1 | grep -v -i warn > $G/ab_norc.txt
echo "ab norc rc=$?"; grep -E "^\||^\*" $G/ab_norc.txt | head -12
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --metrics smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct"
for p in 0.9 1.0; do
  timeout 60 $NCU $S --kernel-name regex:_draw_kernel --launch-skip 2 --launch-count 1 \
    python3 tools/ncu_target.py --impl gumbel-max --R 64 --k 0 --top-p $p > $G/ncu_draw_topp$p.txt 2>&1
  echo "ncu draw top-p $p rc=$?"
done
grep -E "Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued|inst_executed|dram__bytes|hit_rate|Grid Size" $G/ncu_draw_*.txt
