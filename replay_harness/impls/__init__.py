"""Sampler implementations ("impls") and their registry.

An impl is any object with:

    name: str              the name users type after --impl
    description: str       one line for `replay impls`
    rng_contract: str      the noise it consumes ("mrv2"); exact token comparison needs equal contracts
    requires_cuda: bool    True if it cannot run on the CPU (Triton impls run under TRITON_INTERPRET=1)
    sample(step: Step) -> SampleResult

Built-in impls are listed in BUILTIN as "module:attribute" so that the command
line imports only what it runs. Third-party impls register through the
entry-point group ``replay.impls`` (name = impl name, value = "module:ClassOrFactory"),
or at run time with ``register(name, factory)``.
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any, Callable

from ..errors import EnvironmentProblem, UsageError

ENTRY_POINT_GROUP = "replay.impls"
BUILTIN: dict[str, str] = {
    "reference": "replay_harness.impls.reference:ReferenceSampler",
    "greedy-only": "replay_harness.impls.engine_bug:GreedyOnlySampler",
    "guarded": "replay_harness.impls.engine_bug:GuardedSampler",
    "stochastic": "replay_kernels.verify:StochasticSampler",
    "serial-scan": "replay_kernels.sample:SerialScanSampler",
    "gumbel-max": "replay_kernels.sample:GumbelMaxSampler",
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


def get_impl(name: str, impl_args: list[str] | None = None) -> Any:
    """An instance of the impl called ``name``; unknown names list the known ones (exit 2).

    ``impl_args`` are the repeated ``--impl-arg`` values; only external impls (``exec:PATH``) take any.
    ``exec:COMMAND`` starts COMMAND (shlex-split, then ``impl_args``) as an external sampler process
    (replay_harness.external, docs/EXTERNAL.md).
    """
    if name.startswith("exec:"):
        from ..external import ExecSampler

        return ExecSampler(name[len("exec:"):], impl_args)
    if impl_args:
        raise UsageError(f"--impl-arg is only for external impls (exec:PATH), not '{name}'")
    try:
        if name in _registered:
            return _registered[name]()
        if name in BUILTIN:
            return _load(BUILTIN[name])()
        eps = _entry_points()
        if name in eps:
            return eps[name].load()()
    except ImportError as e:
        raise EnvironmentProblem(f"impl '{name}' is unavailable: {e}") from None
    raise UsageError(f"unknown impl '{name}'; known impls: {', '.join(known_names())}")
