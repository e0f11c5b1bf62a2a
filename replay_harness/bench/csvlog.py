"""The one CSV layout of every benchmark (`replay bench --csv`, tools/bench_kernels.py): long format.

A *record* is one measurement as a flat dict: identifying columns (what ran on what) plus statistics.
On disk each record becomes one row per statistic, and the environment comes once, as rows of its own:

    columns    case, impl, label, side, family, overrides, recording, data, step, group, route_mix,
               vocab, requests, rows, max_drafts, top_p, dtype, mode, timed, clock, round, l2_policy,
               verdict, error, statistic, value, unit
    case       what was measured: "REC#STEP[ GROUP]" (replay bench), "V.. R.. k.. top_p=.." (kernels),
               or "environment" for the environment rows (statistic = key, value = value, unit empty)
    statistic  one of :data:`STATISTICS` (its unit in ``unit``); ``value`` empty when it does not apply

Columns that do not apply to a bench stay empty (``side`` is A/B in `replay bench`, ``family``
ours/vllm/flashinfer/torch in the kernel benchmark). :func:`pivot` turns the rows back into records.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from replay_harness.guarded import write_file

ID_COLUMNS = ["case", "impl", "label", "side", "family", "overrides", "recording", "data", "step", "group",
              "route_mix", "vocab", "requests", "rows", "max_drafts", "top_p", "dtype", "mode", "timed", "clock",
              "round", "l2_policy", "verdict", "error"]
STATISTICS = {  # statistic -> unit
    "calls": "count", "median_us": "us", "p20_us": "us", "p80_us": "us", "min_us": "us",
    "bytes": "B", "gbps": "GB/s", "pct_copy_bw": "%", "floor_us": "us", "tokens": "count",
    "us_per_token": "us/token", "self_reported_us": "us", "rotation": "copies", "device_busy": "fraction",
    "graph_launches": "count",
}
STAT_COLUMNS = ["statistic", "value", "unit"]
COLUMNS = ID_COLUMNS + STAT_COLUMNS
ENV_CASE = "environment"


def long_rows(records: list[dict], env: dict) -> list[dict]:
    """The CSV rows: the environment rows, then one row per (record, statistic present in it).

    A record key that is an environment key and no ID column is dropped (the environment is written
    once); any other key must be an ID column or a statistic (ValueError otherwise: one layout).
    """
    rows = [{"case": ENV_CASE, "statistic": k, "value": v} for k, v in env.items()]
    for r in records:
        ids = {k: v for k, v in r.items() if k not in STATISTICS and (k in ID_COLUMNS or k not in env)}
        unknown = set(ids) - set(ID_COLUMNS)
        if unknown:
            raise ValueError(f"not columns of the benchmark CSV: {', '.join(sorted(unknown))}")
        rows += [{**ids, "statistic": s, "value": r[s], "unit": unit} for s, unit in STATISTICS.items() if s in r]
    return rows


def render(records: list[dict], env: dict) -> str:
    """The CSV text of ``records`` and ``env`` (:func:`long_rows`; csv's own line ends, \\r\\n)."""
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    w.writeheader()
    for row in long_rows(records, env):
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def write(path: str | Path, records: list[dict], env: dict, option: str = "--csv") -> None:
    """Write the CSV to ``path`` atomically through the claim of its check (replay_harness.guarded: never over
    an input, a FIFO, a socket or a device; an OS error is exit 3 naming ``option`` and the path)."""
    write_file(path, render(records, env), option, "the CSV")


def pivot(rows: list[dict]) -> tuple[dict, list[dict]]:
    """(environment, records) from long rows (dicts of csv.DictReader): statistics as float (None when
    empty), identifying columns as text; a record is the rows that agree on every column but the last three."""
    env: dict = {}
    records: dict[tuple, dict] = {}
    for row in rows:
        if row.get("case") == ENV_CASE:
            env[row["statistic"]] = row["value"]
            continue
        ids = {c: v for c, v in row.items() if c not in STAT_COLUMNS}  # extra columns (e.g. a merged "run") too
        rec = records.setdefault(tuple(ids.items()), ids)
        value = row["value"]
        rec[row["statistic"]] = float(value) if value not in ("", None) else None
    return env, list(records.values())

