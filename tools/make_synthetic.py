#!/usr/bin/env python3
"""Regenerate the committed SYNTHETIC fixtures (fixtures/synthetic-*), emitted tokens from `reference`.

    python tools/make_synthetic.py            # all cases into fixtures/
    python tools/make_synthetic.py --list
    python tools/make_synthetic.py synthetic-mixed --out /tmp/x
"""
from __future__ import annotations

import argparse
from pathlib import Path

from replay_harness.recording.synthetic import CASES, write_case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    ap.add_argument("--out", default="fixtures", help="folder to write recordings into (default fixtures/)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args()
    if args.list:
        for c in CASES.values():
            print(f"{c.name:26s} V={c.vocab_size:<5d} R={c.num_requests} k<={c.max_drafts} {c.description}")
        return
    for name in args.cases or list(CASES):
        if name not in CASES:
            raise SystemExit(f"make_synthetic: unknown case {name!r}; known: {', '.join(CASES)}")
        path = write_case(CASES[name], Path(args.out) / name, seed=args.seed, overwrite=True)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
