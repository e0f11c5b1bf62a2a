#!/usr/bin/env bash
# Twenty-fifth session, call 2: why the bounded position launches cost twice the plain ones when their arithmetic
# does not set their time (call 1: two-pass stats, 96 instead of 121 registers, 6 block reductions a span instead of
# 24: the same 123.5 µs). Nsight Compute, full sections, position 0 of the third launch: verify k=4 R=64 with and
# without top-p 0.9 (the tree). Whether torch's CUDAGraph has conditional nodes here (graph_api.txt).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s25/scripts/call2.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
python3 -c "
import torch; g = torch.cuda.CUDAGraph
print(torch.__version__, torch.version.cuda, [a for a in dir(g) if 'cond' in a or 'if_node' in a or 'capturing' in a])
" > $G/graph_api.txt 2>&1; cat $G/graph_api.txt
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
for i in 0 1 2 3; do
  timeout 100 $NCU $S --kernel-name regex:_position_kernel --launch-skip $((16 + i)) --launch-count 1 \
    python3 tools/ncu_target.py --impl stochastic --R 64 --k 4 --top-p 0.9 > $G/ncu_topp_pos$i.txt 2>&1
  echo "topp pos$i rc=$?"
done
timeout 100 $NCU $S --kernel-name regex:_position_kernel --launch-skip 8 --launch-count 1 \
  python3 tools/ncu_target.py --impl stochastic --R 64 --k 4 > $G/ncu_plain_pos0.txt 2>&1
echo "plain rc=$?"
PYTHONPATH=$PWD/scratch/s25base:$PWD timeout 100 $NCU $S --kernel-name regex:_position_kernel --launch-skip 16 \
  --launch-count 1 python3 tools/ncu_target.py --impl stochastic --R 64 --k 4 --top-p 0.9 > $G/ncu_base_topp_pos0.txt 2>&1
echo "base rc=$?"
grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued|Block Limit|Grid Size|One or More|No Eligible" $G/ncu_*.txt
