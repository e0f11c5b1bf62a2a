"""The impl contract: what every sampler implementation is, declared once.

An impl turns one recorded decode step into the tokens, counts and routes its
sampler would emit. Subclass :class:`Sampler` and override ``sample`` (and any
hook below whose default does not fit); the registry (:mod:`replay_harness.impls`)
wraps third-party objects that do not subclass it in :class:`Adapted`, so every
caller can use every hook without probing for it.

Attributes
----------
name           the name users type after ``--impl``
description    one line for ``replay impls``
rng_contract   the noise it consumes ("mrv2"); exact token comparison needs equal contracts
requires_cuda  True if it cannot run on the CPU (Triton impls run under TRITON_INTERPRET=1 there)
cpu_only       True if it wants CPU tensors whatever ``--device`` says (torch oracles that loop
               per request in Python, external programs that read files); see :func:`place`
external       True if it runs outside this process (its self-reported timing is the one to use)
keeps_inputs   True if ``sample`` never writes into the step's tensors; otherwise (the default, since engines'
               samplers divide logits in place: vLLM's apply_temperature) :func:`place` hands it a copy, so
               neither the other side of a comparison nor the expected routes see what it wrote
timeout        seconds an external program may take per step (None: not external / default)

Hooks
-----
sample(step) -> SampleResult        the whole step; the only method an impl must write
prepare(step) -> state              host work only (index maps, buffers); optional, for benchmarks
launch(state) -> (tokens, counts)   device work only, no host sync, graph-capturable; with prepare
begin_recording(label)              called before the steps of each recording (external impls
                                    quote it in their messages)
close()                             release processes or files; called once when done
                                    (``with impl:`` calls it on exit)
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from replay_harness.recording.step import SampleResult, Step

HOOK_DEFAULTS = {"rng_contract": "unknown", "requires_cuda": False, "cpu_only": False, "external": False,
                 "keeps_inputs": False, "timeout": None, "description": ""}


class Sampler:
    """Base class of every impl; the defaults are what an impl without that hook means."""

    name: str = "unnamed"
    description: str = ""
    rng_contract: str = "unknown"
    requires_cuda: bool = False
    cpu_only: bool = False
    external: bool = False
    keeps_inputs: bool = False
    timeout: float | None = None

    def sample(self, step: Step) -> SampleResult:
        raise NotImplementedError

    @property
    def launchable(self) -> bool:
        """True when the impl splits ``sample`` into ``prepare`` + ``launch`` (timed separately)."""
        return type(self).prepare is not Sampler.prepare and type(self).launch is not Sampler.launch

    def prepare(self, step: Step) -> Any:
        raise NotImplementedError(f"impl '{self.name}' has no prepare/launch split")

    def launch(self, state: Any) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError(f"impl '{self.name}' has no prepare/launch split")

    def result(self, state: Any, tokens: torch.Tensor, counts: torch.Tensor) -> SampleResult | None:
        """The SampleResult of a launch of ``state``, when the state says its routes; None otherwise
        (callers then run ``sample``). :class:`LaunchSampler` states always say them."""
        return None

    def begin_recording(self, label: str) -> None:
        """Called before the steps of each recording; no-op unless the impl quotes it."""

    def close(self) -> None:
        """Release what the impl holds (processes, files); no-op by default."""

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LaunchSampler(Sampler):
    """An impl whose step is ``prepare`` (host work) then ``launch`` (device work only): ``sample`` is the
    two. Its state carries ``routes`` ([R] int8 codes, host) and may carry ``notes`` (list[str])."""

    def sample(self, step: Step) -> SampleResult:
        if step.num_requests == 0:
            return SampleResult.empty(0, step.max_drafts)
        state = self.prepare(step)
        return self.result(state, *self.launch(state))

    def result(self, state: Any, tokens: torch.Tensor, counts: torch.Tensor) -> SampleResult:
        return SampleResult(tokens=tokens.cpu(), counts=counts.cpu(), routes=state.routes.clone().cpu(),
                            notes=list(getattr(state, "notes", [])))


class Adapted(Sampler):
    """A third-party impl object that does not subclass :class:`Sampler`, with the defaults filled in.

    ``name``: what to call it when ``inner`` has no ``name`` (default: its class name).
    """

    def __init__(self, inner: Any, name: str | None = None):
        self.inner = inner
        for attr, default in HOOK_DEFAULTS.items():
            setattr(self, attr, getattr(inner, attr, default))
        self.name = str(getattr(inner, "name", name or type(inner).__name__))
        self._has_launch = callable(getattr(inner, "prepare", None)) and callable(getattr(inner, "launch", None))

    @property
    def launchable(self) -> bool:
        return self._has_launch

    def sample(self, step: Step) -> SampleResult:
        return self.inner.sample(step)

    def prepare(self, step: Step) -> Any:
        return self.inner.prepare(step) if self._has_launch else super().prepare(step)

    def launch(self, state: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inner.launch(state) if self._has_launch else super().launch(state)

    def begin_recording(self, label: str) -> None:
        hook = getattr(self.inner, "begin_recording", None)
        if callable(hook):
            hook(label)

    def close(self) -> None:
        hook = getattr(self.inner, "close", None)
        if callable(hook):
            hook()


def as_sampler(obj: Any, name: str | None = None) -> Sampler:
    """``obj`` itself if it is a :class:`Sampler`, else wrapped in :class:`Adapted` (``name``: see there)."""
    return obj if isinstance(obj, Sampler) else Adapted(obj, name)


def placement(impl: Sampler, device: torch.device) -> torch.device:
    """The device an impl's step tensors go to: the CPU for ``cpu_only`` impls, else ``device``."""
    return torch.device("cpu") if impl.cpu_only else device


def place(step: Step, impl: Sampler, device: torch.device) -> Step:
    """``step`` on the device ``impl`` runs on (the one placement rule, used by every caller): tensors of its
    own unless the impl declares ``keeps_inputs`` (a move to another device copies already)."""
    placed = step.to(placement(impl, device))
    if getattr(impl, "keeps_inputs", False) or placed.logits.data_ptr() != step.logits.data_ptr() \
            or step.logits.numel() == 0:
        return placed
    fields = {f.name: getattr(placed, f.name) for f in dataclasses.fields(placed)}
    return Step(**{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in fields.items()})
