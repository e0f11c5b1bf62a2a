#!/usr/bin/env bash
# stochastic against FlashInfer 0.6.18.post1 and 0.7.2.post1, every path of the same semantics, in one GPU call
# (issue 68; tools/fi_race.py). Needs ../shared/peers/prepare.sh --prebuild --prebuild-fi07 done here first:
#   run(command="bash tools/run_gpu_fi_race.sh", carry=[".peers/fi07", ".peers/prebuilt_fi07_sm90a",
#       ".peers/gpu_env.py", ".peers/smoke.py", ".peers/MANIFEST.txt"], timeout_s=600)          (0.7.2.post1)
#   the same with carry=[".peers/wheels", ".peers/prebuilt_sm90a", ".peers/gpu_env.py", ".peers/smoke.py",
#       ".peers/MANIFEST.txt"]                                                                  (0.6.18.post1)
# Both versions do not fit one call's 64 MiB with the project (18 MiB tracked on 2026-12-08; 0.6.18: 29 MiB,
# 0.7.2: 38 MiB): a version whose folder was not carried is left out, and --table joins the CSVs of two calls.
# Each version is installed into its own site and timed in its own process (two versions of one package never
# share a site); ours is timed in both, interleaved with that version's paths, so each ratio is of one run. Output under $OUT: fi06.csv,
# fi07.csv, fi_race.md (the table), fi_race.txt (the log). Environment: FR_SEEDS [8], FR_REQUESTS ["1 64 256"],
# FR_LIMIT_S [270] (each version's own deadline).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/fi_race_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  echo "== $(date -u +%FT%TZ) $(hostname); tree ${TREE:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
  rm -rf /tmp/site6 /tmp/site7; versions=()
  if [ -d .peers/wheels ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site6 .peers/wheels/*.whl && versions+=(6)
    PYTHONPATH=/tmp/site6 python3 -c 'from typing_extensions import get_annotations' 2>/dev/null \
      || python3 -m pip install -q --no-index --no-deps --target /tmp/site6 .peers/wheels/opt/*.whl
  fi
  if [ -d .peers/fi07 ]; then
    python3 .peers/gpu_env.py install-fi07 /tmp/site7 && versions+=(7) || echo "== FlashInfer 0.7.2 install failed"
  fi
  # shellcheck disable=SC2086
  for v in "${versions[@]}"; do
    echo "== FlashInfer site /tmp/site$v"
    PYTHONPATH="$PWD:/tmp/site$v" timeout "${FR_LIMIT_S:-270}" python3 tools/fi_race.py --peers .peers \
      --label "fi0.$v" --csv "$OUT/fi0$v.csv" --seeds "${FR_SEEDS:-8}" --requests ${FR_REQUESTS:-1 64 256}
    echo "== exit $?"
  done
  python3 tools/fi_race.py --table "$OUT"/fi0*.csv | tee "$OUT/fi_race.md"
} 2>&1 | tee "$OUT/fi_race.txt"
