#!/usr/bin/env bash
# Sixteenth session, third device call: margins 0-2 of the vouched-for runner-up against 3ad3946 with 512-lane
# check tiles (base512: the reference), then ncu of the first draw and the first check of the bench's top-p 0.9
# R = 64 step, base512 against the tree (why the two-candidate first check costs more than one candidate).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT; G=/tmp/g; mkdir -p $G/ncu
timeout 200 python3 tools/ab_kernels.py --kernels --steps 8 \
  --cases "SYNTHETIC top-p 0.9 R=1,top-p 0.9 R=8,SYNTHETIC top-p 0.9 R=64,top-p 0.9 R=256,Qwen2.5-derived top-p,verify k=4 top-p" \
  --variant base512=scratch/base/replay_kernels --set "base512:sample_check.CHECK_BLOCK=512" \
  --variant m2=replay_kernels \
  --variant m1=replay_kernels --set "m1:draw.RUNNER_UP_MARGIN=tl.constexpr(1.0)" \
  --variant m0=replay_kernels --set "m0:draw.RUNNER_UP_MARGIN=tl.constexpr(0.0)" \
  2>&1 | grep -v -i warn > $G/ab_margins.txt
echo "ab rc=$?"; grep "^|" $G/ab_margins.txt
tar czf $R/call3.tgz -C $G .
S=docs/bench/2026-12-02-h200-s16/scripts/check_step.py
M="--metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warp_latency_per_inst_issued.ratio,sm__warps_active.avg.pct_of_peak_sustained_active"
for v in base tree; do
  P=$PWD; [ $v = base ] && P=$PWD/scratch/base:$PWD
  PYTHONPATH=$P timeout 60 ncu --kernel-name regex:_check_kernel --launch-count 1 $M python3 $S 64 \
    > $G/ncu/check_$v.txt 2>&1; echo "ncu check $v rc=$?"
  PYTHONPATH=$P timeout 60 ncu --kernel-name regex:_draw_kernel --launch-count 1 $M python3 $S 64 \
    > $G/ncu/draw_$v.txt 2>&1; echo "ncu draw $v rc=$?"
done
grep -H -E "rounds|gpu__time|sm__throughput|dram__|inst_executed|short_scoreboard|latency_per|warps_active|Grid Size" $G/ncu/*.txt
tar czf $R/call3.tgz -C $G .
