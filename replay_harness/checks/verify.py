"""`replay verify`: run an impl many times per request and test what it emits against the exact law.

The per-step driver (:func:`verify_step`) and the tests it runs, per request (docs/VERIFY.md):

* ``distribution``: Pearson's X^2 of the token at each reached position against its law
  (:mod:`replay_harness.checks.laws`), sparse bins merged; p-values in :mod:`replay_harness.checks.stats`
  (chi-squared far from the threshold, Monte Carlo near it, exact binomial with two bins);
* ``acceptance``: two-sided exact binomial test of the accepted count against the acceptance rate;
* ``independence`` (twins): half of the trials are twins of the other half (same seed, positions shifted
  by K = k+1, other batch rows); with noise keyed by position their outcomes coincide with probability
  ``RequestLaw.collision``, more often when the noise ignores the position;
* ``position`` ("noise does not depend on position"): the first half is run again in a second call,
  every copy in the same batch row with the same seed at positions shifted by 2K; noise keyed by (seed,
  batch row) but not position (the founding engine's random-sample kernel) repeats its outcomes there;
* exact checks (no p-value; any deviation fails): ``support`` (a token of probability 0 emitted),
  ``structure`` (bad count, prefix not the drafts, no -1 padding), ``greedy``, ``route`` (and power: :mod:`.power`).

Statistical checks form one family, judged by :func:`replay_harness.checks.report.finalize`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import numpy as np
import torch

from replay_harness.checks import methods_verify, power, tree_verify
from replay_harness.checks.laws import RequestLaw, request_law, softmax64
from replay_harness.checks.report import (DEFAULT_ALPHA, STATISTICAL, Check, UnitReport, VerifyReport,
                                          finalize)
from replay_harness.checks.stats import MIN_EXPECTED, binomial_p, chi_square
from replay_harness.checks.trials import (Group, Outcomes, expected_runs, request_rng, run_groups, same_outcome,
                                          trial_seeds)
from replay_harness.compare.ablation import forbidding_rule, uses_history
from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.step import ROUTE_CODE, Step, expected_route, route_name

DEFAULT_TRIALS = 1000


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x < 0.9995 or x == 1 else f"{100 * x:.2f}%"


def verify_step(label: str, index: int, step: Step, impl: Any, trials: int, rng: np.random.Generator | None,
                device: torch.device, requests: Iterable[int] | None = None,
                on_chunk: Callable[[int], None] | None = None, sample_drafts: bool = True,
                twins: bool = True, seed_key: tuple[int, int] | None = None) -> list[UnitReport]:
    """Verify every request (or ``requests``) of one step with ``trials`` runs each (rounded up to even),
    plus trials / 2 runs for the position test.

    index: the recording's step number (quoted by external impls). sample_drafts: on draft-logit steps,
    each trial draws its drafts from q (the theorem's setting); False keeps the recorded drafts (the
    exact conditional law; acceptance min(1, p(d)/q(d))). twins: half the trials are twins and the
    position test runs; False gives every trial its own seed and skips both (for impls whose noise is,
    by contract, not keyed by position). seed_key: (seed, source): request r draws its trial seeds and
    drafts from ``request_rng(seed, source, index, r)`` instead of ``rng`` (`replay verify` does, so its
    result is the same however the steps are spread over processes).

    Statistical checks come back with ``passed=None``; call :func:`finalize` on the whole report.
    """
    step = step.to("cpu")
    processed = apply_sampling_params(step)
    cu = step.cu_num_logits.tolist()
    d_idx = step.draft_row_index()
    name = impl.name
    units = []
    for r in (range(step.num_requests) if requests is None else requests):
        if seed_key is not None:
            rng = request_rng(seed_key[0], seed_key[1], index, r)
        a, b = cu[r], cu[r + 1]
        if tree_verify.is_tree(step, r):  # draft trees: their own walk and laws (checks/tree_verify.py)
            units.append(tree_verify.verify(label, index, step, r, impl, trials, rng, device, processed, on_chunk))
            continue
        k, temp = b - a - 1, float(step.temperature[r])
        drafts = step.draft_token_ids[a:b - 1].tolist()
        half = (trials + 1) // 2
        seeds = trial_seeds(rng, half if twins else 2 * half)
        seeds, second = (seeds, seeds) if twins else (seeds[:half], seeds[half:])
        law = None
        # a row's pipeline (penalties, bad words, min-tokens) reads the drafts before it: its law is fixed only
        # for the recorded drafts, so those are kept in every trial
        history = uses_history(step, r)
        if temp != 0.0:
            dl = step.draft_logits[d_idx[a:b - 1]] if step.draft_logits is not None and k > 0 else None
            law = request_law(processed[a:b], drafts, temp, dl, sample_drafts and not history)
        sampled = law is not None and law.sampled
        groups_of = [(seeds, 0), (second, k + 1 if twins else 0)]  # probabilistic drafts: the contract drafter's
        trial_drafts = methods_verify.trial_drafts(step, r, law, rng, groups_of) if sampled else None
        groups = [Group(seeds, 0, None if trial_drafts is None else trial_drafts[:half]),
                  Group(second, k + 1 if twins else 0, None if trial_drafts is None else trial_drafts[half:])]
        first, other = run_groups(step, r, impl, groups, device, index, on_chunk)
        again = None
        if twins and law is not None:  # same seeds, same batch rows, positions shifted by 2K
            shifted = methods_verify.trial_drafts(step, r, law, rng, [(seeds, 2 * (k + 1))]) if sampled else None
            again = run_groups(step, r, impl, [Group(seeds, 2 * (k + 1), shifted)], device, index, on_chunk)[0]
        tokens = np.concatenate([first.tokens, other.tokens])
        counts = np.concatenate([first.counts, other.counts])
        routes = np.concatenate([first.routes, other.routes] + ([again.routes] if again is not None else []))
        if trial_drafts is None:
            trial_drafts = np.tile(np.array(drafts, dtype=np.int64), (counts.size, 1)).reshape(counts.size, k)
        unit = UnitReport(recording=label, step=index, request=r, request_id=int(step.request_ids[r]),
                          temperature=temp, num_drafts=k, expected_route=expected_route(temp, k),
                          routes=sorted({route_name(int(c)) for c in routes}), trials=int(counts.size),
                          status="tested")
        units.append(unit)
        if sampled:
            unit.notes.append("drafts drawn from the draft logits in every trial")
        elif history and sample_drafts and law is not None and law.q is not None:
            unit.notes.append("recorded drafts kept in every trial: the request's penalties, bad words or "
                              "min-tokens read the drafts before each row")
        where = dict(recording=label, step=index, request=r, request_id=unit.request_id)
        power.check_route(unit, where, name)
        refused = (routes[:counts.size] == ROUTE_CODE["refused"]) | (counts == 0)
        rerun_refused = again is not None and bool(((again.routes == ROUTE_CODE["refused"]) |
                                                    (again.counts == 0)).any())
        if refused.any() or rerun_refused:
            unit.status = "refused"
            unit.notes.append(f"{name} refused the request in {int(refused.sum())} of {counts.size} trials"
                              f"{'' if refused.any() else ' (in position-test reruns)'}: not verifiable")
            continue
        if not _structure_ok(unit, where, tokens, counts, trial_drafts, step.vocab_size, name, greedy=law is None):
            continue
        if law is None:
            want = methods_verify.greedy_walk(step, r, processed[a:b], drafts)  # FLy defers at T = 0 too
            _check_greedy(unit, where, tokens, counts, want, name)
            power.greedy_unit(unit)
            continue
        if not np.isfinite(law.emit).all():
            unit.status = "skipped"
            unit.notes.append("a target row has no finite logit after sampling params: no law to test against")
            continue
        if not (np.isfinite(law.accept).all() and (law.q is None or np.isfinite(law.q).all())):
            unit.status = "skipped"  # a draft-logits row all -inf, or one that overflows at the temperature
            unit.notes.append("a draft-logits row gives no distribution after the temperature (all -inf, or "
                              "overflowing): no law to test against")
            continue
        if methods_verify.check_request(unit, where, step, r, processed[a:b], law, tokens, counts, trial_drafts,
                                        groups_of, rng, name, (first, other, again) if twins else None):
            unit.status = "tested" if unit.checks else "untestable"  # block / FLy: their own laws
            continue
        _check_positions(unit, where, tokens, counts, law, name, step)
        if twins:
            _check_pairs(unit, where, "independence", first, other, law,
                         f"{name}: twin runs (same seed, other batch rows, positions shifted by {k + 1})")
            _check_pairs(unit, where, "position", first, again, law,
                         f"{name}: reruns in the same batch row with the same seed at positions shifted by "
                         f"{2 * (k + 1)}")
        if not unit.checks:  # nothing could be tested (all mass in one bin, outcome certain): not a pass
            unit.status = "untestable"
        else:  # which mechanisms this request exercises, and how likely each one's bug was to be missed
            power.stochastic_unit(unit, law, step, r, counts, twins)
    return units


def verify_units(sources: list[tuple], open_impl: Callable[[torch.device], Any], trials: int, seed: int,
                 device: torch.device, *, sample_drafts: bool = True, twins: bool = True,
                 on_chunk: Callable[[int], None] | None = None) -> list[UnitReport] | None:
    """Verify every chosen step of every source: the UnitReports in (source, step, request) order, in one
    process or sharded over torchrun's ranks by (source, step) (rank 0 gets them all, the others None).

    sources: [(label, synthetic, a Recording or a list of Steps, chosen step indices)];
    open_impl(device): the loaded impl (closed at the end), once per process, on that process's device.
    Request r of step i of source s draws its trials from ``request_rng(seed, s, i, r)``, so the reports
    (and the verdict :func:`finalize` gives them) do not depend on the number of processes.
    ``on_chunk(runs)`` after every impl call (a single process only).
    """
    from contextlib import contextmanager

    from replay_harness.compare import distributed
    from replay_harness.recording.prefetch import read_step
    from replay_harness.recording.store import Recording

    units = [(s, i) for s, (_, _, _, chosen) in enumerate(sources) for i in chosen]
    sizes = distributed.unit_sizes([sources[s][2].files[i] if isinstance(sources[s][2], Recording) else ""
                                    for s, i in units])  # built-in steps: 0 bytes each, dealt in turn

    def load(unit: tuple[int, int]) -> Step:
        s, i = unit
        rec = sources[s][2]
        return read_step(rec, i).step if isinstance(rec, Recording) else rec[i]

    @contextmanager
    def worker(shard):
        dev = device if shard is None else shard.device(device)
        impl = open_impl(dev)
        begun: set[int] = set()

        def do(unit: tuple[int, int], step: Step) -> list[UnitReport]:
            s, i = unit
            label, _, rec, _ = sources[s]
            if isinstance(rec, Recording) and s not in begun:
                begun.add(s)
                impl.begin_recording(label)
            return verify_step(label, i, step, impl, trials, None, dev, on_chunk=on_chunk if shard is None else None,
                               sample_drafts=sample_drafts, twins=twins, seed_key=(seed, s))
        try:
            yield do
        finally:
            impl.close()

    unread = [(rec, i) for _, _, rec, chosen in sources if isinstance(rec, Recording) and rec.needs_digest
              for i in sorted(set(range(len(rec))) - set(chosen))]  # --steps: for the digest check alone
    parts = distributed.map_units(units, sizes, worker, load, unread)
    return None if parts is None else [u for part in parts for u in part]


def _structure_ok(unit: UnitReport, where: dict, tokens: np.ndarray, counts: np.ndarray, drafts: np.ndarray,
                  vocab: int, name: str, greedy: bool) -> bool:
    """Counts in [1, k+1], last token in the vocabulary, -1 after it, accepted prefix == the trial's
    drafts ([trials, k])."""
    k = drafts.shape[1]
    problems = []
    for i in range(counts.size):
        c = int(counts[i])
        row = tokens[i]
        if not 1 <= c <= k + 1:
            problems.append(f"count {c} outside 1..{k + 1}")
        elif not 0 <= row[c - 1] < vocab:
            problems.append(f"token {row[c - 1]} at position {c - 1} is outside the vocabulary 0..{vocab - 1}")
        elif (row[c:] != -1).any():
            problems.append(f"tokens after the count {c} are not -1: {row.tolist()}")
        elif not greedy and (row[:c - 1] != drafts[i, :c - 1]).any():
            j = int(np.argmax(row[:c - 1] != drafts[i, :c - 1]))
            problems.append(f"position {j} continues past a token {row[j]} that is not the draft {drafts[i, j]}")
        if problems:
            unit.checks.append(Check(kind="structure", position=None, n=int(counts.size), passed=False,
                                     message=f"{name}: trial {i}: {problems[0]}", **where))
            return False
    return True


def _check_greedy(unit: UnitReport, where: dict, tokens: np.ndarray, counts: np.ndarray, want: list[int],
                  name: str) -> None:
    n = counts.size
    expect = np.full(tokens.shape[1], -1)
    expect[:len(want)] = want
    bad = (counts != len(want)) | (tokens != expect).any(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        got = tokens[i, :counts[i]].tolist()
        msg = (f"greedy request (temperature 0): {name} emitted {got} in {int(bad.sum())} of {n} trials "
               f"where the argmax walk gives {want}")
    else:
        msg = f"all {n} trials emitted the argmax walk {want}"
    unit.checks.append(Check(kind="greedy", position=None, n=n, passed=not bad.any(), message=msg,
                             expected=1.0, observed=float(1 - bad.mean()), **where))


def removed_by(step: Step, r: int, j: int, token: int) -> str:
    """Which rule removed ``token`` from row j of request r: a rule of the sampling pipeline (grammar mask,
    allowed ids, bias, min-tokens, bad words: compare/ablation.py's ``forbidding_rule``), else the filter whose
    omission alone admits it (a sampler that skips min-p emits tokens top-p's cut removes only after min-p),
    else the filters applied one by one in the reference's order (temperature, min-p, top-k, top-p), the first
    that leaves it -inf."""
    one = step.select([r])
    row = one.cu_num_logits.tolist()[0] + j
    if not bool(torch.isfinite(one.logits[row, token].float())):
        return "its recorded logit is -inf"
    if one.has_pipeline:
        rule = forbidding_rule(step, r, j, token)
        if rule is not None:
            return f"removed by the rule '{rule}'"
    off = dict(min_p=torch.zeros_like(one.min_p), top_k=torch.zeros_like(one.top_k), top_p=torch.ones_like(one.top_p))
    names = [("min_p", f"removed by min-p {float(one.min_p[0]):g}"), ("top_k", f"removed by top-k {int(one.top_k[0])}"),
             ("top_p", f"removed by top-p {float(one.top_p[0]):g}")]
    for f, why in names:  # the one filter whose omission admits the token is the one missing (min-p before top-p
        on = getattr(one, f)  # changes top-p's cut: the later filter removes it too, but min-p is what is missing)
        if bool((on != off[f]).any()):
            x = apply_sampling_params(dataclasses.replace(one, **{f: off[f]}))
            if bool(torch.isfinite(x[row, token])):
                return why
    for i, (_, why) in enumerate(names):
        keep = {f: getattr(one, f) for f, _ in names[:i + 1]}
        x = apply_sampling_params(dataclasses.replace(one, **{**off, **keep}))
        if not bool(torch.isfinite(x[row, token])):
            return why
    return "outside the support"


def _check_positions(unit: UnitReport, where: dict, tokens: np.ndarray, counts: np.ndarray, law: RequestLaw,
                     name: str, step: Step) -> None:
    k = len(law.drafts)
    for j in range(k + 1):
        reached = counts > j
        n = int(reached.sum())
        if n == 0:
            unit.notes.append(f"position {j}: no trial reached it")
            continue
        x = tokens[reached, j]
        e = law.emit[j]
        bad = e[x] <= 0
        if bad.any():
            tok = int(x[np.argmax(bad)])
            unit.checks.append(Check(kind="support", position=j, n=n, passed=False, expected=0.0,
                                     observed=float(bad.mean()),
                                     message=f"{name} emitted token {tok} (probability 0 after sampling params: "
                                             f"{removed_by(step, unit.request, j, tok)}) in {int(bad.sum())} of "
                                             f"{n} trials reaching position {j}", **where))
            continue
        cs = chi_square(x, e)
        if cs is None:
            unit.notes.append(f"position {j}: {n} trials reached it, too few for a chi-squared test "
                              f"(fewer than two bins expect {MIN_EXPECTED:g})")
        else:
            obs = np.bincount(x, minlength=e.size)[:e.size] / n
            tok = int(np.argmax(np.abs(obs - e)))
            what = "the argmax" if tok == int(np.argmax(e)) else (
                "the draft" if j < k and not law.sampled and tok == law.drafts[j] else "token")
            mode = float(cs.probs.max())  # bug direction: every trial on the most likely bin (greedy at T > 0)
            floor = binomial_p(n, n, mode) if cs.exact else max(mode ** n, _chi2_sf(n * (1 - mode) / mode, cs.df))
            unit.checks.append(Check(
                kind="distribution", position=j, n=n, statistic=cs.statistic, df=cs.df, p_value=cs.p_value,
                expected=float(e[tok]), observed=float(obs[tok]), bins=cs.probs,
                floor_p=floor, floor_rate=mode, floor_scale=counts.size / n,
                method="binomial" if cs.exact else "chi-squared",
                message=f"{name} emitted {what} ({tok}) in {_pct(obs[tok])} of {n} trials reaching position {j}; "
                        f"expected {_pct(e[tok])}", **where))
        if j < k and law.drafts[j] >= 0:
            acc = int((counts[reached] > j + 1).sum())
            a = float(law.accept[j])
            drafted = "its drafts (drawn from q; expected sum min(p, q))" if law.sampled else \
                f"draft {law.drafts[j]}"
            direction = ("too many accepted: fits greedy verification of likely drafts or an acceptance uniform "
                         "fixed low" if acc / n > a else "too few accepted: fits greedy verification of unlikely "
                         "drafts, a wrong acceptance rule or a target / draft mix-up")
            unit.checks.append(Check(
                kind="acceptance", position=j, n=n, statistic=float(acc), p_value=binomial_p(acc, n, a),
                expected=a, observed=acc / n, method="binomial",
                floor_p=binomial_p(n, n, a), floor_rate=a, floor_scale=counts.size / n,
                message=f"{name} accepted {drafted} at position {j} in {_pct(acc / n)} of {n} trials "
                        f"reaching it; expected {_pct(a)}: {direction}", **where))


def _chi2_sf(x: float, df: int) -> float:
    from scipy.stats import chi2

    return float(chi2.sf(x, df))


def _check_pairs(unit: UnitReport, where: dict, kind: str, a: Outcomes, b: Outcomes, law: RequestLaw,
                 what: str) -> None:
    """Pairs (copy i of ``a``, copy i of ``b``) are independent runs under a correct impl: they give the same
    outcome with probability ``law.collision``; more often means reused noise (two-sided exact binomial)."""
    n = a.counts.size
    c = law.collision
    if n == 0 or c >= 1.0 - 1e-12:
        unit.notes.append(f"{kind}: every outcome is certain, nothing to test")
        return
    hits = int(same_outcome(a, b).sum())
    unit.checks.append(Check(
        kind=kind, position=None, n=n, statistic=float(hits), p_value=binomial_p(hits, n, c),
        expected=c, observed=hits / n, method="binomial", floor_p=binomial_p(n, n, c), floor_rate=c,
        floor_scale=2.0,
        message=f"{what} gave the same outcome in {_pct(hits / n)} of {n} pairs; expected {_pct(c)} for "
                f"independent runs: {pair_diagnosis(kind, hits / n > c, unit, a, power.argmax_walks(a, law.p))}",
        **where))


def pair_diagnosis(kind: str, too_many: bool, unit: UnitReport, a: Outcomes, argmax: bool = False) -> str:
    """The direction of a twin / position test and every mechanism its evidence fits (docs/VERIFY.md,
    "Reading a failure"): too few coincidences is a wrong marginal; too many is a run that ignores its
    seed (greedy at T > 0: named first when the impl reported a greedy route or every run gave one
    outcome) or noise reused where it should differ (independence: not keyed by position nor batch row;
    position: keyed by batch row but not position)."""
    if not too_many:
        return "too few coincidences: a wrong marginal law (the distribution and acceptance tests say where)"
    fits = []
    greedy = [r for r in unit.routes if r.startswith("greedy")]
    distinct = len({(int(c), tuple(t[:c])) for t, c in zip(a.tokens.tolist(), a.counts.tolist())})
    if greedy:  # the impl said it decoded greedily: no noise was drawn, so none is to blame
        return (f"too many coincidences; fits greedy decoding at temperature {unit.temperature:g} (route "
                f"{','.join(greedy)}): the outcome does not depend on the seed (not evidence about the noise)")
    if argmax and distinct > 1:  # drafts drawn per trial: outcomes differ, yet each is the argmax walk
        fits.append("greedy decoding at T > 0: every run emitted the argmax of each row it reached")
    if distinct == 1:
        fits.append(f"a deterministic sampler: all {a.counts.size} runs gave one outcome whatever their seed "
                    f"(greedy at T > 0, or the seed ignored)")
    fits.append("noise that does not depend on the position (keyed by seed and batch row)" if kind == "position"
                else "noise keyed without the position and the batch row (by seed and token alone)")
    return "too many coincidences; fits " + "; or ".join(fits)


def parse_steps(text: str | None, num_steps: int) -> list[int]:
    """'0,2,5-7' -> step indices in the order first named, each once (all when None); raises ValueError with
    the reason. Linear in the text and the steps selected (a range is checked by its ends, a repeat found in
    a set): 40,000 steps parse in milliseconds."""
    if text is None:
        return list(range(num_steps))
    out: list[int] = []
    seen: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not _index(lo) or (sep and not _index(hi)):
            raise ValueError(f"cannot read {part[:40]!r}" + ("..." if len(part) > 40 else "")
                             + " (examples: 0  0,2  1-3)")
        first, last = _bounded(lo, num_steps), _bounded(hi, num_steps) if sep else _bounded(lo, num_steps)
        if first <= last and last >= num_steps:
            bad = str(max(first, num_steps)) if first < 10 ** 18 else lo[:18] + "..."
            raise ValueError(f"step {bad} does not exist (the recording has {num_steps} steps)")
        for i in range(first, last + 1):
            if i not in seen:
                seen.add(i)
                out.append(i)
    if not out:
        raise ValueError("no step selected")
    return out


def _index(text: str) -> bool:
    """A step index as --steps writes it: ASCII digits ('²' and other Unicode digits are not)."""
    return text.isascii() and text.isdigit()


def _bounded(digits: str, num_steps: int) -> int:
    """The index ``digits`` names, or ``num_steps`` for one past every step (a 5,000-digit index is never
    converted: Python refuses integers that long)."""
    return int(digits) if len(digits) <= 18 else max(num_steps, 10 ** 18)


__all__ = ["Check", "UnitReport", "VerifyReport", "RequestLaw", "request_law", "softmax64", "chi_square",
           "binomial_p", "finalize", "verify_step", "verify_units", "trial_seeds", "parse_steps", "expected_runs",
           "builtin_steps", "DEFAULT_ALPHA", "DEFAULT_TRIALS", "STATISTICAL"]


def builtin_steps(seed: int = 0) -> list[Step]:
    """SYNTHETIC steps for `replay verify` without a recording (vocabulary 64, so Triton impls run fast
    under the interpreter): step 0 one-hot drafts with top-k and placeholders at temperatures 0, 0.7
    and 1; step 1 draft logits with top-p and min-p at temperatures 0.8, 1 and 1.3. Logits are
    halved after generation (flatter rows, more chi-squared bins)."""
    from replay_harness.recording.synthetic import Case, random_step

    gen = torch.Generator().manual_seed(seed)
    cases = [Case("verify-one-hot", vocab_size=64, num_requests=6, max_drafts=3, temperatures=(0.0, 0.7, 1.0),
                  features=frozenset({"ragged", "top-k", "placeholders"})),
             Case("verify-draft-logits", vocab_size=64, num_requests=6, max_drafts=3,
                  temperatures=(0.8, 1.0, 1.3), features=frozenset({"ragged", "draft-logits", "top-p", "min-p"}))]
    steps = []
    for i, c in enumerate(cases):
        s = random_step(gen, c, i)
        s.logits = s.logits / 2  # flatter rows than the generator's (std 1.5 instead of 3): more bins to test
        if s.draft_logits is not None:
            s.draft_logits = s.draft_logits / 2
        steps.append(s)
    return steps
