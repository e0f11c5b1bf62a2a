#!/usr/bin/env bash
# Twenty-ninth session, call 1: the open-row launch's redraw floored by the first draw's partials (open_rows._floor,
# one_launch.settle_row: spans where no x + gumbel_upper_bound(h) reaches the floor pay no logs; the scores no
# longer kept in registers in that launch) against base (scratch/s29base = git archive 4d82581); c128: the same
# with the 122-program shape capped at 128 registers (4 an SM). GPU tests of the one launch and the open rows
# first (the false-floor tests among them); Nsight Compute of the open-row launch, R=64 top-p 0.9.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s29/scripts/call1.sh", carry=["scratch/s29base"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call1; mkdir -p $G
timeout 120 python3 -m pytest -q -m gpu tests/test_one_launch.py -p no:cacheprovider > $G/gpu_test_one_launch.txt 2>&1
echo "gpu test_one_launch rc=$? $(tail -1 $G/gpu_test_one_launch.txt)"
timeout 300 python3 tools/ab_kernels.py --kernels --per-step --steps 10 \
  --cases "SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=32$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$" \
  --variant base=scratch/s29base/replay_kernels --variant tree=replay_kernels --variant c128=replay_kernels \
  --set "c128:open_rows.OPEN_ROW_SHAPES=((3.0, 122, 128), (8.0, 61, 128))" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab.txt | head -20; grep "^\*" $G/ab.txt | head -40
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --metrics smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct"
timeout 80 $NCU $S --kernel-name regex:_open_rows_kernel --launch-skip 2 --launch-count 1 \
  python3 tools/ncu_target.py --impl gumbel-max --R 64 --k 0 --top-p 0.9 > $G/ncu_open_rows.txt 2>&1
echo "ncu open rows rc=$?"
grep -E "Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Compute \(SM\) Throughput|inst_executed|dram__bytes|hit_rate|Grid Size|Issued Warp|No Eligible" $G/ncu_open_rows.txt | head -20
