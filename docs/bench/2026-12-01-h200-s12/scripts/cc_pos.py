"""Offline sm_90 compile of stochastic._position_kernel (LOADS 1 / 2) and sample_check._check_kernel (LOADS 2 / 4)."""
import inspect, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, "scratch")
from cc import resources
from replay_kernels.stochastic import _position_kernel
from replay_kernels.sample_check import _check_kernel

F32 = {"req_temp_ptr", "logits_ptr", "draft_ptr", "temp_div_ptr", "cut_val_ptr", "topp_ptr", "smax_ptr", "ssum_ptr",
       "dmax_ptr", "dsum_ptr", "srb_ptr", "sx2_ptr", "lse_t_ptr", "lse_q_ptr", "temp_ptr", "lbound_ptr", "cut_val_in",
       "cut_val_out", "top_ptr", "pall_ptr", "plow_ptr"}
I64 = {"seed_ptr", "pos_ptr", "tokens_ptr"}


def build(kern, warps, maxnreg=None, **const):
    params = list(inspect.signature(kern.fn).parameters)
    sig, consts = {}, {}
    for i, n in enumerate(params):
        if n in const:
            sig[n] = "constexpr"; consts[(i,)] = const[n]
        elif n in F32:
            sig[n] = "*fp32"
        elif n in I64:
            sig[n] = "*i64"
        elif n.endswith("_ptr") or n in ("list_in", "len_in", "list_out", "len_out", "len_done", "mode_in", "mode_out",
                                         "cut_idx_in", "cut_idx_out"):
            sig[n] = "*i32"
        else:
            sig[n] = "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(params) if sig[n] != "constexpr" and sig[n].startswith("*")}
    opts = {"num_warps": warps}
    if maxnreg:
        opts["maxnreg"] = maxnreg
    return triton.compile(ASTSource(fn=kern, signature=sig, constexprs=consts, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options=opts)


for loads in (1, 2):
    for bounded in (False, True):
        k = build(_position_kernel, 4, None if bounded else 56, HAS_DRAFT=False, BOUNDED=bounded, EXACT=False, ALL=False,
                  SPAN=8192, BLOCK=2048, CHUNK=128, LOADS=loads)
        print("position LOADS", loads, "bounded", bounded, resources(k), flush=True)
for loads in (2, 4):
    for lst in (False, True):
        k = build(_check_kernel, 4, LIST=lst, APPEND=True, SPAN=8192, BLOCK=1024, LOADS=loads)
        print("check LOADS", loads, "LIST", lst, resources(k), flush=True)
