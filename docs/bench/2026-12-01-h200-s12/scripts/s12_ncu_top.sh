#!/usr/bin/env bash
# SCRATCH (twelfth session): why the first draw of sample-and-check (TOP: it also records each row's largest
# value) takes ~128 us at top-p 0.9 R=256 against ~111 us for the plain draw of the same rows. ncu --set full
# of both kernels; raw CSV kept, a few metrics printed.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
mkdir -p /tmp/n
prof() {  # prof NAME SKIP ARGS...
  local name=$1 skip=$2; shift 2
  timeout 110 "$NCU" --set full --kernel-name regex:_draw_kernel --launch-skip "$skip" --launch-count 1 --csv --page details \
    python3 tools/ncu_target.py "$@" > /tmp/n/$name.csv 2>&1; echo "$name rc=$?"
  grep -E '"(Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Executed Instructions|Issue Slots Busy|Executed Ipc Active|L1/TEX Hit Rate|L2 Hit Rate|Block Limit Registers|Warp Cycles Per Issued Instruction|Avg. Active Threads Per Warp|Branch Instructions|Dynamic Shared Memory Per Block)"' /tmp/n/$name.csv | awk -F'","' '{print $(NF-2)" = "$NF" "$(NF-1)}' | sed 's/"//g'
}
prof plain256 2 --impl gumbel-max --R 256 --k 0
prof top256 8 --impl gumbel-max --R 256 --k 0 --top-p 0.9
tar czf $OUT/s12_ncu_top.tgz -C /tmp/n .
