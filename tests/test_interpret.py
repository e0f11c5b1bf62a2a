"""``replay_kernels.shared.interpret``: under TRITON_INTERPRET=1 the language is patched once a launch, not once a
device-function call (what made CPU kernel tests slow), and kernels compute the same."""

import pytest
import torch
import triton
import triton.language as tl

import replay_kernels  # noqa: F401  (installs the skip under the interpreter)
from replay_kernels.shared.interpret import interpreting, skip_repeated_patching

pytestmark = pytest.mark.skipif(not interpreting(), reason="the interpreter only")


@triton.jit
def _double(x):
    return x * 2.0


@triton.jit
def _sum_of_doubles_kernel(out_ptr, N: tl.constexpr):
    acc = tl.zeros((), tl.float32)
    for i in range(N):
        acc = acc + _double(tl.full((), 1.0, tl.float32) + i)
    tl.store(out_ptr, acc)


def test_language_is_patched_once_a_launch(monkeypatch):
    """The patches a launch makes do not grow with the device calls it makes (4 or 16 here); the
    results are those of the plain interpreter."""
    from triton.runtime import interpreter

    assert skip_repeated_patching()  # installed (idempotent)
    patches = []
    real = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda *a: patches.append(a[0]) or real(*a))
    out = torch.zeros(1)
    counts = []
    for n in (4, 4, 16):
        patches.clear()
        _sum_of_doubles_kernel[(1,)](out, N=n)
        assert float(out) == 2.0 * sum(1 + i for i in range(n))
        counts.append(len(patches))
    assert counts[1] == counts[2] < 16, counts  # once a launch (each language module), not once a call
