#!/usr/bin/env bash
# SCRATCH (eleventh session): where the time goes. Per-kernel device times, ncu --set full with stall reasons.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/smi.txt 2>&1
timeout 200 python3 tools/profile_kernels.py --launches 20 > $OUT/profile.txt 2>&1; echo "profile rc=$?"
full() {  # full NAME KERNEL SKIP CMD...
  local name=$1 kernel=$2 skip=$3; shift 3
  timeout 150 "$NCU" --set full --kernel-name "regex:$kernel" --launch-skip "$skip" --launch-count 1 -o "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$?"
  "$NCU" -i "$OUT/$name.ncu-rep" --page details > "$OUT/$name.details.txt" 2>&1
  "$NCU" -i "$OUT/$name.ncu-rep" --page raw --csv > "$OUT/$name.raw.csv" 2>&1
}
full check256 _check_kernel 8 python3 tools/ncu_target.py --impl gumbel-max --R 256 --k 0 --top-p 0.9
full realdraw256 _draw_kernel 2 python3 docs/bench/2026-12-01-h200-s9/scripts/s9_ncu.py
full pos64 _position_kernel 8 python3 tools/ncu_target.py --impl stochastic --R 64 --k 4
full draw64v _draw_kernel 2 python3 tools/ncu_target.py --impl stochastic --R 64 --k 4
ls -la $OUT
