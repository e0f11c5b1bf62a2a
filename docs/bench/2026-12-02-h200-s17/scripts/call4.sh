#!/usr/bin/env bash
# Seventeenth session, last device call, on the final tree (the verify position stats loading one tile ahead,
# capped at 64 registers): the CUDA correctness checks (tests/test_impls.py on CUDA, `replay run` of every
# committed fixture, the founding case, verify, the real draft-model bench), then Nsight Compute of the
# position launch (position 0, verify k=4 R=64 and R=256) before (scratch/head = b1d0320) and after.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s17/scripts/call4.sh", carry=["scratch", ".peers"])
set -u
export PYTHONUNBUFFERED=1
G=/tmp/c4; mkdir -p $G
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for v in head tree; do
  [ $v = head ] && P=$PWD/scratch/head:$PWD || P=$PWD
  for R in 64 256; do
    echo "== $v verify k=4 R=$R position 0" >> $G/ncu_position.txt
    PYTHONPATH=$P timeout 60 "$NCU" --section SpeedOfLight --section Occupancy --kernel-name "regex:_position_kernel" \
      --launch-skip 8 --launch-count 1 --csv python3 tools/ncu_target.py --impl stochastic --R $R --k 4 2>&1 \
      | PYTHONPATH=$PWD python3 tools/ncu_summary.py >> $G/ncu_position.txt 2>&1
  done
done
cat $G/ncu_position.txt
tar czf $OUT/c4.tgz -C $G .
export PYTHONPATH=$PWD
SKIP_KERNEL_TESTS=1 OUT=$G/checks timeout 380 bash tools/run_gpu_checks.sh > $G/gpu_checks.txt 2>&1; echo "checks rc=$?"
grep "^==== \|UNEXPECTED\|passed\|failed" $G/gpu_checks.txt | tail -40
tar czf $OUT/c4.tgz -C $G .
