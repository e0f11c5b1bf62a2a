"""Shared test set-up: Triton runs under the interpreter when there is no GPU."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede any Triton kernel import

import pytest  # noqa: E402

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
