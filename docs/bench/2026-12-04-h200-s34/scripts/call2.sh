#!/usr/bin/env bash
# Thirty-fourth session, call 2: several spans a position program (stochastic.POSITION_SPANS; the stats of each span
# are those of one program a span). base = 86711a5's kernels (scratch/base: `git archive 86711a5 replay_kernels`);
# sN = the tree with N spans a program at every R. Then the committed fixtures on CUDA and the GPU tests.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s34/scripts/call2.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
sets=(); for n in 1 2 3 4; do sets+=(--variant s$n=replay_kernels --set "s$n:stochastic.POSITION_SPANS=((1 << 31, $n),)"); done
timeout 280 python3 tools/ab_kernels.py --rounds 5 --kernels --variant base=scratch/base/replay_kernels "${sets[@]}" \
  --cases "Qwen2.5-derived verify k=4 R=256,Qwen2.5-derived verify k=4 R=64,Qwen2.5-derived verify k=4 R=32,SYNTHETIC verify k=4 R=32$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  2>&1 | grep -v -i warn > $G/spans.txt
echo "== ab rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error|^\* " $G/spans.txt
timeout 200 python3 -m replay_harness.cli run fixtures/*/ --impl stochastic --against reference --device cuda > $G/fixtures_cuda.txt 2>&1
echo "== fixtures on CUDA rc=$?"; tail -4 $G/fixtures_cuda.txt
left=$((580 - SECONDS)); [ $left -gt 10 ] || exit 0
timeout $left python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_launches.py \
  "tests/test_kernels.py::test_stochastic_span_sums_far_from_the_draft_value" \
  "tests/test_kernels.py::test_stochastic_spans_per_program_keep_each_span_s_stats" > $G/gpu_tests.txt 2>&1
echo "== gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
