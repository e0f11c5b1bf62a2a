#!/usr/bin/env bash
# Thirty-fourth session, call 3: the tree (stochastic.POSITION_SPANS: bf16 rows, 4 spans a position program from 128
# requests) against 86711a5 (scratch/base) and bf16 at 1, 2 and 8 spans everywhere; fp32 rows unchanged (one span).
# Then Nsight Compute of the Qwen2.5-derived R=256 position launches and the real-row benches against the peers.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s34/scripts/call3.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
sets=(); for n in 1 2 8; do sets+=(--variant b$n=replay_kernels --set "b$n:stochastic.POSITION_SPANS={2: ((1 << 31, $n),)}"); done
timeout 240 python3 tools/ab_kernels.py --rounds 5 --kernels --variant base=scratch/base/replay_kernels \
  --variant tree=replay_kernels "${sets[@]}" \
  --cases "Qwen2.5-derived verify k=4 R=256,Qwen2.5-derived verify k=4 R=128,Qwen2.5-derived verify k=4 R=64,Qwen2.5-derived verify k=4 R=32,Qwen2.5-derived verify k=4 R=8,Qwen2.5-derived plain R=256,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=8$" \
  2>&1 | grep -v -i warn > $G/spans.txt
echo "== ab rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error" $G/spans.txt
timeout 80 ncu --section SpeedOfLight --metrics dram__bytes_read.sum,smsp__inst_executed.sum --kernel-name regex:_position_kernel \
  --launch-skip 4 --launch-count 4 python3 tools/ncu_target.py --impl stochastic --R 256 --k 4 \
  --source fixtures/real-draft-model > $G/ncu_qwen_positions.txt 2>&1
echo "== ncu positions rc=$?"; grep -E "_position_kernel|Duration|DRAM Throughput|Compute \(SM\)|dram__bytes|inst_executed" $G/ncu_qwen_positions.txt | head -30
left=$((585 - SECONDS)); [ $left -gt 30 ] || exit 0
OUT=$G REAL_SHAPES="qwen:fixtures/real-draft-model:256:4 qwen:fixtures/real-draft-model:64:4" SKIP_FIXTURE_RUN=1 SKIP_VERIFY=1 \
  timeout $left bash tools/run_gpu_real_rows.sh > /dev/null 2>&1
echo "== real rows rc=$?"; grep -E "^====|ours|median|x |speed|GB/s|mismatch|tokens" $G/real_rows.txt | head -40
