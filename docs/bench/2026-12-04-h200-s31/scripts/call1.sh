#!/usr/bin/env bash
# (The variants come from make_variants.sh; run it first.)
# Thirty-first session, call 1 (carry scratch): the GPU tests left from the thirtieth session (launch_pdl reaches the
# compiled kernel; the held-once and draw-tail tests on CUDA); the open-row launch's phases from %globaltimer stamps
# (scratch/trace: make_variants.sh); then an A/B over 10 steps: the tree
# against `hoist` (the draw tail's row parameters loaded with the partials) and `noreread` (held_once never re-reads
# the span: what the re-read costs the draw, the check then reading those rows), by kernel with PDL off (first step), then end to end over 10 steps.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s31/scripts/call1.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call1; mkdir -p $G
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $G/gpu.txt 2>&1
timeout 60 python3 -m pytest -q -m gpu tests/test_launches.py -p no:cacheprovider > $G/gpu_test_launches.txt 2>&1
echo "gpu test_launches rc=$? $(tail -1 $G/gpu_test_launches.txt)"
timeout 90 python3 -m pytest -q tests/test_sample_check.py -k "draw_tail or held_once" -p no:cacheprovider > $G/gpu_test_tail.txt 2>&1
echo "tail tests on cuda rc=$? $(tail -1 $G/gpu_test_tail.txt)"
timeout 120 python3 docs/bench/2026-12-04-h200-s31/scripts/trace_open_rows.py --R 64 --steps 6 --reps 3 > $G/trace_r64.txt 2>&1
echo "trace r64 rc=$?"; tail -30 $G/trace_r64.txt
timeout 60 python3 docs/bench/2026-12-04-h200-s31/scripts/trace_open_rows.py --R 16 --steps 4 --reps 3 > $G/trace_r16.txt 2>&1
echo "trace r16 rc=$?"; tail -16 $G/trace_r16.txt
C="SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=64$"
V3="--variant tree=replay_kernels --variant hoist=scratch/hoist/replay_kernels --variant noreread=scratch/noreread/replay_kernels"
timeout 100 python3 tools/ab_kernels.py --steps 1 --rounds 1 --kernels $V3 --set tree:launches.PDL=False \
  --set hoist:launches.PDL=False --set noreread:launches.PDL=False --cases "$C" 2>&1 | grep -v -i warn > $G/ab_kernels_nopdl.txt
echo "ab kernels rc=$?"; grep -E "DIFFER|Error|^\* " $G/ab_kernels_nopdl.txt | cut -c1-400
timeout 240 python3 tools/ab_kernels.py --steps 10 $V3 --cases "$C" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt
