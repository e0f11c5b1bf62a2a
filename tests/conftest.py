"""Shared test set-up: Triton runs under the interpreter when there is no GPU."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede any Triton kernel import

import pytest  # noqa: E402

try:  # hypothesis comes with the "test" extra; only tests/test_hardening.py needs it
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover
    settings = None
if settings is not None:
    # Profiles (tests/test_hardening.py): "ci" is the default, derandomized so CI is reproducible;
    # REPLAY_HYPOTHESIS_PROFILE=thorough runs 10x the examples with fresh randomness.
    settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("thorough", max_examples=1000, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("REPLAY_HYPOTHESIS_PROFILE", "ci"))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(REPO, ".peers")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


def pytest_addoption(parser):
    parser.addoption("--regen-goldens", action="store_true", default=False,
                     help="rewrite tests/goldens/*.txt from the current code instead of comparing (review the diff!)")
