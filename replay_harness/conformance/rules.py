"""The rules the conformance vectors pin, one row each (docs/FIXTURES.md, "Sampling rules", "The sampling pipeline" and
"Verification methods").

Each vector under ``replay_harness/conformance/vectors/<rule>/`` is a recording whose manifest names its rule
(``source.rule``); ``tools/make_conformance.py`` builds one recording per row here, with the tokens that
``reference`` emits, and ``replay conformance`` quotes the statement when an impl fails the vector.

Two sets (docs/INTEGRATION.md, "Conformance for any RNG"): rules every correct sampler meets whatever its
RNG (``mrv2_only`` False: checked token for token for an impl of the vector's contract, by route, support and
statistics for any other), and the bit-exact rules (``mrv2_only`` True: "not applicable" to an impl of another RNG
contract): the noise itself (MRV2's, and the ``mrv2-fp64`` contract's), and block and FLy verification, whose laws
`replay verify` does not test.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """id: the vector's folder name; statement: the rule, one sentence; section: where FIXTURES.md states it;
    mrv2_only: checked token for token only, under the vector's contract (the noise itself; block and FLy
    verification); pipeline: the rule is one of the sampling pipeline's (schema minor 2 fields: "The sampling
    pipeline", "Emitted logprobs and kept sets"); method: the rule is one of a verification method's or of the
    mrv2-fp64 contract's ("Verification methods")."""

    id: str
    statement: str
    section: str
    mrv2_only: bool = False
    pipeline: bool = False
    method: bool = False


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
    # The sampling pipeline (schema minor 2): its rules act on the logits before temperature, in this order.
    *(Rule(rule, statement, section, pipeline=True) for rule, statement, section in (
        ("grammar-mask", "a request with has_grammar = 1 keeps only the tokens whose bit (v % 32 of int32 word "
                         "v // 32 of its row's grammar_bitmask) is set, on every row, before everything else; bits "
                         "at v >= V are ignored, and so is the bitmask of a request with has_grammar = 0",
         "The sampling pipeline"),
        ("allowed-token-ids", "a non-empty allowed_token_ids list sets every other token to -inf (an allowed -inf "
                              "stays -inf; an empty list restricts nothing)", "The sampling pipeline"),
        ("logit-bias", "logit bias adds its value to the token's fp32 logit (-inf bans it), after the allowed ids "
                       "and before the penalties", "The sampling pipeline"),
        ("min-tokens", "while a row's output holds fewer than min_tokens tokens, its stop ids are -inf; the drafts "
                       "before the row count toward the output", "The sampling pipeline"),
        ("min-tokens-restore", "when the min-tokens mask leaves a grammar request's row all -inf, the stop ids get "
                               "back their finite values (a request without grammar is not restored)",
         "The sampling pipeline"),
        ("repetition-penalty", "repetition penalty: a token of the prompt or the output, once whatever its count, "
                               "becomes x * (1 / rep) if x > 0 else x * rep (fp32)", "The sampling pipeline"),
        ("frequency-penalty", "frequency penalty: x - freq * count, the count of the token in the row's output "
                              "(the prompt does not count)", "The sampling pipeline"),
        ("presence-penalty", "presence penalty: x - pres once for a token of the row's output, after the "
                             "frequency penalty (the prompt does not count)", "The sampling pipeline"),
        ("penalties-at-drafts", "a verify row's output is output_token_ids followed by the request's drafts "
                                "before the row: penalties count those drafts", "The sampling pipeline"),
        ("bad-words", "a bad word whose tokens but the last end the row's output (drafts before the row "
                      "included; never the prompt) bans its last token; a one-token word is always banned",
         "The sampling pipeline"),
        ("logprobs-raw", "raw logprobs / logits are those of the model's logits after the grammar mask only: "
                         "column 0 the emitted token, then the top n descending (ties by ascending id), the rank "
                         "the count of tokens >= the emitted one's", "Emitted logprobs and kept sets"),
        ("logprobs-processed", "processed logprobs / logits are those of the row after every rule, temperature "
                               "and filters included", "Emitted logprobs and kept sets"),
        ("kept-set", "the kept set of an emitted slot is the tokens whose processed logit is finite (after "
                     "top-k with its ties, top-p and min-p; greedy requests ignore the filters)",
         "Emitted logprobs and kept sets"),
    )),
    # Verification methods and the fp64 contract (vLLM 0.33 MRV2's RejectionSampleMethod, DraftSampleMethod and
    # use_fp64_gumbel).
    Rule("block-verification", "block verification: c_i = min(c_{i-1} + log p_i(d_i) - log q_i(d_i), 0); draft i "
                               "is tested with the Philox uniform of seed ^ (i << 32) against h_i = r / (r + 1 - "
                               "e^c_i), r the residual mass of row i + 1 (e^c_i for the last draft); the largest "
                               "i + 1 with u_i <= h_i is accepted, then a draw from max(e^c p - q, 0) or the bonus "
                               "row", "Verification methods", mrv2_only=True, method=True),
    Rule("fly-verification", "FLy: a token-wise rejection at draft i on a row whose top-k entropy is at least the "
                             "threshold, with i + W < k, is deferred: accepted when the next W drafts are accepted "
                             "natively, else verification stops at i (greedy requests too)", "Verification methods",
         mrv2_only=True, method=True),
    Rule("probabilistic-drafts", "a probabilistic draft is the Gumbel-max of draft_logits / T with the noise of "
                                 "(seed, position + 2^30), never the verifier's own key, and is verified with "
                                 "q = softmax(draft_logits / T)", "Verification methods", method=True),
    Rule("fp64-noise", "under mrv2-fp64 every Gumbel draw widens the scores to float64 and adds -log(-log(u)), u "
                       "the 53-bit uniform of two murmur3 hashes (h = 0 and h = 0x9E3779B9); the acceptance uniform "
                       "is unchanged", "RNG contract `mrv2-fp64`", mrv2_only=True, method=True),
)
RULE = {r.id: r for r in RULES}

# The mechanisms (replay_harness/checks/power.py) whose bugs a rule's RNG-independent check must have had the
# power to catch, where its vector exercises them: an exact check on a greedy row is no power for a rule about
# stochastic verification. A rule not listed keeps the older criterion (an exact check, or a powered test).
MECHANISMS_OF = {
    "greedy-ties": ("greedy",),
    "temperature": ("temperature",),
    "min-p": ("min-p",),
    "top-k-ties": ("top-k",),
    "top-p-cut": ("top-p",),
    "filter-order": ("min-p", "top-k", "top-p"),
    "stochastic-verify": ("temperature", "acceptance", "residual"),
    "placeholder-drafts": ("greedy", "temperature"),
    "draft-logits": ("acceptance",),  # the residual: stochastic-verify (no power on this vector at 200 trials)
    "mixed-routing": ("greedy", "temperature", "acceptance"),
    "logits-dtypes": ("greedy", "temperature"),
}

# Not a vector: where `replay conformance` groups the failures of the twin and position tests (and the other
# statistical failures of the requests that failed them), which come from the noise whatever the vector's rule.
NOISE_RULE = Rule("position-keyed-noise", "noise is keyed by seed and position: runs with other seeds, batch rows "
                                          "or positions draw independently", "RNG contract `mrv2`")

