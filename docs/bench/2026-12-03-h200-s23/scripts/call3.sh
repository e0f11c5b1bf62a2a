#!/usr/bin/env bash
# Twenty-third session, call 3: the tree as committed (the open-row launch by the requests expected open:
# OPEN_ROW_SHAPES, 122 programs a row up to 3 expected, 61 up to 8, else the rounds). GPU tests; A/B against
# scratch/s23base (git archive 056645d replay_kernels); the peers in the same run at R = 64 (plain, top-p 0.9);
# ncu of the open-row launch at R = 64 and R = 8.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s23/scripts/call3.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
timeout 170 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -12
timeout 200 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC plain R=8$,SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=32$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,Qwen2.5-derived top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=256$,verify k=4 top-p 0.9 R=8$,verify k=4 top-p 0.9 R=64$" \
  --variant base=scratch/s23base/replay_kernels --variant tree=replay_kernels \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|mismatch|Error" $G/ab.txt | head -30
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 110 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_r64 --vocab 248320 \
  --cases R64k0 --top-p 1.0,0.9 --budget-s 60 > $G/bench_r64.log 2>&1
echo "bench rc=$?"; grep "| 248320 \|^| 64 " $G/bench_r64/bench.md | grep -v "serial\|torch.topk" | head -12
for R in 64 8; do
  timeout 45 ncu --section SpeedOfLight --section Occupancy --kernel-name regex:_open_rows_kernel --launch-skip 2 \
    --launch-count 1 python3 tools/ncu_target.py --impl gumbel-max --R $R --k 0 --top-p 0.9 > $G/ncu_open_rows_r$R.txt 2>&1
  echo "ncu R=$R rc=$?"; grep -E "Duration|DRAM Throughput|Compute \(SM\)|Registers|Achieved Occ|Theoretical Occ" $G/ncu_open_rows_r$R.txt
done
