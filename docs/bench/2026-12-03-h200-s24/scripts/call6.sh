#!/usr/bin/env bash
# Twenty-fourth session, call 6: the three commands of tools/run_gpu_checks.sh that call 5's 200 s limit cut, on the
# committed tree (expected exit codes 0, 1, 0).
# run(command="timeout 400 bash docs/bench/2026-12-03-h200-s24/scripts/call6.sh", carry=["scratch"])
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call6; mkdir -p $G
{
  python3 -m replay_harness.cli verify fixtures/real-draft-logits fixtures/real-draft-model --impl stochastic --device cuda
  echo "==== exit $? (expected 0)"
  python3 -m replay_harness.cli verify fixtures/real-founding --impl greedy-only --device cuda
  echo "==== exit $? (expected 1)"
  python3 -m replay_harness.cli bench fixtures/real-draft-model fixtures/real-draft-logits --impl greedy-only --vs stochastic --repeats 30
  echo "==== exit $? (expected 0)"
} > $G/log.txt 2>&1
grep "^==== exit" $G/log.txt
