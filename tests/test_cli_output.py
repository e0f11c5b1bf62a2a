"""Output in CI logs and the consistency of the command line (issue 66 items 5 and 6).

Piped (a CI log: stdout not a terminal), with $COLUMNS unset and set narrow: no table folds a name inside a word
(a recording path, an impl name such as ``greedy-at-temperature``), no help text is split at a hyphen
(``--routes-`` / ``only``), `inspect` shows the recording's source or says it cut it and how to see all,
progress comes at least every REPLAY_PROGRESS_EVERY seconds while one long step runs, and a long operation
(a model load) says what it is doing. Consistency: a count of steps is ``--num-steps`` (``--steps`` selects),
an option that takes one value may not be repeated (click kept the last one silently), conformance calls a
vector whose every request the impl refused "n/a", and every JSON document says ``ok`` (``validate`` keeps
``valid`` beside it) with an error message that does not repeat its prefix."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import main_inproc, write_recording
from replay_harness import impls as registry
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.step import ROUTE_CODE
from replay_harness.recording.synthetic import CASES, Case, write_case

REPO = Path(__file__).resolve().parents[1]
WIDTHS = [None, "40"]  # $COLUMNS unset (80 when piped), and narrow
COMMANDS = ["run", "inspect", "validate", "impls", "record", "bench", "synth", "verify", "audit", "conformance",
            "diff", "completion"]


def piped(*args: str, columns: str | None = None, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    """`replay ARGS` with stdout and stderr to pipes, $COLUMNS as given (unset: None)."""
    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    environ.update({"NO_COLOR": "1", **env, **({"COLUMNS": columns} if columns else {})})
    return subprocess.run([sys.executable, "-m", "replay_harness.cli", *args], capture_output=True, text=True,
                          env=environ, cwd=cwd, timeout=300)


# ------------------------------------------------------------------------------------------------ tables
@pytest.mark.parametrize("columns", WIDTHS)
def test_piped_tables_never_fold_a_recording_name(tmp_path, columns):
    long_name = tmp_path / "recordings-of-greedy-at-temperature-engine-build-1234"
    shutil.copytree(REPO / "fixtures" / "synthetic-founding", long_name)
    p = piped("run", str(long_name), "fixtures/synthetic-plain", "--impl", "greedy-only", columns=columns)
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    rule = next(i for i, ln in enumerate(lines) if ln.startswith("─" * 10))
    table = lines[rule + 1:rule + 1 + next(i for i, ln in enumerate(lines[rule + 1:]) if "routing violation" in ln)]
    for name in (str(long_name), "fixtures/synthetic-plain"):
        assert any(ln.startswith(name + " ") for ln in table), "\n".join(lines)   # whole, on one line


def test_a_table_wraps_text_at_spaces_and_widens_for_a_word_it_cannot_break():
    import io

    from replay_harness.cli import tables
    from replay_harness.cli.common import SafeConsole

    t = tables.table("impls", [("name", tables.WORD), ("description", tables.TEXT)])
    t.add_row("greedy-at-temperature", "verifies greedily at any temperature, the founding bug of an engine")
    t.add_row("x", "/a/very/long/path/that/has/no/space/in/it/and/is/longer/than/forty/columns")
    for width in (40, 80):
        buf = io.StringIO()
        SafeConsole(file=buf, width=width, no_color=True, soft_wrap=True).print(t)  # as cli.common.out
        text = buf.getvalue()
        assert "greedy-at-temperature" in text and "/a/very/long/path/that/has/no/space/in/it/and/is/longer/than/" \
            "forty/columns" in text, text
        assert all(w in text.split() for w in "verifies greedily at any temperature, the founding bug".split())
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert max(map(len, lines)) <= 100   # at 80 columns: as wide as the path needs, prose wrapped


# ------------------------------------------------------------------------------------------------ help
@pytest.mark.parametrize("columns", WIDTHS)
def test_help_is_never_split_at_a_hyphen_and_examples_stay_whole(columns):
    from replay_harness.cli import app
    import typer

    group = typer.main.get_command(app)
    for command in COMMANDS:
        p = piped(command, "--help", columns=columns)
        assert p.returncode == 0, p.stderr
        assert not re.search(r"\w-\n", p.stdout), (command, p.stdout)   # "--routes-" / "only", "kept-" / "set"
        examples = [ln.strip() for ln in group.commands[command].help.splitlines() if ln.strip().startswith("Example:")]
        shown = [ln.strip() for ln in p.stdout.splitlines()]
        assert examples and all(e in shown for e in examples), (command, p.stdout)   # each one line, to copy
        words = set(p.stdout.split())
        for param in group.commands[command].params:
            for opt in param.opts:
                if opt.startswith("--") and not param.hidden:
                    assert any(w.strip("`'.,;:()[]") == opt for w in words), (command, opt)


# ------------------------------------------------------------------------------------------------ inspect
def test_inspect_shows_a_source_whole_or_says_it_cut_it_and_how_to_see_all(tmp_path):
    rec = write_case(CASES["synthetic-plain"], tmp_path / "plain")
    manifest = json.loads((rec / "manifest.json").read_text())
    manifest["source"] = {"note": "word " * 60}  # 313 characters of JSON: was cut at 200
    (rec / "manifest.json").write_text(json.dumps(manifest))
    p = piped("inspect", str(rec))
    row = " ".join(p.stdout.split("\nsource ")[1].split("steps / request")[0].split())
    assert p.returncode == 0 and row.count("word") == 60 and "cut" not in row, row
    manifest["source"] = {"note": "word " * 600}
    (rec / "manifest.json").write_text(json.dumps(manifest))
    p = piped("inspect", str(rec))
    row = " ".join(p.stdout.split("\nsource ")[1].split("steps / request")[0].split())
    assert "of 3,012 characters; `replay inspect --json` prints all of it" in row, row
    full = json.loads(piped("inspect", str(rec), "--json").stdout)["recordings"][0]["source"]["note"]
    assert full.count("word") == 600


# ------------------------------------------------------------------------------------------------ progress
class Slow(ReferenceSampler):
    """The reference, one second per call: one step of bench takes several seconds."""

    name = "slow"

    def sample(self, step):
        time.sleep(1.0)
        return super().sample(step)


def test_bench_prints_a_line_at_least_every_period_while_one_step_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(registry._registered, "slow", Slow)
    rec = write_recording(tmp_path / "one", Case("one", vocab_size=50, num_requests=2, max_drafts=0, steps=1,
                                                 temperatures=(1.0,)))
    start = time.monotonic()
    code, out, err = main_inproc("bench", str(rec), "--impl", "slow", "--device", "cpu", "--repeats", "2",
                                 "--warmup", "1", REPLAY_PROGRESS_EVERY="0.5")
    took = time.monotonic() - start
    assert code == 0, out + err
    during = [ln for ln in err.splitlines() if ln.startswith("replay bench: 0/1 steps")]
    assert len(during) >= int(took / 0.5) - 3 >= 3, err   # a heartbeat through the 4 s step, not one line at its end
    assert "s elapsed; timing " in during[-1] and "replay bench: 1/1 steps" in err.splitlines()[-1]


def test_a_long_operation_says_what_it_does_off_a_terminal(capsys, monkeypatch):
    from replay_harness.cli.common import waiting

    monkeypatch.setenv("REPLAY_PROGRESS_EVERY", "0.2")
    with waiting("loading the model smollm2-135m"):
        time.sleep(0.7)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "loading the model smollm2-135m ..." and lines[-1].startswith("loading the model "
                                                                                      "smollm2-135m: done in")
    assert any("s elapsed" in ln for ln in lines[1:-1]), lines
    with waiting("loading", quiet=True):
        pass
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------------------------------------ options
@pytest.mark.parametrize("args", [["bench", "fixtures/synthetic-plain", "--impl", "reference", "--top-k", "5",
                                   "--top-k", "10"],
                                  ["record", "--top-k", "5", "--top-k", "10", "--out", "/nonexistent/x"],
                                  ["verify", "fixtures/synthetic-plain", "--trials", "4", "--trials", "8"]])
def test_an_option_that_takes_one_value_given_twice_is_exit_2_naming_it(args):
    code, out, err = main_inproc(*args)
    option = next(a for a in args if args.count(a) == 2)
    assert code == 2 and f"{option} was given 2 times" in err and len(err.strip().splitlines()) == 1, err
    if args[0] == "record":
        assert f"({option} N[,N...])" in err   # its one value is a comma-separated list


def test_repeatable_options_and_repeated_flags_are_still_accepted():
    code, out, err = main_inproc("bench", "fixtures/synthetic-plain", "--impl", "reference", "--temperature", "0",
                                 "--temperature", "1", "--repeats", "1", "--warmup", "0", "-q", "-q", "--json")
    assert code == 0, err
    assert json.loads(out)["sides"][0]["overrides"]["temperature"] == [0.0, 1.0]


def test_synth_counts_with_num_steps_and_steps_is_a_deprecated_alias_that_warns(tmp_path):
    args = ("synth", "fixtures/synthetic-plain", "--batch", "2", "--vocab", "100")
    code, out, err = main_inproc(*args, "--out", str(tmp_path / "a"), "--num-steps", "3")
    assert code == 0 and "3 derived/synthetic step(s)" in out and err == "", err
    code, out, err = main_inproc(*args, "--out", str(tmp_path / "b"), "--steps", "1")
    assert code == 0 and "1 derived/synthetic step(s)" in out
    assert "replay: warning: synth --steps 1 is deprecated: write --num-steps 1" in err
    code, _, err = main_inproc(*args, "--out", str(tmp_path / "c"), "--steps", "1", "--num-steps", "2")
    assert code == 2 and "give --num-steps only" in err


# ------------------------------------------------------------------------------------------------ conformance
def test_conformance_calls_a_vector_whose_requests_the_impl_refused_na_not_a_failure():
    code, out, err = main_inproc("conformance", "--impl", "gumbel-max", "--device", "cpu", "--rule",
                                 "stochastic-verify", "--rule", "temperature")
    assert code == 0, out + err   # was exit 1: every drafted request "refused"
    assert out.splitlines()[0].startswith("n/a  stochastic-verify") and "refused" in out.splitlines()[0]
    assert not [ln for ln in out.splitlines() if ln.startswith("gumbel-max: rule")]   # no failure lines
    code, out, _ = main_inproc("conformance", "--impl", "gumbel-max", "--device", "cpu", "--rule",
                               "stochastic-verify", "--json")
    doc = json.loads(out)
    assert code == 4 and doc["vectors"][0]["status"] == "n/a" and doc["vectors"][0]["refused"] == 6


class PlainOnlyOwnRng(ReferenceSampler):
    """A plain sampler of its own RNG: refuses every request with drafts (the RNG-independent path)."""

    name, rng_contract = "plain-only", "own"

    def sample(self, step):
        res = super().sample(step)
        cu = step.cu_num_logits.tolist()
        for r in range(step.num_requests):
            if cu[r + 1] - cu[r] > 1:
                res.tokens[r], res.counts[r], res.routes[r] = -1, 0, ROUTE_CODE["refused"]
        return res


def test_conformance_sets_refusals_aside_on_the_rng_independent_path_too(monkeypatch):
    monkeypatch.setitem(registry._registered, "plain-only", PlainOnlyOwnRng)
    code, out, err = main_inproc("conformance", "--impl", "plain-only", "--device", "cpu", "--rule",
                                 "placeholder-drafts", "--trials", "4")
    assert code == 4, out + err   # nothing applies: neither a pass nor a failure
    assert out.splitlines()[0].startswith("n/a  placeholder-drafts") and "FAIL" not in out


# ------------------------------------------------------------------------------------------------ JSON
def test_validate_says_ok_as_every_command_and_keeps_valid_beside_it():
    code, out, _ = main_inproc("validate", "fixtures/synthetic-plain", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True and doc["valid"] is True and doc["exit_code"] == 0
    assert doc["recordings"][0]["ok"] is True and doc["recordings"][0]["valid"] is True


def test_the_error_document_does_not_repeat_the_line_prefix(tmp_path):
    code, out, err = main_inproc("inspect", str(tmp_path / "missing"), "--json")
    doc = json.loads(out)
    assert code == 2 and doc["kind"] == "error" and not doc["error"].startswith("error:")
    assert err.strip() == f"replay: error: {doc['error']}"
    code, out, err = main_inproc("run", "fixtures/synthetic-plain", "--no-such-option", "--json")
    doc = json.loads(out)
    assert code == 2 and doc["kind"] == "usage error" and doc["error"].startswith("No such option")
