#!/usr/bin/env bash
# SCRATCH (twelfth session): final bench and CUDA checks of the two-tile check pass, one call.
set -u
R=$OUT; mkdir -p /tmp/f/bench /tmp/f/checks
OUT=/tmp/f/bench timeout 330 bash tools/run_gpu_bench.sh --vocab 248320 --top-p 1.0,0.9 --budget-s 140 > /tmp/f/bench/stdout.txt 2>&1; echo "bench rc=$?"
tail -40 /tmp/f/bench/stdout.txt
OUT=/tmp/f/checks SKIP_KERNEL_TESTS=1 timeout 240 bash tools/run_gpu_checks.sh > /tmp/f/checks/stdout.txt 2>&1; echo "checks rc=$?"
tail -15 /tmp/f/checks/stdout.txt
tar czf $R/s12_final.tgz -C /tmp/f .
