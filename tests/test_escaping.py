"""Nothing read from a path or a file reaches the terminal raw (docs/HARDENING.md, "Printing what came from a
file"; issue 55, item 3): a recording folder named with a newline and an escape sequence, and manifest
strings holding terminal controls, give exactly one error line on stderr, no raw control character, and
validate's stdout lines stay one line per finding. JSON stays JSON (json.dumps escapes already).

Recordings used: copies of the committed fixture synthetic-plain (SYNTHETIC), renamed and edited here.
"""
import json
import re
import shutil
from pathlib import Path

import pytest

from helpers import cli, main_inproc
from replay_harness.errors import printable

REPO = Path(__file__).resolve().parent.parent
PLAIN = REPO / "fixtures" / "synthetic-plain"
NAME = "x\nreplay: error: FORGED second line \x1b[2J\u2028end"
TITLE = "\x1b]0;pwned\x07"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")  # a raw control (tab and the line ends aside)


def _hostile(tmp_path: Path, *, broken: bool) -> Path:
    rec = tmp_path / NAME
    shutil.copytree(PLAIN, rec)
    manifest = json.loads((rec / "manifest.json").read_text())
    manifest["rng_contract"] = TITLE
    manifest["source"] = {"engine": "evil\x00\x1b[31m\r\nreplay: error: FORGED"}
    (rec / "manifest.json").write_text(json.dumps(manifest))
    if broken:  # step 0 cut short: every command fails on it and names its path
        step = sorted((rec / "steps").iterdir())[0]
        step.write_bytes(step.read_bytes()[:9])
    return rec


def _clean(text: str) -> None:
    assert not RAW.search(text), repr(text)
    assert "\r" not in text
    assert not any(line.startswith("replay: error: FORGED") or line.startswith("end") for line in text.splitlines())


@pytest.mark.parametrize("command", [
    ("inspect",), ("run", "--impl", "reference"), ("audit",), ("verify", "--impl", "reference", "--trials", "4"),
    ("validate",),
])
def test_error_is_one_escaped_line(tmp_path, command):
    rec = _hostile(tmp_path, broken=True)
    code, out, err = main_inproc(command[0], str(rec), *command[1:])
    assert code == 2, (out, err)
    _clean(out)
    _clean(err)
    errors = [line for line in err.splitlines() if line.startswith("replay: error:")]
    if command[0] == "validate":  # the findings go to stdout, one line each, naming the escaped path
        assert errors == [] and err == ""
        assert any(printable(str(rec)) in line for line in out.splitlines())
        assert all(line.startswith(("error: ", "warning: ", printable(str(rec)))) for line in out.splitlines()), out
    else:
        assert len(err.splitlines()) == 1 and len(errors) == 1, err
        assert "x\\nreplay: error: FORGED second line \\x1b[2J\\u2028end" in errors[0]


def test_inspect_table_escapes_manifest_strings(tmp_path):
    rec = _hostile(tmp_path, broken=False)
    code, out, err = main_inproc("inspect", str(rec))
    assert code == 0, err
    _clean(out)
    _clean(err)
    assert "rng=\\x1b]0;pwned\\x07" in out
    code, out, _ = main_inproc("inspect", str(rec), "--json")  # JSON carries the exact strings, escaped as JSON
    assert code == 0 and "\x1b" not in out and json.loads(out)["recordings"][0]["rng_contract"] == TITLE


def test_error_line_is_escaped_by_the_console_script(tmp_path):
    """The real `replay` process (entry, rich on a pipe): one stderr line, no raw control."""
    rec = _hostile(tmp_path, broken=True)
    code, out, err = cli("inspect", str(rec), "--json")
    assert code == 2
    _clean(err)
    assert len(err.splitlines()) == 1 and err.startswith("replay: error: ")
    assert json.loads(out)["exit_code"] == 2 and NAME in json.loads(out)["error"]


def test_printable():
    assert printable("a\tb\nc\rd\x1b\x00\x7f\x85\u2028\u202e\udcff é") == \
        "a\\tb\\nc\\rd\\x1b\\x00\\x7f\\x85\\u2028\\u202e\\udcff é"
    assert printable("plain text: 1,2 [x]") == "plain text: 1,2 [x]"
