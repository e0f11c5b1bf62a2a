#!/usr/bin/env bash
# Thirtieth session, call 3: the first draw's tail reduces the (score, token) partials and the per-span maxima in
# one pass (partials.block_argmax_top: the three loads of a chunk in flight together) and re-reads the span that
# holds the top TILES tiles at a time (held_once), against base (scratch/s30base = git archive 9146e3c). GPU tests
# of sample-and-check first; the fixture verify call 1 cut; the peers bench last.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s30/scripts/call3.sh", carry=["scratch/s30base", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
timeout 100 python3 -m pytest -q tests/test_sample_check.py -m "gpu" -p no:cacheprovider > $G/gpu_test_sample_check.txt 2>&1
echo "gpu test_sample_check rc=$? $(tail -1 $G/gpu_test_sample_check.txt)"
timeout 30 python3 -m pytest -q tests/test_sample_check.py -k "draw_tail or held_once" -p no:cacheprovider > $G/gpu_test_tail.txt 2>&1
echo "tail tests on cuda rc=$? $(tail -1 $G/gpu_test_tail.txt)"
AB="python3 tools/ab_kernels.py --variant base=scratch/s30base/replay_kernels --variant tree=replay_kernels"
timeout 160 $AB --steps 10 \
  --cases "SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC top-k 50 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$" \
  2>&1 | grep -v -i warn > $G/ab_warm.txt
echo "ab warm rc=$?"; grep -E "^\||DIFFER|Error" $G/ab_warm.txt | head -20
timeout 50 $AB --kernels --set "base:launches.PDL=False" --set "tree:launches.PDL=False" \
  --cases "SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$" 2>&1 | grep -v -i warn > $G/ab_kernels_nopdl.txt
echo "ab kernels rc=$?"; grep -E "^\*" $G/ab_kernels_nopdl.txt
timeout 90 python3 -m replay_harness.cli verify fixtures/real-draft-logits fixtures/real-draft-model --impl stochastic \
  --device cuda > $G/verify_real_draft.txt 2>&1
echo "verify real-draft rc=$?"; tail -1 $G/verify_real_draft.txt
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
python3 -c 'from typing_extensions import get_annotations' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl
PYTHONPATH=/tmp/site:$PWD timeout 150 python3 tools/bench_kernels.py --vocab 248320 --budget-s 95 --skip-correctness \
  --out $G/bench > $G/bench_log.txt 2>&1
echo "bench rc=$?"; grep -A24 "^## HEADLINE" $G/bench_log.txt | grep -E "^\| (1|64|256) \| (0|4) \|"
