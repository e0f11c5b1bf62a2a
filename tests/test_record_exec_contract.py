"""`replay record --impl exec:PROG` writes the RNG contract the program declares in its handshake (issue 66 item
8), not "mrv2": the program replaying its own recording compares every token (exit 0), and the reference does not
blame it for its own noise (exit 4, never a FAIL). Decoded with the SYNTHETIC tiny Llama of tests/tiny_model.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import main_inproc
from tiny_model import save_tiny_llama

TESTS = Path(__file__).resolve().parent
PROGRAM = f"exec:{sys.executable} -m replay_harness.impls.external_adapter held_out:OwnRng"


def test_record_through_an_exec_program_writes_its_declared_contract(tmp_path, monkeypatch):
    monkeypatch.chdir(TESTS)  # the adapter imports held_out from here
    model = save_tiny_llama(tmp_path / "model")
    out = tmp_path / "rec"
    code, _, err = main_inproc("record", "hello", "--model", str(model), "--steps", "2", "--temperature", "1.0",
                               "--out", str(out), "--impl", PROGRAM, "--quiet")
    assert code == 0, err
    assert json.loads((out / "manifest.json").read_text())["rng_contract"] == "my-engine-rng"
    code, stdout, err = main_inproc("run", str(out), "--impl", PROGRAM, "--json")
    doc = json.loads(stdout)
    assert code == 0 and doc["tokens_not_compared"] == 0, stdout + err
    code, stdout, err = main_inproc("run", str(out), "--impl", "reference", "--json")
    assert code == 4 and json.loads(stdout)["verdict"] == "INCONCLUSIVE", stdout + err
