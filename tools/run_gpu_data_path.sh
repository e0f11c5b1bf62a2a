#!/usr/bin/env bash
# The recording data path on the GPU machine in one call (docs/BENCHMARKS.md, "Record and replay"):
#   run(command="bash tools/run_gpu_data_path.sh", timeout_s=600)
# 1. the data-path tests on CUDA (tests/test_data_path.py, tests/test_recorder_async.py);
# 2. tools/bench_recorder.py at R = 64 and 256 (bf16, k = 4, V = 248,320, 20 ms steps): sync, async-block,
#    async-drop and async at the sustainable rate; then R = 8 recorded every step for 96 steps;
# 3. a derived corpus of DP_RECS recordings x DP_STEPS steps (R = 256, k = 4, V = 248,320, bf16; `replay synth`,
#    the reference's tokens stored), then tools/measure_replay_rss.py: the disk's cold read bandwidth on the
#    corpus's own files and `replay run CORPUS --impl stochastic --device cuda` cold, wall time, peak RSS,
#    GB/s after the start-up (a one-step recording of the same shape, replayed once before to fill Triton's
#    cache).
# 4. tools/probe_write_back.py on the same disk: the step-file write protocol's variants, interleaved;
# 5. N readers of that corpus on one host (docs/SCALE.md, "Targets"): tools/run_gpu_scale.sh with
#    SCALE_COMMANDS=run for each N of DP_READERS, cold reads with 1 and N readers and `replay run` with 1 and N
#    processes (more processes than GPUs share them: compare/distributed.py).
# Everything under $OUT: log.txt, recorder*.json/txt, probe.json, replay.json, scale-N/, tests.txt.
# Environment: DP_DIR [/tmp/dp], DP_RECS [6], DP_STEPS [4], DP_READERS [2 4], FIXTURE_IMPLS [stochastic
# reference; empty: none], SKIP_TESTS, SKIP_RECORDER, SKIP_PROBE, SKIP_REPLAY, SKIP_SCALE.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/data_path_out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
DIR="${DP_DIR:-/tmp/dp}"; RECS="${DP_RECS:-6}"; STEPS="${DP_STEPS:-4}"
mkdir -p "$DIR"
{
  echo "== $(date -u +%FT%TZ) $(hostname); tree ${TREE:-unknown}"
  nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv 2>/dev/null || true
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  lscpu | grep -E "Model name|^CPU\(s\)" ; df -h "$DIR" | tail -1; free -g | head -2
  if [ -z "${SKIP_TESTS:-}" ]; then
    echo "== $(date -u +%T) tests on CUDA"
    timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_data_path.py tests/test_recorder_async.py \
      > "$OUT/tests.txt" 2>&1; echo "   -> exit $?"; tail -3 "$OUT/tests.txt"
    for impl in ${FIXTURE_IMPLS-stochastic reference}; do  # every committed recording through the CUDA read path
      timeout 200 python3 -m replay_harness.cli run fixtures/ --impl "$impl" --device cuda --quiet > "$OUT/fixtures-$impl.txt" 2>&1
      echo "   replay run fixtures/ --impl $impl --device cuda -> exit $?"; tail -2 "$OUT/fixtures-$impl.txt"
    done
  fi
  if [ -z "${SKIP_RECORDER:-}" ]; then
    echo "== $(date -u +%T) bench_recorder R=64,256"
    timeout 200 python3 tools/bench_recorder.py --dir "$DIR" --batch 64,256 --steps 16 --out "$OUT/recorder.json" \
      > "$OUT/recorder.txt" 2>&1; echo "   -> exit $?"; cat "$OUT/recorder.txt"
    echo "== $(date -u +%T) bench_recorder R=8 every step, 96 steps"
    timeout 100 python3 tools/bench_recorder.py --dir "$DIR" --batch 8 --steps 96 --modes none,async-block \
      --out "$OUT/recorder8.json" > "$OUT/recorder8.txt" 2>&1; echo "   -> exit $?"; cat "$OUT/recorder8.txt"
  fi
  if [ -z "${SKIP_PROBE:-}" ]; then
    echo "== $(date -u +%T) probe_write_back 152, 607 MiB"
    timeout 150 python3 tools/probe_write_back.py --dir "$DIR" --mib 152,607 --files 4 --rounds 3 \
      --out "$OUT/probe.json"; echo "   -> exit $?"
  fi
  if [ -z "${SKIP_REPLAY:-}" ]; then
    C="$DIR/corpus"; rm -rf "$C" "$DIR/warm"; mkdir -p "$C"
    echo "== $(date -u +%T) synth: $RECS x $STEPS steps, R=256 k=4 V=248320"
    t0=$(date +%s)
    python3 -m replay_harness.cli synth fixtures/real-draft-model --out "$DIR/warm" --batch 256 --drafts 4 \
      --vocab 248320 --steps 1 --seed 999 > /dev/null &
    seq 0 $((RECS - 1)) | OMP_NUM_THREADS=3 xargs -P "$RECS" -I{} python3 -m replay_harness.cli synth fixtures/real-draft-model \
      --out "$C/rec-{}" --batch 256 --drafts 4 --vocab 248320 --steps "$STEPS" --seed {} > "$OUT/synth.txt" 2>&1
    wait
    echo "   -> $(du -sh "$C" | cut -f1) in $(( $(date +%s) - t0 )) s"
    python3 -m replay_harness.cli run "$DIR/warm" --impl stochastic --device cuda --quiet > /dev/null 2>&1
    echo "== $(date -u +%T) measure_replay_rss"
    timeout 240 python3 tools/measure_replay_rss.py --folder "$C" --reuse --device cuda --impl stochastic \
      --startup-on "$DIR/warm" --work "$DIR" --json-out "$OUT/replay.json" > /dev/null 2> "$OUT/replay.err"
    echo "   -> exit $?"; tail -4 "$OUT/replay.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d['replay'], indent=1)[:1500])" \
      "$OUT/replay.json" 2>/dev/null || true
  fi
  if [ -z "${SKIP_SCALE:-}" ] && [ -d "$DIR/corpus" ]; then
    for n in ${DP_READERS:-2 4}; do
      echo "== $(date -u +%T) $n readers: tools/run_gpu_scale.sh, run only"
      SCALE_CORPUS="$DIR/corpus" SCALE_COMMANDS=run SCALE_NPROC="$n" SKIP_RECORDER=1 SCALE_DIR="$DIR/scale" \
        OUT="$OUT/scale-$n" timeout 240 bash tools/run_gpu_scale.sh > "$OUT/scale-$n.txt" 2>&1
      echo "   -> exit $?"; grep -E "Disk read|replay run|^\| run" "$OUT/scale-$n/scale.md" 2>/dev/null
    done
  fi
  echo "== $(date -u +%T) done"
} 2>&1 | tee "$OUT/log.txt"
