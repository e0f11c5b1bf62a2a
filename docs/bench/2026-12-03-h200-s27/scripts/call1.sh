#!/usr/bin/env bash
# Twenty-seventh session, call 1: the verify fallback's filter passes in one cooperative launch
# (replay_kernels/filter_loop.py; tree) against the launch sequence (base: scratch/s27base = git archive b18a8e0
# replay_kernels). GPU tests of the loop first (a hang would show there, under its timeout), the loop's registers
# and slots, the A/B (tokens compared), the GPU kernel tests, then the peers bench at the tree.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s27/scripts/call1.sh", carry=["scratch/s27base", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call1; mkdir -p $G
timeout 120 python3 -m pytest -q -m gpu tests/test_filter_loop.py -p no:cacheprovider > $G/gpu_filter_loop.txt 2>&1
echo "filter_loop gpu rc=$?"; tail -3 $G/gpu_filter_loop.txt
timeout 60 python3 - > $G/slots.txt 2>&1 <<'PY'
import torch
import replay_kernels.filter_loop as fl
from replay_kernels.filter_loop import FilterLoop, launcher
from replay_kernels.filters import FilterScratch
resident = fl.resident_programs
def spy(compiled, device):
    n = resident(compiled, device)
    print("regs", compiled.n_regs, "spills", compiled.n_spills, "resident programs", n)
    return n
fl.resident_programs = spy
V = 248320
fs = FilterScratch.allocate(64, V, "cuda", any_topk=False, any_topp=True, any_bound=False, grid_rows=8)
loop = FilterLoop.allocate(fs, "cuda")
logits = torch.randn(64, V, device="cuda")
z = torch.zeros(64, device="cuda")
run = launcher(loop, logits, torch.arange(64, dtype=torch.int32, device="cuda"), z + 1, z - float("inf"),
               torch.full((64,), V, dtype=torch.int32, device="cuda"), z + 0.9, z.clone(),
               torch.zeros(64, dtype=torch.int32, device="cuda"), fs)
print("programs a slot", loop.programs, "launcher", run is not None)
PY
cat $G/slots.txt | tail -4
timeout 200 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$" \
  --variant base=scratch/s27base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab.txt | head -20; grep "^\*" $G/ab.txt | head -20
timeout 130 python3 -m pytest -q -m gpu tests/test_kernels.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl
python3 -c 'from typing_extensions import get_annotations' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl
PYTHONPATH=/tmp/site:$PWD timeout 150 python3 tools/bench_kernels.py --vocab 248320 --budget-s 110 --skip-correctness \
  --out $G/bench > $G/bench_log.txt 2>&1
echo "bench rc=$?"; tail -40 $G/bench_log.txt
