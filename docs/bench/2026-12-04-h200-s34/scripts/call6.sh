#!/usr/bin/env bash
# Thirty-fourth session, call 6: the filter targets over 20 SYNTHETIC steps at the final tree (CUDA graphs: each
# filtered case against its unfiltered one), then the "done when" checks of the peers as impls:
# `replay run --impl vllm-mrv2 --against reference` on the committed fixtures and `replay verify --impl flashinfer`.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s34/scripts/call6.sh", carry=[".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call6; mkdir -p $G
timeout 200 python3 tools/ab_kernels.py --steps 20 --variant tree=replay_kernels \
  --cases "SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-k 50 R=64$,SYNTHETIC plain R=1$,SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-k 50 R=1$" \
  2>&1 | grep -v -i warn > $G/filters20.txt
echo "== ab rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error" $G/filters20.txt
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
python3 -c 'from typing_extensions import get_annotations' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl
export PYTHONPATH=$PWD:/tmp/site
timeout 150 python3 -m replay_harness.cli run fixtures/*/ --impl vllm-mrv2 --against reference --device cuda > $G/vllm_fixtures.txt 2>&1
echo "== replay run --impl vllm-mrv2 rc=$?"; grep -E "│ fixtures" $G/vllm_fixtures.txt | head -20
timeout 100 python3 -m replay_harness.cli verify --impl flashinfer --device cuda > $G/verify_fi.txt 2>&1
echo "== replay verify --impl flashinfer rc=$?"; tail -6 $G/verify_fi.txt
