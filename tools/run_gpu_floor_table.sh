#!/usr/bin/env bash
# The kernels against their floor and the peers in one GPU call (docs/BENCHMARKS.md, "Against the floor"):
#   run(command="bash tools/run_gpu_floor_table.sh", carry=[".peers"], timeout_s=600)
# 1. installs the peers' wheels from .peers (../shared/peers/prepare.sh --prebuild made it);
# 2. derives FT_STEPS-step recordings at V = 248,320 with `replay synth` from real rows: Qwen2.5-Coder
#    (fixtures/real-draft-model) and SmolLM2-135M (fixtures/real-mixed), verify k = 4 and plain, R = 64 and 256
#    (FT_SHAPES: name:source:R:k ...), FT_JOBS at a time;
# 3. python3 tools/floor_table.py on them (`replay bench`'s timing vs vLLM MRV2, the same steps in CUDA graphs)
#    and on FT_SYNTH SYNTHETIC fp32 steps a shape (graphs, the peers in the same loop; stochastic eager R = 1).
# Output under $OUT: floor.txt (the table), floor.json, synth.txt. Environment: FT_DIR [/tmp/ft], FT_STEPS [8],
# FT_SYNTH [8], FT_REPEATS [20], FT_JOBS [8], FT_SHAPES, FT_PEER [vllm-mrv2],
# FT_CASES (floor_table.py --cases: the SYNTHETIC cases to run; default all).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/floor_out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ -d .peers/wheels ]; then
  rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>/dev/null \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
  python3 -c 'from typing_extensions import get_annotations' 2>/dev/null \
    || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl 2>/dev/null
fi
DIR="${FT_DIR:-/tmp/ft}"; STEPS="${FT_STEPS:-8}"
SHAPES="${FT_SHAPES:-qwen:fixtures/real-draft-model:64:4 qwen:fixtures/real-draft-model:256:4 \
qwen:fixtures/real-draft-model:64:0 qwen:fixtures/real-draft-model:256:0 smol:fixtures/real-mixed:64:4 \
smol:fixtures/real-mixed:256:4 smol:fixtures/real-mixed:64:0 smol:fixtures/real-mixed:256:0}"
{
  echo "== $(date -u +%FT%TZ) $(hostname); tree ${TREE:-unknown}"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
  mkdir -p "$DIR"; recs=()
  t0=$(date +%s)
  for spec in $SHAPES; do
    IFS=: read -r name path b k <<<"$spec"
    echo "$path $DIR/$name-R${b}k$k $b $k"
  done | OMP_NUM_THREADS=2 xargs -P "${FT_JOBS:-8}" -L 1 sh -c 'python3 -m replay_harness.cli synth "$0" --out "$1" \
      --batch "$2" --drafts "$3" --vocab 248320 --steps '"$STEPS"' --overwrite > /dev/null || echo "synth $1 failed"'
  for spec in $SHAPES; do IFS=: read -r name path b k <<<"$spec"; recs+=("$DIR/$name-R${b}k$k"); done
  echo "== $(date -u +%T) derived: $(du -sh "$DIR" | cut -f1) in $(( $(date +%s) - t0 )) s"
  timeout 470 python3 tools/floor_table.py --derived "${recs[@]}" --peer "${FT_PEER-vllm-mrv2}" \
    --repeats "${FT_REPEATS:-20}" --synthetic-steps "${FT_SYNTH:-8}" ${FT_CASES:+--cases "$FT_CASES"} \
    --out "$OUT/floor.json"
  rc=$?; echo "== $(date -u +%T) exit $rc"
} 2>&1 | tee "$OUT/floor.txt"
