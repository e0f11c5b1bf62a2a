"""Labels that keep one meaning (issue 56 item 8): request-steps in inspect as in run; run's tokens column the same
count whatever the impl's RNG contract; a routing-only difference is a "route difference", not a "real divergence
... same tokens"; inspect says "not recorded" for an acceptance no token was recorded for (was 0.00)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from helpers import main_inproc
from replay_harness.recording.store import Emitted, RecordingWriter
from replay_harness.recording.synthetic import Case, random_step

REPO = Path(__file__).resolve().parents[1]
FOUNDING = str(REPO / "fixtures" / "synthetic-founding")
MIXED = str(REPO / "fixtures" / "real-mixed")


def test_inspect_says_request_steps_and_distinct_requests():
    code, out, _ = main_inproc("inspect", MIXED)
    assert code == 0 and "steps / request-steps / rows" in out and "requests (distinct ids)" in out
    s = json.loads(main_inproc("inspect", MIXED, "--json")[1])["recordings"][0]
    assert s["request_steps"] == s["requests"] == 6 and s["distinct_requests"] == 3


def test_a_route_only_difference_is_not_called_a_real_divergence():
    code, out, _ = main_inproc("run", FOUNDING, "--impl", "greedy-only", "--against", "reference")
    assert code == 1
    line = next(line for line in out.splitlines() if "same tokens" in line)
    assert "first route difference" in line and "real divergence" not in line


def test_run_tokens_do_not_depend_on_the_rng_contract():
    """tokens = compared + not compared: an impl of another RNG contract sees the same count as the reference."""
    from replay_harness.api import compare
    from replay_harness.impls.reference import ReferenceSampler

    class Other(ReferenceSampler):
        name, rng_contract = "other", "other"

    a, b = compare(MIXED, "reference"), compare(MIXED, Other())
    assert b.tokens_not_compared > 0
    assert a.tokens_compared + a.tokens_not_compared == b.tokens_compared + b.tokens_not_compared


def test_inspect_acceptance_not_recorded(tmp_path):
    case = Case("labels", vocab_size=40, num_requests=3, max_drafts=2, steps=1, temperatures=(1.0,))
    step = random_step(torch.Generator().manual_seed(0), case, 0)
    r = step.num_requests
    with RecordingWriter(tmp_path / "rec", vocab_size=40, synthetic=True, source={"synthetic": True}) as w:
        w.write_step(step, Emitted(torch.full((r, 3), -1, dtype=torch.int32), torch.zeros(r, dtype=torch.int32),
                                   None))
    code, out, err = main_inproc("inspect", str(tmp_path / "rec"))
    assert code == 0, err
    row = next(line for line in out.splitlines() if "acceptance by position" in line)
    assert "not recorded" in row and "0.00" not in row
