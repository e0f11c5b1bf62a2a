#!/usr/bin/env bash
# Twenty-ninth session, call 4: the kernels of this session (floored open-row redraws, programmatic dependent
# launch on) against the peers (FlashInfer, vLLM MRV2; eager and CUDA graph, interleaved), then every committed
# fixture through stochastic against reference on CUDA, the founding case and replay verify (run_gpu_checks).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s29/scripts/call4.sh", carry=[".peers"])
set -u
export PYTHONUNBUFFERED=1
G=$OUT/call4; mkdir -p $G
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
python3 -c 'from typing_extensions import get_annotations' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl
PYTHONPATH=/tmp/site:$PWD timeout 170 python3 tools/bench_kernels.py --vocab 248320 --budget-s 110 --skip-correctness \
  --out $G/bench > $G/bench_log.txt 2>&1
echo "bench rc=$?"; tail -45 $G/bench_log.txt
PYTHONPATH=$PWD SKIP_KERNEL_TESTS=1 SKIP_IMPL_TESTS=1 timeout 230 bash tools/run_gpu_checks.sh > $G/gpu_checks.txt 2>&1
echo "gpu checks rc=$?"; grep -iE "exit|rc=|pass|fail|error" $G/gpu_checks.txt | tail -15
