"""`replay run / inspect / validate / impls` end to end on SYNTHETIC recordings."""
import json
import shutil
import types
from pathlib import Path

import pytest

from helpers import cli
from replay_harness import impls as registry
from replay_harness.errors import UsageError
from replay_harness.recording.synthetic import CASES, write_case

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def founding(tmp_path_factory):
    return write_case(CASES["synthetic-founding"], tmp_path_factory.mktemp("f") / "founding")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return write_case(CASES["synthetic-mixed"], tmp_path_factory.mktemp("m") / "mixed")


def test_reference_against_reference_exits_0(founding, mixed):
    code, out, err = cli("run", str(founding), str(mixed), "--impl", "reference", "--against", "reference")
    assert code == 0, out + err
    assert "FAIL" not in out


def test_reference_against_recorded_exits_0(founding):
    code, out, _ = cli("run", str(founding), "--impl", "reference")
    assert code == 0 and "ok" in out


def test_greedy_only_exits_1_with_violations_naming_requests(founding):
    code, out, _ = cli("run", str(founding), "--impl", "greedy-only", "--against", "reference", "--json")
    assert code == 1
    doc = json.loads(out)
    r = doc["recordings"][0]
    assert r["routing_violations"] == {"stochastic-verify -> greedy-verify": 18}
    assert {v["request_id"] for v in r["routing_violation_requests"]} >= {1000, 1001, 2000}
    code, out, _ = cli("run", str(founding), "--impl", "greedy-only", "--against", "reference")
    assert code == 1 and "routing violation stochastic-verify -> greedy-verify" in out and "1000" in out


def test_guarded_exits_1_and_names_refused(founding):
    code, out, _ = cli("run", str(founding), "--impl", "guarded")
    assert code == 1 and "guarded refused 18 request-steps; request ids 1000, 1001" in out
    # the impl's own notes say why, one a step (docs/EXTERNAL.md: notes are shown by `replay run`)
    assert "note: step 0: refused requests 1000, 1001" in out and "needs a stochastic verifier" in out
    assert out.count(": note: step ") == 3


def test_json_is_byte_identical_run_to_run(mixed):
    a = cli("run", str(mixed), "--impl", "greedy-only", "--against", "reference", "--json")
    b = cli("run", str(mixed), "--impl", "greedy-only", "--against", "reference", "--json")
    assert a == b and a[0] == 1


def test_inspect_and_validate(mixed):
    code, out, _ = cli("inspect", str(mixed), "--json")
    (s,) = json.loads(out)["recordings"]
    assert code == 0 and s["steps"] == 3 and s["synthetic"] and s["vocab_size"] == 1000
    assert s["greedy_requests"] + s["stochastic_requests"] == s["requests"] == 24
    code, out, _ = cli("inspect", str(mixed))
    assert code == 0 and "acceptance by position" in out
    code, out, _ = cli("validate", str(mixed))
    assert code == 0 and "valid" in out


def test_impls_lists_builtins():
    code, out, _ = cli("impls", "--json")
    names = {r["name"] for r in json.loads(out)["impls"]}
    assert code == 0 and {"reference", "greedy-only", "guarded", "stochastic"} <= names


def test_help_explains():
    code, out, _ = cli("run", "--help")
    assert code == 0 and "--against" in out and "Exit 0" in out


def test_registry_register_and_entry_points(monkeypatch):
    class Mine:
        name, description, rng_contract, requires_cuda = "mine", "test impl", "mrv2", False

    registry.register("mine", Mine)
    assert isinstance(registry.get_impl("mine").inner, Mine)  # wrapped by as_sampler: see tests/test_impls.py
    ep = types.SimpleNamespace(name="plugged", load=lambda: Mine)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep] if group == "replay.impls" else [])
    assert "plugged" in registry.known_names() and isinstance(registry.get_impl("plugged").inner, Mine)
    with pytest.raises(UsageError, match="known impls: .*plugged"):
        registry.get_impl("unknown-one")


NOT_THE_REPOSITORY = (".git", "build", "dist")  # beside any folder holding pyvenv.cfg (a virtual environment)


def in_repository(origin: str | None, repo: Path) -> bool:
    """True when ``origin`` (a module file or package folder) is part of the repository at ``repo``: inside it,
    and not inside a virtual environment made in the clone (`python -m venv .venv`: a folder holding
    pyvenv.cfg), .git, build or dist, whose packages are installed ones, not this repository's."""
    if not origin:
        return False
    path = Path(origin).resolve()
    root = repo.resolve()
    if not path.is_relative_to(root):
        return False
    for folder in [*reversed(path.relative_to(root).parents)][1:]:  # root/a, root/a/b, ... (not root itself)
        if folder.name in NOT_THE_REPOSITORY or (root / folder / "pyvenv.cfg").is_file():
            return False
    return True


def shadowing(names: tuple[str, ...], repo: Path) -> dict[str, list[str]]:
    """{import name: its origins} for the ``names`` that import from inside the repository."""
    import importlib.util

    found = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None:
            origins = [spec.origin, *(spec.submodule_search_locations or [])]
            if any(in_repository(o, repo) for o in origins):
                found[name] = origins
    return found


def test_import_names_do_not_shadow_other_packages():
    """transformers probes for a package importable as `kernels`, and `replay` is another PyPI project's
    import name: this project installs as replay_harness and replay_kernels only, so neither name
    resolves into this repository (a venv inside the clone is not the repository)."""
    assert not shadowing(("kernels", "replay"), REPO)


def test_a_venv_inside_the_clone_is_not_the_repository(tmp_path, monkeypatch):
    """`python -m venv .venv` in the clone, with Hugging Face's `kernels` installed in it: not a shadow; the
    same package at the repository's top level is one."""
    import importlib
    import sys

    site = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    (site / "kernels").mkdir(parents=True)
    (site / "kernels" / "__init__.py").write_text("")
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    monkeypatch.delitem(sys.modules, "kernels", raising=False)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert not shadowing(("kernels",), tmp_path)
    for name in ("build", "dist", ".git"):
        assert not in_repository(str(tmp_path / name / "kernels" / "__init__.py"), tmp_path)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert shadowing(("kernels",), tmp_path) == {"kernels": [str(tmp_path / "kernels" / "__init__.py"),
                                                             str(tmp_path / "kernels")]}


def test_bare_replay_prints_help_on_stdout_exit_0():
    code, out, err = cli()
    assert code == 0 and err == "", err
    assert out.startswith("Usage: replay") and "usage error" not in out and "Commands:" in out


def test_top_level_help_gives_every_command_a_whole_one_line_summary():
    code, out, _ = cli("--help")
    assert code == 0
    lines = out.split("Commands:")[1].strip().splitlines()
    names = [ln.split()[0] for ln in lines]
    assert names == ["run", "inspect", "validate", "impls", "record", "bench", "synth", "verify", "audit",
                     "conformance", "diff", "completion"]
    assert all(not ln.rstrip().endswith("...") for ln in lines), lines   # click cuts at ~45 chars
    assert "Exit codes: 0 ok" in out and "4 inconclusive" in out


@pytest.mark.parametrize("command", ["run", "inspect", "validate", "impls", "record", "bench", "synth", "verify",
                                     "audit", "conformance", "diff", "completion"])
def test_every_command_help_has_an_example(command):
    code, out, _ = cli(command, "--help")
    assert code == 0 and "Example: replay " + command in " ".join(out.split())


def test_inspect_marks_a_clipped_source(tmp_path):
    rec = write_case(CASES["synthetic-plain"], tmp_path / "plain")
    m = json.loads((rec / "manifest.json").read_text())
    m["source"] = {"note": "word " * 100}
    (rec / "manifest.json").write_text(json.dumps(m))
    code, out, err = cli("inspect", str(rec))
    assert code == 0, err
    source_row = out.split("source")[1].split("steps / requests")[0]
    assert " …" in source_row and "word word" in source_row   # cut, and said so (was a silent mid-word cut)


@pytest.mark.parametrize("command", [["record", "--steps", "1"], ["synth", "fixtures/synthetic-plain", "--batch", "2",
                                                                   "--vocab", "100"]])
def test_out_naming_a_file_is_one_line_exit_2(tmp_path, command):
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    args = [str(repo / a) if a.startswith("fixtures/") else a for a in command]
    code, out, err = cli(*args, "--out", str(afile))
    assert code == 2, err             # was: internal error NotADirectoryError, exit 3 (record: after loading the model)
    assert err.count("\n") == 1 and "internal error" not in err and str(afile) in err and "folder" in err
    assert afile.read_text() == "not a folder"


def test_run_takes_folders_of_recordings_each_once(tmp_path):
    """A folder of recordings is searched recursively; a recording named twice is replayed once."""
    from replay_harness.recording.discover import find_recordings

    nested = tmp_path / "corpus" / "a"
    nested.mkdir(parents=True)
    shutil.copytree(REPO / "fixtures" / "synthetic-plain", nested / "plain")
    shutil.copytree(REPO / "fixtures" / "synthetic-edge", tmp_path / "corpus" / "edge")
    found = find_recordings([str(tmp_path / "corpus"), str(nested / "plain")])
    assert found == [str(nested / "plain"), str(tmp_path / "corpus" / "edge")]
    code, out, err = cli("run", str(tmp_path / "corpus"), str(nested / "plain"), "--impl", "reference", "--json")
    assert code == 0, err
    assert [r["path"] for r in json.loads(out)["recordings"]] == found
    (tmp_path / "empty").mkdir()
    code, _, err = cli("run", str(tmp_path / "empty"), "--impl", "reference")
    assert code == 2 and "no replay recording" in err and "Traceback" not in err


def test_bench_refuses_an_output_inside_its_input(tmp_path):
    rec = tmp_path / "rec"
    shutil.copytree(REPO / "fixtures" / "synthetic-plain", rec)
    before = sorted((p.name, p.stat().st_size) for p in rec.rglob("*"))
    code, _, err = cli("bench", str(rec), "--impl", "reference", "--csv", str(rec / "manifest.json"))
    assert code == 2 and "is inside the input" in err
    assert sorted((p.name, p.stat().st_size) for p in rec.rglob("*")) == before
