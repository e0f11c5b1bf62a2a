#!/usr/bin/env bash
# Thirty-second session, call 1 (carry .peers, scratch): (a) the thirty-first session's prepared race, the tree
# against `rheld` (rounds_held.patch: every check keeps a draw at the held-once top unread); (b) verify k=4 at small
# R, where the peers bench saw 27.9 us (s27) become 32.2 (s29) against vLLM's 23.6: the tree against the
# twenty-seventh (31becf3) and twenty-eighth (897316a) sessions' kernels and against itself without PDL, by kernel;
# (c) the peers bench; (d) the committed fixtures on CUDA.
# bash docs/bench/2026-12-04-h200-s32/scripts/make_variants.sh  (here, before the call: scratch/v31becf3, v897316a)
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s32/scripts/call1.sh", carry=[".peers", "scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call1; mkdir -p $G
rm -rf scratch/rheld && mkdir -p scratch/rheld && cp -r replay_kernels scratch/rheld/ \
  && patch -s -d scratch/rheld -p1 < docs/bench/2026-12-04-h200-s31/scripts/rounds_held.patch || exit 1
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
ab rheld.txt 130 --steps 10 --variant tree=replay_kernels --variant rheld=scratch/rheld/replay_kernels \
  --cases "SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=256$,Qwen2.5-derived top-p 0.9 R=256$"
V="SYNTHETIC verify k=4 R=1$,SYNTHETIC verify k=4 R=8$,SYNTHETIC verify k=4 R=32$"
ab verify_small.txt 100 --steps 10 --kernels --variant tree=replay_kernels --variant s27=scratch/v31becf3/replay_kernels \
  --variant s28=scratch/v897316a/replay_kernels --variant nopdl=replay_kernels --set "nopdl:launches.PDL=False" --cases "$V"
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
python3 -c 'from typing_extensions import get_annotations' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl
PYTHONPATH=/tmp/site:$PWD timeout 150 python3 tools/bench_kernels.py --vocab 248320 --budget-s 95 --skip-correctness --out $G/bench > $G/bench_log.txt 2>&1
echo "== peers bench rc=$?"; grep -E "^\| [0-9]" $G/bench/bench.md | head -14
SKIP_KERNEL_TESTS=1 SKIP_IMPL_TESTS=1 OUT=$G/checks timeout 150 bash tools/run_gpu_checks.sh > /dev/null 2>&1
echo "== run_gpu_checks rc=$?"; grep -E "^==== exit|== done" $G/checks/log.txt
