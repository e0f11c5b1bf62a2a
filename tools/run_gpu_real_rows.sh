#!/usr/bin/env bash
# Real-row figures on the lent H200 (repo root, .peers carried):
#   run(command="bash tools/run_gpu_real_rows.sh", carry=[".peers"], timeout_s=600)
# Derives production-shape steps (V = 248,320) from real recordings with `replay synth` (Qwen2.5-Coder rows of
# fixtures/real-draft-model, V = 151,936; SmolLM2-135M rows of fixtures/real-mixed, V = 49,152), then:
# `replay run` ours against vLLM MRV2 token for token, `replay bench` ours vs each peer (A/B interleaved,
# coverage counted), and the peers' own checks on the committed fixtures. Output: $OUT/real_rows.txt and
# one JSON per bench under $OUT/real/. Environment: REAL_SHAPES (name:source:R:k ...), SKIP_FIXTURE_RUN,
# SKIP_VERIFY.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/real_rows_out}"; mkdir -p "$OUT/real"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>/dev/null \
  && export PYTHONPATH="$PYTHONPATH:/tmp/site"
replay() { python3 -m replay_harness.cli "$@"; }
R=/tmp/real_rows
check() { echo; echo "==== \$ $*"; "$@"; echo "==== exit $?"; }
{
  for spec in ${REAL_SHAPES:-qwen:fixtures/real-draft-model:256:0 qwen:fixtures/real-draft-model:64:4 \
              qwen:fixtures/real-draft-model:256:4 smol:fixtures/real-mixed:256:0}; do
    IFS=: read -r name path b k <<<"$spec"
    replay synth "$path" --out "$R/$name-R${b}k$k" --batch "$b" --drafts "$k" --vocab 248320 --overwrite >/dev/null \
      || echo "synth $name R=$b k=$k failed"
  done
  [ -n "${SKIP_FIXTURE_RUN:-}" ] || check replay run fixtures/*/ replay_harness/conformance/vectors/ --impl vllm-mrv2 --against reference --device cuda
  check replay run $R/*/ --impl stochastic --against vllm-mrv2 --device cuda
  for rec in $R/*k0; do
    [ -d "$rec" ] || continue  # no plain shape in REAL_SHAPES
    check replay bench "$rec" --impl gumbel-max --vs vllm-mrv2 --repeats 30 --json-file "$OUT/real/$(basename $rec)-vllm.json"
    check replay bench "$rec" --impl gumbel-max --vs flashinfer --repeats 30 --json-file "$OUT/real/$(basename $rec)-fi.json"
  done
  for rec in $R/*k4; do
    [ -d "$rec" ] || continue
    check replay bench "$rec" --impl stochastic --vs vllm-mrv2 --repeats 30 --json-file "$OUT/real/$(basename $rec)-vllm.json"
    check replay bench "$rec" --impl stochastic --vs flashinfer --repeats 30 --json-file "$OUT/real/$(basename $rec)-fi.json"
  done
  [ -n "${SKIP_VERIFY:-}" ] || check timeout 90 python3 -m replay_harness.cli verify --impl flashinfer --device cuda
} 2>&1 | tee "$OUT/real_rows.txt"
