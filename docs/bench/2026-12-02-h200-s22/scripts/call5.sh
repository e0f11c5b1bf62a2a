#!/usr/bin/env bash
# Twenty-second session, call 5: the tree as committed (the one launch below ONE_LAUNCH_BELOW = 4 requests, the
# vector verdict) against `base` = scratch/s22base (134e8a1) at R = 1-4, including R = 3 (not timed before); the
# GPU tests of every kernel the verdict serves; FlashInfer on the plain R = 1 shapes; ncu of the one launch.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s22/scripts/call5.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c5; mkdir -p $G
timeout 150 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.5 R=1$,SYNTHETIC top-p 0.9 R=2$,SYNTHETIC top-p 0.9 R=3$,SYNTHETIC top-p 0.9 R=4$,top-k 50 R=1$,top-k 50 R=2$,top-k 50 R=3$,top-k 50 R=4$,derived top-p 0.9 R=1$,SYNTHETIC plain R=1$" \
  --variant base=scratch/s22base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c5.tgz -C $G .
timeout 200 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_sample_check.py tests/test_kernels.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
tar czf $OUT/c5.tgz -C $G .
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 120 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_r1 --vocab 248320 \
  --cases R1k0 --top-p 1.0,0.9 --budget-s 60 > $G/bench_r1.log 2>&1
echo "bench rc=$?"; grep "| 248320 " $G/bench_r1/bench.md | grep -v "serial\|torch.topk"
tar czf $OUT/c5.tgz -C $G .
timeout 60 ncu --section SpeedOfLight --section Occupancy --kernel-name regex:_one_launch_kernel --launch-skip 2 \
  --launch-count 1 --csv python3 tools/ncu_target.py --impl gumbel-max --R 1 --k 0 --top-p 0.9 2>&1 \
  | python3 tools/ncu_summary.py > $G/ncu_one_launch.txt 2>&1
echo "ncu rc=$?"; cat $G/ncu_one_launch.txt | head -20
tar czf $OUT/c5.tgz -C $G .
