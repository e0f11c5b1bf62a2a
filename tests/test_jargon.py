"""What a user reads is in the project's own terms (issue 56 item 9): no "the brief's replay/" in the README, a peer
that is not there says how to install it from its wheel (not a script of another folder), and `replay impls` prints
no Python None / False."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import main_inproc

REPO = Path(__file__).resolve().parents[1]


def test_readme_and_architecture_speak_of_the_packages_not_the_brief():
    for doc in ("README.md", "docs/ARCHITECTURE.md"):
        assert "brief" not in (REPO / doc).read_text().lower(), doc


def test_a_missing_peer_says_how_to_install_it(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    monkeypatch.setenv("REPLAY_PEERS", str(tmp_path / "no-peers"))
    code, _, err = main_inproc("run", str(REPO / "fixtures" / "synthetic-plain"), "--impl", "vllm-mrv2")
    assert code == 3 and err.count("\n") == 1, err
    assert "pip install vllm" in err and "prepare.sh" not in err and "carry" not in err


def test_impls_prints_words_not_python_values():
    code, out, _ = main_inproc("impls")
    assert code == 0 and not re.search(r"\b(None|False|True)\b", out), out
