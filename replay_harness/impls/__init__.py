"""Sampler implementations ("impls") and their registry (the one place names become impls).

What an impl is, every hook and its default: :mod:`replay_harness.impls.contract` (``Sampler``).
``get_impl`` hands back a ``Sampler`` for every name (third-party objects that do not subclass it are
wrapped by ``as_sampler``), so callers use the hooks directly and never probe for them.

Built-in impls are listed in BUILTIN as "module:attribute" so that the command
line imports only what it runs; adding an impl is one class file plus one line
here (tests/test_impls.py then checks it against ``reference`` and every fixture).
Third-party impls register through the entry-point group ``replay.impls``
(name = impl name, value = "module:ClassOrFactory"), or at run time with
``register(name, factory)``.
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any, Callable

from replay_harness.errors import EnvironmentProblem, UsageError
from replay_harness.impls.contract import Sampler, as_sampler

ENTRY_POINT_GROUP = "replay.impls"
BUILTIN: dict[str, str] = {
    "reference": "replay_harness.impls.reference:ReferenceSampler",
    "greedy-only": "replay_harness.impls.engine_bug:GreedyOnlySampler",
    "guarded": "replay_harness.impls.engine_bug:GuardedSampler",
    "stochastic": "replay_harness.impls.kernel_impls:StochasticSampler",
    "serial-scan": "replay_harness.impls.kernel_impls:SerialScanSampler",
    "gumbel-max": "replay_harness.impls.kernel_impls:GumbelMaxSampler",
    # the peers (impls/peers.py): optional, loaded from .peers or an install; unavailable -> exit 3 with why
    "vllm-mrv2": "replay_harness.impls.peers:VllmMrv2Sampler",
    "flashinfer": "replay_harness.impls.peers:FlashInferSampler",
}
_registered: dict[str, Callable[[], Any]] = {}


def register(name: str, factory: Callable[[], Any]) -> None:
    """Make ``factory()`` available as ``--impl name`` in this process."""
    _registered[name] = factory


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_names() -> list[str]:
    return sorted(set(BUILTIN) | set(_registered) | set(_entry_points()))


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_impl(name: str, impl_args: list[str] | None = None, timeout: float | None = None) -> Sampler:
    """The impl called ``name`` as a :class:`Sampler`; unknown names list the known ones (exit 2).

    ``impl_args`` are the repeated ``--impl-arg`` values; only external impls (``exec:PATH``) take any.
    ``exec:COMMAND`` starts COMMAND (shlex-split, then ``impl_args``) as an external sampler process
    (replay_harness.impls.external, docs/EXTERNAL.md). ``timeout`` (``--impl-timeout``, seconds) is its
    per-step reply limit and, when longer than the default, its handshake limit too (a program that
    loads a framework before it answers).
    """
    if name.startswith("exec:"):
        from replay_harness.impls.external import HANDSHAKE_TIMEOUT_S, ExecSampler

        if timeout is not None and not timeout > 0:
            raise UsageError(f"--impl-timeout must be > 0 seconds, got {timeout:g}")
        limits = {} if timeout is None else dict(timeout=timeout, handshake_timeout=max(HANDSHAKE_TIMEOUT_S, timeout))
        return as_sampler(ExecSampler(name[len("exec:"):], impl_args, **limits), name)
    if impl_args:
        raise UsageError(f"--impl-arg is only for external impls (exec:PATH), not '{name}'")
    try:
        if name in _registered:
            return as_sampler(_registered[name](), name)
        if name in BUILTIN:
            return as_sampler(_load(BUILTIN[name])(), name)
        eps = _entry_points()
        if name in eps:
            return as_sampler(eps[name].load()(), name)
    except ImportError as e:
        raise EnvironmentProblem(f"impl '{name}' is unavailable: {e}") from None
    raise UsageError(f"unknown impl '{name}'; known impls: {', '.join(known_names())}")
