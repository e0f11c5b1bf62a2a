#!/usr/bin/env bash
# Nsight Compute Speed-of-Light (SM % and DRAM %) of the kernels that dominate each production shape, on the
# lent H200, from the repo root:  run(command="bash tools/run_gpu_ncu.sh", timeout_s=300)
# Output: $OUT/ncu.txt (one block per kernel: shape, kernel, duration, SM %, DRAM %).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/ncu_out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
profile() {  # profile LABEL KERNEL_REGEX ARGS...
  local label=$1 kernel=$2; shift 2
  echo "== $label  kernel=$kernel  args: $*"
  "$NCU" --section SpeedOfLight --kernel-name "regex:$kernel" --launch-skip 2 --launch-count 1 --csv \
    python3 tools/ncu_target.py "$@" 2>&1 | python3 tools/ncu_summary.py
}
{
  profile "plain R=256 V=248320" _draw_kernel --impl gumbel-max --R 256 --k 0
  profile "plain R=1 V=248320" _draw_kernel --impl gumbel-max --R 1 --k 0
  profile "verify k=4 R=256" _stats_kernel --impl stochastic --R 256 --k 4
  profile "verify k=4 R=256" _draw_kernel --impl stochastic --R 256 --k 4
  profile "verify k=4 R=64" _stats_kernel --impl stochastic --R 64 --k 4
  profile "top-p 0.9 R=256 (sample-and-check: the check pass)" _check_kernel --impl gumbel-max --R 256 --k 0 --top-p 0.9
  profile "top-p 0.9 R=1 (sample-and-check: the check pass)" _check_kernel --impl gumbel-max --R 1 --k 0 --top-p 0.9
  profile "verify k=4 top-p 0.9 R=64 (one search round)" _round_kernel --impl stochastic --R 64 --k 4 --top-p 0.9
} 2>&1 | tee "$OUT/ncu.txt"
