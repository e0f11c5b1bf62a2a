"""The Recorder as docs/RECORDING.md describes it (issue 66 items 1 and 4): it claims no RNG contract the engine did
not declare (default "unknown"), the arguments the docs give defaults for are optional and a missing required one
is one line naming it (not a TypeError), an aborted run's folder is refused in the API's words (overwrite=True),
and the package exports Recorder and __version__. Steps are SYNTHETIC (random logits, made-up tokens)."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
import torch

import replay_harness
from replay_harness.api import compare
from replay_harness.errors import InputError
from replay_harness.impls.reference import ReferenceSampler
from replay_harness.recording.recorder import Recorder
from replay_harness.recording.recorder_inputs import REQUIRED
from replay_harness.recording.step import Step
from replay_harness.recording.store import Recording

V = 16
MODES = ["sync", "async"]


def _required(gen: torch.Generator) -> dict:
    """Only the required arguments: two requests, request 0 with 2 placeholder drafts (3 rows), request 1 plain."""
    return dict(logits=torch.randn(4, V, generator=gen), cu_num_logits=[0, 3, 4], positions=[10, 11, 12, 4],
                temperature=[0.0, 1.0], seed=[1, 2], emitted_tokens=torch.tensor([[5, 3, -1], [9, -1, -1]]))


def test_the_default_contract_is_unknown_so_an_own_rng_engine_is_not_failed(tmp_path):
    """An engine with its own RNG: greedy request 0 emits the argmax, sampled request 1 a token the mrv2 noise
    would not have drawn. Recorded with the defaults, `run` must not call that a divergence (it cannot know);
    recorded claiming mrv2, it is one."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, V, generator=gen)
    step = Step(logits=logits, cu_num_logits=torch.tensor([0, 1, 2], dtype=torch.int32),
                draft_token_ids=torch.full((2,), -1, dtype=torch.int32), positions=torch.tensor([3, 7]),
                temperature=torch.tensor([0.0, 1.0]), top_k=torch.zeros(2, dtype=torch.int32), top_p=torch.ones(2),
                min_p=torch.zeros(2), seed=torch.tensor([5, 6]), request_ids=torch.tensor([0, 1]))
    mrv2 = int(ReferenceSampler().sample(step).tokens[1, 0])
    tokens = [[int(logits[0].argmax())], [(mrv2 + 1) % V]]
    for name, kw in (("default", {}), ("mrv2", {"rng_contract": "mrv2"})):
        with Recorder(tmp_path / name, V, **kw) as rec:
            rec.record_step(logits, [0, 1, 2], positions=[3, 7], temperature=[0.0, 1.0], seed=[5, 6],
                            emitted_tokens=tokens)
    assert Recording(tmp_path / "default").rng_contract == "unknown"
    cmp = compare(tmp_path / "default", "reference", device="cpu")
    assert cmp.verdict() == "inconclusive" and cmp.tokens_not_compared == 1 and cmp.tokens_matched == 1
    assert compare(tmp_path / "mrv2", "reference", device="cpu").verdict() == "fail"


def test_rng_contract_must_be_a_name(tmp_path):
    with pytest.raises(InputError, match="rng_contract must be a non-empty name"):
        Recorder(tmp_path / "rec", V, rng_contract="")


@pytest.mark.parametrize("mode", MODES)
def test_the_arguments_with_documented_defaults_are_optional(tmp_path, mode):
    with Recorder(tmp_path / "rec", V, mode=mode) as rec:
        rec.record_step(**_required(torch.Generator().manual_seed(1)))
    s = Recording(tmp_path / "rec")[0]
    assert s.emitted.counts.tolist() == [2, 1]   # from the -1 padding of emitted_tokens
    assert s.step.draft_token_ids.tolist() == [-1] * 4 and s.step.request_ids.tolist() == [0, 1]
    assert s.step.top_k.tolist() == [0, 0] and s.step.top_p.tolist() == [1, 1] and s.step.min_p.tolist() == [0, 0]
    assert s.emitted.routes is None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("missing", REQUIRED)
def test_a_missing_required_argument_is_one_line_naming_it(tmp_path, mode, missing):
    assert set(REQUIRED) == {"logits", "cu_num_logits", "positions", "temperature", "seed", "emitted_tokens"}
    kwargs = _required(torch.Generator().manual_seed(2))
    del kwargs[missing]
    rec = Recorder(tmp_path / "rec", V, mode=mode)
    with pytest.raises(InputError) as e:   # not a TypeError: sync raises at the call, async at close
        rec.record_step(**kwargs)
        rec.close()
    assert e.value.field == missing and e.value.step == 0 and "required" in str(e.value)
    assert e.value.file.endswith("step-000000.safetensors") and "\n" not in str(e.value)


def test_an_aborted_run_is_refused_in_the_api_s_words_and_overwrite_replaces_it(tmp_path):
    gen = torch.Generator().manual_seed(3)
    with pytest.raises(RuntimeError):
        with Recorder(tmp_path / "rec", V) as rec:
            rec.record_step(**_required(gen))
            raise RuntimeError("engine crashed")
    with pytest.raises(InputError) as e:
        Recorder(tmp_path / "rec", V)
    message = str(e.value)
    assert "overwrite=True" in message and "--overwrite" not in message and "complete: false" in message
    with Recorder(tmp_path / "rec", V, overwrite=True) as rec:
        rec.record_step(**_required(gen))
        rec.record_step(**_required(gen))
    assert Recording(tmp_path / "rec").manifest["complete"] and len(Recording(tmp_path / "rec")) == 2
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="folder exists and is not empty: pass overwrite=True"):
        Recorder(tmp_path / "other", V)


def test_the_package_exports_recorder_and_its_version_without_importing_torch():
    from replay_harness import Recorder as exported, assert_replays, limits  # noqa: F401  (a submodule still works)

    assert exported is Recorder and assert_replays is replay_harness.api.assert_replays
    try:
        installed = importlib.metadata.version("replay-sampler-harness")
    except importlib.metadata.PackageNotFoundError:   # a source tree on PYTHONPATH, not installed
        installed = "0+unknown"
    assert replay_harness.__version__ == installed
    with pytest.raises(AttributeError):
        replay_harness.not_a_name  # noqa: B018
    code = "import sys, replay_harness; replay_harness.__version__; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
