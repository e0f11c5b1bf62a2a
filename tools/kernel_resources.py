"""Registers, spills and code size of every kernel one sampler launch runs, compiled for an H200 without a GPU.

    python3 tools/kernel_resources.py --impl gumbel-max --R 256 --top-p 0.9        # the table below
    python3 tools/kernel_resources.py --impl stochastic --R 64 --k 4 [--V 248320] [--dtype bf16] [--sass DIR]

The impl prepares one SYNTHETIC step of the shape (``replay_harness.bench.kernels.cases.Inputs``, on the CPU)
and runs ``launch`` with Triton's launcher replaced by a recorder: nothing executes. Each recorded launch is
then specialized the way Triton's own launcher does it (its binder: constexprs, integers equal to 1, 16-byte
alignment and divisibility) and compiled for sm_90 (``GPUTarget("cuda", 90, 32)``); ``cuobjdump`` (shipped
with Triton) reads the registers a thread and the spill stack of the cubin. Per launch, in launch order:

* regs, stack: registers a thread and spill bytes a thread (0 is what a change should keep);
* programs an SM: what the registers allow. An H100/H200 SM has four partitions of 16,384
  registers; a warp takes ``ceil(regs / 8) * 8 * 32`` of one partition, so ``4 * floor(16384 / that)`` warps
  an SM, at most 64 warps and 32 programs;
* sass: instructions in the cubin (code size); ``--sass DIR`` also writes each distinct kernel's SASS
  (``cuobjdump -sass``) to ``DIR/R<requests>-<launch #>-<kernel>.sass``, to read a loop's instructions without a GPU.

A plain step below ``one_launch.ONE_LAUNCH_BELOW`` requests with top-k / top-p checks is recorded as the one
launch (``replay_kernels/draw/one_launch.py``), as on a GPU with room for all its programs; a line under the table
says whether an H200 has that room (when it does not, the sampler runs the sequence: record it at a larger R).
The open-row launch that settles what a first check leaves open is recorded with every slot it allocates; a
line says how many of them an H200 holds at once (the grid the sampler then launches).

Use it before spending device time: a variant that spills, or that drops a launch below the programs an SM
it had, shows up here in seconds (docs/KERNELS.md "Measuring a kernel change"). It reads Triton internals
(the binder of ``triton.runtime.jit``), written against triton 3.6-3.9; figures from another version of
Triton than the GPU machine's differ: with triton 3.6.0, the GPU machine's, it gives ncu's registers (the
plain draw at R = 256: 96, 20 programs an SM; sample-and-check's first draw: 111, 16), with 3.9 it gives
128 for both. For register work, install the GPU machine's Triton in a venv of its own:
``python3 -m venv /tmp/venv36 && . /tmp/venv36/bin/activate && pip install torch==2.13.0 triton==3.6.0 && pip
install -e .``. Exit 2 (one line) for an impl without prepare/launch, a bad shape, or when Triton cannot
compile for sm_90 here.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

H200_SMS = 132  # streaming multiprocessors of an H200 (and an H100 SXM)
MAX_WARPS, MAX_PROGRAMS = 64, 32  # resident warps and programs an SM


def record_launches(impl_name: str, V: int, R: int, k: int, top_p: float, dtype: str, top_k: int = 0) -> list[tuple]:
    """(JITFunction, args, kwargs, grid) of every kernel launch of one ``impl.launch`` on the shape, in order."""
    import torch
    from triton.runtime.jit import JITFunction

    from replay_harness.bench.kernels.cases import Inputs
    from replay_harness.impls import get_impl
    from replay_kernels.filters import filter_loop
    from replay_kernels.draw import one_launch, open_rows

    launches = []

    def record(self, *args, grid, warmup, **kwargs):  # None: replay_kernels.shared.launches then records kernel[grid]
        if not warmup:
            launches.append((self, args, kwargs, grid))

    step = Inputs.make(V, R, k, seed=0, device="cpu").step(top_p, top_k)
    if dtype != "fp32":
        step.logits = step.logits.to(getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype]))
    impl = get_impl(impl_name)
    state = impl.prepare(step)
    run, fits, slots, loop_grid = JITFunction.run, one_launch.fits, open_rows.slots, filter_loop.loop_grid
    JITFunction.run = record
    one_launch.fits = lambda *args: True  # as on a GPU with room for its programs (main checks the room)
    open_rows.slots = lambda s, *args: s.sync.numel()  # every slot allocated (main says how many fit)
    filter_loop.loop_grid = lambda loop, *args: (loop.sync.numel(), loop.programs)
    try:
        impl.launch(state)
    finally:
        JITFunction.run, one_launch.fits, open_rows.slots, filter_loop.loop_grid = run, fits, slots, loop_grid
    return launches


def compile_sm90(fn, args: tuple, kwargs: dict):
    """The cubin Triton would build for this launch on an sm_90 GPU."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    kwargs = dict(kwargs)
    kwargs.setdefault("debug", False)
    for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):  # what JITFunction.run adds, where it exists
        if hasattr(knobs.compilation, name):
            kwargs[name] = getattr(knobs.compilation, name)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)


def cubin_resources(cubin: bytes) -> tuple[int, int, int, str]:
    """(registers a thread, spill stack bytes a thread, SASS instructions, the SASS) of a cubin, by ``cuobjdump``."""
    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", usage)
    instructions = len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", sass, flags=re.M))
    return int(m.group(1)), int(m.group(2)), instructions, sass


def programs_per_sm(regs: int, warps: int) -> int:
    """Programs of ``warps`` warps an H100/H200 SM holds at ``regs`` registers a thread (registers only; the
    partition rule of ``replay_kernels.draw.one_launch.warps_by_registers``, imported here, after main has taken
    TRITON_INTERPRET out of the environment)."""
    from replay_kernels.draw.one_launch import warps_by_registers

    return min(MAX_PROGRAMS, min(MAX_WARPS, warps_by_registers(regs)) // warps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", default="gumbel-max", help="an impl with prepare/launch (gumbel-max, stochastic, "
                    "serial-scan)")
    ap.add_argument("--R", default="256", help="requests, or a comma list of request counts (one table each, one "
                    "process)")
    ap.add_argument("--k", type=int, default=0, help="drafts a request (stochastic)")
    ap.add_argument("--V", type=int, default=248320, help="vocabulary")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0, help="top-k of every request (default 0: off)")
    ap.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32", help="logits dtype")
    ap.add_argument("--sass", metavar="DIR", help="also write each distinct kernel's SASS to DIR")
    args = ap.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)  # before the kernels are imported: compile them, do not interpret them
    try:
        counts = [int(r) for r in args.R.split(",")]
    except ValueError:
        print(f"kernel_resources: --R {args.R!r}: expected request counts, comma-separated", file=sys.stderr)
        return 2
    for R in counts:
        rc = report(args, R)
        if rc:
            return rc
    return 0


def report(args, R: int) -> int:
    """Print the table of one shape's launches (``R`` requests); 2 (one line on stderr) when it cannot."""
    try:
        launches = record_launches(args.impl, args.V, R, args.k, args.top_p, args.dtype, args.top_k)
    except Exception as e:  # noqa: BLE001 - an unknown impl, one without prepare/launch, a bad shape: one line
        print(f"kernel_resources: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(f"# {args.impl} V={args.V} R={R} k={args.k} top_p={args.top_p} top_k={args.top_k} {args.dtype}: "
          f"{len(launches)} launches, compiled for sm_90")
    print("| # | kernel | grid | warps | maxnreg | regs | stack B | programs an SM | sass |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    seen, notes = {}, []
    for i, (fn, a, kw, grid) in enumerate(launches):
        try:
            kernel = compile_sm90(fn, a, kw)
        except Exception as e:  # noqa: BLE001 - any compiler failure ends the tool with one line
            print(f"kernel_resources: cannot compile {fn.__name__} for sm_90 here: {type(e).__name__}: {e}",
                  file=sys.stderr)
            return 2
        key = kernel.hash
        if key not in seen:
            seen[key] = cubin_resources(kernel.asm["cubin"])
            if args.sass:
                os.makedirs(args.sass, exist_ok=True)
                with open(os.path.join(args.sass, f"R{R}-{i}-{fn.__name__}.sass"), "w") as f:
                    f.write(seen[key][3])
        regs, stack, sass, _ = seen[key]
        warps = kernel.metadata.num_warps
        maxnreg = kw.get("maxnreg") or "-"
        print(f"| {i} | `{fn.__name__}` | {tuple(grid)} | {warps} | {maxnreg} | {regs} | {stack} | "
              f"{programs_per_sm(regs, warps)} | {sass} |", flush=True)
        room = H200_SMS * programs_per_sm(regs, warps)
        if fn.__name__ == "_one_launch_kernel":  # its programs wait for each other: all must be resident
            need = grid[0] * grid[1]
            notes.append(f"`_one_launch_kernel` needs its {need} programs resident at once; an H200 holds {room}"
                         + ("" if need <= room else ": there the sampler runs the launch sequence instead"))
        if fn.__name__ == "_open_rows_kernel":  # slots of grid[1] programs, as many as are resident at once
            notes.append(f"`_open_rows_kernel`: {grid[0]} slots of {grid[1]} programs allocated; an H200 holds "
                         f"{room} programs, so {min(grid[0], room // grid[1])} slots run")
        if fn.__name__ == "_filter_loop_kernel":  # every slot, with fewer programs a slot when they do not fit
            notes.append(f"`_filter_loop_kernel`: {grid[0]} slots of {grid[1]} programs allocated; an H200 holds "
                         f"{room} programs, so each slot runs {max(1, min(grid[1], room // grid[0]))}")
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
