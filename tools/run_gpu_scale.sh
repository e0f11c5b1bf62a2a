#!/usr/bin/env bash
# Scaling on one host with 2 H200 GPUs (repo root; docs/SCALE.md, "Targets"):
#   run(command="bash tools/run_gpu_scale.sh", kind="nvidia-h200-x2", timeout_s=600)
# 1. derives a corpus of production-shape recordings with `replay synth` from fixtures/real-draft-model
#    (R = 256, k = 4, V = 248,320, bf16 as the source; SCALE_RECS recordings of SCALE_STEPS steps, each with its
#    own --seed, SYNTH_JOBS in parallel: ~636 MB a step; a corpus an earlier call left in SCALE_DIR with the
#    same shape is kept, so one measurement may span two calls), and measures the disk's cold read bandwidth on it with 1 and N readers;
# 2. times the fixed start-up: `replay run` on a one-step fixture with 1 process and under torchrun with N;
# 3. runs `replay run`, `replay verify` and `replay bench` (impl stochastic) on 1 GPU (no launcher) and on
#    SCALE_NPROC GPUs (`torchrun --standalone --nproc-per-node N -m replay_harness.cli ...`), each after
#    dropping the corpus from the page cache, timing its wall time and peak RSS (largest process);
# 4. checks the N-GPU JSON equals the 1-GPU JSON (run, verify: the whole document; bench: the steps
#    measured, coverage and verdict; timings differ by nature);
# 5. runs tools/bench_recorder.py when it exists (the async Recorder's cost);
# 6. writes $OUT/scale.md (a markdown table: wall time, speedup, and the speedup of the work = wall time minus
#    the start-up of the same number of processes) and $OUT/scale.json; every command's output under $OUT/.
# Environment (defaults in brackets): SCALE_DEVICE [cuda], SCALE_NPROC [2], SCALE_R [256], SCALE_K [4],
# SCALE_V [248320], SCALE_STEPS [4], SCALE_RECS [8], SCALE_IMPL [stochastic], VERIFY_STEPS [0],
# VERIFY_TRIALS [20], BENCH_REPEATS [5], CMD_TIMEOUT [170 s per command], SCALE_DIR [/tmp/scale],
# SCALE_CORPUS (an existing folder of recordings to use instead: no synth, not deleted), SCALE_COMMANDS
# [run verify bench], SCALE_GPUS [1 $SCALE_NPROC: the process counts measured], SYNTH_JOBS [8], SKIP_DISK_READ, SKIP_RECORDER, PROFILE (cProfile of the 1-process run and verify first), OMP_NUM_THREADS [8 on cuda].
# CPU check of the script's logic (gloo, tiny sizes, a few minutes):
#   SCALE_DEVICE=cpu SCALE_R=2 SCALE_K=2 SCALE_V=4096 SCALE_STEPS=2 SCALE_IMPL=reference VERIFY_TRIALS=8 \
#   BENCH_REPEATS=1 SKIP_RECORDER=1 OUT=/tmp/scale_out bash tools/run_gpu_scale.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/scale_out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 REPLAY_DIST_TIMEOUT="${REPLAY_DIST_TIMEOUT:-600}" \
  REPLAY_DIST_TIMING=1  # each rank: where its time went (stderr, $OUT/NAME.err)
DEV="${SCALE_DEVICE:-cuda}"; NPROC="${SCALE_NPROC:-2}"; IMPL="${SCALE_IMPL:-stochastic}"
R="${SCALE_R:-256}"; K="${SCALE_K:-4}"; V="${SCALE_V:-248320}"; STEPS="${SCALE_STEPS:-4}"; RECS="${SCALE_RECS:-8}"
VSTEPS="${VERIFY_STEPS:-0}"; TRIALS="${VERIFY_TRIALS:-20}"; REPEATS="${BENCH_REPEATS:-5}"
LIMIT="${CMD_TIMEOUT:-170}"; DIR="${SCALE_DIR:-/tmp/scale}"; C="${SCALE_CORPUS:-$DIR/corpus}"
COMMANDS="${SCALE_COMMANDS:-run verify bench}"; GPUS="${SCALE_GPUS:-1 $NPROC}"
# The same CPU threads per process for 1 and N processes (torchrun would set 1 per rank, a single process
# would take every core: an unfair comparison of the CPU-side work).
if [ "$DEV" = cpu ]; then export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"; else export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}"; fi
MEASURE="python3 tools/measure_replay_rss.py"
RESULTS="$OUT/results.tsv"; : > "$RESULTS"

# measured NAME GPUS CMD...: drop the corpus from the page cache, run CMD (stdout to $OUT/NAME.json,
# stderr to $OUT/NAME.err), append "NAME GPUS rc wall_s max_rss_mib" to $RESULTS
measured() {
  local name=$1 gpus=$2; shift 2
  $MEASURE drop-cache "$C"
  echo "== $(date -u +%T) $name: $*"
  timeout --kill-after 10 "$LIMIT" $MEASURE exec -- "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
  local rc=$? line
  line=$(grep '^{"rc"' "$OUT/$name.err" | tail -1)
  [ -n "$line" ] || line="{\"rc\": $rc, \"wall_s\": null, \"max_rss_mib\": null}"
  printf '%s\t%s\t%s\n' "$name" "$gpus" "$line" >> "$RESULTS"
  echo "   -> $line"; grep -v '^{"rc"\|timing:' "$OUT/$name.err" | tail -3; grep 'timing:' "$OUT/$name.err"
}
replay1() { python3 -m replay_harness.cli "$@"; }
{
  echo "== $(date -u +%FT%TZ) $(hostname) repo $PWD; device $DEV, $NPROC processes; R=$R k=$K V=$V, $RECS x $STEPS steps"
  nvidia-smi --query-gpu=index,name,memory.used,utilization.gpu --format=csv 2>/dev/null || true
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  df -h "$(dirname "$DIR")" | tail -1; free -g | head -2
  if [ -z "${SCALE_CORPUS:-}" ]; then
    tag="R=$R K=$K V=$V RECS=$RECS STEPS=$STEPS"  # a corpus left by an earlier call with the same shape is kept
    if [ "$(cat "$DIR/corpus.made" 2>/dev/null)" = "$tag" ]; then
      echo "== corpus (kept from an earlier call): $(du -sh "$C" | cut -f1)"
    else
      rm -rf "$DIR"; mkdir -p "$C"
      t0=$(date +%s)
      # every recording its own --seed (distinct bytes: no file is read twice), SYNTH_JOBS at a time
      seq 0 $((RECS - 1)) | xargs -P "${SYNTH_JOBS:-8}" -I{} python3 -m replay_harness.cli synth \
        fixtures/real-draft-model --out "$C/rec-{}" --batch "$R" --drafts "$K" --vocab "$V" --steps "$STEPS" \
        --seed {} --overwrite > "$OUT/synth.txt" || { echo "FATAL: replay synth failed"; exit 3; }
      echo "$tag" > "$DIR/corpus.made"
      echo "== corpus: $(du -sh "$C" | cut -f1) in $(( $(date +%s) - t0 )) s (${SYNTH_JOBS:-8} synth jobs)"
    fi
  else
    echo "== corpus (given): $C, $(du -sh "$C" | cut -f1)"; mkdir -p "$DIR"
  fi
  for n in 1 "$NPROC"; do  # what N ranks replaying from this disk can read at most
    [ -n "${SKIP_DISK_READ:-}" ] || $MEASURE disk-read "$n" "$C" | tee "$OUT/disk-read-$n.json"
  done
  TR=(python3 -m torch.distributed.run --standalone --nproc-per-node "$NPROC" -m replay_harness.cli)
  ONE=(python3 -m replay_harness.cli)
  RUN=(run "$C" --impl "$IMPL" --device "$DEV" --json)  # not --quiet: the read report (GB, s) on stderr
  VERIFY=(verify "$C" --impl "$IMPL" --device "$DEV" --steps "$VSTEPS" --trials "$TRIALS" --json --quiet)
  BENCH=(bench "$C" --impl "$IMPL" --device "$DEV" --repeats "$REPEATS" --warmup 1 --json)
  if [ -n "${PROFILE:-}" ]; then  # where a single-process run and verify spend their time (cProfile, top 40)
    for what in RUN VERIFY; do
      declare -n cmd=$what
      python3 -m cProfile -o "$OUT/$what.prof" -m replay_harness.cli "${cmd[@]}" > /dev/null 2>&1
      python3 -c "import pstats,sys; pstats.Stats(sys.argv[1]).sort_stats('cumtime').print_stats(40)" \
        "$OUT/$what.prof" > "$OUT/profile-$what.txt" 2>&1; rm -f "$OUT/$what.prof"
    done
  fi
  TINY=(run fixtures/synthetic-founding --impl "$IMPL" --device "$DEV" --json --quiet)
  "${ONE[@]}" "${TINY[@]}" > /dev/null 2>&1  # untimed: fills Triton's kernel cache, which every run then loads
  on() {  # on NAME N ARGS...: `measured NAME-N` of the CLI with ARGS, one process (N = 1) or under torchrun
    local name=$1 n=$2; shift 2
    if [ "$n" = 1 ]; then measured "$name-1" 1 "${ONE[@]}" "$@"; else measured "$name-$n" "$n" "${TR[@]}" "$@"; fi
  }
  for n in $GPUS; do on startup "$n" "${TINY[@]}"; done  # start-up alone: interpreter, torch, CUDA, kernels, (NCCL)
  for what in $COMMANDS; do
    declare -n cmd="${what^^}"
    for n in $GPUS; do on "$what" "$n" "${cmd[@]}"; done
  done
  if [ -f tools/bench_recorder.py ] && [ -z "${SKIP_RECORDER:-}" ]; then
    echo "== $(date -u +%T) tools/bench_recorder.py"
    timeout 200 python3 tools/bench_recorder.py --dir "$DIR" --out "$OUT/recorder.json" > "$OUT/recorder.txt" 2>&1
    echo "   -> exit $?"; tail -15 "$OUT/recorder.txt"
  fi
  python3 - "$OUT" "$NPROC" "$DEV" "$R" "$K" "$V" "$RECS" "$STEPS" "$(du -sb "$C" | cut -f1)" <<'EOF'
import json, sys
from pathlib import Path
out, nproc, dev, R, K, V, recs, steps, nbytes = sys.argv[1:]
out = Path(out)
rows = {}
for line in (out / "results.tsv").read_text().splitlines():
    name, gpus, doc = line.split("\t")
    rows[name] = {"gpus": int(gpus), **json.loads(doc)}

def load(name):
    try:
        return json.loads((out / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None

def bench_view(doc):
    """What must not depend on the number of GPUs in a bench: the steps measured, coverage, verdict."""
    steps = sorted({(m["recording"], m["step"], m["group"], m["side"]) for m in doc["measurements"]})
    return {"steps": steps, "coverage": doc["coverage"], "verdict": doc["verdict"], "exit_code": doc["exit_code"]}

summary = {"device": dev, "processes": int(nproc), "shape": {"R": int(R), "k": int(K), "V": int(V)},
           "corpus": {"recordings": int(recs), "steps_each": int(steps), "bytes": int(nbytes)}, "commands": {}}
lines = [f"| command | processes | wall s | speedup | work s (wall - start-up) | work speedup | peak RSS MiB (largest "
         "process) | exit | same JSON as 1 GPU |", "|---|---|---|---|---|---|---|---|---|"]
startup = {1: (rows.get("startup-1") or {}).get("wall_s"), int(nproc): (rows.get(f"startup-{nproc}") or {}).get("wall_s")}
summary["startup_s"] = {str(k): v for k, v in startup.items()}
for n in (1, int(nproc)):
    try:
        summary[f"disk_read_{n}"] = json.loads((out / f"disk-read-{n}.json").read_text())
    except (OSError, ValueError):
        pass


def work_s(r):
    """Wall time minus the start-up of a run with the same number of processes."""
    s0 = startup.get(r["gpus"]) if r else None
    return round(r["wall_s"] - s0, 2) if r and r.get("wall_s") and s0 else None
for cmd in ("run", "verify", "bench"):
    one, many = rows.get(f"{cmd}-1"), rows.get(f"{cmd}-{nproc}")
    d1, dn = load(f"{cmd}-1"), load(f"{cmd}-{nproc}")
    if d1 is None or dn is None:
        same = "no JSON"
    elif cmd == "bench":
        same = "yes (steps, coverage, verdict)" if bench_view(d1) == bench_view(dn) else "NO"
    else:
        same = "yes" if d1 == dn else "NO"
    speedup = None
    if one and many and one.get("wall_s") and many.get("wall_s"):
        speedup = round(one["wall_s"] / many["wall_s"], 2)
    w1, wn = work_s(one), work_s(many)
    work_speedup = round(w1 / wn, 2) if w1 and wn and wn > 0 else None
    summary["commands"][cmd] = {"one": one, "many": many, "speedup": speedup, "work_s": [w1, wn],
                                "work_speedup": work_speedup, "same_json": same}
    if cmd == "bench" and d1 and dn:
        def med(doc):
            return sorted(m["median_us"] for m in doc["measurements"] if m.get("median_us") is not None)
        summary["commands"][cmd]["median_us_per_step"] = {"one": med(d1), "many": med(dn)}
    for r in (one, many):
        if r:
            lines.append(f"| {cmd} | {r['gpus']} | {r.get('wall_s')} | {speedup if r is many else ''} | "
                         f"{work_s(r)} | {work_speedup if r is many else ''} | "
                         f"{r.get('max_rss_mib')} | {r.get('rc')} | {same if r is many else ''} |")
gb = int(nbytes) / 1e9
run1 = rows.get("run-1", {}).get("wall_s")
runn = rows.get(f"run-{nproc}", {}).get("wall_s")
if run1 and runn:
    summary["run_gb_per_s"] = {"one": round(gb / run1, 3), "many": round(gb / runn, 3),
                               "many_per_gpu": round(gb / runn / int(nproc), 3)}
# docs/SCALE.md "Targets": disk-bound `run` against the disk read with as many readers as ranks, start-up excluded
ratios = {}
for n, r in ((1, rows.get("run-1")), (int(nproc), rows.get(f"run-{nproc}"))):
    disk = summary.get(f"disk_read_{n}")
    if r and disk and work_s(r):
        ratios[str(n)] = round(gb / work_s(r) / disk["gb_per_s"], 3)
summary["run_over_disk_read"] = ratios
rec = out / "recorder.json"
if rec.exists():
    try:
        summary["recorder"] = json.loads(rec.read_text())
    except ValueError:
        summary["recorder"] = "unreadable"
md = [f"# replay scale: {dev}, 1 vs {nproc} processes", "",
      f"Corpus: {recs} recordings x {steps} steps, R = {R}, k = {K}, V = {V} ({gb:.2f} GB, derived by `replay synth` "
      "from fixtures/real-draft-model). Wall times include start-up; each command started with the corpus "
      "dropped from the page cache. Bench timings are per-GPU timings (each step timed on one GPU).", "", *lines]
md += ["", f"Start-up alone (`replay run` on a one-step fixture): {startup[1]} s with 1 process, "
           f"{startup[int(nproc)]} s under torchrun with {nproc}."]
for n in (1, int(nproc)):
    if f"disk_read_{n}" in summary:
        d = summary[f"disk_read_{n}"]
        md += [f"Disk read, cold, {n} reader(s): {d['gb_per_s']} GB/s ({d['bytes'] / 1e9:.2f} GB in {d['seconds']} s)."]
if "run_gb_per_s" in summary:
    g = summary["run_gb_per_s"]
    md += ["", f"`replay run` read the corpus at {g['one']} GB/s on 1 GPU, {g['many']} GB/s on {nproc} "
               f"({g['many_per_gpu']} GB/s per GPU), wall time incl. start-up."]
for n, ratio in ratios.items():
    md += [f"`replay run` with {n} process(es), start-up excluded / cold read with {n} reader(s): {ratio} "
           "(target >= 0.85, docs/SCALE.md)"]
(out / "scale.md").write_text("\n".join(md) + "\n")
(out / "scale.json").write_text(json.dumps(summary, indent=2) + "\n")
print("\n".join(md))
EOF
} 2>&1 | tee "$OUT/log.txt"
