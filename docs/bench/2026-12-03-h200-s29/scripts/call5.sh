#!/usr/bin/env bash
# Twenty-ninth session, call 5: programmatic dependent launch for the cooperative kernels too (the one launch, the
# open rows, the filter loop) against base = scratch/s29b (git archive 84b94b5: PDL for the other kernels only);
# then the GPU tests of the one launch, the open rows and the filter loop (cooperative + PDL; the refusal tests).
# run(command="timeout 300 bash docs/bench/2026-12-03-h200-s29/scripts/call5.sh", carry=["scratch/s29b"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call5; mkdir -p $G
timeout 140 python3 tools/ab_kernels.py --steps 10 --cases "SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-k 50 R=1$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC plain R=1$" \
  --variant base=scratch/s29b/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab.txt | head -12
timeout 110 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_filter_loop.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$? $(tail -1 $G/gpu_tests.txt)"
