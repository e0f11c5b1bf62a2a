#!/usr/bin/env bash
# Thirty-fourth session, call 5: the final tree's Qwen2.5-derived R = 256 targets (verify k=4, plain) against 86711a5
# with the copy bandwidth measured in the same call (the floor), then the peers bench (SYNTHETIC, every target case
# its budget reaches).
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s34/scripts/call5.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call5; mkdir -p $G
python3 -c "from replay_harness.bench.timing import copy_bandwidth as c; r = c(True, 2.0); print('copy', r['gbps'], 'GB/s', r)" > $G/copy.txt 2>&1
cat $G/copy.txt
timeout 120 python3 tools/ab_kernels.py --rounds 7 --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --cases "Qwen2.5-derived verify k=4 R=256,Qwen2.5-derived plain R=256" 2>&1 | grep -v -i warn > $G/ab.txt
echo "== ab rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error" $G/ab.txt
python3 -c "from replay_harness.bench.timing import copy_bandwidth as c; r = c(True, 2.0); print('copy', r['gbps'], 'GB/s', r)" >> $G/copy.txt 2>&1
tail -1 $G/copy.txt
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
python3 -c 'from typing_extensions import get_annotations' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl
left=$((580 - SECONDS))
PYTHONPATH=/tmp/site:$PWD timeout $left python3 tools/bench_kernels.py --vocab 248320 --budget-s $((left - 60)) --skip-correctness --out $G/bench > $G/bench_log.txt 2>&1
echo "== peers bench rc=$?"; grep -E "^\| [0-9]" $G/bench/bench.md | head -24
