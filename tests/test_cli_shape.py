"""One CLI shape (issue 16, part 4, the rest): --quiet on bench and record, close warnings from every
command that reads recordings, audit's "not testable" (exit 4), --json-file on every --json command,
--temperature repeatable and cycled, help without python types, `replay completion SHELL`.

Most tests run the app in this process (no torch import per call); recordings are a few tiny steps."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import main_inproc, write_recording
from replay_harness.errors import ReplayError, UsageError
from replay_harness.recording.synthetic import Case

REPO = Path(__file__).resolve().parents[1]
FOUNDING = REPO / "fixtures" / "real-founding"
PLAIN = REPO / "fixtures" / "synthetic-plain"
CASE = Case("shape", vocab_size=40, num_requests=3, max_drafts=2, steps=2, temperatures=(0.0, 1.0),
            features=frozenset({"ragged"}))
COMMANDS = ["run", "inspect", "validate", "impls", "record", "bench", "synth", "verify", "audit", "conformance",
            "completion"]
JSON_COMMANDS = [c for c in COMMANDS if c != "completion"]


def inproc(*args: str, **env: str) -> tuple[int, str, str]:
    """The `replay` app in this process: exit code (a ReplayError's, as `main` maps it), stdout, stderr."""
    from typer.testing import CliRunner

    from replay_harness.cli import app

    result = CliRunner().invoke(app, list(args), env=env or None)
    if isinstance(result.exception, ReplayError):
        return result.exception.exit_code, result.stdout, str(result.exception)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def replay(*args: str, **env: str) -> tuple[int, str, str]:
    """The real entry point, `replay_harness.cli.main`, in this process (for what only `main` does: errors,
    completion): exit code, stdout, stderr."""
    return main_inproc(*args, **env)


@pytest.fixture(scope="module")
def rec(tmp_path_factory):
    return write_recording(tmp_path_factory.mktemp("rec") / "rec", CASE)


@pytest.fixture(scope="module")
def spoiled(tmp_path_factory):
    """Two recordings: a did not close cleanly, b's content digest does not match its steps."""
    root = tmp_path_factory.mktemp("spoiled")
    a, b = write_recording(root / "a", CASE), write_recording(root / "b", CASE, seed=1)
    for path, change in ((a, {"complete": False}), (b, {"digest": "0" * 32})):
        manifest = json.loads((path / "manifest.json").read_text())
        (path / "manifest.json").write_text(json.dumps({**manifest, **change}))
    return a, b


@pytest.fixture(scope="module")
def derived(tmp_path_factory):
    """`replay synth fixtures/real-founding --out X --batch 4 --drafts 2 --vocab 1024`."""
    from replay_harness.recording.derive import write_derived

    return write_derived(FOUNDING, tmp_path_factory.mktemp("derived") / "X", batch=4, drafts=2, vocab=1024)


# ------------------------------------------------------------------------------------------------- --quiet
def test_bench_progress_lines_off_a_terminal_and_quiet_silences_them(rec):
    args = ("bench", str(rec), "--impl", "reference", "--device", "cpu", "--repeats", "1", "--warmup", "0")
    code, out, err = inproc(*args, REPLAY_PROGRESS_EVERY="0")
    assert code == 0, out + err
    assert "replay bench: 1/2 steps" in err and "replay bench: 2/2 steps" in err
    for quiet in ("--quiet", "-q"):
        code, out, err = inproc(*args, quiet, REPLAY_PROGRESS_EVERY="0")
        assert code == 0 and err == "" and "verdict" in out


def test_record_takes_quiet_and_its_progress_obeys_it(tmp_path, capsys, monkeypatch):
    from replay_harness.cli.record import _decoding

    afile = tmp_path / "afile"
    afile.write_text("x")
    code, _, err = inproc("record", "-q", "--steps", "1", "--out", str(afile))  # refused before the model loads
    assert code == 2 and "No such option" not in err and str(afile) in err
    monkeypatch.setenv("REPLAY_PROGRESS_EVERY", "0")
    for quiet in (False, True):
        with _decoding(2, quiet=quiet) as advance:
            advance(1)
            advance(2)
        err = capsys.readouterr().err
        assert ("replay record: 2/2 steps" in err) != quiet, err


# ------------------------------------------------------------------------------ close warnings everywhere
@pytest.mark.parametrize("command", [["audit", "-q"], ["verify", "-q", "--trials", "2", "--steps", "0",
                                                        "--device", "cpu"], ["inspect"],
                                     ["bench", "-q", "--impl", "reference", "--device", "cpu", "--repeats", "1",
                                      "--warmup", "0"]])
def test_every_reader_warns_once_about_incomplete_and_digest_mismatched_recordings(spoiled, command):
    a, b = spoiled
    code, out, err = inproc(command[0], str(a), str(b), *command[1:])
    assert code in (0, 4), out + err
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith("replay: warning: ") for line in lines), err
    assert str(a) in lines[0] and "did not close cleanly" in lines[0]
    assert str(b) in lines[1] and "content digest does not match" in lines[1]


# ------------------------------------------------------------------------------------ audit: not testable
def test_audit_says_not_testable_and_exits_4_on_a_derived_recording(derived, rec):
    code, out, err = inproc("audit", str(derived), "-q")
    assert code == 4, out + err
    assert f"{derived}: not testable, 0 tokens tested: the recording has no engine tokens (derived recording)" in out
    assert "nothing found" not in out
    code, out, _ = inproc("audit", str(derived), str(rec), "--json", "-q")  # one untestable recording: still 4
    doc = json.loads(out)
    assert code == 4 and doc["exit_code"] == 4 and not doc["ok"] and not doc["testable"]
    first, second = doc["recordings"]
    assert not first["testable"] and first["not_testable"].startswith("0 tokens tested: the recording has no engine")
    assert second["testable"] and second["not_testable"] is None and second["tokens_greedy"] > 0


def test_audit_names_why_a_recording_of_refused_requests_is_not_testable():
    import torch

    from replay_harness.checks.audit import audit_steps
    from replay_harness.recording.synthetic import random_step

    step = random_step(torch.Generator().manual_seed(0), CASE, 0)
    tokens = torch.full((step.num_requests, 3), -1, dtype=torch.long)
    result = audit_steps([(step, tokens, torch.zeros(step.num_requests, dtype=torch.int32))])
    assert result.ok and not result.testable
    assert result.not_testable == "0 tokens tested: none of its 3 request-steps emitted a token"


# ------------------------------------------------------------------------------------------- --json-file
@pytest.mark.parametrize("command", JSON_COMMANDS)
def test_json_file_naming_a_folder_is_refused_before_any_work(command, tmp_path, rec):
    args = {"run": [str(rec)], "inspect": [str(rec)], "validate": [str(rec)], "audit": [str(rec)],
            "verify": [str(rec)], "bench": [str(rec), "--impl", "reference"], "record": ["--steps", "1"],
            "synth": [str(PLAIN), "--batch", "2", "--vocab", "100"]}.get(command, [])
    out_dir = tmp_path / "synth-out"
    if command in ("synth", "record"):
        args += ["--out", str(out_dir)]
    code, _, err = inproc(command, *args, "--json-file", str(tmp_path))
    assert code == 2 and "--json-file" in err and "is a folder" in err, err
    assert not out_dir.exists()  # synth / record: nothing written


def test_json_file_in_a_missing_folder_or_inside_an_input_is_exit_2(tmp_path, rec):
    code, out, err = inproc("run", str(rec), "--json-file", str(tmp_path / "nope" / "r.json"))
    assert code == 2 and "folder" in err and "does not exist" in err and out == ""
    before = (rec / "manifest.json").read_text()
    code, _, err = inproc("inspect", str(rec), "--json-file", str(rec / "manifest.json"))
    assert code == 2 and "is inside the input" in err and (rec / "manifest.json").read_text() == before


def test_an_error_after_the_check_replaces_the_json_file_and_none_is_written_before_it(tmp_path, rec):
    target = tmp_path / "doc.json"
    target.write_text("an earlier run's document")
    code, _, err = replay("run", str(rec), "--impl", "nope", "--json-file", str(target))
    doc = json.loads(target.read_text())
    assert code == 2 == doc["exit_code"] and doc["error"].startswith("unknown impl 'nope'") and doc["kind"] == "error", err
    code, _, err = replay("run", str(rec), "--json-file", str(rec / "x.json"), "--no-such-option")
    assert code == 2 and "No such option" in err and not (rec / "x.json").exists()  # never into an input


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_json_file_in_an_unwritable_folder_is_exit_2(tmp_path, rec):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    code, _, err = inproc("validate", str(rec), "--json-file", str(locked / "v.json"))
    assert code == 2 and "cannot write" in err


@pytest.mark.parametrize("command", [["run", "--device", "cpu"], ["inspect"], ["validate"], ["audit", "-q"]])
def test_json_file_holds_what_json_prints_and_the_table_still_goes_to_stdout(command, tmp_path, rec):
    target = tmp_path / "doc.json"
    code, out, _ = inproc(command[0], str(rec), *command[1:], "--json", "--json-file", str(target))
    assert code == 0 and json.loads(out) == json.loads(target.read_text())
    target.unlink()
    code, table, _ = inproc(command[0], str(rec), *command[1:], "--json-file", str(target))
    assert code == 0 and json.loads(target.read_text()) == json.loads(out)
    with pytest.raises(json.JSONDecodeError):
        json.loads(table)  # the human output, not the document


def test_json_file_for_impls_and_synth(tmp_path):
    target = tmp_path / "impls.json"
    code, out, _ = inproc("impls", "--json-file", str(target))
    assert code == 0 and "reference" in out and {"reference", "stochastic"} <= {r["name"] for r in
                                                                              json.loads(target.read_text())["impls"]}
    code, out, _ = inproc("synth", str(PLAIN), "--out", str(tmp_path / "s"), "--batch", "2", "--vocab", "100",
                          "--json-file", str(tmp_path / "s.json"))
    assert code == 0 and out.startswith("wrote ") and json.loads((tmp_path / "s.json").read_text())["derived"]


# ------------------------------------------------------------------------------------------ --temperature
def test_temperatures_are_repeatable_comma_separated_and_checked():
    from replay_harness.cli.common import temperatures

    assert temperatures(None) == []
    assert temperatures(["0.7"]) == [0.7]
    assert temperatures(["0", "1.0"]) == temperatures(["0,1.0"]) == [0.0, 1.0]
    for bad in (["-1"], ["x"], ["inf"], ["0,nan"]):
        with pytest.raises(UsageError, match="--temperature"):
            temperatures(bad)


@pytest.mark.parametrize("given, expected", [(["--temperature", "0", "--temperature", "1"], [0.0, 1.0, 0.0, 1.0]),
                                             (["--temperature", "0,1.0"], [0.0, 1.0, 0.0, 1.0]),
                                             (["--temperature", "0.7"], [0.7] * 4), ([], [1.0] * 4)])
def test_record_cycles_its_temperatures_over_the_requests(monkeypatch, given, expected):
    from replay_harness.record import pipeline

    seen = {}

    def fake_run_record(opts, **_):
        seen["temperatures"] = [p.temperature for p in pipeline._requests(opts)[1]]
        return {"out": "x"}

    monkeypatch.setattr(pipeline, "run_record", fake_run_record)
    code, out, err = inproc("record", "--batch", "4", *given, "--json")
    assert code == 0, out + err
    assert seen["temperatures"] == expected


def test_bench_takes_one_temperature_as_before_and_repeats_of_it(rec):
    from replay_harness.cli.bench import _temperature_override

    assert _temperature_override([], "--temperature") is None
    assert _temperature_override([0.5, 0.5], "--temperature") == 0.5
    code, out, err = inproc("bench", str(rec), "--impl", "reference", "--device", "cpu", "--repeats", "1",
                            "--warmup", "0", "--temperature", "0", "--json", "-q")
    assert code == 4, out + err  # every request greedy: the stochastic path never ran
    assert json.loads(out)["sides"][0]["overrides"]["temperature"] == 0.0


def test_bench_cycles_several_temperatures_over_the_requests(rec):
    code, out, err = inproc("bench", str(rec), "--impl", "reference", "--device", "cpu", "--repeats", "1",
                            "--warmup", "0", "--drop-drafts", "--temperature", "0", "--temperature", "1", "--json",
                            "-q")
    assert code == 0, out + err
    routes = json.loads(out)["coverage"]["A"]["requests_by_route"]
    assert routes == {"greedy-sample": 4, "random-sample": 2}, routes  # 3 requests x 2 steps: T = 0, 1, 0


# ---------------------------------------------------------------------------------------------- --help
@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_metavars_not_python_types(command):
    code, out, _ = inproc(command, "--help", COLUMNS="200")
    assert code == 0
    for python_type in ("<list[", "[str]", "<str>", "<int", "<float>", "<bool>", " LIST", " TEXT", "{"):
        assert python_type not in out, (python_type, out)
    usage = out.splitlines()[0]
    if command in ("run", "inspect", "validate", "audit"):
        assert usage.endswith("[OPTIONS] RECORDING...") and "\n  RECORDING...  Recording folders" in out
    if command in ("bench", "verify"):
        assert usage.endswith("[OPTIONS] [RECORDING]...")


# ------------------------------------------------------------------------------------------ completion
def test_completion_prints_a_script_and_completes_commands():
    code, out, err = replay("completion", "bash")
    assert code == 0 and err == ""
    assert "_replay_completion()" in out and "complete -o default -F _replay_completion replay" in out
    assert "_REPLAY_COMPLETE=complete_bash" in out
    for shell, mark in (("zsh", "#compdef replay"), ("fish", "complete --command replay")):
        code, out, _ = replay("completion", shell)
        assert code == 0 and mark in out
    code, _, err = replay("completion", "tcsh")
    assert code == 2 and "unknown shell 'tcsh'" in err
    code, out, _ = replay(_REPLAY_COMPLETE="complete_bash", COMP_WORDS="replay ru", COMP_CWORD="1")
    assert code == 0 and out.split() == ["run"]   # what the script asks replay for, and replay answers
    code, out, _ = replay(_REPLAY_COMPLETE="complete_bash", COMP_WORDS="replay audit --js", COMP_CWORD="2")
    assert code == 0 and set(out.split()) == {"--json", "--json-file"}


def test_completion_leaves_startup_alone():
    p = subprocess.run([sys.executable, "-m", "replay_harness.cli", "--version"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("replay ") and p.stderr == ""
