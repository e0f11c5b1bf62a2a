#!/usr/bin/env bash
# The thirty-first session's kernel copies under scratch/ (the calls carry scratch): base = git archive 878e9fb;
# each variant = base + its patch here (noreread, check4: calls 1-2; single, pairs: call 3; acquire, merge: call 5);
# hoist = base + the thirtieth session's hoist_tail_loads.patch; trace = base stamped by make_trace.py.
#   bash docs/bench/2026-12-04-h200-s31/scripts/make_variants.sh
set -euo pipefail
D=docs/bench/2026-12-04-h200-s31/scripts
fresh() { rm -rf "scratch/$1" && mkdir -p "scratch/$1" && git archive 878e9fb replay_kernels | tar x -C "scratch/$1"; }
fresh base
for v in noreread check4 single pairs acquire merge; do fresh $v; patch -s -d scratch/$v -p1 < $D/$v.patch; done
fresh hoist; patch -s -d scratch/hoist -p1 < docs/bench/2026-12-03-h200-s30/scripts/hoist_tail_loads.patch
fresh trace; python3 $D/make_trace.py
