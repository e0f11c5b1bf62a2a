"""The value rules of schema minor 2's fields (docs/FIXTURES.md, "The sampling pipeline"): the pipeline's inputs
and the emitted logprobs and kept sets. ``validate.check_step`` calls :func:`check_pipeline` once names, dtypes and
the fixed shapes passed; every problem goes to ``bad(field, message)`` like the rest of a step's."""
from __future__ import annotations

import torch

from replay_harness import limits
from replay_harness.recording.schema import (DRAFT_SAMPLING, FIELD, FLY_FIELDS, LOGPROB_FIELDS, LOGPROBS_MODES,
                                             RAGGED_FIELDS, VERIFY_METHODS)
from replay_harness.recording.validate_tree import check_trees

# What a field needs beside it (docs/FIXTURES.md, "Which fields go together").
NEEDS = {
    "repetition_penalty": ("prompt_token_ids", "output_token_ids"),
    "frequency_penalty": ("output_token_ids",),
    "presence_penalty": ("output_token_ids",),
    "min_tokens": ("output_token_ids",),
    "stop_token_ids": ("min_tokens",),
    "bad_words_token_ids": ("bad_words_lengths", "output_token_ids"),
    "bad_words_lengths": ("bad_words_token_ids",),
    "grammar_bitmask": ("has_grammar",),
    "has_grammar": ("grammar_bitmask",),
    "logprobs_mode": ("logprobs",),
    "emitted_logprobs": ("logprobs", "emitted_logprob_ids", "emitted_logprob_ranks"),
    "emitted_logprob_ids": ("emitted_logprobs",),
    "emitted_logprob_ranks": ("emitted_logprobs",),
}
TOKEN_LISTS = ("prompt_token_ids", "output_token_ids", "allowed_token_ids", "stop_token_ids", "bad_words_token_ids",
               "logit_bias_ids")


def _first(mask: torch.Tensor) -> int:
    return int(torch.nonzero(mask.flatten())[0])


def _request_of(cu: torch.Tensor, index: int) -> int:
    """The request whose entries of a ragged list hold entry ``index``."""
    return int(torch.searchsorted(cu[1:].long(), torch.tensor(index), right=True))


def _check_ragged(t: dict, name: str, r: int, bad) -> bool:
    """A ragged list and its prefix sum: both there, the sum a prefix sum of the list, each request's entries
    within REPLAY_MAX_HISTORY. False when the list cannot be used further."""
    cu_name = FIELD[name].ragged
    if (name in t) != (cu_name in t):
        bad(name if name not in t else cu_name, f"missing: {name} and {cu_name} come together")
        return False
    if name not in t:
        return False
    values, cu = t[name], t[cu_name].long()
    if values.ndim != 1:
        bad(name, f"shape {list(values.shape)}, expected a 1-D list split by {cu_name}")
        return False
    if int(cu[0]) != 0 or bool((cu[1:] < cu[:-1]).any()) or int(cu[-1]) != values.numel():
        bad(cu_name, f"must start at 0, never decrease and end at {values.numel()} (the entries of {name}); "
                     f"got {cu.tolist()[:8]}{' ...' if cu.numel() > 8 else ''}")
        return False
    sizes = cu[1:] - cu[:-1]
    cap = limits.value(limits.MAX_HISTORY)
    if r and int(sizes.max()) > cap:
        rr = int(torch.argmax(sizes))
        bad(name, f"request {rr}: {int(sizes[rr]):,} entries, over the limit of {cap:,} tokens a request "
                  f"(set {limits.MAX_HISTORY.env} to raise it)")
        return False
    return True


def check_pipeline(t: dict[str, torch.Tensor], k: torch.Tensor, vocab_size: int, bad) -> None:
    """Every rule of docs/FIXTURES.md "The sampling pipeline" on step tensors ``t`` (names, dtypes and the fixed
    shapes already checked; ``k`` [R] the drafts per request)."""
    r = k.numel()
    usable = {name: _check_ragged(t, name, r, bad) for name in RAGGED_FIELDS}
    for name, needs in NEEDS.items():
        for other in needs:
            if name in t and other not in t:
                bad(name, f"needs {other} in the same step (docs/FIXTURES.md, 'Which fields go together')")
    for name in TOKEN_LISTS:
        if usable.get(name):
            ids = t[name].long()
            outside = (ids < 0) | (ids >= vocab_size)
            if bool(outside.any()):
                at = _first(outside)
                bad(name, f"request {_request_of(t[FIELD[name].ragged], at)}: id {int(ids[at])} is outside "
                          f"[0, {vocab_size})")
                usable[name] = False
    _check_per_request(t, vocab_size, bad)
    if usable.get("logit_bias_ids") and usable.get("logit_bias_values"):
        _check_bias(t, bad)
    if usable.get("bad_words_lengths") and usable.get("bad_words_token_ids"):
        lengths, cu_len, cu_tok = (t["bad_words_lengths"].long(), t["cu_bad_words_lengths"].long(),
                                   t["cu_bad_words_token_ids"].long())
        if bool((lengths < 1).any()):
            at = _first(lengths < 1)
            bad("bad_words_lengths", f"request {_request_of(cu_len, at)}: a bad word of {int(lengths[at])} tokens "
                                     "(every word holds at least 1)")
        else:
            ends = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
            per = ends[cu_len[1:]] - ends[cu_len[:-1]]  # tokens of each request's words
            if bool((per != cu_tok[1:] - cu_tok[:-1]).any()):
                rr = _first(per != cu_tok[1:] - cu_tok[:-1])
                bad("bad_words_lengths", f"request {rr}: the words' lengths add up to {int(per[rr])}, but it has "
                                         f"{int(cu_tok[rr + 1] - cu_tok[rr])} bad_words_token_ids")
    if "grammar_bitmask" in t and "has_grammar" in t:
        _warn_empty_grammar_rows(t, vocab_size, bad)
    if all(name in t for name in LOGPROB_FIELDS) and "logprobs" in t:
        _check_logprobs(t, vocab_size, bad)
    _check_methods(t, k, bad)


def _codes(t: dict, name: str, names: tuple[str, ...], bad) -> bool:
    """An int8 code field within ``names``' codes; False when it is not."""
    x = t[name].long()
    wrong = (x < 0) | (x >= len(names))
    if bool(wrong.any()):
        rr = _first(wrong)
        bad(name, f"request {rr}: code {int(x[rr])} is outside [0, {len(names) - 1}] ({', '.join(names)})")
        return False
    return True


def _check_methods(t: dict, k: torch.Tensor, bad) -> None:
    """docs/FIXTURES.md "Verification methods": codes, FLy's parameters, draft logits of probabilistic drafts."""
    if "verify_method" in t and _codes(t, "verify_method", VERIFY_METHODS, bad):
        fly = t["verify_method"].long() == VERIFY_METHODS.index("fly")
        missing = [name for name in FLY_FIELDS if name not in t]
        if bool(fly.any()) and missing:
            bad("verify_method", f"request {_first(fly)} uses fly, which needs {', '.join(missing)}")
        elif bool(fly.any()):
            window, threshold, top_k = (t[name] for name in FLY_FIELDS)
            for name, wrong in (("fly_window", window < 1), ("fly_entropy_threshold", ~torch.isfinite(threshold)),
                                ("fly_entropy_top_k", top_k < 1)):
                if bool((fly & wrong).any()):
                    rr = _first(fly & wrong)
                    bad(name, f"request {rr}: {t[name][rr].item()} (fly needs a window and a top-k >= 1 and a "
                              "finite threshold)")
    if "draft_sampling" in t and _codes(t, "draft_sampling", DRAFT_SAMPLING, bad):
        sampled = (t["draft_sampling"].long() == 1) & (k > 0) & (t["temperature"] != 0)
        if bool(sampled.any()) and "draft_logits" not in t:
            bad("draft_sampling", f"request {_first(sampled)}: probabilistic drafts need draft_logits (the "
                                  "drafter's logits they were drawn from)")
    if "verify_method" in t or "tree_parent" in t:
        check_trees(t, k, bad)  # docs/FIXTURES.md "Draft trees"


def _check_per_request(t: dict, vocab_size: int, bad) -> None:
    if "repetition_penalty" in t:
        x = t["repetition_penalty"]
        wrong = ~(torch.isfinite(x) & (x > 0))
        if bool(wrong.any()):
            rr = _first(wrong)
            bad("repetition_penalty", f"request {rr}: {float(x[rr])} (must be finite and > 0; 1 means off)")
    for name in ("frequency_penalty", "presence_penalty"):
        if name in t and bool((~torch.isfinite(t[name])).any()):
            rr = _first(~torch.isfinite(t[name]))
            bad(name, f"request {rr}: {float(t[name][rr])} (must be finite; 0 means off)")
    if "min_tokens" in t and bool((t["min_tokens"] < 0).any()):
        rr = _first(t["min_tokens"] < 0)
        bad("min_tokens", f"request {rr}: {int(t['min_tokens'][rr])} is negative")
    if "has_grammar" in t and bool(((t["has_grammar"] != 0) & (t["has_grammar"] != 1)).any()):
        rr = _first((t["has_grammar"] != 0) & (t["has_grammar"] != 1))
        bad("has_grammar", f"request {rr}: {int(t['has_grammar'][rr])} (must be 0 or 1)")
    if "logprobs" in t:
        n = t["logprobs"].long()
        if bool(((n < -1) | (n > vocab_size)).any()):
            rr = _first((n < -1) | (n > vocab_size))
            bad("logprobs", f"request {rr}: {int(n[rr])} is outside [-1, {vocab_size}] (-1: none asked for)")
    if "logprobs_mode" in t:
        m = t["logprobs_mode"].long()
        if bool(((m < 0) | (m >= len(LOGPROBS_MODES))).any()):
            rr = _first((m < 0) | (m >= len(LOGPROBS_MODES)))
            bad("logprobs_mode", f"request {rr}: code {int(m[rr])} is outside [0, {len(LOGPROBS_MODES) - 1}] "
                                 f"({', '.join(LOGPROBS_MODES)})")


def _check_bias(t: dict, bad) -> None:
    values = t["logit_bias_values"]
    wrong = torch.isnan(values) | torch.isposinf(values)
    if bool(wrong.any()):
        at = _first(wrong)
        bad("logit_bias_values", f"request {_request_of(t['cu_logit_bias'], at)}: bias {float(values[at])} "
                                 "(NaN and +inf are refused; -inf bans the token)")
    cu, ids = t["cu_logit_bias"].long(), t["logit_bias_ids"].long()
    for rr in range(cu.numel() - 1):
        mine = ids[cu[rr]:cu[rr + 1]]
        if torch.unique(mine).numel() != mine.numel():
            bad("logit_bias_ids", f"request {rr}: a token id given twice (one bias a token)")
            return


def _warn_empty_grammar_rows(t: dict, vocab_size: int, bad) -> None:
    """A row of a grammar request whose mask allows no token in [0, V): valid, a warning (the row is all -inf
    after the mask; the reference emits token 0 there, as vLLM's argmax does)."""
    words = t["grammar_bitmask"]
    cu = t["cu_num_logits"].long()
    rows = torch.repeat_interleave(t["has_grammar"].long(), cu[1:] - cu[:-1]).bool()
    tail = vocab_size % 32
    live = words.clone()
    if tail:
        live[:, -1] &= (1 << tail) - 1
    empty = rows & (live == 0).all(1)
    for row in torch.nonzero(empty).flatten().tolist():
        bad("grammar_bitmask", f"row {row} allows no token (every logit becomes -inf; the reference emits token 0 "
                               "there, as vLLM does)", warning=True)


def _check_logprobs(t: dict, vocab_size: int, bad) -> None:
    values, ids, ranks = (t[name] for name in LOGPROB_FIELDS)
    counts, tokens, asked = t["emitted_counts"].long(), t["emitted_tokens"].long(), t["logprobs"].long()
    if values.shape != ids.shape or values.ndim != 3 or values.shape[:2] != tokens.shape:
        bad("emitted_logprob_ids", f"shape {list(ids.shape)} beside emitted_logprobs {list(values.shape)}, "
                                   f"expected both [R, K+1, L] with [R, K+1] = {list(tokens.shape)}")
        return
    need = 1 + int(asked.clamp(min=0).max())
    if values.shape[2] < need:
        bad("emitted_logprobs", f"{values.shape[2]} columns, but a request asked for {need - 1} (L >= 1 + n)")
        return
    slot = torch.arange(tokens.shape[1])[None, :]
    emitted = (slot < counts[:, None]) & (asked[:, None] >= 0)
    col = torch.arange(values.shape[2])[None, None, :]
    used = emitted[:, :, None] & (col <= asked[:, None, None])
    if bool((emitted & (ids[:, :, 0].long() != tokens)).any()):
        rr = _first((emitted & (ids[:, :, 0].long() != tokens)).any(1))
        bad("emitted_logprob_ids", f"request {rr}: column 0 must hold the emitted token")
    if bool((used & ((ids < 0) | (ids >= vocab_size))).any()) or bool((~used & (ids != -1)).any()):
        rr = _first((used & ((ids < 0) | (ids >= vocab_size)) | (~used & (ids != -1))).any(2).any(1))
        bad("emitted_logprob_ids", f"request {rr}: ids in [0, {vocab_size}) in the columns asked for of each "
                                   "emitted slot, -1 elsewhere")
    if bool((used & torch.isposinf(values)).any()):  # NaN is allowed: a row with no finite logit has none defined
        rr = _first((used & torch.isposinf(values)).any(2).any(1))
        bad("emitted_logprobs", f"request {rr}: +inf in a column asked for")
    if bool((emitted & (ranks < 1)).any()) or bool((~emitted & (ranks != -1)).any()):
        rr = _first(((emitted & (ranks < 1)) | (~emitted & (ranks != -1))).any(1))
        bad("emitted_logprob_ranks", f"request {rr}: a rank >= 1 for each emitted slot of a request that asked "
                                     "for logprobs, -1 elsewhere")
