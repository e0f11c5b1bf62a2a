"""Offline sm_90 compile of the draw kernel (no GPU): catches frontend type errors the interpreter lets through,
and prints the registers and the SASS size."""
import inspect
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import os, importlib
_draw_kernel = importlib.import_module(os.environ.get("DRAWMOD", "replay_kernels.draw"))._draw_kernel

PTR_F32 = {"logits_ptr", "draft_ptr", "lse_t_ptr", "lse_q_ptr", "temp_div_ptr", "cut_val_ptr", "req_temp_ptr",
           "part_max_ptr", "part_top_ptr", "top_ptr"}


def compile_draw(dtype="bf16", **const):
    params = list(inspect.signature(_draw_kernel.fn).parameters)
    sig, consts = {}, {}
    for i, name in enumerate(params):
        if name in const:
            sig[name] = "constexpr"
            consts[(i,)] = const[name]
        elif name.endswith("_ptr"):
            if name == "logits_ptr" or name == "draft_ptr":
                sig[name] = f"*{dtype}"
            elif name in PTR_F32:
                sig[name] = "*fp32"
            elif name in ("seed_ptr", "pos_ptr", "tokens_ptr"):
                sig[name] = "*i64"
            else:
                sig[name] = "*i32"
        else:
            sig[name] = "i32"
    div16 = {"l_stride", "d_stride", "V", "span", "tok_stride"}
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(params)
             if sig[name] != "constexpr" and (name.endswith("_ptr") or name in div16)}
    src = ASTSource(fn=_draw_kernel, signature=sig, constexprs=consts, attrs=attrs)
    opts = {"num_warps": const.pop("_warps", 1)}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def resources(k):
    import os
    import re
    import subprocess
    import tempfile
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        out = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", out)
    return f"regs {m.group(1)} stack {m.group(2)} sass {sass.count(chr(10))} lines"


if __name__ == "__main__":
    for dtype, tiles in (("bf16", 8), ("fp32", 4)):
        for name, c in (("plain", dict(HAS_DRAFT=False, TOP=False, SHARE=True, PRUNE=True, LIST=False)),
                        ("top", dict(HAS_DRAFT=False, TOP=True, SHARE=True, PRUNE=True, LIST=False)),
                        ("draft", dict(HAS_DRAFT=True, TOP=False, SHARE=True, PRUNE=True, LIST=False)),
                        ("list", dict(HAS_DRAFT=False, TOP=True, SHARE=True, PRUNE=True, LIST=True)),
                        ("small", dict(HAS_DRAFT=False, TOP=False, SHARE=False, PRUNE=False, LIST=False, _warps=8))):
            blk = 2048 if name == "small" else 512
            k = compile_draw(dtype, BLOCK=blk, HASHES=128, TILES=1 if name == "small" else tiles, CHUNK=128, **c)
            print(dtype, name, resources(k), flush=True)


def sass(k):
    import os
    import subprocess
    import tempfile
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        return subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True).stdout
