"""What is in a recording: shapes, dtypes, parameter mix, bytes, acceptance (for `replay inspect`)."""
from __future__ import annotations

from collections import Counter
from typing import Any

from replay_harness.recording.schema import STEP_FIELDS, route_name
from replay_harness.recording.store import Recording
from replay_harness.recording.validate import check_step


def summarize(rec: Recording) -> dict[str, Any]:
    """A JSON-able summary of ``rec``; reads every step once (memory-mapped).

    Raises the first schema violation of a step as an ``InputError`` (exit 2), like every loader.
    """
    shapes, dtypes, ks, routes, ids = Counter(), Counter(), Counter(), Counter(), set()
    greedy = stochastic = top_k = top_p = min_p = with_draft_logits = rows = requests = 0
    accepted_at = Counter()   # position i -> drafts accepted at i
    offered_at = Counter()    # position i -> requests with k > i
    for i in range(len(rec)):
        t, _ = rec.read_tensors(i)
        problems = [p for p in check_step(t, rec.vocab_size, file=rec.files[i], step=i, nan=rec.nan,
                                          neg_inf=rec.neg_inf)
                    if not p.warning]
        if problems:  # the counts below assume a valid step; a broken one is bad input (exit 2)
            raise problems[0]
        n, v = t["logits"].shape
        rows += n
        r = t["cu_num_logits"].numel() - 1
        requests += r
        ids.update(t["request_ids"].tolist())
        shapes[f"[{n}, {v}]"] += 1
        dtypes[str(t["logits"].dtype).removeprefix("torch.")] += 1
        k = (t["cu_num_logits"][1:] - t["cu_num_logits"][:-1] - 1).long()
        ks.update(k.tolist())
        temp = t["temperature"]
        greedy += int((temp == 0).sum())
        stochastic += int((temp > 0).sum())
        top_k += int(((t["top_k"] > 0) & (t["top_k"] < v) & (temp > 0)).sum())
        top_p += int(((t["top_p"] < 1) & (temp > 0)).sum())
        min_p += int(((t["min_p"] > 0) & (temp > 0)).sum())
        with_draft_logits += int("draft_logits" in t)
        if "emitted_routes" in t:
            routes.update(route_name(c) for c in t["emitted_routes"].tolist())
        accepted = t["emitted_counts"].long() - 1
        for kk, a in zip(k.tolist(), accepted.tolist()):
            if a < 0:  # no token recorded for this request (a derived step, a refusal): no acceptance to count
                continue
            for pos in range(kk):
                offered_at[pos] += 1
                accepted_at[pos] += int(a > pos)
    size = sum(f.stat().st_size for f in rec.files)
    spec = [(kk, c) for kk, c in ks.items() if kk > 0]
    spec_requests = sum(c for _, c in spec)
    mean_accepted = None
    if spec_requests:
        mean_accepted = sum(accepted_at.values()) / spec_requests
    return {
        "path": str(rec.path), "schema": rec.manifest.get("schema"), "complete": rec.manifest.get("complete"),
        "synthetic": rec.synthetic, "rng_contract": rec.rng_contract, "vocab_size": rec.vocab_size,
        "source": rec.manifest.get("source", {}), "steps": len(rec), "rows": rows,
        # request-steps: one request in one step (the term of run, verify and audit); distinct: request ids
        "requests": requests, "request_steps": requests, "distinct_requests": len(ids),
        "logits_shapes": dict(shapes), "logits_dtypes": dict(dtypes),
        "drafts_per_request": {str(k): c for k, c in sorted(ks.items())},
        "greedy_requests": greedy, "stochastic_requests": stochastic,
        "top_k_requests": top_k, "top_p_requests": top_p, "min_p_requests": min_p,
        "steps_with_draft_logits": with_draft_logits, "recorded_routes": dict(sorted(routes.items())),
        "acceptance_rate_by_position": {str(p): accepted_at[p] / offered_at[p] for p in sorted(offered_at)},
        "mean_accepted_drafts": mean_accepted, "bytes_on_disk": size,
        "tensors": list(STEP_FIELDS),
    }
