#!/usr/bin/env bash
# Eighteenth session, call 7: top-k rows without top-p by sample-and-check (plain.CHECK_TOP_K = True, the default)
# or by their gathered bound and one draw (`g`: CHECK_TOP_K = False).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c7; mkdir -p $G
timeout 150 python3 tools/ab_kernels.py --kernels --steps 5 --cases "SYNTHETIC top-k 50 R" \
  --variant check=replay_kernels --variant g=replay_kernels --set "g:plain.CHECK_TOP_K=False" 2>&1 \
  | grep -v -i warn > $G/ab_topk_alone.txt
echo "ab rc=$?"; grep "^|" $G/ab_topk_alone.txt
tar czf $OUT/c7.tgz -C $G .
