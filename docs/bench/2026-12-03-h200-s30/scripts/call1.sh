#!/usr/bin/env bash
# (Thirtieth session, call 1: the twenty-ninth session's next_first_call.sh as run, at 9146e3c.)
# For the next session's first GPU call: what call 5's kernels (PDL for the cooperative kernels too, HEAD of the
# twenty-ninth session) were not run through: the peers bench and every committed fixture on CUDA, then the A/B
# figures of the two cases at the 2x line over 20 steps (verify k=4 + top-p 0.9 R=64 against verify k=4 R=64,
# top-p 0.9 R=64 against plain R=64), same process, interleaved with nothing but themselves.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s29/scripts/next_first_call.sh", carry=[".peers"])
set -u
export PYTHONUNBUFFERED=1
G=$OUT/first; mkdir -p $G
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
python3 -c 'from typing_extensions import get_annotations' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl
PYTHONPATH=/tmp/site:$PWD timeout 170 python3 tools/bench_kernels.py --vocab 248320 --budget-s 110 --skip-correctness \
  --out $G/bench > $G/bench_log.txt 2>&1
echo "bench rc=$?"; grep -A30 "^## HEADLINE" $G/bench_log.txt | head -30
PYTHONPATH=$PWD SKIP_KERNEL_TESTS=1 SKIP_IMPL_TESTS=1 timeout 200 bash tools/run_gpu_checks.sh > $G/gpu_checks.txt 2>&1
echo "gpu checks rc=$?"; tail -3 $G/gpu_checks.txt
PYTHONPATH=$PWD timeout 170 python3 tools/ab_kernels.py --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC plain R=64$" \
  --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab_ratios.txt
echo "ab rc=$?"; grep -E "^\|" $G/ab_ratios.txt
