"""Recorded launch sequences (replay_kernels/shared/launches.py): built once a state, nothing run while recording,
the same tokens on every launch (CPU interpreter here; every GPU kernel test runs the compiled path); programmatic
dependent launch only for kernels that wait first."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from replay_harness.impls.reference import ReferenceSampler
from replay_kernels.shared import launches
from replay_kernels.draw.gumbel_max import GumbelMaxSampler
from replay_kernels.verify.stochastic import StochasticSampler
from test_kernels import DEVICE, compare, synthetic_step, top_p_verify_step


@triton.jit
def _fill_kernel(out_ptr, value, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, value, mask=offs < n)


class _State:
    launches = None


def test_recording_runs_nothing_and_each_call_launches_with_its_own_arguments():
    out = torch.zeros(300, device=DEVICE)
    state = _State()
    seen = []

    def build():
        launches.launch(_fill_kernel, (3,), out, 2.0, 300, BLOCK=128)
        seen.append(out.clone())  # recording: nothing ran yet
        launches.launch(_fill_kernel, (1,), out, 5.0, 100, BLOCK=128)

    launches.run_recorded(state, build)
    assert seen[0].eq(0).all() and len(state.launches) == 2
    want = torch.tensor([5.0] * 100 + [2.0] * 200)
    assert torch.equal(out.cpu(), want)
    out.zero_()
    launches.run_recorded(state, lambda: pytest.fail("a recorded state must not be built again"))
    assert torch.equal(out.cpu(), want)


@pytest.mark.parametrize("kind", ["plain", "verify"])
def test_a_state_builds_its_launches_once_and_every_launch_rewrites_the_outputs(monkeypatch, kind):
    if kind == "plain":  # top-p rows: the draw, the checks and their rounds, the finish loop
        step = synthetic_step(31, 700, 6, 0, ks=[0] * 6, greedy_frac=0.2)
        impl, cls = GumbelMaxSampler(block=64, programs=16, filter_span=256), GumbelMaxSampler
    else:  # top-p verify: bounds, the exact-cut fallback's search, sample-and-check
        step = top_p_verify_step(32, 500, 5, 0.0)
        impl = StochasticSampler(stats_block=64, draw_block=64, stats_span=256, filter_span=256)
        cls = StochasticSampler
    built = []
    original = cls._launch_all
    monkeypatch.setattr(cls, "_launch_all", lambda self, s: (built.append(s), original(self, s))[1])
    state = impl.prepare(step.to(DEVICE))
    first = [x.clone() for x in impl.launch(state)]
    calls = len(state.launches)
    state.tokens.fill_(-7)
    state.counts.fill_(-7)
    again = impl.launch(state)
    assert built == [state] and len(state.launches) == calls > 3
    assert [torch.equal(a, b) for a, b in zip(again, first)] == [True, True]
    compare(step, impl.result(state, *again), ReferenceSampler().sample(step))


@triton.jit
def _pdl_fill_kernel(out_ptr, value, PDL: tl.constexpr = False):
    launches.pdl_wait(PDL)
    tl.store(out_ptr, value)


def test_programmatic_dependent_launch_only_for_kernels_that_wait(monkeypatch):
    """``launch_pdl`` goes to a kernel that declares ``PDL`` (and so waits first), never to one that does not,
    and only where the device runs it: not on this machine's interpreter or CPU."""
    assert launches._with_pdl(_pdl_fill_kernel, {"num_warps": 4}) == {"num_warps": 4}
    monkeypatch.setattr(launches, "_pdl_device", lambda: True)
    assert launches._with_pdl(_pdl_fill_kernel, {"num_warps": 4}) == {"num_warps": 4, "PDL": launches.PDL_EARLY,
                                                                        "launch_pdl": True}
    assert launches._with_pdl(_fill_kernel, {"num_warps": 4}) == {"num_warps": 4}
    monkeypatch.setattr(launches, "PDL", False)
    assert launches._with_pdl(_pdl_fill_kernel, {}) == {}


def test_a_recorded_launch_triggers_early_only_when_the_next_one_waits_for_it(monkeypatch):
    """The PDL trigger of a recorded launch, as the calls pass it to the kernel: early where the next launch of the
    sequence is a PDL kernel (it waits, so its programs may start while this one runs), late before a kernel that
    does not wait, at the end of the sequence (what follows is the caller's), where the launch site asks for it,
    and for an unrecorded launch. A rule keyed on the wrong neighbour, one that ignored the site, or a call that
    dropped the trigger gives another list."""
    monkeypatch.setattr(launches, "_pdl_device", lambda: True)
    out = torch.zeros(4)
    specs = []
    launches._local.recording = specs
    try:
        for kernel, trigger in ((_pdl_fill_kernel, None), (_pdl_fill_kernel, None), (_pdl_fill_kernel, None),
                                (_fill_kernel, None), (_pdl_fill_kernel, launches.PDL_LATE),
                                (_pdl_fill_kernel, None), (_pdl_fill_kernel, None)):
            if kernel is _pdl_fill_kernel:
                launches.launch(kernel, (1,), out, 1.0, trigger=trigger)
            else:
                launches.launch(kernel, (1,), out, 1.0, 4, trigger=trigger, BLOCK=4)
    finally:
        launches._local.recording = None
    calls = launches._calls(specs)  # the interpreter's kernels: partial(kernel[grid], *args, **options)
    early, late = launches.PDL_EARLY, launches.PDL_LATE
    assert [call.keywords.get("PDL") for call in calls] == [early, early, late, None, late, early, late]
    seen = []
    monkeypatch.setattr(launches, "_compiled_call", lambda kernel, grid, args, options, trigger: seen.append(
        launches._with_pdl(kernel, options, trigger).get("PDL")) or (lambda: None))
    launches.launch(_pdl_fill_kernel, (1,), out, 1.0)
    assert seen == [late]


def test_every_pdl_kernel_waits_before_it_touches_memory():
    """A kernel launched with ``launch_pdl`` may start while the one before it still writes: each kernel of the
    package that declares ``PDL`` must call ``pdl_wait(PDL)`` as its first statement (after the docstring)."""
    import ast
    import pathlib

    import replay_kernels

    waiting, found = set(), set()
    for path in pathlib.Path(replay_kernels.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or node.name == "pdl_wait" or "PDL" not in [
                    a.arg for a in node.args.args]:
                continue
            found.add(node.name)
            docstring = isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
            first = node.body[1 if docstring else 0]
            if ast.unparse(first) in ("pdl_wait(PDL)", "launches.pdl_wait(PDL)"):
                waiting.add(node.name)
    assert {"_draw_kernel", "_check_kernel", "_position_kernel", "_fallback_rows_kernel", "_one_launch_kernel",
            "_open_rows_kernel", "_filter_loop_kernel"} <= found
    assert waiting == found, f"kernels that touch memory before pdl_wait: {sorted(found - waiting)}"


@pytest.mark.gpu
def test_gpu_pdl_kernels_compile_with_launch_pdl_and_run():
    """On an sm_90+ device the option reaches the backend: the compiled kernel a launch records carries
    ``launch_pdl`` (the flag its launcher passes to cuLaunchKernelEx) for a kernel that waits, not for one
    that does not, and the waiting kernel runs and writes. A Triton that dropped the option would lose the
    launch gaps silently, with the same tokens."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs sm_90 or later")
    out = torch.zeros(128, device="cuda")
    state = _State()
    launches.run_recorded(state, lambda: (launches.launch(_fill_kernel, (1,), out, 2.0, 128, BLOCK=128),
                                          launches.launch(_pdl_fill_kernel, (1,), out, 5.0)))
    torch.cuda.synchronize()
    assert out[0].item() == 5.0 and out[1:].eq(2.0).all()
    plain = launches.compiled_kernel(_fill_kernel, (1,), (out, 2.0, 128), {"BLOCK": 128})
    waiting = launches.compiled_kernel(_pdl_fill_kernel, (1,), (out, 5.0), {})
    assert (plain.metadata.launch_pdl, waiting.metadata.launch_pdl) == (False, True)
    late = launches.compiled_kernel(_pdl_fill_kernel, (1,), (out, 5.0), {}, launches.PDL_LATE)
    trigger = "griddepcontrol.launch_dependents"  # an early trigger in the code, a late one left to the exits
    assert (trigger in waiting.asm["ptx"], trigger in late.asm["ptx"]) == (True, False)
    assert "griddepcontrol.wait" in late.asm["ptx"]
