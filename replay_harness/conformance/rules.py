"""The rules the conformance vectors pin, one row each (docs/FIXTURES.md, "Sampling rules").

Each vector under ``replay_harness/conformance/vectors/<rule>/`` is a recording whose manifest names its rule
(``source.rule``); ``tools/make_conformance.py`` builds one recording per row here, with the tokens that
``reference`` emits, and ``replay conformance`` quotes the statement when an impl fails the vector.

Two sets (docs/INTEGRATION.md, "Conformance for any RNG"): rules every correct sampler meets whatever its
RNG (``mrv2_only`` False: checked token for token for an ``mrv2`` impl, by route, support and statistics
for any other), and the MRV2 bit-exact rules of the noise itself (``mrv2_only`` True: "not applicable" to
an impl of another RNG contract).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """id: the vector's folder name; statement: the rule, one sentence; section: where FIXTURES.md states it;
    mrv2_only: the rule is about the MRV2 noise itself (bit-exact vectors only)."""

    id: str
    statement: str
    section: str
    mrv2_only: bool = False


RULES = (
    Rule("greedy-ties", "greedy picks the FIRST index of the maximum; greedy verify accepts a draft only if it "
                        "equals that index; a -1 placeholder ends verification", "Greedy"),
    Rule("gumbel-hash", "Gumbel noise: murmur3 words seed_lo, seed_hi, pos_lo, token from h = 0, then "
                        "fmix32(h ^ 16); u = (h >> 16) * 2^-16 + ((h & 0xFFFF) + 0.5) * 2^-32 in fp32", "Gumbel noise",
         mrv2_only=True),
    Rule("gumbel-clamp", "1 - u is clamped to >= 2^-24 before the log (u rounds to 1.0 at seed 12345, position "
                         "20531159, token 1: noise -2.8115, not -inf)", "Gumbel noise", mrv2_only=True),
    Rule("extreme-seeds-positions", "seeds are any int64 (two's complement words); Gumbel uses the low 32 bits "
                                    "of the position, the acceptance uniform both words", "RNG contract",
         mrv2_only=True),
    Rule("temperature", "temperature divides the fp32 logits (x / t) before every filter", "Filters"),
    Rule("min-p", "min-p drops x < max + log(min_p) (fp32); tokens AT the bound are kept", "Filters"),
    Rule("top-k-ties", "top-k keeps every token >= the k-th largest value (ties at the k-th value are kept, "
                       "so more than k tokens may survive)", "Filters"),
    Rule("top-p-cut", "top-p: stable ascending sort, drop while the fp32 cumulative softmax <= 1 - p, always "
                      "keep the last (largest) entry", "Filters"),
    Rule("filter-order", "filters apply in the order temperature, min-p, top-k, top-p", "Filters"),
    Rule("stochastic-verify", "accept draft d iff log p(d) > log u + log q(d) with u the Philox acceptance "
                              "uniform; on rejection draw from the residual, after all accepted draw the bonus",
         "Stochastic verify"),
    Rule("placeholder-drafts", "a -1 draft on a verify row ends verification: the token is drawn from that "
                               "row's target (greedy: its argmax)", "Stochastic verify"),
    Rule("draft-logits", "with draft logits, q = softmax(draft / t) and the residual is max(p - q, 0)",
         "Stochastic verify"),
    Rule("logits-dtypes", "BF16 and F16 logits are widened exactly to fp32 before anything else", "One step file"),
)
RULE = {r.id: r for r in RULES}
