"""Replay harness: torch oracles and tools for replaying LLM sampler steps.

    import replay_harness
    replay_harness.__version__                       # the installed distribution's version
    from replay_harness import Recorder              # recording.recorder.Recorder (docs/RECORDING.md)
    from replay_harness import load, replay, compare, assert_replays   # the Python API (docs/INTEGRATION.md)

The names are imported when first asked for: ``import replay_harness`` (and the pytest plugin, which lives
in this package) imports neither torch nor the harness.
"""
from __future__ import annotations

import importlib
from importlib import metadata as _metadata

try:
    __version__: str = _metadata.version("replay-sampler-harness")
except _metadata.PackageNotFoundError:  # a source tree put on sys.path without installing it
    __version__ = "0+unknown"

_LAZY = {"Recorder": "replay_harness.recording.recorder", "load": "replay_harness.api",
         "replay": "replay_harness.api", "compare": "replay_harness.api", "assert_replays": "replay_harness.api"}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    """``Recorder`` and the API's functions, imported on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'replay_harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
