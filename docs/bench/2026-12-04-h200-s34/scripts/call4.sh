#!/usr/bin/env bash
# Thirty-fourth session, call 4: the final tree (POSITION_SPANS = {2: ((256, 1), (1 << 31, 4))}): the committed fixtures
# on CUDA and the GPU tests; the A/B against 86711a5 (scratch/base) on the real-row and SYNTHETIC verify cases; the
# real-row bench of verify k=4 R=256 against both peers (replay bench, eager, L2 rotated).
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s34/scripts/call4.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call4; mkdir -p $G
timeout 200 python3 -m replay_harness.cli run fixtures/*/ --impl stochastic --against reference --device cuda > $G/fixtures_cuda.txt 2>&1
echo "== fixtures on CUDA rc=$?"; tail -12 $G/fixtures_cuda.txt | grep -E "│|exit"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_launches.py \
  "tests/test_kernels.py::test_stochastic_span_sums_far_from_the_draft_value" \
  "tests/test_kernels.py::test_stochastic_spans_per_program_keep_each_span_s_stats" > $G/gpu_tests.txt 2>&1
echo "== gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
timeout 150 python3 tools/ab_kernels.py --rounds 5 --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --cases "Qwen2.5-derived verify k=4 R=256,Qwen2.5-derived verify k=4 R=128,Qwen2.5-derived verify k=4 R=64,Qwen2.5-derived verify k=4 R=32,Qwen2.5-derived verify k=4 R=8,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=256$" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "== ab rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error" $G/ab.txt
left=$((585 - SECONDS)); [ $left -gt 30 ] || exit 0
OUT=$G REAL_SHAPES="qwen:fixtures/real-draft-model:256:4" SKIP_FIXTURE_RUN=1 SKIP_VERIFY=1 \
  timeout $left bash tools/run_gpu_real_rows.sh > /dev/null 2>&1
echo "== real rows rc=$?"; grep -E "^====|│ (A|B) .*stochastic-verify  |ratio|│ /tmp" $G/real_rows.txt | head -20
