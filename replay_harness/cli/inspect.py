"""`replay inspect`: what a recording holds (the numbers come from replay_harness.recording.summary)."""
from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Iterator

from replay_harness.cli import tables

from replay_harness.cli.common import (JsonFileOpt, JsonOpt, RecordingsArg, check_json_file, out, print_json,
                                       warn_recording)

SOURCE_CHARS = 400  # the table shows this much of a recording's `source` (JSON); --json has all of it


def inspect(paths: RecordingsArg, as_json: JsonOpt = False, json_file: JsonFileOpt = None) -> None:
    """Show what recordings hold: steps, shapes, dtypes, parameter mix, drafts, acceptance, bytes.

    Exit 0, or 2 when a folder is not a readable recording. Folders of recordings are searched. A recording
    that did not close cleanly or whose content digest does not match gets one warning line on stderr. The
    table shows the first 400 characters of the recording's source (how it was made), saying so when it is
    longer; --json prints it whole.

    Recordings with draft trees (verify_method tree) count acceptance by depth for the tree requests and by
    position for the chains (replay_harness/cli/inspect_tree.py).

    Example: replay inspect fixtures/real-founding --json
    """
    from replay_harness.cli.inspect_tree import split_acceptance
    from replay_harness.recording.discover import find_recordings
    from replay_harness.recording.store import Recording
    from replay_harness.recording.summary import summarize

    check_json_file(json_file, paths)
    found = find_recordings(paths)
    recs = [Recording(p) for p in found]
    summaries = [(p, split_acceptance(rec, summarize(rec))) for p, rec in zip(found, recs)]
    for rec in recs:  # not closed cleanly, or a digest that does not match: one warning line each
        warn_recording(rec)
    if as_json or json_file:
        # one shape whatever the number of recordings (docs/INTEGRATION.md, "JSON documents")
        with _room_for(max((_depth(s["source"]) for _, s in summaries), default=0)):
            print_json({"schema": "replay.inspect/1", "recordings": [s for _, s in summaries]}, json_file=json_file,
                       stdout=as_json)
    if not as_json:
        for path, s in summaries:
            _print_table(path, s)


def _depth(value: object) -> int:
    """How deeply ``value`` (a JSON value) nests lists and objects, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


@contextmanager
def _room_for(depth: int) -> Iterator[None]:
    """Recursion room to print a JSON document holding a value ``depth`` levels deep: the printer takes a few
    frames a level, and a valid manifest's ``source`` may nest as deep as its parser allowed (nearly the
    recursion limit), so ``inspect --json`` prints any source it read instead of an internal error."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, limit + 4 * depth))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _print_table(path: str, s: dict) -> None:
    """The summary of one recording as a two-column table."""
    table = tables.table(f"{path}" + (" (synthetic)" if s["synthetic"] else ""),
                         [("what", tables.TEXT), ("value", tables.TEXT)], show_header=False)
    rows = [
        ("schema", f"{s['schema']}  complete={s['complete']}  rng={s['rng_contract']}"),
        ("source", _clip(json.dumps(s["source"], sort_keys=True), SOURCE_CHARS)),
        ("steps / request-steps / rows", f"{s['steps']} / {s['request_steps']} / {s['rows']}"),
        ("requests (distinct ids)", str(s["distinct_requests"])),
        ("vocab", str(s["vocab_size"])),
        ("logits shapes", ", ".join(f"{k} x{v}" for k, v in s["logits_shapes"].items())),
        ("logits dtypes", ", ".join(f"{k} x{v}" for k, v in s["logits_dtypes"].items())),
        ("drafts per request (k: count)", ", ".join(f"{k}: {v}" for k, v in s["drafts_per_request"].items())),
        ("greedy / stochastic requests", f"{s['greedy_requests']} / {s['stochastic_requests']}"),
        ("top-k / top-p / min-p requests", f"{s['top_k_requests']} / {s['top_p_requests']} / {s['min_p_requests']}"),
        ("steps with draft logits", str(s["steps_with_draft_logits"])),
        ("recorded routes", ", ".join(f"{k}: {v}" for k, v in s["recorded_routes"].items()) or "not recorded"),
        ("acceptance by position", _acceptance(s)),
        ("mean accepted drafts", "-" if s["mean_accepted_drafts"] is None else f"{s['mean_accepted_drafts']:.2f}"),
        ("bytes on disk", f"{s['bytes_on_disk']:,}"),
    ]
    if "acceptance_rate_by_depth" in s:
        rows.insert(-2, ("tree acceptance by depth", ", ".join(
            f"{k}: {v:.2f}" for k, v in s["acceptance_rate_by_depth"].items()) or "not recorded"))
    for k, v in rows:
        table.add_row(k, v)
    out.print(table)


def _acceptance(s: dict) -> str:
    """The chains' acceptance by position, or why there is none (trees are counted by depth, their own row)."""
    text = ", ".join(f"{k}: {v:.2f}" for k, v in s["acceptance_rate_by_position"].items())
    if text:
        return text
    if "acceptance_rate_by_depth" in s:
        return "no chain drafts (tree requests: by depth)"
    return "no drafts" if not any(int(k) > 0 for k in s["drafts_per_request"]) else "not recorded"


def _clip(text: str, limit: int) -> str:
    """``text`` whole when it has at most ``limit`` characters; else cut at the last space before ``limit``
    (never inside a word) and said so: how long it is and where to read all of it."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rpartition(" ")[0] or text[:limit]
    return f"{cut} … (cut: {len(cut):,} of {len(text):,} characters; `replay inspect --json` prints all of it)"
