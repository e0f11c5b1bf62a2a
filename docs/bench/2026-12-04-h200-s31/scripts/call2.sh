#!/usr/bin/env bash
# (The variants come from make_variants.sh; run it first.)
# Thirty-first session, call 2 (carry scratch): the open-row launch's phases (scratch/trace, fixed: the residency
# compile now sees the trace argument); the tree against `check4` (the check phase of settle_row, in the open-row
# launch and the one launch, loading four 1,024-lane tiles at once instead of two; same sums, same order); ncu of
# the draw at R = 64 with and without the first draw's TOP (what the 3 µs between them are).
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s31/scripts/call2.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
timeout 120 python3 docs/bench/2026-12-04-h200-s31/scripts/trace_open_rows.py --R 64 --steps 6 --reps 3 > $G/trace_r64.txt 2>&1
echo "trace r64 rc=$?"; tail -24 $G/trace_r64.txt; grep -A3 "^step 0" $G/trace_r64.txt | cut -c1-300
timeout 60 python3 docs/bench/2026-12-04-h200-s31/scripts/trace_open_rows.py --R 16 --steps 4 --reps 3 > $G/trace_r16.txt 2>&1
echo "trace r16 rc=$?"; tail -16 $G/trace_r16.txt
C="SYNTHETIC top-p 0.9 R=2$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$"
V2="--variant tree=replay_kernels --variant check4=scratch/check4/replay_kernels"
timeout 200 python3 tools/ab_kernels.py --steps 10 $V2 --cases "$C" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt
timeout 60 python3 tools/ab_kernels.py --steps 1 --rounds 1 --kernels $V2 --set tree:launches.PDL=False \
  --set check4:launches.PDL=False --cases "SYNTHETIC top-p 0.9 R=64$" 2>&1 | grep -v -i warn > $G/ab_kernels_nopdl.txt
echo "ab kernels rc=$?"; grep -E "DIFFER|Error|^\* " $G/ab_kernels_nopdl.txt | cut -c1-400
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,smsp__inst_executed.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active,smsp__issue_active.avg.per_cycle_active,dram__bytes_read.sum,lts__t_bytes.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard,smsp__average_warp_latency_issue_stalled_barrier,launch__registers_per_thread
for tp in 1.0 0.9; do
  timeout 90 "$NCU" --metrics $M --kernel-name regex:_draw_kernel --launch-skip 2 --launch-count 1 \
    python3 tools/ncu_target.py --impl gumbel-max --R 64 --k 0 --top-p $tp > $G/ncu_draw_r64_p$tp.txt 2>&1
  echo "ncu draw top-p $tp rc=$?"; grep -E "^\s+(gpu__|smsp__|sm__|dram__|lts__|launch__)" $G/ncu_draw_r64_p$tp.txt
done
