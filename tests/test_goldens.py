"""Goldens: what `reference` and `greedy-only` emit on every committed fixture, as small text files.

One file per fixture and impl, tests/goldens/<fixture>.<impl>.txt, one line per request-step:
tokens, route and accepted-draft count. Timing is never in a golden. A change that alters any
emitted token or route shows up as a readable diff. After an intended change, regenerate with

    python -m pytest tests/test_goldens.py --regen-goldens

and review `git diff tests/goldens` before committing.
"""
from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from replay_harness.recording.store import Recording
from replay_harness.impls import get_impl
from replay_harness.recording.step import route_name

REPO = Path(__file__).resolve().parent.parent
GOLDENS = Path(__file__).resolve().parent / "goldens"
FIXTURES = sorted(p.name for p in (REPO / "fixtures").iterdir() if (p / "manifest.json").exists())
IMPLS = ("reference", "greedy-only")


def render(fixture: str, impl_name: str) -> str:
    """The golden text of one fixture replayed through one impl (deterministic: mrv2 noise, no timing)."""
    impl = get_impl(impl_name)
    rec = Recording(REPO / "fixtures" / fixture)
    lines = [f"# golden: fixtures/{fixture} replayed through --impl {impl_name}; no timing",
             "# regenerate: python -m pytest tests/test_goldens.py --regen-goldens",
             "# step request_id route drafts accepted tokens"]
    for record in rec:
        step, got = record.step, impl.sample(record.step)
        for r in range(step.num_requests):
            k, count = int(step.num_drafts[r]), int(got.counts[r])
            route = route_name(int(got.routes[r]))
            accepted = max(count - 1, 0) if route.endswith("verify") else 0
            tokens = " ".join(str(t) for t in got.tokens[r, :count].tolist()) or "-"
            lines.append(f"{record.index} {int(step.request_ids[r])} {route} {k} {accepted} {tokens}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("impl_name", IMPLS)
@pytest.mark.parametrize("fixture", FIXTURES)
def test_golden(fixture, impl_name, request):
    path = GOLDENS / f"{fixture}.{impl_name}.txt"
    text = render(fixture, impl_name)
    if request.config.getoption("--regen-goldens"):
        path.write_text(text)
        pytest.skip(f"regenerated {path.relative_to(REPO)}")
    if not path.exists():
        pytest.fail(f"no golden {path.relative_to(REPO)}: run python -m pytest tests/test_goldens.py --regen-goldens")
    want = path.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "golden", "now"))
        pytest.fail(f"{fixture} through {impl_name} differs from its golden:\n{diff}")


def test_every_golden_has_a_fixture():
    """A golden whose fixture was deleted or renamed is stale, not silently ignored."""
    stale = sorted(p.name for p in GOLDENS.glob("*.txt") if p.name.split(".")[0] not in FIXTURES)
    assert not stale, f"stale goldens (no such fixture): {stale}"


def test_reference_golden_matches_what_the_engine_recorded():
    """The reference goldens agree with the tokens stored in the real fixtures (recorded with reference)."""
    for fixture in (f for f in FIXTURES if f.startswith("real-")):
        rec = Recording(REPO / "fixtures" / fixture)
        lines = [ln.split() for ln in (GOLDENS / f"{fixture}.reference.txt").read_text().splitlines()
                 if not ln.startswith("#")]
        stored = [(str(r.index), int(r.emitted.counts[i]), r.emitted.tokens[i, :int(r.emitted.counts[i])].tolist())
                  for r in rec for i in range(r.step.num_requests)]
        assert [(ln[0], len(ln) - 5 if ln[5] != "-" else 0, [int(t) for t in ln[5:] if t != "-"]) for ln in lines] \
            == stored, fixture
