"""The kernel micro-benchmark (tools/bench_kernels.py): our Triton samplers next to the peers (FlashInfer,
vLLM MRV2) on synthetic inputs, in one run.

settings.py  what to run (torch-free: the script reads its options before Triton is imported)
cases.py     the inputs of one shape and THE case table (one function per family of impls)
peers.py     loading FlashInfer and vLLM MRV2 from the carried peers folder
checks.py    correctness vs the torch reference, determinism, vLLM token parity
run.py       the shape loop: checks, then every case timed eager-cold / eager-warm / graph, interleaved
report.py    bench.json, bench.csv (the shared long layout, replay_harness.bench.csvlog), bench.md
"""
