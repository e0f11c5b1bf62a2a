#!/usr/bin/env bash
# Twenty-second session, call 7: the tree as committed against the peers at R = 1 (plain and top-p 0.9), and ncu
# of the one launch on the same shape (tools/ncu_target.py's step: its first draw is the row's peak, held once).
# run(command="timeout 400 bash docs/bench/2026-12-02-h200-s22/scripts/call7.sh", carry=[".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c7; mkdir -p $G
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 150 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_r1 --vocab 248320 \
  --cases R1k0 --top-p 1.0,0.9 --budget-s 60 > $G/bench_r1.log 2>&1
echo "bench rc=$?"; grep "| 248320 \|^| 1 " $G/bench_r1/bench.md | grep -v "serial\|torch.topk"
tar czf $OUT/c7.tgz -C $G .
timeout 60 ncu --section SpeedOfLight --section Occupancy --kernel-name regex:_one_launch_kernel --launch-skip 2 \
  --launch-count 1 python3 tools/ncu_target.py --impl gumbel-max --R 1 --k 0 --top-p 0.9 > $G/ncu_one_launch.txt 2>&1
echo "ncu rc=$?"; grep -E "Duration|DRAM Throughput|Compute \(SM\)|Registers|Achieved Occ|Theoretical Occ" $G/ncu_one_launch.txt
tar czf $OUT/c7.tgz -C $G .
