"""Offline sm_90 compile of _check_kernel (tree vs HEAD) and _draw_kernel LIST: registers and SASS size."""
import importlib.util, inspect, sys, os, re, subprocess, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, "scratch")
from cc import resources

def load(name, path):
    spec = importlib.util.spec_from_file_location("replay_kernels." + name, path)
    m = importlib.util.module_from_spec(spec); m.__package__ = "replay_kernels"
    sys.modules["replay_kernels." + name] = m; spec.loader.exec_module(m); return m

F32 = {"temp_ptr", "lbound_ptr", "topp_ptr", "cut_val_in", "cut_val_out", "top_ptr", "pall_ptr", "plow_ptr", "logits_ptr"}
I64 = {"tokens_ptr"}
def compile_check(kern, dtype, **const):
    params = list(inspect.signature(kern.fn).parameters)
    sig, consts = {}, {}
    for i, n in enumerate(params):
        if n in const:
            sig[n] = "constexpr"; consts[(i,)] = const[n]
        elif n in ("l_stride", "tok_stride", "V", "SPLITS"):
            sig[n] = "i32"
        elif n == "logits_ptr":
            sig[n] = f"*{dtype}"
        elif n in F32:
            sig[n] = "*fp32"
        elif n in I64:
            sig[n] = "*i64"
        else:
            sig[n] = "*i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(params) if sig[n] != "constexpr"}
    return triton.compile(ASTSource(fn=kern, signature=sig, constexprs=consts, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})

head = load("_sc_head", "scratch/sc_head.py")
import replay_kernels.sample_check as tree
for dtype in ("fp32", "bf16"):
    for name, mod in (("head", head), ("tree", tree)):
        for lst in (False, True):
            k = compile_check(mod._check_kernel, dtype, LIST=lst, APPEND=True, SPAN=8192, BLOCK=1024)
            print(dtype, name, "LIST" if lst else "first", resources(k), flush=True)

if os.environ.get("DUMP"):
    from cc import sass
    for name, mod in (("head", head), ("tree", tree)):
        k = compile_check(mod._check_kernel, "fp32", LIST=False, APPEND=True, SPAN=8192, BLOCK=1024)
        open(f"scratch/out/check_{name}.sass", "w").write(sass(k))
