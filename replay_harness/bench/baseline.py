"""Saved bench baselines: `replay bench --save-baseline FILE`, then `--compare-baseline FILE --fail-above R`.

A baseline is one JSON document (``"schema": "replay.bench-baseline/1"``): the environment, settings and verdict
of the run that saved it, and one entry per *case*, a (sub-)step of a recording timed for one side (A or B):
its label, median, p20 and p80 in µs and its number of timed calls. A later run compares its own cases with
it, case by case: ratio = this run's median / the baseline's median; a case whose ratio exceeds ``fail_above``
has regressed (the CLI exits 1 and names it), as pytest-benchmark's ``--benchmark-compare-fail`` does for a
test. Cases are matched by side, recording folder name, step and group, so a baseline saved in one checkout
compares in another; a case on one side only is listed, never counted. docs/BENCH.md, "Baselines", has a
worked example. No printing here: :func:`lines` gives the text the command prints.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from replay_harness.errors import InputError

SCHEMA = "replay.bench-baseline/1"


def case_key(m: Any) -> str:
    """The name of a measurement's case: ``A: real-founding#0`` (``A: REC#STEP (ROUTE)`` for a sub-step)."""
    return f"{m.side}: {Path(str(m.recording)).name}#{m.step}" + ("" if m.group == "all" else f" ({m.group})")


def to_baseline(result: Any) -> dict:
    """The baseline document of a bench result (``replay_harness.bench.ab.BenchResult``)."""
    return {"schema": SCHEMA, "env": result.env, "settings": result.settings, "verdict": result.verdict.label,
            "cases": [{"case": case_key(m), "side": m.side, "label": m.label, "recording": str(m.recording),
                       "step": m.step, "group": m.group, "median_us": m.median_us, "p20_us": m.p20_us,
                       "p80_us": m.p80_us, "calls": len(m.times_us)} for m in result.measurements]}


def read_baseline(path: str | Path) -> dict:
    """The baseline document at ``path``; InputError (exit 2, one line) when it cannot be read or is not one."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(path, f"cannot read the baseline ({e.strerror})") from None
    except (UnicodeDecodeError, ValueError):
        raise InputError(path, "not a JSON document (a baseline is written by `replay bench --save-baseline`)") \
            from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(path, f"not a bench baseline (expected \"schema\": \"{SCHEMA}\", written by "
                               "`replay bench --save-baseline`)")
    cases = doc.get("cases")
    if not isinstance(cases, list) or not all(
            isinstance(c, dict) and isinstance(c.get("case"), str) and isinstance(c.get("median_us"), (int, float))
            and not isinstance(c.get("median_us"), bool) and c["median_us"] > 0 for c in cases):
        raise InputError(path, "its \"cases\" are not a list of {case, median_us > 0, ...} objects")
    return doc


@dataclass
class CaseComparison:
    """One case timed now and in the baseline."""

    case: str
    label: str
    baseline_label: str
    median_us: float
    baseline_us: float
    regressed: bool = False

    @property
    def ratio(self) -> float:
        return self.median_us / self.baseline_us


@dataclass
class BaselineComparison:
    """This run against a baseline: the matched cases, those on one side only, notes (another GPU, another
    impl label, a noisy baseline)."""

    path: str
    fail_above: float | None
    cases: list[CaseComparison] = field(default_factory=list)
    only_here: list[str] = field(default_factory=list)  # cases this run timed that the baseline lacks
    only_there: list[str] = field(default_factory=list)  # cases of the baseline this run did not time
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.regressed]

    @property
    def overall(self) -> float | None:
        """Sum of this run's medians over the sum of the baseline's, over the matched cases."""
        base = sum(c.baseline_us for c in self.cases)
        return sum(c.median_us for c in self.cases) / base if base > 0 else None

    def to_dict(self) -> dict:
        return {"file": self.path, "fail_above": self.fail_above, "overall_ratio": self.overall,
                "cases": [{**asdict(c), "ratio": c.ratio} for c in self.cases],
                "regressed": [c.case for c in self.regressed], "only_here": self.only_here,
                "only_there": self.only_there, "notes": self.notes}


def compare_baseline(result: Any, baseline: dict, path: str, fail_above: float | None) -> BaselineComparison:
    """Compare a bench result's cases with a baseline document (:func:`read_baseline`); ``fail_above``: the
    ratio (this run / baseline) above which a case has regressed (None: report the ratios, fail nothing)."""
    cmp = BaselineComparison(str(path), fail_above)
    before = {c["case"]: c for c in baseline["cases"]}
    seen = set()
    for m in result.measurements:
        key = case_key(m)
        seen.add(key)
        old = before.get(key)
        if old is None:
            cmp.only_here.append(key)
            continue
        c = CaseComparison(key, m.label, str(old.get("label", "?")), m.median_us, float(old["median_us"]))
        c.regressed = fail_above is not None and c.ratio > fail_above
        cmp.cases.append(c)
    cmp.only_there = [k for k in before if k not in seen]
    old_env, env = baseline.get("env") or {}, result.env
    if old_env.get("gpu") != env.get("gpu") or old_env.get("clock") != env.get("clock"):
        cmp.notes.append(f"the baseline was timed on {old_env.get('gpu', '?')} ({old_env.get('clock', '?')}), this run "
                         f"on {env.get('gpu')} ({env.get('clock')}): the ratios compare machines, not builds")
    relabelled = sorted({f"{c.baseline_label} -> {c.label}" for c in cmp.cases if c.label != c.baseline_label})
    if relabelled:
        cmp.notes.append("impl labels differ from the baseline's (" + ", ".join(relabelled) + "): compared anyway")
    if baseline.get("verdict") == "noisy":
        cmp.notes.append("the baseline's own timings were noisy: its medians are not precise")
    return cmp


def lines(cmp: BaselineComparison) -> list[str]:
    """The comparison as the command prints it: one line per case (regressed ones marked), then the summary."""
    out = []
    for c in cmp.cases:
        mark = f"  REGRESSED: above --fail-above {cmp.fail_above:g}" if c.regressed else ""
        out.append(f"baseline {c.case}: {c.median_us:,.1f} µs vs {c.baseline_us:,.1f} µs: {c.ratio:.3g}x{mark}")
    if cmp.only_here:
        out.append(f"baseline: {len(cmp.only_here)} case(s) not in {cmp.path}, not compared: "
                   + ", ".join(cmp.only_here[:6]) + (" …" if len(cmp.only_here) > 6 else ""))
    if cmp.only_there:
        out.append(f"baseline: {len(cmp.only_there)} case(s) of {cmp.path} not timed here: "
                   + ", ".join(cmp.only_there[:6]) + (" …" if len(cmp.only_there) > 6 else ""))
    out += [f"baseline note: {n}" for n in cmp.notes]
    return out
