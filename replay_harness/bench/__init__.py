"""Timing: `replay bench` (A/B on recorded steps) and the kernel benchmark (tools/bench_kernels.py).

timing.py       CUDA-event / wall-clock timing, the L2 policy (rotation, flush), quantiles, bootstrap CI
environment.py  the one environment capture (GPU, clocks, versions, commit)
coverage.py     kernel-launch counting, route coverage, the coverage guard (exit 4)
ab.py           the A/B bench of `replay bench` (Side, run_bench; bench_record / finish_bench per step)
shard.py        `replay bench` under torchrun: each rank times its steps on its GPU, rank 0 merges
overrides.py    what-if parameter overrides (--temperature, --drop-drafts, ...)
csvlog.py       the one long-format CSV layout of both benchmarks
report.py       `replay bench` tables, JSON, CSV, plot
kernels/        the kernel micro-benchmark against FlashInfer and vLLM (cases.py: the case table)
core.py         moved to ab.py (kept until replay_harness/cli/bench.py imports from there)
"""
