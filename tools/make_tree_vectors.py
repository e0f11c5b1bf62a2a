#!/usr/bin/env python3
"""Write the draft-tree conformance vector (docs/FIXTURES.md "Draft trees"; replay_harness/conformance/tree_vectors.py
builds and checks it): a SYNTHETIC recording of two steps, the tokens `reference` emits.

    python tools/make_tree_vectors.py --out /tmp/tree-verification

The vector is checked before it is written: every ablation (standard verification of the nodes as a chain, one
uniform shared by the siblings, no residual) changes its tokens, and they survive 16 random moves of every logit by
up to 1e-3. Written without ``write_stats`` (timings), so writing it again gives the same bytes.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling tool, also when imported by a test
from make_conformance import write_steps  # noqa: E402
from replay_harness.conformance.tree_vectors import RULE_ID, STATEMENT, V, build, emitted  # noqa: E402


def write_vector(out: Path) -> Path:
    return write_steps(out, build(), emitted, rule=RULE_ID, statement=STATEMENT, section="Draft trees",
                       tool="tools/make_tree_vectors.py", vocab=V, contract="mrv2")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder of the vector (a recording)")
    print(f"wrote {write_vector(Path(ap.parse_args().out))}")


if __name__ == "__main__":
    main()
