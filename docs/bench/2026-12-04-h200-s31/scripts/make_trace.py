"""Stamp scratch/trace/replay_kernels (a copy of 878e9fb's, make_variants.sh): the open-row launch writes
%globaltimer (ns) at its phases, for trace_open_rows.py. A measuring copy only: the edits below are string
replacements on 878e9fb's one_launch.py and open_rows.py (they fail loudly on other sources)."""
import os
os.chdir("scratch/trace/replay_kernels")
ol = open("one_launch.py").read()
stamp = '''

@triton.jit
def stamp(trace_ptr, slot):
    """TRACE (scratch only): %globaltimer (ns) at ``trace_ptr + slot``."""
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [tl.zeros((), tl.int32)], dtype=tl.int64,
                                  is_pure=False, pack=1)
    tl.store(trace_ptr + slot, t)
'''
def rep(src, a, b):
    assert src.count(a) == 1, a
    return src.replace(a, b)
ol = rep(ol, '\n\n@triton.jit\ndef row_barrier', stamp + '\n\n@triton.jit\ndef row_barrier')
ol = rep(ol, "CHECK_BLOCK: tl.constexpr, CHUNK: tl.constexpr, ONE_SPAN: tl.constexpr, FLOOR: tl.constexpr):",
         "CHECK_BLOCK: tl.constexpr, CHUNK: tl.constexpr, ONE_SPAN: tl.constexpr, FLOOR: tl.constexpr,\n"
         "               trace_ptr=None, TRACE: tl.constexpr = False):")
ol = rep(ol, """    if FLOOR:
        thr = floor_of(floors, base, t, cv0, ci0, skip, CHUNK)
    if ONE_SPAN:""", """    if FLOOR:
        thr = floor_of(floors, base, t, cv0, ci0, skip, CHUNK)
    if TRACE:
        stamp(trace_ptr, 1)
    if ONE_SPAN:""")
ol = rep(ol, """        row_barrier(sync_ptr, b, arrivals)
        arrivals += P
        best, token = block_argmax(part_max_ptr, part_arg_ptr, b * DRAW_SPLITS, DRAW_SPLITS, CHUNK)""",
"""        if TRACE:
            stamp(trace_ptr, draws * 8 + 0)
        row_barrier(sync_ptr, b, arrivals)
        if TRACE:
            stamp(trace_ptr, draws * 8 + 1)
        arrivals += P
        best, token = block_argmax(part_max_ptr, part_arg_ptr, b * DRAW_SPLITS, DRAW_SPLITS, CHUNK)""")
ol = rep(ol, """            if done == 0:
                for s in range(q, CHECK_SPLITS, P):""", """            if TRACE:
                stamp(trace_ptr, draws * 8 + 2)
            if done == 0:
                for s in range(q, CHECK_SPLITS, P):""")
ol = rep(ol, """                row_barrier(sync_ptr, b, arrivals)
                arrivals += P
                done = _verdict(""", """                if TRACE:
                    stamp(trace_ptr, draws * 8 + 3)
                row_barrier(sync_ptr, b, arrivals)
                if TRACE:
                    stamp(trace_ptr, draws * 8 + 4)
                arrivals += P
                done = _verdict(""")
ol = rep(ol, """                if FLOOR:  # a miss: the next draw floored anew under its bound
                    thr = floor_of(floors, base, t, xc, token + 1, skip, CHUNK)""", """                if TRACE:
                    stamp(trace_ptr, draws * 8 + 5)
                if FLOOR:  # a miss: the next draw floored anew under its bound
                    thr = floor_of(floors, base, t, xc, token + 1, skip, CHUNK)
                if TRACE:
                    stamp(trace_ptr, draws * 8 + 6)""")
open("one_launch.py", "w").write(ol)

orow = open("open_rows.py").read()
orow = rep(orow, "CHUNK: tl.constexpr, PDL: tl.constexpr = False):",
           "CHUNK: tl.constexpr, PDL: tl.constexpr = False, trace_ptr=None):")
orow = rep(orow, """    P = tl.num_programs(1)
    arrivals = P""", """    P = tl.num_programs(1)
    tr = trace_ptr + (s * P + q) * 64
    one_launch.stamp(tr, 0)
    arrivals = P""")
orow = rep(orow, """        r = tl.load(list_ptr + j)""", """        r = tl.load(list_ptr + j)
        trj = tr + tl.minimum((j - s) // S, 1) * 32
        tl.store(trj + 2, r.to(tl.int64))""")
orow = rep(orow, "CHECK_BLOCK, CHUNK, False, True)", "CHECK_BLOCK, CHUNK, False, True, trj, True)")
orow = rep(orow, """    if last_to_arrive(exits_ptr, s, P):
        tl.store(sync_ptr + s, 0)""", """    one_launch.stamp(tr, 3)
    if last_to_arrive(exits_ptr, s, P):
        tl.store(sync_ptr + s, 0)""")
orow = rep(orow, """    options = one_launch.launch_options(s)
    grid = (slots(s, args, options, logits.device), s.programs)""", """    global TRACE, GRID
    TRACE = torch.zeros(s.sync.numel() * s.programs * 64, dtype=torch.int64, device=logits.device)
    options = dict(one_launch.launch_options(s), trace_ptr=TRACE)
    grid = (slots(s, args, options, logits.device), s.programs)
    GRID = grid""")
orow = rep(orow, "import math\n", "import math\n\nimport torch\n")
orow = rep(orow, "OPEN_ROW_SLOTS = 16", "TRACE = None\nOPEN_ROW_SLOTS = 16")
open("open_rows.py", "w").write(orow)
