"""``replay_kernels`` as a library: it imports nothing of ``replay_harness``, its public entry points run on plain
tensors (examples/kernels_on_tensors.py, checked against the oracle), and the harness's adapter keeps the
recordings' route codes."""
from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton / replay_kernels are imported

REPO = Path(__file__).resolve().parent.parent


def harness_imports(root: Path = REPO / "replay_kernels") -> list[str]:
    """``path:line`` of every import of ``replay_harness`` in the package's source, at any depth (module level,
    functions, ``try`` / ``if``), read with ``ast``."""
    hits = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                names = [str(node.args[0].value)]
            hits += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names
                     if n == "replay_harness" or n.startswith("replay_harness.")]
    return hits


def test_replay_kernels_imports_nothing_of_replay_harness():
    assert harness_imports() == []


def test_the_import_check_finds_an_import_at_any_depth(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from replay_harness.recording.step import Step\n")
    (tmp_path / "b.py").write_text("import importlib\nm = importlib.import_module('replay_harness.oracle')\n")
    (tmp_path / "c.py").write_text("from .batch import SamplingBatch\nimport replay_harnessy\n")
    assert [h.split(": ")[1] for h in harness_imports(tmp_path)] == ["replay_harness.recording.step",
                                                                      "replay_harness.oracle"]


def test_the_example_calls_the_entry_points_on_tensors_and_matches_the_oracle(capsys):
    spec = importlib.util.spec_from_file_location("kernels_on_tensors", REPO / "examples" / "kernels_on_tensors.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert example.main(["--device", device]) == 0, capsys.readouterr().out


def test_route_codes_are_the_recordings():
    from replay_harness.recording.schema import ROUTE_CODE
    from replay_kernels.batch import ROUTE_CODE as KERNEL_ROUTE_CODE

    assert KERNEL_ROUTE_CODE == ROUTE_CODE


def test_needs_processing_is_the_oracles():
    from replay_harness.oracle.sampling_params import needs_processing as oracle_rule
    from replay_harness.recording.synthetic import Case, random_step
    from replay_kernels.batch import SamplingBatch, needs_processing

    case = Case("params", vocab_size=64, num_requests=12, max_drafts=2, temperatures=(0.0, 0.7, 1.0),
                features=frozenset({"top-k", "top-p", "min-p", "ragged"}))
    for seed in range(4):
        step = random_step(torch.Generator().manual_seed(seed), case)
        assert torch.equal(needs_processing(SamplingBatch.of(step)), oracle_rule(step))


def test_draft_tokens_from_mrv2_draft_sampled():
    from replay_kernels.api import draft_tokens_from_sampled

    cu = torch.tensor([0, 3, 4, 6], dtype=torch.int32)  # k = 2, 0, 1
    draft_sampled = torch.tensor([50, 7, 8, 60, 70, 9])  # the input token at each row: last accepted, drafts
    assert draft_tokens_from_sampled(draft_sampled, cu).tolist() == [7, 8, -1, -1, 9, -1]


def test_adapter_turns_a_step_into_the_kernels_batch():
    from replay_harness.impls import get_impl
    from replay_harness.impls.kernel_impls import batch_of
    from replay_harness.recording.synthetic import Case, random_step

    step = random_step(torch.Generator().manual_seed(3), Case("adapter", vocab_size=40, num_requests=6, max_drafts=2))
    batch = batch_of(step)
    assert batch.logits is step.logits and batch.request_ids is step.request_ids
    impl = get_impl("stochastic")
    assert impl.launchable and impl.rng_contract == "mrv2"
    result = impl.sample(step)
    assert type(result).__name__ == "SampleResult" and result.tokens.shape == (6, step.max_drafts + 1)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [0, 3])  # a plain sample (the plain sampler's launches) and a verify with top-p
def test_a_prepared_call_captured_in_a_cuda_graph_reads_the_logits_written_in_place(k):
    """``Prepared.launch()`` captured once in a CUDA graph: each replay samples the logits the engine wrote into
    the same tensor since, and gives what a fresh eager call gives on them (tokens and counts)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from replay_kernels import api

    gen = torch.Generator(device="cuda").manual_seed(5)
    r, v, cuda = 6, 50_000, dict(device="cuda")
    n = r * (k + 1)
    logits = torch.randn(n, v, generator=gen, **cuda) * 3
    cu = torch.arange(0, n + 1, k + 1, dtype=torch.int32, **cuda)
    drafts = torch.randint(0, v, (n,), generator=gen, dtype=torch.int32, **cuda)
    drafts[k::k + 1] = -1
    pos = torch.arange(n, dtype=torch.int64, **cuda) + 100
    temp = torch.ones(r, **cuda)
    temp[0] = 0.0
    seed = torch.arange(r, dtype=torch.int64, **cuda) + 7
    top_p = torch.full((r,), 0.9, **cuda)
    prepared = api.prepare_rejection_sample(logits, drafts, cu, pos, temp, seed, top_p=top_p)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the first launch records the sequence and compiles: outside the capture
        prepared.launch()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tokens, counts = prepared.launch()
    for _ in range(3):
        logits.copy_(torch.randn(n, v, generator=gen, **cuda) * 3)
        graph.replay()
        want_tokens, want_counts = api.rejection_sample(logits.clone(), drafts, cu, pos, temp, seed, top_p=top_p)
        torch.cuda.synchronize()
        assert torch.equal(tokens, want_tokens) and torch.equal(counts, want_counts)
