"""`replay bench` under torchrun: each rank times its share of the (recording, step) units on its own GPU.

The units are dealt by bytes (:func:`replay_harness.compare.distributed.assign`); each rank loads the
sides on ``cuda:LOCAL_RANK``, benchmarks its steps exactly as a single process would
(:func:`replay_harness.bench.ab.bench_record`: coverage pass, interleaved A/B timing) and rank 0 merges
the per-step parts in (recording, step) order (:func:`replay_harness.bench.ab.finish_bench`): the report
covers every step, each timed on one GPU. With N GPUs the timings are per-GPU timings (N steps timed at
once on N devices, never one step split), so they compare with a single-GPU run step by step; only the
wall time of the whole benchmark shrinks.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable

import torch

from replay_harness.bench.ab import BenchResult, Side, StepPart, bench_record, finish_bench
from replay_harness.bench.timing import l2_bytes
from replay_harness.compare import distributed
from replay_harness.recording.prefetch import read_step
from replay_harness.errors import UsageError


def bench_units(recordings: list, open_sides: Callable[[torch.device], list[Side]], device: torch.device, *,
                repeats: int, warmup: int, warm_l2: bool = False, split_routes: bool = False,
                expect_routes: list[tuple[str | None, str]] = (), resamples: int = 2000, confidence: float = 0.95,
                on_step: Callable[[str], None] | None = None) -> BenchResult | None:
    """The benchmark of every step of ``recordings``, in one process or sharded over torchrun's ranks
    (rank 0 gets the BenchResult, the others None). ``open_sides(device)``: the sides, loaded on that
    process's device (closed at the end). ``on_step`` (a single process only): before each (sub-)step."""
    units = [(r, i) for r, rec in enumerate(recordings) for i in range(len(rec))]
    sizes = distributed.unit_sizes([recordings[r].files[i] for r, i in units])
    held: dict[str, Any] = {}

    @contextmanager
    def worker(shard):
        if shard is not None and device.type == "cuda" and shard.shares_gpu:
            raise UsageError(f"bench: {shard.local_world_size} ranks on a host with "
                             f"{torch.cuda.device_count()} GPU(s): ranks sharing a GPU time each other's "
                             "kernels; start at most one rank per GPU (docs/SCALE.md)")
        dev = device if shard is None else shard.device(device)
        sides = open_sides(dev)
        held.setdefault("sides", sides)  # a single process: the sides the report names
        l2, begun = l2_bytes(dev), set()

        def do(unit: tuple[int, int], record) -> StepPart:
            rec = recordings[unit[0]]
            if unit[0] not in begun:
                begun.add(unit[0])
                for s in sides:
                    s.impl.begin_recording(str(rec.path))
            return bench_record(rec, record, sides, dev, l2, repeats=repeats, warmup=warmup, warm_l2=warm_l2,
                                split_routes=split_routes, on_step=on_step if shard is None else None)
        try:
            yield do
        finally:
            for s in sides:
                s.impl.close()

    parts = distributed.map_units(units, sizes, worker, lambda u: read_step(recordings[u[0]], u[1]))
    if parts is None:
        return None
    processes = distributed.world_size()
    return finish_bench(parts, held["sides"], device if processes == 1 else _rank0_device(device), repeats=repeats,
                        warmup=warmup, warm_l2=warm_l2, split_routes=split_routes, expect_routes=expect_routes,
                        resamples=resamples, confidence=confidence, processes=processes)


def _rank0_device(device: torch.device) -> torch.device:
    """Rank 0's device (the one its environment capture describes)."""
    return torch.device("cuda", torch.cuda.current_device()) if device.type == "cuda" else device
