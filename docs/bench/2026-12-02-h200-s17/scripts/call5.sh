#!/usr/bin/env bash
# Seventeenth session, fifth device call: the verify position stats with TWO tiles in flight (scratch/ahead2 =
# b2a2ccc + span_stats loading the tile after next, POSITION_MAXNREG 80: 79 registers, no stack, 6 programs an SM;
# a2c72: 72, 16 B of stack, 7) against the tree (scratch/tree = b2a2ccc: one tile ahead, cap 64), then the bench's
# verify shapes on ahead2 (copied over the device's tree).
# run(command="timeout 330 bash docs/bench/2026-12-02-h200-s17/scripts/call5.sh", carry=["scratch", ".peers"]); scratch/ahead2
# = scratch/tree + ahead2.patch (next to this script)
set -u
export PYTHONUNBUFFERED=1
G=/tmp/c5; mkdir -p $G/bench
PYTHONPATH=$PWD timeout 130 python3 tools/ab_kernels.py --kernels --steps 5 --cases "verify k=4 R" \
  --variant tree=scratch/tree/replay_kernels --variant a2=scratch/ahead2/replay_kernels \
  --variant a2c72=scratch/ahead2/replay_kernels --set "a2c72:stochastic.POSITION_MAXNREG=72" \
  2>&1 | grep -v -i warn > $G/ab_ahead2.txt
echo "ab rc=$?"; grep "^|" $G/ab_ahead2.txt
tar czf $OUT/c5.tgz -C $G .
cp scratch/ahead2/replay_kernels/*.py replay_kernels/  # on the device's copy of the tree only
# tools/run_gpu_bench.sh without its GPU tests (the A/B compared every token): the peers, then the bench
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
PYTHONPATH=/tmp/site:$PWD timeout 110 python3 tools/bench_kernels.py --out $G/bench --vocab 248320 --top-p 1.0 \
  --cases R64k4,R256k4 --budget-s 45 > $G/bench/stdout.txt 2>&1; echo "bench rc=$?"
grep -B2 -A8 "^| R | k" $G/bench/stdout.txt | head -30
tar czf $OUT/c5.tgz -C $G .
