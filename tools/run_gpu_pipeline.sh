#!/usr/bin/env bash
# The sampling pipeline's cost and vLLM MRV2's pipeline beside it, in one GPU call (issue 64; tools/pipeline_bench.py):
#   run(command="bash tools/run_gpu_pipeline.sh", carry=[".peers/vllm_mrv2", ".peers/gpu_env.py"], timeout_s=600)
# 1. DERIVED (SYNTHETIC) bf16 steps at V = 248,320 from the real rows of Qwen2.5-Coder (fixtures/real-draft-model),
#    every request verifying k = 4 drafts, R = 64 and 256, PB_STEPS steps each;
# 2. every rule of the sampling pipeline on them (penalties, bias and bad words over 4,096-token histories, a grammar
#    bitmask, allowed ids, min-tokens, logprobs), and the same steps without them and with the grammar bitmask only;
# 3. `stochastic` against `vllm-mrv2` token for token, logprobs within 1e-4;
# 4. interleaved timing: stochastic with the rules / without (target <= 1.1), grammar only / without (<= 1.1),
#    stochastic / vLLM's own pipeline, its processors + rejection_sample (<= 0.6).
# Output under $OUT: pipeline.md (the table), pipeline.json, pipeline_calls.csv, pipeline_checks.csv, pipeline.txt (the
# log). Environment: PB_STEPS [8], PB_REQUESTS ["64 256"], PB_REPEATS [20], PB_SOURCE [fixtures/real-draft-model],
# PB_MODE [raw_logprobs], PB_LIMIT_S [560] (the script's own deadline: the table of each R is written as it finishes).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/pipeline_out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
  echo "== $(date -u +%FT%TZ) $(hostname); tree ${TREE:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
  [ -f .peers/vllm_mrv2/vllm/v1/worker/gpu/sample/penalties.py ] || echo "== no .peers/vllm_mrv2 processors: carry it"
  # shellcheck disable=SC2086
  timeout "${PB_LIMIT_S:-560}" python3 tools/pipeline_bench.py --vocab 248320 --drafts 4 --dtype bfloat16 \
    --requests ${PB_REQUESTS:-64 256} --steps "${PB_STEPS:-8}" --history 4096 --repeats "${PB_REPEATS:-20}" \
    --source "${PB_SOURCE:-fixtures/real-draft-model}" --logprobs-mode "${PB_MODE:-raw_logprobs}" --device cuda \
    --out "$OUT"
  rc=$?; echo "== $(date -u +%T) exit $rc"
} 2>&1 | tee "$OUT/pipeline.txt"
