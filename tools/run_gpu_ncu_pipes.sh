#!/usr/bin/env bash
# Nsight Compute of the launches behind the floor table's misses (docs/KERNELS.md "Where the floor is not
# reached"): every metric of the SpeedOfLight, ComputeWorkloadAnalysis (pipe utilisation), InstructionStats,
# WarpStateStats (stall reasons), Occupancy and MemoryWorkloadAnalysis sections, one launch a case, as raw CSV.
#   run(command="bash tools/run_gpu_ncu_pipes.sh", timeout_s=600)
# Cases: the plain draw at R = 256 on SYNTHETIC fp32 rows, Qwen2.5-derived and SmolLM2-derived bf16 rows, and the
# first verify position launch at k = 4, R = 256 on Qwen2.5- and SmolLM2-derived rows. NCU_KERNELS=DIR profiles the
# replay_kernels package in DIR instead of the tree's (a baseline copy: git archive REV replay_kernels).
# Output: $OUT/ncu-pipes.csv (one row a case after the two header rows; column "case" added) and
# $OUT/ncu-pipes.txt (python3 tools/ncu_summary.py --pipes of it).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/ncu_out}"; mkdir -p "$OUT"
export PYTHONPATH="${NCU_KERNELS:+$NCU_KERNELS:}$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
SECTIONS=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats
          --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis)
first=1
profile() {  # profile LABEL KERNEL_REGEX SKIP ARGS...
  local label=$1 kernel=$2 skip=$3; shift 3
  echo "== $label" >&2
  "$NCU" "${SECTIONS[@]}" --kernel-name "regex:$kernel" --launch-skip "$skip" --launch-count 1 --csv --page raw \
    python3 tools/ncu_target.py "$@" 2>/dev/null | grep '^"' > "$OUT/one.csv"
  if [ "$first" = 1 ]; then head -2 "$OUT/one.csv" | sed '1s/^/"case",/; 2s/^/"",/' > "$OUT/ncu-pipes.csv"; first=0; fi
  tail -n +3 "$OUT/one.csv" | sed "s/^/\"$label\",/" >> "$OUT/ncu-pipes.csv"
}
profile "SYNTHETIC fp32 plain R=256" _draw_kernel 2 --impl gumbel-max --R 256 --k 0
profile "Qwen2.5-derived plain R=256" _draw_kernel 2 --impl gumbel-max --R 256 --k 0 --source fixtures/real-draft-model
profile "SmolLM2-derived plain R=256" _draw_kernel 2 --impl gumbel-max --R 256 --k 0 --source fixtures/real-mixed
profile "Qwen2.5-derived verify k=4 R=256 position" _position_kernel 8 --impl stochastic --R 256 --k 4 \
  --source fixtures/real-draft-model
profile "SmolLM2-derived verify k=4 R=256 position" _position_kernel 8 --impl stochastic --R 256 --k 4 \
  --source fixtures/real-mixed
rm -f "$OUT/one.csv"
python3 tools/ncu_summary.py --pipes "$OUT/ncu-pipes.csv" | tee "$OUT/ncu-pipes.txt"
