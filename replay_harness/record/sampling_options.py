"""The sampling pipeline's options of `replay record` (docs/RECORDING.md, "The sampling pipeline"): read and
checked per request (:func:`read_pipeline`, before the model loads), resolved against the model
(:func:`resolve`: token ids inside the vocabulary, bad words tokenized, logprob counts), and laid out as one
step's optional tensors (:func:`step_inputs`, schema minor 2's fields, docs/FIXTURES.md).

Per request, as vLLM's ``SamplingParams`` holds them (:class:`PipelineParams`). From the command line:

* per-request numbers (``--repetition-penalty``, ``--frequency-penalty``, ``--presence-penalty``,
  ``--min-tokens``, ``--logprobs``, ``--logprobs-mode``): repeatable or comma separated, the values cycled over
  the requests (request i gets value i mod n) as ``--temperature``'s are;
* lists and the grammar (``--logit-bias``, ``--allowed-token-ids``, ``--bad-words``, ``--bad-word-ids``,
  ``--json-schema``, ``--regex``): every request gets them; repeated occurrences add up;
* ``--request-params JSON|FILE``: a list of objects with vLLM's names, cycled over the requests the same way;
  a key of object i mod n replaces the command line's value for request i (``null``: off).

Every problem is a :class:`~replay_harness.errors.UsageError` (exit 2) of one line naming the option, and the
object and key for ``--request-params``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

from replay_harness.errors import ReplayError, UsageError
from replay_harness.limits import regular_file

# --logprobs-mode spellings -> the schema's logprobs_mode codes (schema.LOGPROBS_MODES order)
LOGPROBS_MODES = {"raw": 0, "processed": 1, "raw-logits": 2, "processed-logits": 3,
                  "raw_logprobs": 0, "processed_logprobs": 1, "raw_logits": 2, "processed_logits": 3}
MODE_NAMES = ("raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits")
BIAS_LIMIT = 100.0  # vLLM clamps a logit bias into [-100, 100]; replay refuses a value outside instead
PENALTY_LIMIT = 2.0  # vLLM: frequency and presence penalties in [-2, 2]


@dataclass
class PipelineParams:
    """One request's sampling pipeline options (vLLM ``SamplingParams`` names). The defaults are off.

    ``bad_words``: as given, text (tokenized by :func:`resolve` as vLLM does) or a token-id list;
    ``bad_words_token_ids``: the token sequences (set by :func:`resolve`). ``json_schema`` (JSON text) and
    ``regex`` are the request's grammar (at most one); ``logprobs``: None = none asked for, n >= 0 the top n.
    """

    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    allowed_token_ids: list[int] = field(default_factory=list)  # empty: no restriction
    bad_words: list[str | list[int]] = field(default_factory=list)
    bad_words_token_ids: list[list[int]] = field(default_factory=list)
    min_tokens: int = 0
    logprobs: int | None = None
    logprobs_mode: int = 0  # a code of MODE_NAMES
    json_schema: str | None = None
    regex: str | None = None

    @property
    def grammar(self) -> tuple[str, str] | None:
        """("json_schema" | "regex", text) or None."""
        if self.json_schema is not None:
            return "json_schema", self.json_schema
        return ("regex", self.regex) if self.regex is not None else None

    def describe(self) -> dict[str, Any]:
        """The options that are on, JSON-able (the manifest's ``source.requests``)."""
        out: dict[str, Any] = {}
        for name, off in (("repetition_penalty", 1.0), ("frequency_penalty", 0.0), ("presence_penalty", 0.0),
                          ("min_tokens", 0)):
            if getattr(self, name) != off:
                out[name] = getattr(self, name)
        if self.logit_bias:
            out["logit_bias"] = {str(k): v for k, v in self.logit_bias.items()}
        if self.allowed_token_ids:
            out["allowed_token_ids"] = list(self.allowed_token_ids)
        if self.bad_words:
            out["bad_words"] = list(self.bad_words)
            out["bad_words_token_ids"] = [list(w) for w in self.bad_words_token_ids]
        if self.logprobs is not None:
            out["logprobs"], out["logprobs_mode"] = self.logprobs, MODE_NAMES[self.logprobs_mode]
        if self.grammar is not None:
            out[self.grammar[0]] = self.grammar[1]
        return out


@dataclass
class PipelineText:
    """The options as the command line gives them (text; lists for the repeatable ones), before reading."""

    repetition_penalty: list[str] = field(default_factory=list)
    frequency_penalty: list[str] = field(default_factory=list)
    presence_penalty: list[str] = field(default_factory=list)
    min_tokens: list[str] = field(default_factory=list)
    logprobs: list[str] = field(default_factory=list)
    logprobs_mode: list[str] = field(default_factory=list)
    logit_bias: list[str] = field(default_factory=list)
    allowed_token_ids: list[str] = field(default_factory=list)
    bad_words: list[str] = field(default_factory=list)
    bad_word_ids: list[str] = field(default_factory=list)
    json_schema: str | None = None
    regex: str | None = None
    request_params: str | None = None

    def inputs(self) -> list[str]:
        """Files the options read (--json-schema, --request-params given as a path): --out may not touch them."""
        return [t for t in (self.json_schema, self.request_params) if t is not None and _is_path(t)]


def _is_path(text: str) -> bool:
    return not text.lstrip().startswith(("{", "[", '"')) and Path(text).exists()


# ----------------------------------------------------------------------------- values, checked
def _number(option: str, text: Any, conv=float) -> Any:
    try:
        if conv is int and (isinstance(text, bool) or isinstance(text, float)):
            raise ValueError
        value = conv(text.strip() if isinstance(text, str) else text)
    except (TypeError, ValueError):
        kind = "an integer" if conv is int else "a number"
        raise UsageError(f"{option}: {text!r} is not {kind}") from None
    if conv is float and not math.isfinite(value):
        raise UsageError(f"{option}: {text!r} is not finite")
    return value


def _check_scalar(option: str, name: str, value: Any) -> Any:
    """A per-request number of ``name`` read and range-checked (UsageError naming ``option``)."""
    if name == "repetition_penalty":
        value = _number(option, value)
        if value <= 0:
            raise UsageError(f"{option}: {value} must be > 0 (1 = off)")
    elif name in ("frequency_penalty", "presence_penalty"):
        value = _number(option, value)
        if abs(value) > PENALTY_LIMIT:
            raise UsageError(f"{option}: {value} is outside [-2, 2] (vLLM's range; 0 = off)")
    elif name == "min_tokens":
        value = _number(option, value, int)
        if value < 0:
            raise UsageError(f"{option}: {value} is negative")
    elif name == "logprobs":
        if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
            return None
        value = _number(option, value, int)
        if value < 0:
            raise UsageError(f"{option}: {value} (a count n >= 0 of top logprobs, or none)")
    elif name == "logprobs_mode":
        if not isinstance(value, str) or value.strip() not in LOGPROBS_MODES:
            raise UsageError(f"{option}: {value!r} is not one of raw, processed, raw-logits, processed-logits")
        value = LOGPROBS_MODES[value.strip()]
    return value


def _token_id(option: str, value: Any) -> int:
    token = _number(option, value, int)
    if token < 0:
        raise UsageError(f"{option}: token id {token} is negative")
    return token


def _bias_entries(option: str, text: str) -> dict[int, float]:
    """'ID=BIAS[,ID=BIAS...]' -> {id: bias}."""
    out: dict[int, float] = {}
    for part in (p.strip() for p in text.split(",")):
        key, sep, value = part.partition("=")
        if not sep:
            raise UsageError(f"{option}: {part!r} is not ID=BIAS (e.g. 50256=-100)")
        _add_bias(option, out, _token_id(option, key), value)
    return out


def _add_bias(option: str, biases: dict[int, float], token: int, value: Any) -> None:
    bias = _number(option, value)
    if abs(bias) > BIAS_LIMIT:
        raise UsageError(f"{option}: bias {bias} for token {token} is outside [-100, 100] (vLLM's range)")
    if token in biases:
        raise UsageError(f"{option}: token {token} is given twice (one bias a token)")
    biases[token] = bias


def _id_list(option: str, text: str) -> list[int]:
    ids = [_token_id(option, p) for p in text.split(",") if p.strip()]
    if not ids:
        raise UsageError(f"{option}: {text!r} names no token id (comma separated ids)")
    return ids


def _read_json(option: str, text: str) -> Any:
    """JSON text, or a file holding it."""
    source = text
    if not text.lstrip().startswith(("{", "[", '"')):
        path = Path(text)
        if not path.exists():
            raise UsageError(f"{option} {text}: neither JSON nor an existing file")
        try:
            regular_file(path)
            source = path.read_text()
        except ReplayError as e:
            raise UsageError(f"{option} {text}: {e}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"{option} {text}: cannot read it ({type(e).__name__})") from None
    try:
        return json.loads(source)
    except json.JSONDecodeError as e:
        raise UsageError(f"{option}: not valid JSON ({e.msg}, line {e.lineno} column {e.colno})") from None


def _schema_text(option: str, schema: Any) -> str:
    """The schema as JSON text, its keys in the order given (xgrammar keeps the properties' order)."""
    if isinstance(schema, str):  # JSON text, or a file holding it
        schema = _read_json(option, schema)
    if not isinstance(schema, dict):
        raise UsageError(f"{option}: a JSON schema is an object, got {type(schema).__name__}")
    return json.dumps(schema)


# ----------------------------------------------------------------------------- per request
def cycled(option: str, texts: list[str], n: int, conv: Callable[[str, str], Any]) -> list[Any] | None:
    """Per-request values of a repeatable / comma separated option, each part read by ``conv(option, part)``,
    cycled over ``n`` requests (None: not given); an empty part is a UsageError. method_options reads its
    per-request options through it too."""
    if not texts:
        return None
    parts = [p for text in texts for p in str(text).split(",")]
    if any(not p.strip() for p in parts):
        raise UsageError(f"{option}: an empty value in {','.join(texts)!r}")
    values = [conv(option, p) for p in parts]
    return [values[i % len(values)] for i in range(n)]


def _common(text: PipelineText) -> PipelineParams:
    """What the list and grammar options give every request."""
    p = PipelineParams()
    for entry in text.logit_bias:
        for token, bias in _bias_entries("--logit-bias", entry).items():
            _add_bias("--logit-bias", p.logit_bias, token, bias)
    for entry in text.allowed_token_ids:
        p.allowed_token_ids.extend(_id_list("--allowed-token-ids", entry))
    for word in text.bad_words:
        if not word.strip():
            raise UsageError("--bad-words: an empty word")
        p.bad_words.append(word)
    p.bad_words.extend(_id_list("--bad-word-ids", entry) for entry in text.bad_word_ids)
    if text.json_schema is not None and text.regex is not None:
        raise UsageError("--json-schema and --regex: one grammar a request (give one; mix them per request "
                         "with --request-params)")
    if text.json_schema is not None:
        p.json_schema = _schema_text("--json-schema", _read_json("--json-schema", text.json_schema))
    p.regex = text.regex
    return p


REQUEST_KEYS = ("repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens", "logprobs",
                "logprobs_mode", "logit_bias", "allowed_token_ids", "bad_words", "json_schema", "regex")


def _override(base: PipelineParams, obj: Any, where: str) -> PipelineParams:
    """``base`` with the keys of one --request-params object applied."""
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected an object of sampling parameters, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(REQUEST_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(REQUEST_KEYS)})")
    p = replace(base)
    for key, value in obj.items():
        opt = f"{where}: {key}"
        if key in ("repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens"):
            setattr(p, key, _check_scalar(opt, key, {"repetition_penalty": 1.0, "min_tokens": 0}.get(key, 0.0)
                                          if value is None else value))
        elif key == "logprobs":
            p.logprobs = _check_scalar(opt, key, value)
        elif key == "logprobs_mode":
            p.logprobs_mode = _check_scalar(opt, key, "raw" if value is None else value)
        elif key == "logit_bias":
            if not isinstance(value, (dict, type(None))):
                raise UsageError(f"{opt}: expected an object {{token id: bias}}")
            p.logit_bias = {}
            for token, bias in (value or {}).items():
                _add_bias(opt, p.logit_bias, _token_id(opt, token), bias)
        elif key == "allowed_token_ids":
            if not isinstance(value, (list, type(None))) or value == []:
                raise UsageError(f"{opt}: expected a non-empty list of token ids (null: no restriction)")
            p.allowed_token_ids = [_token_id(opt, t) for t in value or []]
        elif key == "bad_words":
            if not isinstance(value, (list, type(None))):
                raise UsageError(f"{opt}: expected a list of words (text, or lists of token ids)")
            p.bad_words = [_bad_word(opt, w) for w in value or []]
    if "json_schema" in obj or "regex" in obj:  # one setting, the request's grammar: replaces the command line's
        schema, regex = obj.get("json_schema"), obj.get("regex")
        if schema is not None and regex is not None:
            raise UsageError(f"{where}: json_schema and regex: one grammar a request")
        if regex is not None and not isinstance(regex, str):
            raise UsageError(f"{where}: regex: expected a string")
        p.json_schema = None if schema is None else _schema_text(f"{where}: json_schema", schema)
        p.regex = regex
    return p


def _bad_word(option: str, word: Any) -> str | list[int]:
    if isinstance(word, str) and word.strip():
        return word
    if isinstance(word, list) and word:
        return [_token_id(option, t) for t in word]
    raise UsageError(f"{option}: a bad word is non-empty text or a non-empty list of token ids, got {word!r}")


def read_pipeline(text: PipelineText, n: int) -> list[PipelineParams]:
    """The ``n`` requests' pipeline options from the command line's text (module docstring); UsageError on
    bad input. Checks what needs no model: syntax, ranges, a grammar xgrammar can parse (xgrammar missing:
    EnvironmentProblem, exit 3, from :func:`replay_harness.record.grammar.xgrammar`)."""
    base = _common(text)
    params = [replace(base, logit_bias=dict(base.logit_bias), allowed_token_ids=list(base.allowed_token_ids),
                      bad_words=list(base.bad_words)) for _ in range(n)]
    for name in ("repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens", "logprobs",
                 "logprobs_mode"):
        values = cycled("--" + name.replace("_", "-"), getattr(text, name), n,
                        lambda option, part, name=name: _check_scalar(option, name, part))
        for p, value in zip(params, values or []):
            setattr(p, name, value)
    if text.request_params is not None:
        objects = _read_json("--request-params", text.request_params)
        objects = [objects] if isinstance(objects, dict) else objects
        if not isinstance(objects, list) or not objects:
            raise UsageError("--request-params: expected a non-empty JSON list of objects (cycled over the requests)")
        params = [_override(p, objects[i % len(objects)], f"--request-params: object {i % len(objects)}")
                  for i, p in enumerate(params)]
    if text.logprobs_mode and all(p.logprobs is None for p in params):
        raise UsageError("--logprobs-mode: no request asks for logprobs (add --logprobs N)")
    from replay_harness.record.grammar import check_grammar
    for i, p in enumerate(params):
        if p.grammar is not None:
            check_grammar(*p.grammar, where=f"request {i}")
    return params


def resolve(params: list[PipelineParams], vocab_size: int, encode) -> None:
    """In place: token ids checked against ``vocab_size`` and bad words tokenized with ``encode`` (text ->
    ids, no special tokens), as vLLM's ``SamplingParams.update_from_tokenizer`` does: each word without its
    leading spaces, then with one leading space when that gives another first token and as many tokens."""
    for i, p in enumerate(params):
        p.bad_words_token_ids = []
        for word in p.bad_words:
            if isinstance(word, list):
                p.bad_words_token_ids.append(list(word))
                continue
            plain = encode(word.lstrip())
            if not plain:
                raise UsageError(f"--bad-words {word!r}: tokenizes to no token")
            p.bad_words_token_ids.append(plain)
            spaced = encode(" " + word.lstrip())
            if spaced and spaced[0] != plain[0] and len(spaced) == len(plain):
                p.bad_words_token_ids.append(spaced)
        for option, ids in (("--logit-bias", list(p.logit_bias)), ("--allowed-token-ids", p.allowed_token_ids),
                            ("--bad-words", [t for w in p.bad_words_token_ids for t in w])):
            outside = [t for t in ids if t >= vocab_size]
            if outside:
                raise UsageError(f"{option}: request {i}: token id {outside[0]} is outside the vocabulary "
                                 f"[0, {vocab_size})")
        if p.logprobs is not None and p.logprobs > vocab_size:
            raise UsageError(f"--logprobs: request {i}: {p.logprobs} is more than the vocabulary ({vocab_size})")


# ----------------------------------------------------------------------------- a step's tensors
def fields_on(params: list[PipelineParams]) -> set[str]:
    """Which groups of pipeline fields a run's steps carry: a group is on when some request uses it."""
    on = set()
    for name, off in (("repetition_penalty", 1.0), ("frequency_penalty", 0.0), ("presence_penalty", 0.0),
                      ("min_tokens", 0)):
        if any(getattr(p, name) != off for p in params):
            on.add(name)
    for name, used in (("logit_bias", lambda p: p.logit_bias), ("allowed_token_ids", lambda p: p.allowed_token_ids),
                       ("bad_words", lambda p: p.bad_words_token_ids), ("grammar", lambda p: p.grammar),
                       ("logprobs", lambda p: p.logprobs is not None)):
        if any(used(p) for p in params):
            on.add(name)
    if on:
        on.add("histories")
    return on


def _ragged(lists: list[list], dtype: torch.dtype = torch.int32) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [*], prefix sum [R+1] int32) of one list per request."""
    sizes = torch.tensor([0] + [len(x) for x in lists], dtype=torch.int64)
    values = torch.tensor([v for x in lists for v in x], dtype=dtype)
    return values, torch.cumsum(sizes, 0).to(torch.int32)


def step_inputs(on: set[str], params: list[PipelineParams], prompts: list[list[int]], outputs: list[list[int]],
                stop_ids: list[int]) -> dict[str, torch.Tensor]:
    """The pipeline fields of one step (schema minor 2 names; the grammar bitmask comes from
    :mod:`replay_harness.record.grammar`) for its requests' ``params``, ``prompts`` and ``outputs`` so far
    (token ids, before this step's drafts). ``stop_ids``: the min-tokens stop ids (the model's EOS ids)."""
    out: dict[str, torch.Tensor] = {}
    if "histories" in on:
        out["prompt_token_ids"], out["cu_prompt_token_ids"] = _ragged(prompts)
        out["output_token_ids"], out["cu_output_token_ids"] = _ragged(outputs)
    for name in ("repetition_penalty", "frequency_penalty", "presence_penalty"):
        if name in on:
            out[name] = torch.tensor([getattr(p, name) for p in params], dtype=torch.float32)
    if "min_tokens" in on:
        out["min_tokens"] = torch.tensor([p.min_tokens for p in params], dtype=torch.int32)
        out["stop_token_ids"], out["cu_stop_token_ids"] = _ragged([sorted(stop_ids) for _ in params])
    if "logit_bias" in on:
        out["logit_bias_ids"], out["cu_logit_bias"] = _ragged([list(p.logit_bias) for p in params])
        out["logit_bias_values"], _ = _ragged([list(p.logit_bias.values()) for p in params], torch.float32)
    if "allowed_token_ids" in on:
        out["allowed_token_ids"], out["cu_allowed_token_ids"] = _ragged([p.allowed_token_ids for p in params])
    if "bad_words" in on:
        out["bad_words_token_ids"], out["cu_bad_words_token_ids"] = _ragged(
            [[t for w in p.bad_words_token_ids for t in w] for p in params])
        out["bad_words_lengths"], out["cu_bad_words_lengths"] = _ragged(
            [[len(w) for w in p.bad_words_token_ids] for p in params])
    if "grammar" in on:
        out["has_grammar"] = torch.tensor([p.grammar is not None for p in params], dtype=torch.int8)
    if "logprobs" in on:
        out["logprobs"] = torch.tensor([-1 if p.logprobs is None else p.logprobs for p in params], dtype=torch.int32)
        out["logprobs_mode"] = torch.tensor([p.logprobs_mode for p in params], dtype=torch.int8)
    return out
