"""Sharded replay under ``torchrun``: which rank replays which (recording, step), and the gather to rank 0.

``torchrun --nproc-per-node N -m replay_harness.cli run ...`` starts N copies of the command; each finds
its rank in the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``)
and joins one process group (NCCL on CUDA, gloo on the CPU). A host may start more ranks than it has GPUs
(a disk-bound ``run`` wants readers, not GPUs): local rank i then replays on GPU ``i % device_count`` and the
group is gloo (NCCL refuses two ranks on one GPU); ``bench`` refuses that, its timings would interfere
(docs/SCALE.md). The work units are the (recording, step) pairs; every
rank computes the same assignment (:func:`assign`: longest processing time first on the step files'
sizes), replays its own units on its GPU (:meth:`Shard.gpu`; or the CPU) and sends its per-step comparisons
(or its first error) to rank 0 with ``gather_object``, together with the step digests it remembered
while reading (recording/digest.py), so rank 0's digest check hashes only the steps no rank read.
Rank 0 merges them in (recording, step) order, so its report, JSON and exit code are those of a
single-process run; the other ranks print nothing.

Other commands (`verify`, `audit`, `bench`) use :func:`map_units`: a list of units (whatever the command
works on: (recording, step) for all of them), their sizes, and a worker opened once per rank; rank 0 gets
every unit's result in the order of the list, so the command's own merge is that of a single-process run.

Failure: an error in a rank is sent to rank 0, which raises the error of the earliest unit (the one a
single-process run raises) as one line with its exit code. A rank that dies is noticed by torchrun,
which stops the others; a rank that hangs makes the gather time out after ``REPLAY_DIST_TIMEOUT``
seconds (default :data:`DEFAULT_TIMEOUT_S`), and rank 0 exits 3. torchrun itself exits 1 whenever a
rank exits nonzero (its failure report on stderr names that rank's exit code).
"""
from __future__ import annotations

import heapq
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, ContextManager, Iterator, Sequence

from replay_harness.errors import EXIT_ENVIRONMENT, EnvironmentProblem, ReplayError, UsageError

TIMEOUT_ENV = "REPLAY_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 1800.0  # the longest rank 0 waits at the gather for the slowest rank (or at start-up)
TEST_FAIL_ENV = "REPLAY_DIST_TEST_FAIL"  # test hook, "RANK:raise|kill|hang": make that rank fail that way
TIMING_ENV = "REPLAY_DIST_TIMING"  # "1": each rank prints where its wall time went (docs/SCALE.md)

Unit = tuple[int, int]  # (recording index, step index)


# The most ranks a job may have: assign() keeps one heap entry per rank, and no job replay runs comes near it.
MAX_WORLD_SIZE = 1 << 20


def launched() -> bool:
    """True when torchrun (or any launcher setting WORLD_SIZE > 1) started this process as one of several."""
    return world_size() > 1


def world_size() -> int:
    """The number of processes of the job (WORLD_SIZE; 1 without a launcher, or when it is empty)."""
    return _launcher_int("WORLD_SIZE", 1, 1, MAX_WORLD_SIZE)


def _launcher_int(name: str, default: int | None, low: int, high: int) -> int:
    """The launcher's variable ``name`` as a whole number in [low, high]; ``default`` when it is unset or empty
    (None: it must be set). Anything else is EnvironmentProblem (exit 3): one line naming the variable, its
    value and the range, never a ValueError or KeyError (docs/HARDENING.md, "No internal error")."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        if default is not None:
            return default
        raise EnvironmentProblem(f"{name} is not set, but WORLD_SIZE={os.environ.get('WORLD_SIZE')} says this is one "
                                 f"of several processes: start replay with torchrun, or unset WORLD_SIZE")
    text = raw.strip()
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None
    if value is None or not low <= value <= high:
        raise EnvironmentProblem(f"{name}={raw[:40]!r}: expected a whole number from {low} to {high} (a variable "
                                 f"of the launcher, torchrun)")
    return value


def timeout_s() -> float:
    """The process-group timeout: ``REPLAY_DIST_TIMEOUT`` seconds (> 0), else DEFAULT_TIMEOUT_S."""
    raw = os.environ.get(TIMEOUT_ENV)
    try:
        value = DEFAULT_TIMEOUT_S if raw is None else float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UsageError(f"{TIMEOUT_ENV} must be a number of seconds > 0, got {raw!r}")
    return value


def assign(sizes: Sequence[int], world_size: int) -> list[int]:
    """The rank of each unit: largest first, each to the least loaded rank (ties: the lower rank).

    ``sizes``: bytes per unit. A pure function of its arguments, so every rank computes the same list.
    """
    owner = [0] * len(sizes)
    loads = [(0, r) for r in range(world_size)]  # (bytes assigned, rank), a heap
    for u in sorted(range(len(sizes)), key=lambda u: (-sizes[u], u)):
        load, rank = heapq.heappop(loads)
        owner[u] = rank
        heapq.heappush(loads, (load + sizes[u], rank))
    return owner


def _size(path: os.PathLike) -> int:
    try:
        return os.path.getsize(path)
    except OSError:  # reading the step reports it properly
        return 0


@dataclass
class Shard:
    """This rank's part of the job: its rank, the world size and the device it replays on."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int = 1
    current: Unit | None = None  # the unit being replayed (an error there is attributed to it)

    @property
    def shares_gpu(self) -> bool:
        """True when this host runs more ranks than it has CUDA devices (ranks then share GPUs, over gloo)."""
        import torch

        return torch.cuda.is_available() and self.local_world_size > torch.cuda.device_count()

    def gpu(self) -> int:
        """This rank's CUDA device index: LOCAL_RANK, modulo the host's device count when ranks share GPUs."""
        import torch

        return self.local_rank % max(torch.cuda.device_count(), 1)

    def device(self, dev: Any) -> Any:
        """``dev`` (from resolve_device) made this rank's: a CUDA device becomes ``cuda:``:meth:`gpu`."""
        import torch

        if dev.type != "cuda":
            return dev
        torch.cuda.set_device(self.gpu())
        return torch.device("cuda", self.gpu())

    def units(self, step_files: Sequence[Sequence[os.PathLike]]) -> Iterator[Unit]:
        """This rank's (recording, step) units in order; ``step_files[r][i]`` is step i's file of recording r."""
        all_units = [(r, i) for r, files in enumerate(step_files) for i in range(len(files))]
        owner = assign([_size(step_files[r][i]) for r, i in all_units], self.world_size)
        for unit, rank in zip(all_units, owner):
            if rank == self.rank:
                self.current = unit
                yield unit
        self.current = None

    def steps(self, recs: Sequence[Any], device: Any = None,
              units: Sequence[Unit] | None = None) -> Iterator[tuple[Unit, Any]]:
        """((recording, step), StepRecord) of this rank's units of ``recs`` (or of ``units``, this rank's
        already), read ahead in a thread (recording/prefetch.py; pinned for a CUDA ``device``); while one
        is worked on (and while it is read) ``current`` names it."""
        from replay_harness.recording.prefetch import units_ahead

        mine = list(self.units([rec.files for rec in recs])) if units is None else list(units)
        ahead = iter(units_ahead(recs, mine, device))
        try:
            for unit in mine:
                self.current = unit
                yield unit, next(ahead)[1]
        finally:
            ahead.close()
        self.current = None

    def share(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (rank order), on every rank: ``all_gather_object`` inside :func:`run_sharded`'s
        body, for work in two passes (every rank must call it, also one that failed in the first pass)."""
        import torch.distributed as dist

        values: list[Any] = [None] * self.world_size
        try:
            with _native_stderr_quiet():
                dist.all_gather_object(values, value)
        except Exception as e:
            raise EnvironmentProblem(f"rank {self.rank}: the other ranks did not answer within {timeout_s():g} s "
                                     f"(set {TIMEOUT_ENV}): {_line(e)}") from None
        return values

    def mine(self, sizes: Sequence[int]) -> list[int]:
        """The indices of this rank's units (:func:`assign` on ``sizes``, bytes per unit), in order."""
        return [u for u, rank in enumerate(assign(sizes, self.world_size)) if rank == self.rank]


class RankError(ReplayError):
    """An error raised in some rank, raised again on rank 0 with its line and exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def this_shard() -> Shard:
    """This process's Shard from the launcher's environment. Without ``LOCAL_WORLD_SIZE`` (a launcher other than
    torchrun) the host's ranks are taken to have a GPU each: ranks share GPUs only where the launcher says how
    many there are."""
    world = world_size()
    rank = _launcher_int("RANK", None, 0, world - 1)
    local_world = _launcher_int("LOCAL_WORLD_SIZE", 1, 1, world)
    set_locally = bool(os.environ.get("LOCAL_WORLD_SIZE", "").strip())
    local_rank = _launcher_int("LOCAL_RANK", 0, 0, (local_world if set_locally else world) - 1)
    return Shard(rank, world, local_rank, local_world)


def backend_for(shard: Shard) -> str:
    """NCCL when CUDA is there and each local rank has its own GPU, else gloo. Every host decides alone: start the
    same number of ranks per GPU on every host (torchrun's ``--nproc-per-node`` on like hosts), or the hosts'
    backends differ and joining the group fails with exit 3."""
    import torch
    import torch.distributed as dist

    return "nccl" if torch.cuda.is_available() and dist.is_nccl_available() and not shard.shares_gpu else "gloo"


def run_sharded(body: Callable[[Shard], Any]) -> list[Any] | None:
    """Run ``body(shard)`` on every rank; rank 0 gets the list of every rank's value (rank order), the
    other ranks None. An error in any rank is raised on rank 0 (the one of the earliest unit)."""
    import torch
    import torch.distributed as dist

    from replay_harness.recording import digest as registry

    shard = this_shard()
    marks = [("start-up", time.perf_counter())]
    seconds = timeout_s()
    backend = backend_for(shard)
    try:
        if torch.cuda.is_available():
            torch.cuda.set_device(shard.gpu())
        with _native_stderr_quiet():
            dist.init_process_group(backend, timeout=timedelta(seconds=seconds))
    except Exception as e:
        raise EnvironmentProblem(f"rank {shard.rank}: cannot join the {backend} process group: {_line(e)}") from None
    marks.append(("join", time.perf_counter()))
    try:
        try:
            _test_hook(shard.rank)
            sent: tuple[Any, Any] = (body(shard), None)
        except Exception as e:  # sent to rank 0, which decides what the job says
            where = shard.current if shard.current is not None else ()  # set-up errors sort first
            if isinstance(e, ReplayError):
                sent = (None, (where, str(e), e.exit_code))
            else:
                sent = (None, (where, f"rank {shard.rank}: internal error: {type(e).__name__}: {e}",
                               EXIT_ENVIRONMENT))
        marks.append(("work", time.perf_counter()))
        parts: list[Any] | None = [None] * shard.world_size if shard.rank == 0 else None
        try:  # with the step digests this rank remembered: rank 0's digest check need not read those steps
            with _native_stderr_quiet():
                dist.gather_object((*sent, registry.export()), parts, dst=0)
        except Exception as e:
            raise EnvironmentProblem(f"rank {shard.rank}: the other ranks did not answer within {seconds:g} s "
                                     f"(set {TIMEOUT_ENV}): {_line(e)}") from None
        marks.append(("gather", time.perf_counter()))
    finally:
        with _native_stderr_quiet():
            dist.destroy_process_group()
    if os.environ.get(TIMING_ENV) == "1":
        _print_timing(shard.rank, marks)
    if parts is None:
        return None
    for _, _, known in parts:
        registry.absorb(known)
    errors = [error for _, error, _ in parts if error is not None]
    if errors:
        _, message, code = min(errors, key=lambda error: error[0])
        raise RankError(message, code)
    return [value for value, _, _ in parts]


def merge_units(heads: list[Any], parts: list[tuple[Unit, Any]]) -> list[Any]:
    """Per recording, its head Comparison merged with the per-step Comparisons of ``parts`` in step order."""
    for (r, _), cmp in sorted(parts, key=lambda part: part[0]):
        heads[r].merge(cmp)
    return heads


def map_units(units: Sequence[Any], sizes: Sequence[int],
              open_worker: Callable[[Shard | None], ContextManager[Callable[..., Any]]],
              load: Callable[[Any], Any] | None = None, unread: Sequence[tuple[Any, int]] = ()) -> list[Any] | None:
    """Every unit's result, in the order of ``units``, in a single process and under torchrun alike.

    ``open_worker(shard)`` is entered once per process (``shard`` None in a single process: no torchrun)
    and yields ``do``; the result of unit u is ``do(u)``, or ``do(u, load(u))`` when ``load`` is given
    (then ``load`` runs a few units ahead in a reader thread: recording/prefetch.py). Under torchrun each
    rank does the units :func:`assign` gives it (``sizes``: bytes per unit) and rank 0 gets the list
    (errors as :func:`run_sharded`); the other ranks get None.

    ``unread``: (Recording, step) pairs no unit reads whose digests rank 0's digest check will need
    (``verify --steps``): under torchrun the ranks share their hashing after their units (a single process
    leaves it to the check), so rank 0 does not hash them alone at the end.
    """
    from replay_harness.recording.prefetch import Prefetcher

    def results(do: Callable[..., Any], mine: list[int], shard: Shard | None) -> list[tuple[int, Any]]:
        ahead = None if load is None else iter(Prefetcher(mine, lambda u: load(units[u])))
        done = []
        try:
            for u in mine:
                if shard is not None:
                    shard.current = (u,)  # an error from here on is this unit's
                done.append((u, do(units[u]) if ahead is None else do(units[u], next(ahead)[1])))
        finally:
            if ahead is not None:
                ahead.close()  # stops the reader thread now, also on an error
        if shard is not None:
            shard.current = None
        return done

    if not launched():
        with open_worker(None) as do:
            return [value for _, value in results(do, list(range(len(units))), None)]

    def body(shard: Shard) -> list[tuple[int, Any]]:
        with open_worker(shard) as do:
            done = results(do, shard.mine(sizes), shard)
        for j in shard.mine(unit_sizes([rec.files[i] for rec, i in unread])):
            unread[j][0].step_digest(unread[j][1], quiet=True)
        return done

    values = run_sharded(body)
    if values is None:
        return None
    merged: list[Any] = [None] * len(units)
    for part in values:
        for u, value in part:
            merged[u] = value
    return merged


def unit_sizes(step_files: Sequence[os.PathLike]) -> list[int]:
    """Bytes of each step file (0 when it cannot be read: reading the step reports it properly)."""
    return [_size(f) for f in step_files]


@contextmanager
def _native_stderr_quiet() -> Iterator[None]:
    """While torch.distributed joins, gathers or leaves the group: descriptor 2 on /dev/null, so c10d's own
    C++ log lines and stacks (a refused or timed-out rendezvous writes some 5 KB of them) never reach the
    terminal; what went wrong is the one line of the exception it raises (:func:`_line`). REPLAY_DEBUG=1
    keeps them."""
    if os.environ.get("REPLAY_DEBUG"):
        yield
        return
    import sys

    try:
        sys.stderr.flush()
        saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc), or None."""
    try:
        ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        return float(open("/proc/uptime").read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _print_timing(rank: int, marks: list[tuple[str, float]]) -> None:
    """One stderr line: the process's age when sharding began (interpreter, imports, CLI), then seconds per
    phase (join the process group, this rank's work, the gather to rank 0)."""
    import sys

    age = _process_age_s()
    if age is not None:
        age -= time.perf_counter() - marks[0][1]
    phases = ", ".join(f"{name} {b - a:.2f} s" for (_, a), (name, b) in zip(marks, marks[1:]))
    print(f"replay: rank {rank} timing: start-up {age if age is None else round(age, 2)} s, {phases}",
          file=sys.stderr)


def _test_hook(rank: int) -> None:
    """``REPLAY_DIST_TEST_FAIL=RANK:MODE`` (tests only): that rank raises, is SIGKILLed, or hangs."""
    target, _, mode = os.environ.get(TEST_FAIL_ENV, "").partition(":")
    if target != str(rank):
        return
    if mode == "raise":
        raise RuntimeError(f"{TEST_FAIL_ENV} asked rank {rank} to fail")
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        while True:
            time.sleep(60)
