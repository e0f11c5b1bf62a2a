#!/usr/bin/env bash
# PREPARED in the seventeenth session for the next one's first device call; nothing here has run.
# Before the call, on the CPU machine (scratch/ is git-ignored; the device gets it through `carry`):
#   rm -rf scratch/tree scratch/counts && mkdir -p scratch/tree scratch/counts
#   git archive HEAD replay_kernels | tar -x -C scratch/tree && git archive HEAD replay_kernels | tar -x -C scratch/counts
#   (cd scratch/counts && patch -p1 < ../../docs/bench/2026-12-02-h200-s17/scripts/held_once_counts.patch)
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s17/scripts/next_first_call.sh", carry=["scratch", ".peers"])
#
# 1. A/B of the prepared held-once counts (scratch/counts: each draw program counts the lanes holding its largest
#    processed value, so the first draw's last program no longer reads a span again; CPU-tested, sm_90: 95
#    registers, no stack at the cap of 96) and of wider later draws of sample-and-check (ROUND_SPLIT_AS_ROWS 1
#    or 16 instead of 32: each open row of a round split over 122 programs of one 2,048-lane tile or 61 of two,
#    instead of 31 of four; a round with a few open rows took 15-17 µs for its draw at top-p 0.9 R = 64,
#    call1_sequence.txt), against the tree, on the top-p cases, tokens compared.
# 2. verify k=4 R=64 with one position launch; 3. the GPU tests with the counts patch (copied over the device's tree).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/n; mkdir -p $G
timeout 330 python3 tools/ab_kernels.py --kernels --steps 5 --cases "top-p 0.9,SYNTHETIC top-p 0.5" \
  --variant base=scratch/tree/replay_kernels --variant counts=scratch/counts/replay_kernels \
  --variant rs1=scratch/tree/replay_kernels --set "rs1:sample_check.ROUND_SPLIT_AS_ROWS=1" \
  --variant rs16=scratch/tree/replay_kernels --set "rs16:sample_check.ROUND_SPLIT_AS_ROWS=16" \
  2>&1 | grep -v -i warn > $G/ab_counts_rounds.txt
echo "ab rc=$?"; grep "^|" $G/ab_counts_rounds.txt
tar czf $OUT/next.tgz -C $G .
# 2. verify k=4 R=64 in one position launch for all positions (FUSED_BELOW above 64; it reads the rows after a
#    rejection too, but pays one launch's critical path instead of four: the later positions cost 12-21 µs each
#    for few rows, call1_sequence.txt; the sixth session measured it 9% slower, before the tiles were loaded ahead)
timeout 90 python3 tools/ab_kernels.py --kernels --steps 5 --cases "verify k=4 R=64" \
  --variant base=scratch/tree/replay_kernels \
  --variant fused=scratch/tree/replay_kernels --set "fused:stochastic.FUSED_BELOW=65" \
  2>&1 | grep -v -i warn > $G/ab_fused_r64.txt
echo "ab2 rc=$?"; grep "^|" $G/ab_fused_r64.txt
tar czf $OUT/next.tgz -C $G .
# 3. the GPU tests with the counts patch
cp scratch/counts/replay_kernels/*.py replay_kernels/  # on the device's copy of the tree only
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > $G/gpu_tests_counts.txt 2>&1
echo "gpu tests (counts) rc=$?"; tail -3 $G/gpu_tests_counts.txt
tar czf $OUT/next.tgz -C $G .
