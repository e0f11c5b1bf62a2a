"""The sampling pipeline's rules one at a time: a step with a rule removed, at every row or at verify rows only,
and with the drafts left out of the histories (what :mod:`~replay_harness.compare.attribution` and the audit's
pipeline checks re-run the oracle on).

Every ablation is an edit of Step fields (``dataclasses.replace``): a rule is off when its fields are None
(docs/FIXTURES.md, "The sampling pipeline"). The oracle processes every row on its own (each rule, temperature
and every filter are per row), so "a rule not applied at draft positions" is exact as a mix of rows: the verify
rows of the step without the rule, the bonus row of the step with it. "Drafts not counted as output" is the step
with each row made a request of its own whose output is the request's ``output_token_ids`` alone.

The order of :func:`variants` is the order an attribution tries them (docs/VERIFY.md, "The sampling pipeline"):
the rules in Model Runner V2's order, each first at draft positions only, then everywhere; then drafts not counted.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from replay_harness.oracle.sampling_params import apply_sampling_params
from replay_harness.recording.schema import FIELD, PER_REQUEST_FIELDS, RAGGED_FIELDS
from replay_harness.recording.step import Step, select_ragged


@dataclass(frozen=True)
class Rule:
    """One rule of the pipeline: ``label`` as messages name it, the Step ``fields`` that switch it off (None)."""

    key: str
    label: str
    fields: tuple[str, ...]


# Model Runner V2's order (oracle/processors.py): grammar, allowed ids, bias, min-tokens, penalties, bad words.
RULES = (
    Rule("grammar", "grammar mask", ("grammar_bitmask", "has_grammar")),
    Rule("allowed", "allowed token ids", ("allowed_token_ids", "cu_allowed_token_ids")),
    Rule("bias", "logit bias", ("logit_bias_ids", "logit_bias_values", "cu_logit_bias")),
    Rule("min-tokens", "min-tokens", ("min_tokens",)),
    Rule("repetition", "repetition penalty", ("repetition_penalty",)),
    Rule("frequency", "frequency penalty", ("frequency_penalty",)),
    Rule("presence", "presence penalty", ("presence_penalty",)),
    Rule("bad-words", "bad words", ("bad_words_token_ids", "cu_bad_words_token_ids", "bad_words_lengths",
                                    "cu_bad_words_lengths")),
)
RULE = {rule.key: rule for rule in RULES}
PENALTIES = ("repetition", "frequency", "presence")
HISTORY = "history"  # the variant "drafts not counted as output"


def _ragged(step: Step, name: str, r: int) -> torch.Tensor | None:
    values = getattr(step, name)
    if values is None:
        return None
    cu = getattr(step, FIELD[name].ragged)
    return values[int(cu[r]):int(cu[r + 1])]


def active(step: Step, rule: str, r: int) -> bool:
    """Whether ``rule`` can change request r's rows (its fields set and not at their 'off' value)."""
    def value(name: str):
        x = getattr(step, name)
        return None if x is None else x[r].item()
    if rule == "grammar":
        return step.grammar_bitmask is not None and value("has_grammar") == 1
    if rule in ("allowed", "bias", "bad-words"):
        values = _ragged(step, RULE[rule].fields[0], r)
        return values is not None and values.numel() > 0
    if rule == "min-tokens":
        stops = _ragged(step, "stop_token_ids", r)
        return (value("min_tokens") or 0) > 0 and stops is not None and stops.numel() > 0
    off = 1.0 if rule == "repetition" else 0.0
    x = value(RULE[rule].fields[0])
    return x is not None and x != off


def uses_history(step: Step, r: int) -> bool:
    """Whether request r's rows depend on its output, drafts before the row included (penalties, bad words,
    min-tokens): then a row's processed logits depend on the drafts."""
    return any(active(step, rule, r) for rule in (*PENALTIES, "bad-words", "min-tokens"))


def history_matters(step: Step, r: int) -> bool:
    """Whether request r uses its history and has a real draft: only then can "drafts not counted as output"
    change a row."""
    drafts = step.draft_token_ids[int(step.cu_num_logits[r]):int(step.cu_num_logits[r + 1]) - 1]
    return uses_history(step, r) and bool((drafts >= 0).any())


def without(step: Step, *rules: str) -> Step:
    """``step`` with ``rules`` (RULE keys) removed for every request."""
    return dataclasses.replace(step, **{name: None for rule in rules for name in RULE[rule].fields})


def verify_rows(step: Step) -> torch.Tensor:
    """[N] bool: the verify rows (every row but each request's last, the bonus row)."""
    rows = torch.ones(step.logits.shape[0], dtype=torch.bool)
    rows[step.cu_num_logits[1:].long().cpu() - 1] = False
    return rows


def rows_as_requests(step: Step, histories: list[list[int]]) -> Step:
    """Request 0 of ``step`` (a one-request step, N rows) as N one-row requests, row j's output ``histories[j]``:
    the same processing of every row, but with the history each row is given (no drafts counted)."""
    n = step.logits.shape[0]
    same = [0] * n
    out: dict = {"cu_num_logits": torch.arange(n + 1, dtype=torch.int32),
                 "draft_token_ids": torch.full((n,), -1, dtype=step.draft_token_ids.dtype),
                 "draft_logits": None}
    for name in PER_REQUEST_FIELDS:
        if getattr(step, name) is not None:
            out[name] = getattr(step, name)[same]
    out["request_ids"] = torch.arange(n, dtype=torch.int64)
    for name in RAGGED_FIELDS:
        if getattr(step, name) is not None:
            cu_name = FIELD[name].ragged
            out[name], out[cu_name] = select_ragged(getattr(step, name), getattr(step, cu_name), same)
    if step.output_token_ids is not None:
        flat = torch.tensor([t for h in histories for t in h], dtype=step.output_token_ids.dtype)
        sizes = torch.tensor([0] + [len(h) for h in histories])
        out["output_token_ids"] = flat
        out["cu_output_token_ids"] = torch.cumsum(sizes, 0).to(step.cu_output_token_ids.dtype)
    return dataclasses.replace(step, **out)


@dataclass(frozen=True)
class Variant:
    """One ablation: ``rule`` a RULE key (or HISTORY), ``where`` "drafts" (verify rows only) or "all"."""

    rule: str
    where: str = "all"

    @property
    def text(self) -> str:
        """What the message says: "presence penalty not applied at draft positions"."""
        if self.rule == HISTORY:
            return "drafts not counted as output (histories frozen at the step start)"
        at = " at draft positions" if self.where == "drafts" else ""
        return f"{RULE[self.rule].label} not applied{at}"

    def processed(self, step: Step, full: torch.Tensor) -> torch.Tensor:
        """[N, V] float32 processed rows of ``step`` (one request) under this ablation; ``full`` without it."""
        if self.rule == HISTORY:
            history = [] if step.output_token_ids is None else step.output_token_ids.tolist()
            return apply_sampling_params(rows_as_requests(step, [history] * step.logits.shape[0]))
        ablated = apply_sampling_params(without(step, self.rule))
        if self.where == "all":
            return ablated
        rows = verify_rows(step).to(full.device)
        return torch.where(rows[:, None], ablated, full)


def variants(step: Step, r: int = 0) -> list[Variant]:
    """The ablations that can change request r of ``step``, in the documented order (module docstring)."""
    k = int(step.num_drafts[r])
    out = []
    for rule in RULES:
        if active(step, rule.key, r):
            out += ([Variant(rule.key, "drafts")] if k > 0 else []) + [Variant(rule.key, "all")]
    if k > 0 and history_matters(step, r):
        out.append(Variant(HISTORY))
    return out


def pipeline_only(step: Step) -> Step:
    """``step`` with temperature 1 and every filter off: ``apply_sampling_params`` of it is the grammar mask and
    the logits processors alone (the rows the filters then cut)."""
    r = step.num_requests
    return dataclasses.replace(step, temperature=torch.ones(r, dtype=torch.float32),
                               top_k=torch.zeros(r, dtype=torch.int32), top_p=torch.ones(r, dtype=torch.float32),
                               min_p=torch.zeros(r, dtype=torch.float32))


def forbidding_rule(step: Step, r: int, row: int, token: int) -> str | None:
    """The rule (a RULES label) that bans ``token`` at row ``row`` (index within request r's rows): the rules
    applied one by one in Model Runner V2's order on the request alone, the first after which the token's logit
    is -inf; "its recorded logit is -inf" when it was already; None when the pipeline leaves it finite."""
    one = pipeline_only(step.select([r]).to("cpu"))
    if not bool(torch.isfinite(one.logits[row, token].float())):
        return "its recorded logit is -inf"
    if bool(torch.isfinite(apply_sampling_params(one)[row, token])):
        return None
    for i, rule in enumerate(RULES):
        later = [x.key for x in RULES[i + 1:]]
        if not bool(torch.isfinite(apply_sampling_params(without(one, *later))[row, token])):
            return rule.label
    return "the pipeline"  # not reached: with every rule kept the token is -inf
