#!/usr/bin/env bash
# SCRATCH (eleventh session): the committed check pass against HEAD, and register caps of the check launches.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 300 python3 tools/ab_kernels.py --kernels --cases top-p --variant base=scratch/base/replay_kernels \
  --variant tree=replay_kernels --variant cap64=replay_kernels --variant cap56=replay_kernels \
  --set 'cap64:sample_check.CHECK_MAXNREG=64' --set 'cap56:sample_check.CHECK_MAXNREG=56' 2>&1 | grep -v -i warn | tee $OUT/ab3.txt
