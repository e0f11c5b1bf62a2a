#!/usr/bin/env bash
# Twenty-second session, call 2: where the one launch's time goes. scratch/s22timed = the tree's replay_kernels with
# globaltimer stores at each phase of one_launch._one_launch_kernel (a diagnostic copy, not committed; script
# scripts/timed.py, a copy of scratch/s22timed/timed.py, prints per-phase times over the programs of one R = 1 row;
# scratch/s22timed/replay_kernels = replay_kernels with scripts/timed.patch applied).
# run(command="timeout 300 bash docs/bench/2026-12-02-h200-s22/scripts/call2.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 scratch/s22timed/timed.py 2>&1 | grep -v -i warn
