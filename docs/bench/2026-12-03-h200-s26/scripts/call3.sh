#!/usr/bin/env bash
# Twenty-sixth session, call 3: the first check keeps more residual draws unread. base = scratch/s26base (git
# archive 893b62a replay_kernels); held = scratch/held (a RESIDUAL row's drawn token held once at the top kept
# unread when its rejected draft is below that top, tested by the check; the draw recounts the top's lanes only
# when the drawn token lies in the top's span); tree = held + the rejection's bounds (`kept_above`: the draft kept,
# or a level's mass below p S) keeping tokens above them unread. Tokens compared; then the GPU tests.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s26/scripts/call3.sh", carry=["scratch/held", "scratch/s26base"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
timeout 300 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$" \
  --variant base=scratch/s26base/replay_kernels --variant held=scratch/held/replay_kernels \
  --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab.txt | head -20; grep "^\*" $G/ab.txt | grep "top-p" | head -20
timeout 260 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_one_launch.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
