"""Outputs of `replay bench`: human tables (rich), one JSON document, long-format CSV rows, a PNG plot.

The CSV layout is :mod:`replay_harness.bench.csvlog` (shared with tools/bench_kernels.py); here a
measurement is one record (:func:`csv_rows`) and the file holds one row per statistic of it.

The PNG is drawn from CSV rows only (:func:`plot_rows`), so a GPU machine without matplotlib writes the
CSV and a person renders the same picture later: ``replay bench --plot-from bench.csv --png bench.png``.
"""
from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from replay_harness.bench import csvlog
from replay_harness.errors import InputError
from replay_harness.guarded import write_file

PLOT_COLUMNS = {"label", "route_mix", "step", "median_us", "p20_us", "p80_us", "clock", "recording"}


def summary_rows(result) -> list[dict]:
    """Per side and route mix: steps, median of per-step medians, typical within-step spread (p80 - p20),
    µs per emitted token, bytes per step, GB/s (sum of floor bytes / sum of medians)."""
    groups: dict[tuple, list] = defaultdict(list)
    for m in result.measurements:
        groups[(m.side, m.label, m.route_mix)].append(m)
    out = []
    for (side, label, mix), ms in sorted(groups.items()):
        meds = [m.median_us for m in ms]
        total_us = sum(meds)
        tokens = sum(m.tokens for m in ms)
        nbytes = sum(m.bytes for m in ms)
        rep = [m.self_reported_us for m in ms if m.self_reported_us is not None]
        out.append({"side": side, "label": label, "route_mix": mix, "steps": len(ms),
                    "median_us": float(np.median(meds)), "spread_us": float(np.median([m.p80_us - m.p20_us
                                                                                        for m in ms])),
                    "us_per_token": total_us / tokens if tokens else None, "bytes_per_step": nbytes / len(ms),
                    "gbps": nbytes / (total_us * 1e-6) / 1e9 if total_us > 0 and nbytes else None,
                    "self_reported_us": float(np.median(rep)) if rep else None,
                    "timed": ",".join(sorted({m.timed for m in ms})), "clock": ",".join(sorted({m.clock for m in ms}))})
    return out


def to_json(result, exit_code: int) -> dict:
    return {
        "schema": "replay.bench/1", "ok": exit_code == 0, "exit_code": exit_code,
        "verdict": result.verdict.to_dict(),
        "env": result.env,
        "settings": result.settings,
        "sides": [{"key": s.key, "impl": s.impl_name, "label": s.label, "overrides": s.overrides.to_dict(),
                   "timed": s.timed_call, "external": s.external} for s in result.sides],
        "ratio": None if result.ratio is None else result.ratio.to_dict(),
        "summary": summary_rows(result),
        "coverage": {k: c.to_dict() for k, c in result.coverage.items()},
        "measurements": csv_rows(result),
    }


def csv_rows(result) -> list[dict]:
    """One record per measurement (side x recording x step x group): the JSON's ``measurements``; the CSV
    (:func:`write_csv`) holds one row per statistic of each."""
    sides = {s.key: s for s in result.sides}
    env = result.env
    verdict = result.verdict.label
    rows = []
    for m in result.measurements:
        s = sides[m.side]
        rows.append({
            "side": m.side, "impl": s.impl_name, "overrides": s.overrides.label(), "label": m.label,
            "recording": m.recording, "data": m.data, "step": m.step, "group": m.group, "route_mix": m.route_mix,
            "requests": m.requests, "rows": m.rows, "vocab": m.vocab, "max_drafts": m.max_drafts, "dtype": m.dtype,
            "timed": m.timed, "clock": m.clock, "calls": len(m.times_us), "median_us": round(m.median_us, 3),
            "p20_us": round(m.p20_us, 3), "p80_us": round(m.p80_us, 3), "min_us": round(min(m.times_us), 3),
            "bytes": m.bytes, "gbps": None if m.gbps is None else round(m.gbps, 2), "tokens": m.tokens,
            "us_per_token": None if m.us_per_token is None else round(m.us_per_token, 3),
            "self_reported_us": m.self_reported_us, "rotation": m.rotation,
            "device_busy": None if m.device_busy is None else round(m.device_busy, 3),
            "l2_policy": result.settings["l2_policy"], "gpu": env.get("gpu"), "torch": env.get("torch"),
            "triton": env.get("triton"), "cuda": env.get("cuda"), "triton_interpret": env.get("triton_interpret"),
            "date": env.get("date"), "verdict": verdict})
    return rows


def _case(row: dict) -> str:
    return f"{Path(str(row['recording'])).name}#{row['step']}" + ("" if row["group"] == "all" else f" {row['group']}")


def write_csv(path: str | Path, rows: list[dict], env: dict | None = None) -> None:
    """Write :func:`csv_rows` records in the long layout. ``env`` (``result.env``) is written once; without
    it, the environment columns of the records (gpu, torch, triton, cuda, triton_interpret, date) are."""
    if env is None:
        env = {k: v for k, v in (rows[0] if rows else {}).items()
               if k not in csvlog.ID_COLUMNS and k not in csvlog.STATISTICS}
    csvlog.write(path, [{"case": _case(r), **r} for r in rows], env)


def read_csv(path: str | Path) -> list[dict]:
    """Records of a `replay bench --csv` file, each with the environment merged in (timings float, step
    int); also reads the one-row-per-measurement files of earlier versions. Not such a file -> InputError."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror})") from None
    except (UnicodeDecodeError, csv.Error):
        rows = []
    bad = InputError(path, "not a `replay bench` CSV (expected columns " + ", ".join(sorted(PLOT_COLUMNS)) + ")")
    if rows and {"statistic", "value"} <= set(rows[0]):
        try:
            env, rows = csvlog.pivot(rows)
        except ValueError:
            raise InputError(path, "a statistic's value is not a number") from None
        rows = [{**env, **r} for r in rows]
        if not rows or not all(PLOT_COLUMNS <= r.keys() and r["recording"] and r.get("median_us") is not None
                               for r in rows):  # a column the plot draws under another name: no bench CSV
            raise bad
    elif not rows or not PLOT_COLUMNS <= set(rows[0]):
        raise bad
    for i, r in enumerate(rows):
        try:
            for k in ("median_us", "p20_us", "p80_us"):
                r[k] = float(r[k])
            r["step"] = int(r["step"])
        except (TypeError, ValueError):
            raise InputError(path, f"row {i + 2}: a timing column is not a number") from None
    return rows


def plot_rows(rows: list[dict], png: str | Path, title: str | None = None) -> None:
    """Time per step by impl and route, from CSV rows: x = step (recording, step, group), y = median µs
    (log scale when they span > 10x) with p20-p80 bars; colour = impl label, marker = route mix. Text is
    drawn as written (no mathtext, no TeX: a name holding `$` is a label, not a formula that fails to parse).
    Needs matplotlib (raises ImportError without it)."""
    import matplotlib

    with matplotlib.rc_context({"text.usetex": False, "text.parse_math": False}):
        _plot_rows(rows, png, title)


def _plot_rows(rows: list[dict], png: str | Path, title: str | None) -> None:
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(r["label"] for r in rows))
    mixes = list(dict.fromkeys(r["route_mix"] for r in rows))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^vP*Xh<>"
    step_ids: dict[tuple, int] = {}
    for r in rows:
        step_ids.setdefault((r["recording"], r["step"], r.get("group", "all")), len(step_ids))
    n = len(step_ids)
    fig, ax = plt.subplots(figsize=(min(16.0, max(7.0, 0.55 * n + 4.0)), 4.8))
    width = 0.7 / max(len(labels), 1)
    for li, label in enumerate(labels):
        for mi, mix in enumerate(mixes):
            sel = [r for r in rows if r["route_mix"] == mix and r["label"] == label]
            if not sel:
                continue
            x = np.array([step_ids[(r["recording"], r["step"], r.get("group", "all"))] for r in sel]) + \
                (li - (len(labels) - 1) / 2) * width
            y = np.array([r["median_us"] for r in sel])
            lo = np.maximum(y - np.array([r["p20_us"] for r in sel]), 0)
            hi = np.maximum(np.array([r["p80_us"] for r in sel]) - y, 0)
            ax.errorbar(x, y, yerr=[lo, hi], fmt=markers[mi % len(markers)], ms=6, capsize=3,
                        color=colors[li % len(colors)], label=f"{label}: {mix} (median {np.median(y):,.1f} µs)")
    meds = [r["median_us"] for r in rows if r["median_us"] > 0]
    if meds and max(meds) / min(meds) > 10:  # log only when the times span more than a decade
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    names = []
    for rec, step, group in step_ids:
        base = Path(str(rec)).name or str(rec)
        names.append(f"{base}#{step}" + ("" if group in ("all", "") else f" {group}"))
    ax.set_xticks(range(n))
    ax.set_xticklabels(names, rotation=30 if n > 3 else 0, ha="right" if n > 3 else "center", fontsize=8)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylabel("time per step, µs (median, p20-p80)")
    ax.grid(True, which="both", axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    clock = ", ".join(sorted({r["clock"] for r in rows}))
    gpu = rows[0].get("gpu") or ""
    note = ". CPU wall-clock under the Triton interpreter: NOT representative" if gpu == "cpu" else ""
    head = title or f"replay bench on {gpu} ({clock}); L2: {rows[0].get('l2_policy', '')}{note}"
    ax.set_title("\n".join(textwrap.wrap(head, int(fig.get_figwidth() * 11))), fontsize=9)
    if any(r.get("verdict") == "inconclusive" for r in rows):
        ax.text(0.5, 0.5, "INCONCLUSIVE: the path under test never ran\n(these times do not mean 'no difference')",
                transform=ax.transAxes, ha="center", va="center", fontsize=13, color="red", alpha=0.75,
                bbox=dict(facecolor="white", edgecolor="red", alpha=0.8))
    fig.tight_layout()
    image = io.BytesIO()  # drawn in memory, written through the claim of --png's check (replay_harness.guarded)
    kind = Path(str(png)).suffix.lstrip(".").lower()
    fig.savefig(image, dpi=120, format=kind if kind in fig.canvas.get_supported_filetypes() else "png")
    plt.close(fig)
    write_file(png, image.getvalue(), "--png", "the plot")


# ---------------------------------------------------------------------------
# human tables
# ---------------------------------------------------------------------------


def _fmt(v: Any, spec: str = ",.1f") -> str:
    return "-" if v is None else format(v, spec)


def _us(v: Any, spec: str = ",.1f") -> str:
    """Microseconds: tenths below 10,000 µs, whole above (a CPU step's 105,123 µs fits its column)."""
    return ",.0f" if v is not None and v >= 10_000 else spec


def print_tables(result, console, exit_code: int, T) -> None:
    """The bench's lines and tables on ``console``; ``T``: replay_harness.cli.tables (tables that read at 80
    columns), passed in by the command so this module imports nothing of the CLI."""

    env = result.env
    sides = " vs ".join(f"{s.key} = {s.label}" for s in result.sides)
    what = "; ".join(f"{s.key}: timed {s.timed_call}" + (" (device work of a prepared state)"
                                                          if s.timed_call == "launch" else " (whole call)")
                     for s in result.sides)
    console.print(f"replay bench: {sides}")
    console.print(f"device {env['device']}: {env['gpu']}, torch {env['torch']}, triton {env['triton']}, clock {env['clock']}"
                  + (" (Triton interpreter: CPU timings are NOT representative)" if env["device"] == "cpu" else ""))
    console.print(f"{what}; {result.settings['repeats']} timed call(s) per step after {result.settings['warmup']} "
                  f"warm-up; L2: {result.settings['l2_policy']}")
    rows = summary_rows(result)
    self_reported = any(r["self_reported_us"] is not None for r in rows)  # external programs that time themselves
    t = T.table("time per step, by impl and route",
                [("impl", T.TEXT), ("routes", T.TEXT), ("steps", T.NUM), ("median\nµs", T.NUM),
                 ("spread\nµs", T.NUM), ("µs per\ntoken", T.NUM), ("bytes\nper step", T.NUM), ("GB/s", T.NUM)]
                + [("self-\nreported µs", T.NUM)] * self_reported)
    for r in rows:
        t.add_row(f"{r['side']}: {r['label']}", r["route_mix"].replace("+", "+ "), str(r["steps"]),
                  _fmt(r["median_us"], _us(r["median_us"])),
                  _fmt(r["spread_us"], _us(r["spread_us"])), _fmt(r["us_per_token"], _us(r["us_per_token"], ",.2f")),
                  _fmt(r["bytes_per_step"], ",.0f"), _fmt(r["gbps"], ",.1f" if (r["gbps"] or 0) >= 10 else ".2g"),
                  *[_fmt(r["self_reported_us"])] * self_reported)
    console.print(t)
    c = T.table("coverage: what each impl did (counted)",
                [("impl", T.TEXT), ("requests\nby route", T.TEXT), ("rows\nby route", T.TEXT),
                 ("violations", T.TEXT), ("kernels\nlaunched", T.TEXT)])
    for s in result.sides:
        cov = result.coverage[s.key]
        kern = "not observable" if cov.kernels is None else \
            (", ".join(f"{k} x{v}" for k, v in sorted(cov.kernels.items())) or "none")
        c.add_row(f"{s.key}: {s.label}", ", ".join(f"{k} {v}" for k, v in sorted(cov.requests_by_route.items())) or "-",
                  ", ".join(f"{k} {v}" for k, v in sorted(cov.rows_by_route.items())) or "-",
                  ", ".join(f"{k} x{v}" for k, v in sorted(cov.violations.items())) or "none", kern)
    console.print(c)
    for s in result.sides:
        console.print(f"{s.key} kernels counted by: {result.coverage[s.key].kernel_source or '-'}")
    v = result.verdict
    if result.ratio is not None:
        r = result.ratio
        a, b = result.sides[0].label, result.sides[1].label
        if v.conclusive:
            if r.lo <= 1.0 <= r.hi:
                faster = f"{a} and {b} are not distinguishable at this confidence (the CI contains 1)"
            elif r.point < 1:
                faster = f"{a} takes {r.point:.3g}x the time of {b} ({1 / r.point:.3g}x faster)"
            else:
                faster = f"{a} takes {r.point:.3g}x the time of {b} ({r.point:.3g}x slower)"
            console.print(f"ratio A/B = {r.point:.4g}  [{r.lo:.4g}, {r.hi:.4g}] {r.confidence:.0%} bootstrap CI "
                          f"over {r.pairs} step(s) x {r.calls} timed call(s): {faster}; uses {r.uses}")
            if r.caveat:
                console.print(f"caveat: {r.caveat}")
        else:
            console.print(f"ratio A/B = {r.point:.4g} [{r.lo:.4g}, {r.hi:.4g}] is NOT a result: see below")
    for note in v.notes:
        console.print(f"note: {note}")
    if v.conclusive and not v.noisy:
        console.print("verdict: conclusive (the path under test ran, see coverage; the timings are steady)")
    elif v.conclusive:
        console.print("verdict: NOISY (the path under test ran, see coverage; the timings are too spread out to be "
                      "a precise result):")
        for line in v.noisy:
            console.print(f"  - {line}")
    else:
        console.print(f"verdict: INCONCLUSIVE (exit {exit_code}) — this is not 'no difference':")
        for reason in v.reasons:
            console.print(f"  - {reason}")


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, default=str)
