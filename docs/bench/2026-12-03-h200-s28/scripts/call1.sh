#!/usr/bin/env bash
# Twenty-eighth session, call 1: a bounded verify row's span stats in one pass (against the draft's value x_d,
# tiles of verify_stats.BOUND_BLOCK = 512) against the two-pass form (base: scratch/s28base = git archive e23cd0f
# replay_kernels), with tiles of 1,024 and 256 as variants; GPU tests; Nsight Compute of the position launches.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s28/scripts/call1.sh", carry=["scratch/s28base"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call1; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_filter_loop.py tests/test_one_launch.py \
  tests/test_ex2.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
timeout 250 python3 tools/ab_kernels.py --kernels --per-step --steps 20 --cases "SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  --variant base=scratch/s28base/replay_kernels --variant tree=replay_kernels --variant b1024=replay_kernels \
  --set "b1024:verify_stats.BOUND_BLOCK=tl.constexpr(1024)" 2>&1 | grep -v -i warn > $G/ab64.txt
echo "ab64 rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab64.txt | head; grep "^\*" $G/ab64.txt | grep -v "step" | head
grep "rows listed: " $G/ab64.txt | grep -v " 0 rows" | head -20
timeout 120 python3 tools/ab_kernels.py --kernels --per-step --steps 10 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 R=64$" \
  --variant base=scratch/s28base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab8.txt
echo "ab8 rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab8.txt | head; grep "^\*" $G/ab8.txt | grep -v "step" | head
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --metrics smsp__inst_executed.sum,dram__bytes_read.sum"
for v in tree base; do
  P=$PWD; [ $v = base ] && P=$PWD/scratch/s28base:$PWD
  PYTHONPATH=$P timeout 60 $NCU $S --kernel-name regex:_position_kernel --launch-skip 10 --launch-count 5 \
    python3 tools/ncu_target.py --impl stochastic --R 64 --k 4 --top-p 0.9 > $G/ncu_position_$v.txt 2>&1
  echo "ncu $v rc=$?"
done
grep -E "^  _position|Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Compute \(SM\) Throughput|inst_executed|dram__bytes" $G/ncu_position_*.txt
