"""Offline sm_90 compile of check_rounds._rounds_kernel: frontend errors, registers, spills."""
import inspect, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, "scratch")
from cc import resources
from replay_kernels.check_rounds import _rounds_kernel

F32 = {"temp_ptr", "lbound_ptr", "topp_ptr", "plan_cut_val", "cut_val_ptr", "top_ptr", "pall_ptr", "plow_ptr", "d_max_ptr"}
I64 = {"seed_ptr", "pos_ptr", "tokens_ptr"}
I32P = {"plan_mode", "mode_ptr", "row_ptr", "slot_ptr", "dtok_ptr", "check_ptr", "topk_ptr", "plan_cut_idx", "cut_idx_ptr",
        "counts_ptr", "pcnt_ptr", "arrivals_ptr", "d_arg_ptr", "d_arrivals_ptr", "d_best_ptr", "open_rows", "open_len", "sync_ptr"}


def compile_rounds(dtype="fp32", warps=4, maxnreg=None, **const):
    params = list(inspect.signature(_rounds_kernel.fn).parameters)
    sig, consts = {}, {}
    for i, name in enumerate(params):
        if name in const:
            sig[name] = "constexpr"; consts[(i,)] = const[name]
        elif name == "logits_ptr":
            sig[name] = f"*{dtype}"
        elif name in F32:
            sig[name] = "*fp32"
        elif name in I64:
            sig[name] = "*i64"
        elif name in I32P:
            sig[name] = "*i32"
        else:
            sig[name] = "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(params)
             if sig[name].startswith("*") or name in ("l_stride", "V")}
    src = ASTSource(fn=_rounds_kernel, signature=sig, constexprs=consts, attrs=attrs)
    opts = {"num_warps": warps}
    if maxnreg:
        opts["maxnreg"] = maxnreg
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


if __name__ == "__main__":
    for dtype in ("fp32",):
        for dblock in (1024,):
            for cap in (None, 72):
                k = compile_rounds(dtype, 4, cap, ROUNDS=3, SPAN=8192, BLOCK=1024, D_BLOCK=dblock, D_SHARE=True,
                                   D_PRUNE=True, D_HASHES=128, D_TILES=2, CHUNK=128, SYNC=16, NAP=True)
                print(dtype, "dblock", dblock, "cap", cap, resources(k), flush=True)
