#!/usr/bin/env bash
# For the next session's first GPU call, at the thirty-first session's HEAD (carry .peers: make it first with
# `PYTHONPATH=... bash ../shared/peers/prepare.sh --prebuild`): the tree against `rheld` = the tree with
# rounds_held.patch (every check, not only the first, keeps a draw at the row's held-once top unread: the launched
# rounds at R = 256 and the verify's later checks; interpreter tests pass with it, mutation-checked by
# tests/test_one_launch.py's tie test; sm_90: the later check 112 registers as before, 2,240 -> 2,280 SASS;
# sample_check.py is then 452 lines: trim before landing); then the peers bench and the fixtures on CUDA at the tree.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s31/scripts/next_first_call.sh", carry=[".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/first; mkdir -p $G
rm -rf scratch/rheld && mkdir -p scratch/rheld && cp -r replay_kernels scratch/rheld/ \
  && patch -s -d scratch/rheld -p1 < docs/bench/2026-12-04-h200-s31/scripts/rounds_held.patch || exit 1
C="SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=256$,Qwen2.5-derived top-p 0.9 R=256$"
timeout 150 python3 tools/ab_kernels.py --steps 10 --variant tree=replay_kernels --variant rheld=scratch/rheld/replay_kernels \
  --cases "$C" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
python3 -c 'from typing_extensions import get_annotations' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl
PYTHONPATH=/tmp/site:$PWD timeout 150 python3 tools/bench_kernels.py --vocab 248320 --budget-s 95 --skip-correctness > $G/bench.txt 2>&1
echo "peers bench rc=$?"; grep -E "^\|" $G/bench.txt | head -40
SKIP_KERNEL_TESTS=1 SKIP_IMPL_TESTS=1 OUT=$G/checks timeout 250 bash tools/run_gpu_checks.sh > /dev/null 2>&1
echo "run_gpu_checks rc=$?"; grep -E "^==== exit|== done" $G/checks/log.txt
