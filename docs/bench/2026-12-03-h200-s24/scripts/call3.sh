#!/usr/bin/env bash
# Twenty-fourth session, call 3 (run inline on the warm machine after call 2): why the tests the bounds leave
# pending stay pending, on the tree of call 2 (two levels).
# run(command="export PYTHONPATH=$PWD; mkdir -p $OUT/call3; timeout 200 python3 docs/bench/2026-12-03-h200-s24/scripts/pending_why.py > $OUT/call3/pending_why.txt 2>&1", carry=["scratch"])
export PYTHONPATH=$PWD; mkdir -p $OUT/call3
timeout 200 python3 docs/bench/2026-12-03-h200-s24/scripts/pending_why.py > $OUT/call3/pending_why.txt 2>&1
