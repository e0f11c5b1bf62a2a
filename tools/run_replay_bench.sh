#!/usr/bin/env bash
# The `replay bench` done-when runs on one GPU (H200), in under 8 minutes, from the repo root:
#   run(command="bash tools/run_replay_bench.sh", timeout_s=600)
# Needs only torch, triton, typer, rich, safetensors, numpy (no matplotlib, no network).
# Writes (at most 8 files, as the device tool fetches them):
#   $OUT/log.txt          everything printed; each command is printed before its output, with its exit code
#   $OUT/all.csv          every measurement of every run (the long layout of replay_harness/bench/csvlog.py,
#                         one header, a leading `run` column)
#   $OUT/runs.tar.gz      per run: NAME.json (the full `--json` document) and NAME.csv
# Afterwards, here: tar xzf runs.tar.gz && replay bench --plot-from runs/NAME.csv --png NAME.png
# STOP_ON_FAIL=1: stop at the first unexpected exit code. REPLAY_DEBUG=1: tracebacks for internal errors.
# Derived recordings (several GB) go to $SYNTH_DIR (default /tmp/replay-synth), not to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/replay_bench_out}"
RUNS="$OUT/runs"
SYN="${SYNTH_DIR:-/tmp/replay-synth}"
mkdir -p "$RUNS" "$SYN"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
T0=$(date +%s)
FAILS=0

replay() { python3 -m replay_harness.cli "$@"; }
stamp() { echo "[$(( $(date +%s) - T0 ))s]"; }

# bench NAME EXPECTED_EXIT ARGS...: one `replay bench` run, its JSON and CSV kept under runs/
bench() {
  local name=$1 want=$2; shift 2
  echo
  echo "==== $(stamp) $name: replay bench $*"
  replay bench "$@" --json-file "$RUNS/$name.json" --csv "$RUNS/$name.csv"
  local rc=$?
  if [ "$rc" = "$want" ]; then echo "==== $name: exit $rc (expected $want) OK"
  else echo "==== $name: exit $rc (expected $want) UNEXPECTED"; FAILS=$((FAILS + 1))
       if [ -n "${STOP_ON_FAIL:-}" ]; then echo "== STOP_ON_FAIL set: stopping"; exit 1; fi; fi
}

# synth V R K: a derived recording from the real founding-case fixture
synth() {
  local v=$1 r=$2 k=$3
  echo "==== $(stamp) replay synth fixtures/real-founding --out $SYN/v$v-r$r-k$k --batch $r --drafts $k --vocab $v --steps 2 --overwrite"
  replay synth fixtures/real-founding --out "$SYN/v$v-r$r-k$k" --batch "$r" --drafts "$k" --vocab "$v" --steps 2 \
    --overwrite || FAILS=$((FAILS + 1))
}

{
  echo "== $(date -u +%FT%TZ) $(hostname) repo $(pwd)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,memory.used --format=csv 2>&1 || true
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "gpu", torch.cuda.get_device_name(0))'

  # 1. The founding case (real recording, V = 49,152, temperature 1.0 under n-gram drafts): the engine bug
  #    (every drafted request verified greedily, on the same Triton kernels) vs the stochastic port.
  bench founding-greedy-only-vs-stochastic 0 fixtures/real-founding --impl greedy-only --vs stochastic --repeats 50
  bench founding-split-routes 0 fixtures/real-founding --impl greedy-only --vs stochastic --repeats 50 --split-routes
  # 2. The cheap check: the same steps without drafts at temperature 0 vs 1.0 (difference = random-sample cost).
  bench founding-cheap-check 0 fixtures/real-founding --impl stochastic --drop-drafts --temperature 0 --vs-temperature 1.0 --repeats 50
  # 3. Must exit 4: every request of real-greedy is temperature 0, so no stochastic path runs in either impl.
  bench must-exit-4-all-greedy 4 fixtures/real-greedy --impl greedy-only --vs stochastic --repeats 10

  # 4. Production shapes derived from the real rows.
  for r in 1 64 256; do for k in 0 4; do synth 248320 $r $k; done; done
  for r in 1 256; do for k in 0 4; do synth 262144 $r $k; done; done

  # 5. The slow engine kernel vs the parallel one (plain samples; --drop-drafts turns k = 4 steps into plain ones).
  for r in 1 64 256; do
    bench v248320-r$r-serial-vs-gumbel 0 "$SYN/v248320-r$r-k0" --impl serial-scan --vs gumbel-max --drop-drafts --repeats 5 --warmup 1
  done
  bench v262144-r1-serial-vs-gumbel 0 "$SYN/v262144-r1-k0" --impl serial-scan --vs gumbel-max --drop-drafts --repeats 5 --warmup 1
  # 6. The stochastic path's cost at production shapes: the engine bug vs the port, k = 4.
  for r in 1 64 256; do
    bench v248320-r$r-k4-greedy-only-vs-stochastic 0 "$SYN/v248320-r$r-k4" --impl greedy-only --vs stochastic --repeats 20
  done
  bench v262144-r256-k4-greedy-only-vs-stochastic 0 "$SYN/v262144-r256-k4" --impl greedy-only --vs stochastic --repeats 20
  # 7. The cheap check at a production shape, and gumbel-max vs stochastic on plain samples.
  bench v248320-r64-cheap-check 0 "$SYN/v248320-r64-k4" --impl stochastic --drop-drafts --temperature 0 --vs-temperature 1.0 --repeats 20
  bench v248320-r256-k0-gumbel-vs-stochastic 0 "$SYN/v248320-r256-k0" --impl gumbel-max --vs stochastic --repeats 20
  # 8. L2 policy: the same A/B with warm L2 (one input copy reused).
  bench founding-warm-l2 0 fixtures/real-founding --impl greedy-only --vs stochastic --repeats 50 --warm-l2

  echo
  echo "== $(stamp) done: $FAILS unexpected exit code(s)"
} 2>&1 | tee "$OUT/log.txt"

python3 - "$RUNS" "$OUT/all.csv" <<'PY'
import csv, glob, sys
rows, cols = [], None
for f in sorted(glob.glob(sys.argv[1] + "/*.csv")):
    with open(f, newline="") as fh:
        r = csv.DictReader(fh)
        cols = cols or (["run"] + r.fieldnames)
        rows += [{"run": f.rsplit("/", 1)[1][:-4], **row} for row in r]
with open(sys.argv[2], "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=cols or ["run"])
    w.writeheader()
    w.writerows(rows)
print(f"{len(rows)} measurements -> {sys.argv[2]}")
PY
tar czf "$OUT/runs.tar.gz" -C "$OUT" runs && rm -rf "$RUNS"
