"""`replay run / inspect / validate / impls` end to end on SYNTHETIC recordings."""
import json
import types

import pytest

from helpers import cli
from replay_harness import impls as registry
from replay_harness.errors import UsageError
from replay_harness.synthetic import CASES, write_case


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


def test_json_is_byte_identical_run_to_run(mixed):
    a = cli("run", str(mixed), "--impl", "greedy-only", "--against", "reference", "--json")
    b = cli("run", str(mixed), "--impl", "greedy-only", "--against", "reference", "--json")
    assert a == b and a[0] == 1


def test_inspect_and_validate(mixed):
    code, out, _ = cli("inspect", str(mixed), "--json")
    s = json.loads(out)
    assert code == 0 and s["steps"] == 3 and s["synthetic"] and s["vocab_size"] == 1000
    assert s["greedy_requests"] + s["stochastic_requests"] == s["requests"] == 24
    code, out, _ = cli("inspect", str(mixed))
    assert code == 0 and "acceptance by position" in out
    code, out, _ = cli("validate", str(mixed))
    assert code == 0 and "valid" in out


def test_impls_lists_builtins():
    code, out, _ = cli("impls", "--json")
    names = {r["name"] for r in json.loads(out)}
    assert code == 0 and {"reference", "greedy-only", "guarded", "stochastic"} <= names


def test_help_explains():
    code, out, _ = cli("run", "--help")
    assert code == 0 and "--against" in out and "Exit 0" in out


def test_registry_register_and_entry_points(monkeypatch):
    class Mine:
        name, description, rng_contract, requires_cuda = "mine", "test impl", "mrv2", False

    registry.register("mine", Mine)
    assert isinstance(registry.get_impl("mine"), Mine)
    ep = types.SimpleNamespace(name="plugged", load=lambda: Mine)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep] if group == "replay.impls" else [])
    assert "plugged" in registry.known_names() and isinstance(registry.get_impl("plugged"), Mine)
    with pytest.raises(UsageError, match="known impls: .*plugged"):
        registry.get_impl("unknown-one")


def test_import_names_do_not_shadow_other_packages():
    """transformers probes for a package importable as `kernels`, and `replay` is another PyPI project's
    import name: this project installs as replay_harness and replay_kernels only, so neither name
    resolves into this repository."""
    import importlib.util
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    for name in ("kernels", "replay"):
        spec = importlib.util.find_spec(name)
        if spec is not None:
            origins = [spec.origin, *(spec.submodule_search_locations or [])]
            assert not any(o and Path(o).resolve().is_relative_to(repo) for o in origins), origins
    try:
        from transformers.utils import import_utils
    except ImportError:
        return
    if hasattr(import_utils, "is_kernels_available"):
        spec = importlib.util.find_spec("kernels")
        assert spec is None or not Path(spec.origin or "").resolve().is_relative_to(repo)
