#!/usr/bin/env bash
# Nsight Compute Speed-of-Light (SM % and DRAM %) and occupancy of the kernels that dominate each production
# shape, on the lent H200, from the repo root:  run(command="bash tools/run_gpu_ncu.sh", timeout_s=300)
# The check pass and the verify position kernel run 4 times per sampler launch (check: first pass + 3 rounds;
# position: k = 4): skip 8 profiles the first of them in the third launch (skip 2 profiled a later round before).
# Output: $OUT/ncu.txt (one block per kernel: shape, kernel, duration, SM %, DRAM %, registers, occupancy).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/ncu_out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
profile() {  # profile LABEL KERNEL_REGEX SKIP ARGS...: the kernel's (SKIP+1)-th launch in the target's launches
  local label=$1 kernel=$2 skip=$3; shift 3
  echo "== $label  kernel=$kernel  skip=$skip  args: $*"
  "$NCU" --section SpeedOfLight --section Occupancy --kernel-name "regex:$kernel" --launch-skip "$skip" \
    --launch-count 1 --csv python3 tools/ncu_target.py "$@" 2>&1 | python3 tools/ncu_summary.py
}
{
  profile "plain R=256 V=248320" _draw_kernel 2 --impl gumbel-max --R 256 --k 0
  profile "plain R=1 V=248320" _draw_kernel 2 --impl gumbel-max --R 1 --k 0
  profile "verify k=4 R=256 (position 0)" _position_kernel 8 --impl stochastic --R 256 --k 4
  profile "verify k=4 R=256" _draw_kernel 2 --impl stochastic --R 256 --k 4
  profile "verify k=4 R=64 (position 0)" _position_kernel 8 --impl stochastic --R 64 --k 4
  profile "verify k=4 R=64" _draw_kernel 2 --impl stochastic --R 64 --k 4
  profile "top-p 0.9 R=256 (sample-and-check: the check pass)" _check_kernel 8 --impl gumbel-max --R 256 --k 0 --top-p 0.9
  profile "top-p 0.9 R=1 (sample-and-check in one launch)" _one_launch_kernel 2 --impl gumbel-max --R 1 --k 0 --top-p 0.9
  profile "top-p 0.9 R=64 (the open-row launch)" _open_rows_kernel 2 --impl gumbel-max --R 64 --k 0 --top-p 0.9
  profile "verify k=4 top-p 0.9 R=64 (one search round)" _round_kernel 2 --impl stochastic --R 64 --k 4 --top-p 0.9
} 2>&1 | tee "$OUT/ncu.txt"
