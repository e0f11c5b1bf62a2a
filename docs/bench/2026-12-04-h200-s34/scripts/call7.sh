#!/usr/bin/env bash
# Thirty-fourth session, call 7: `replay verify --impl flashinfer` after the adapter's fix (call 6: a batch whose
# requests all drafted one placeholder was taken as one plain draw of 2R rows: internal error, exit 3).
# run(command="timeout 290 bash docs/bench/2026-12-04-h200-s34/scripts/call7.sh", carry=[".peers"])
set -u
G=$OUT/call7; mkdir -p $G
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
python3 -c 'from typing_extensions import get_annotations' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
timeout 150 python3 -m replay_harness.cli verify --impl flashinfer --device cuda > $G/verify_fi.txt 2>&1
echo "== replay verify --impl flashinfer rc=$?"; tail -25 $G/verify_fi.txt
