"""One JSON shape per command whatever the number of arguments, and a "schema" key in every document (issue 56
item 7; docs/INTEGRATION.md, "JSON documents"). inspect and validate: always a list under "recordings"; impls: an
object; bench: "ok" a boolean. Each command with 1 and with 2 recordings."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import main_inproc

REPO = Path(__file__).resolve().parents[1]
A, B = str(REPO / "fixtures" / "synthetic-plain"), str(REPO / "fixtures" / "real-mixed")

COMMANDS = {  # command -> (args before the recordings, args after, the list key)
    "run": (["run"], ["--impl", "reference"], "recordings"),
    "inspect": (["inspect"], [], "recordings"),
    "validate": (["validate"], [], "recordings"),
    "audit": (["audit"], [], "recordings"),
    "verify": (["verify"], ["--impl", "reference", "--trials", "4", "--steps", "0", "-q"], "recordings"),
    "bench": (["bench"], ["--impl", "reference", "--repeats", "1", "--warmup", "0", "-q"], "summary"),
}


def doc(*args: str) -> dict:
    code, out, err = main_inproc(*args, "--json")
    assert code in (0, 1, 4), err
    d = json.loads(out)
    assert isinstance(d, dict), out
    return d


@pytest.mark.parametrize("name", list(COMMANDS))
def test_one_shape_with_one_and_two_recordings(name):
    before, after, key = COMMANDS[name]
    one, two = doc(*before, A, *after), doc(*before, A, B, *after)
    for d in (one, two):
        assert d["schema"] == f"replay.{name}/1"
        assert isinstance(d[key], list)
        if name != "inspect":   # inspect describes, it has no verdict
            assert isinstance(d.get("ok", d.get("valid")), bool)   # never null
    assert set(one) == set(two)
    if key == "recordings":
        assert len(one[key]) == 1 and len(two[key]) == 2


def test_impls_and_conformance_and_errors():
    d = doc("impls")
    assert d["schema"] == "replay.impls/1" and {"reference", "stochastic"} <= {r["name"] for r in d["impls"]}
    d = doc("conformance", "--rule", "greedy-ties")
    assert d["schema"] == "replay.conformance/1" and d["ok"] is True and len(d["vectors"]) == 1
    code, out, _ = main_inproc("inspect", str(REPO / "no-such-recording"), "--json")
    assert code == 2 and json.loads(out)["schema"] == "replay.error/1"
