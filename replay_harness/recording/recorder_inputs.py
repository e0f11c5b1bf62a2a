"""The Recorder's conversions: every ``record_step`` argument to its fixture dtype, shape and layout.

:func:`convert_step` turns the arguments of one call (host values: tensors, numpy arrays, lists, scalars; the
snapshot already copied CUDA tensors) into a :class:`Step` and an :class:`Emitted`; ``validate.check_step``
then checks their values when the writer writes them. Shapes below use docs/FIXTURES.md's symbols (R requests,
N rows, V vocabulary, K+1 emitted slots, W = ceil(V/32) words, L logprob columns). docs/RECORDING.md, "The
Recorder API", tables the same rules:

* ``logits`` [N, V] / ``draft_logits`` [N-R, V]: float32, bfloat16, float16 kept (lossless), float64 narrowed
  to float32, anything else refused;
* integer fields: any integer dtype or Python ints, range-checked into the fixture dtype (schema.FIELDS);
  floats and bools refused (``has_grammar`` also takes bools);
* real fields (``temperature``, ``top_p``, ``min_p``, the three penalties, ``logit_bias_values``): any real
  dtype, to float32;
* per-request fields [R]: a scalar is broadcast; ``top_k=None`` is 0, ``top_p=None`` 1, ``min_p=None`` 0,
  ``draft_token_ids=None`` all -1, ``request_ids=None`` 0..R-1; ``logprobs`` takes None entries (-1, none
  asked for); ``logprobs_mode``, ``verify_method`` and ``draft_sampling`` take their names as well as their
  codes (schema.LOGPROBS_MODES, VERIFY_METHODS, DRAFT_SAMPLING); an optional field left None is absent (its
  rule off). Every optional input of schema.FIELDS is a keyword, converted by its row (dtype and shape);
* ragged lists (``prompt_token_ids``, ``output_token_ids``, ``allowed_token_ids``, ``stop_token_ids``,
  ``bad_words_*``, ``logit_bias_*``): R per-request lists (lists, 1-D arrays or tensors; None = empty), from
  which the values [*] and the prefix sum ``cu_*`` [R+1] are built, or the values [*] with their ``cu_*``
  [R+1] as given; ``bad_words_token_ids`` as R lists of words (each word a list of ids) gives
  ``bad_words_lengths`` too; ``logit_bias`` as R dicts ``{id: bias}`` (or None) gives ``logit_bias_ids``,
  ``logit_bias_values`` and ``cu_logit_bias``;
* ``grammar_bitmask`` [N, W] int32 words (other integer dtypes: bit patterns below 2**32, reinterpreted), or a
  bool [N, V] mask of the allowed tokens, packed;
* ``emitted_tokens`` [R, K+1] -1 padded (slots past the count reset to -1) or R lists; ``emitted_counts`` [R]
  or None (the ids >= 0 per request); ``emitted_routes`` route codes or names;
* ``emitted_logprobs`` / ``emitted_logprob_ids`` [R, K+1, L] or per row [N, L] (the row of slot i of request r
  is ``cu_num_logits[r] + i``, vLLM's layout), ``emitted_logprob_ranks`` [R, K+1] or [N],
  ``emitted_kept_mask`` [R, K+1, W] or [N, W] words, or bool over V (packed). Entries that no emitted slot and
  asked-for column own are reset (ids and ranks -1, values -inf, kept words 0) and L is cut to 1 + the
  largest count asked for: an engine may return its batch's widest columns and leave garbage past a count.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, NoReturn, Sequence

import numpy as np
import torch

from replay_harness.errors import InputError
from replay_harness.recording.schema import (DRAFT_SAMPLING, FIELD, FLOATS, LOGPROBS_MODES, OPTIONAL_EMITTED,
                                             PIPELINE_FIELDS, ROUTES, VERIFY_METHODS)
from replay_harness.recording.step import Step
from replay_harness.recording.store import Emitted

__all__ = ["convert_step", "check_keywords", "REQUIRED", "KEYWORDS", "EMITTED_KEYWORDS"]

# record_step's arguments that have no default: a call without one is refused with one line naming it
REQUIRED = ("logits", "cu_num_logits", "positions", "temperature", "seed", "emitted_tokens")
EMITTED_KEYWORDS = tuple(n for n in OPTIONAL_EMITTED if n != "emitted_routes")  # logprobs, ids, ranks, kept sets
KEYWORDS = PIPELINE_FIELDS + ("logit_bias",) + EMITTED_KEYWORDS  # record_step's keyword-only fields
_BY_HAND = ("bad_words_token_ids", "bad_words_lengths", "logit_bias_ids", "logit_bias_values", "grammar_bitmask")
_NAMED = {"logprobs_mode": (LOGPROBS_MODES, "mode"), "verify_method": (VERIFY_METHODS, "verify method"),
          "draft_sampling": (DRAFT_SAMPLING, "draft sampling")}  # code fields that also take their names
_BOOLS = ("has_grammar",)  # 0/1 fields that also take bools
_NEG_INF = float("-inf")


def check_keywords(names: Sequence[str], path: Path) -> None:
    """Refuse a keyword record_step does not know (one line, the closest known names)."""
    for name in names:
        if name not in KEYWORDS:
            close = difflib.get_close_matches(name, KEYWORDS, n=3)
            raise InputError(path, f"record_step has no keyword {name!r}" +
                             (f"; did you mean {', '.join(close)}?" if close else
                              " (docs/RECORDING.md, 'The Recorder API', lists them)"), field=name)


def convert_step(args: dict[str, Any], where: Path, index: int, vocab_size: int) -> tuple[Step, Emitted]:
    """The :class:`Step` and :class:`Emitted` of one ``record_step`` call (``args`` by argument name, None for
    those not given); ``where`` / ``index``: the step file and step every InputError names."""
    c = Inputs(where, index, vocab_size)
    for name in REQUIRED:
        if args.get(name) is None:
            c.fail(name, "required (0 means greedy)" if name == "temperature" else
                   "required, and missing (docs/RECORDING.md, 'The Recorder API')")
    logits = c.floats("logits", args["logits"])
    cu = c.ints("cu_num_logits", args["cu_num_logits"])
    r = max(cu.numel() - 1, 0)
    n = logits.shape[0] if logits.ndim >= 1 else 0
    drafts = args.get("draft_token_ids")
    per_req = {
        "temperature": c.reals("temperature", args["temperature"], r),
        "top_k": c.ints("top_k", 0 if args.get("top_k") is None else args["top_k"], broadcast=r),
        "top_p": c.reals("top_p", 1.0 if args.get("top_p") is None else args["top_p"], r),
        "min_p": c.reals("min_p", 0.0 if args.get("min_p") is None else args["min_p"], r),
        "seed": c.ints("seed", args["seed"], broadcast=r),
        "request_ids": (torch.arange(r, dtype=FIELD["request_ids"].dtype) if args.get("request_ids") is None
                        else c.ints("request_ids", args["request_ids"], broadcast=r)),
    }
    step = Step(logits=logits, cu_num_logits=cu, positions=c.ints("positions", args["positions"]),
                draft_token_ids=(torch.full((n,), -1, dtype=FIELD["draft_token_ids"].dtype) if drafts is None
                                 else c.ints("draft_token_ids", drafts)),
                draft_logits=None if args.get("draft_logits") is None else c.floats("draft_logits",
                                                                                    args["draft_logits"]),
                **per_req, **c.pipeline(args, r))
    return step, c.emitted(args, step)


def _is_row(x: Any) -> bool:
    """One request's list: a list or tuple, a 1-D array or tensor, or None (empty)."""
    return x is None or isinstance(x, (list, tuple)) or (isinstance(x, (np.ndarray, torch.Tensor)) and x.ndim == 1)


def _per_request(x: Any) -> bool:
    """A list of per-request lists (rather than a tensor or a flat list of values)."""
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(_is_row(row) for row in x)


class Inputs:
    """The conversions of one step: ``where`` its step file, ``index`` its index, ``vocab_size`` V. Every
    problem raises an InputError naming them and the field; nothing is written for the step."""

    def __init__(self, where: Path, index: int, vocab_size: int):
        self.where, self.index, self.vocab_size = where, index, vocab_size

    def fail(self, field: str, message: str) -> NoReturn:
        raise InputError(self.where, message, step=self.index, field=field)

    # ------------------------------------------------------------------ dtypes
    def tensor(self, name: str, x: Any) -> torch.Tensor:
        """A CPU tensor from a tensor, numpy array, list or scalar (no copy for CPU tensors)."""
        if isinstance(x, torch.Tensor):
            return x.detach().cpu()
        try:
            if isinstance(x, np.ndarray):
                if x.dtype.kind not in "biufc":
                    raise TypeError(f"numpy dtype {x.dtype}")
                return torch.from_numpy(np.ascontiguousarray(x))
            if isinstance(x, (Sequence, int, float, np.generic)) and not isinstance(x, (str, bytes)):
                arr = np.asarray(x)
                if arr.dtype.kind not in "biuf":
                    raise TypeError(f"values of type {arr.dtype}")
                return torch.from_numpy(arr)  # converted to the field's dtype by the caller
        except (TypeError, ValueError) as e:
            self.fail(name, f"cannot convert to a tensor ({e})")
        self.fail(name, f"expected a torch tensor, numpy array or list, got {type(x).__name__}")

    def floats(self, name: str, x: Any) -> torch.Tensor:
        """Logits rows: float32 / bfloat16 / float16 kept, float64 narrowed to float32."""
        t = self.tensor(name, x)
        if t.dtype == torch.float64:
            t = t.float()
        if t.dtype not in FLOATS:
            self.fail(name, f"dtype {_dname(t.dtype)} is not a float dtype (float32, bfloat16, float16; float64 is "
                            "narrowed to float32)")
        return t

    def int64(self, name: str, t: torch.Tensor, bools: bool = False) -> torch.Tensor:
        """Any integer tensor as int64 (unsigned ones through numpy: few torch ops take them)."""
        if (t.dtype == torch.bool and not bools) or t.is_floating_point() or t.is_complex():
            self.fail(name, f"dtype {_dname(t.dtype)} is not an integer dtype")
        if t.dtype in (torch.uint16, torch.uint32, torch.uint64):
            arr = t.numpy()
            if arr.size and int(arr.max()) > 2 ** 63 - 1:
                self.fail(name, f"value {int(arr.max())} does not fit int64")
            return torch.from_numpy(arr.astype(np.int64))
        return t.long()

    def ints(self, name: str, x: Any, broadcast: int | None = None, bools: bool = False) -> torch.Tensor:
        """An integer field in its fixture dtype, range-checked; a scalar broadcast to ``broadcast`` entries."""
        t = self.tensor(name, x)
        target = FIELD[name].dtype
        if t.dtype != target:
            t = self.int64(name, t, bools)
            info = torch.iinfo(target)
            if t.numel():
                lo, hi = int(t.min()), int(t.max())
                if lo < info.min or hi > info.max:
                    self.fail(name, f"value {lo if lo < info.min else hi} does not fit {_dname(target)}")
        if broadcast is not None and t.ndim == 0:
            t = t.reshape(1).expand(broadcast)
        return t.to(target).contiguous()

    def reals(self, name: str, x: Any, r: int | None = None) -> torch.Tensor:
        """A real field as float32 (a scalar broadcast to ``r`` entries when given)."""
        t = self.tensor(name, x)
        if t.dtype == torch.bool or t.is_complex():
            self.fail(name, f"dtype {_dname(t.dtype)} is not a real number dtype")
        if r is not None and t.ndim == 0:
            t = t.reshape(1).expand(r)
        return t.to(FIELD[name].dtype).contiguous()

    def words(self, name: str, x: Any) -> torch.Tensor:
        """Packed int32 bit words [..., W] from integer words (bit patterns below 2**32) or a bool mask [..., V]."""
        t = self.tensor(name, x)
        if t.dtype == torch.bool:
            if t.ndim == 0 or t.shape[-1] != self.vocab_size:
                self.fail(name, f"a bool mask must be [..., V={self.vocab_size}], got shape {list(t.shape)}")
            from replay_harness.oracle.logprobs import pack_bits
            return pack_bits(t)
        if t.dtype == torch.int32:
            return t.contiguous()
        t = self.int64(name, t)
        if t.numel() and (int(t.min()) < -2 ** 31 or int(t.max()) >= 2 ** 32):
            self.fail(name, "bit words must fit 32 bits (int32, or unsigned below 2**32)")
        return torch.where(t >= 2 ** 31, t - 2 ** 32, t).to(torch.int32).contiguous()

    # ------------------------------------------------------------------ the sampling pipeline (schema minor 2)
    def pipeline(self, args: dict[str, Any], r: int) -> dict[str, torch.Tensor]:
        """The optional inputs given (None: absent), as Step keyword arguments, each by its row of schema.FIELDS
        (per request [R], ragged [*] with its cu_*, per row); bad words, logit bias and the grammar by hand."""
        out: dict[str, torch.Tensor] = {}
        for name in PIPELINE_FIELDS:
            f, x = FIELD[name], args.get(name)
            real = f.dtype.is_floating_point
            if name in _BY_HAND or f.shape == ("R+1",):
                continue  # below, or with its ragged list
            if f.shape == ("*",):
                self._ragged(out, name, x, args.get(f.ragged), r, real=real)
            elif x is None:
                continue
            elif f.shape == ("R",):
                if name == "logprobs" and isinstance(x, (list, tuple)):
                    x = [-1 if v is None else v for v in x]  # None: no logprobs asked for
                if name in _NAMED:
                    x = self._codes(name, x, *_NAMED[name])
                out[name] = (self.reals(name, x, r) if real else
                             self.ints(name, x, broadcast=r, bools=name in _BOOLS))
            else:
                out[name] = self.reals(name, x) if real else self.ints(name, x)
        self._bad_words(out, args, r)
        self._logit_bias(out, args, r)
        if args.get("grammar_bitmask") is not None:
            out["grammar_bitmask"] = self.words("grammar_bitmask", args["grammar_bitmask"])
        return out

    def _codes(self, name: str, x: Any, names: Sequence[str], what: str) -> Any:
        """Names (a string, or a list holding some) turned into their codes: the index in ``names``."""
        items = [x] if isinstance(x, str) else x
        if isinstance(items, (list, tuple)) and any(isinstance(v, str) for v in items):
            unknown = [v for v in items if isinstance(v, str) and v not in names]
            if unknown:
                self.fail(name, f"unknown {what} {unknown[0]!r}; known: {', '.join(names)}")
            codes = [names.index(v) if isinstance(v, str) else v for v in items]
            return codes[0] if isinstance(x, str) else codes
        return x

    def _ragged(self, out: dict, name: str, values: Any, cu: Any, r: int, real: bool = False) -> None:
        """``out[name]``, ``out[cu_name]`` from R per-request lists, or from values [*] and ``cu`` [R+1]."""
        cu_name = FIELD[name].ragged
        if values is None:
            if cu is not None:
                self.fail(cu_name, f"given without {name}")
            return
        if _per_request(values):
            if cu is not None:
                self.fail(cu_name, f"{name} is given as per-request lists, which define {cu_name}: pass one or "
                                   "the other")
            if len(values) != r:
                self.fail(name, f"{len(values)} lists, expected one per request ({r})")
            rows = [self._row(name, row, real) for row in values]
            sizes = torch.tensor([0] + [t.numel() for t in rows], dtype=torch.int64)
            flat = torch.cat(rows) if any(t.numel() for t in rows) else torch.zeros(0, dtype=torch.int64)
            out[name] = self.reals(name, flat) if real else self.ints(name, flat)
            out[cu_name] = self.ints(cu_name, torch.cumsum(sizes, 0))
            return
        if cu is None:
            self.fail(name, f"a flat list needs {cu_name} [R+1] beside it (or pass R per-request lists)")
        out[name] = self.reals(name, values) if real else self.ints(name, values)
        out[cu_name] = self.ints(cu_name, cu)

    def _row(self, name: str, row: Any, real: bool) -> torch.Tensor:
        """One request's entries as a 1-D tensor (int64, or float64 for ``real``)."""
        if row is None or (isinstance(row, (list, tuple)) and not row):
            return torch.zeros(0, dtype=torch.float64 if real else torch.int64)
        t = self.tensor(name, row)
        if t.ndim != 1:
            self.fail(name, f"a request's entry of shape {list(t.shape)}, expected a flat list")
        if not t.numel():  # np.array([]) and torch.tensor([]) are float: an empty list has no dtype to check
            return torch.zeros(0, dtype=torch.float64 if real else torch.int64)
        if real:
            if t.dtype == torch.bool or t.is_complex():
                self.fail(name, f"dtype {_dname(t.dtype)} is not a real number dtype")
            return t.double()
        return self.int64(name, t)

    def _bad_words(self, out: dict, args: dict, r: int) -> None:
        """bad_words_*: R lists of words (each a list of ids) give the ids and the lengths; else as given."""
        words = args.get("bad_words_token_ids")
        given = [n for n in ("bad_words_lengths", "cu_bad_words_token_ids", "cu_bad_words_lengths")
                 if args.get(n) is not None]
        if _per_request(words) and not given:
            if len(words) != r:
                self.fail("bad_words_token_ids", f"{len(words)} lists, expected one per request ({r})")
            tokens, lengths = [], []
            for i, row in enumerate(words):
                row = [] if row is None else row
                if not isinstance(row, (list, tuple)) or not all(_is_row(w) and w is not None for w in row):
                    self.fail("bad_words_token_ids", f"request {i}: expected a list of words, each a list of "
                                                     "ids (or pass bad_words_lengths beside the flat ids)")
                ids = [self._row("bad_words_token_ids", w, False) for w in row]
                tokens.append(torch.cat(ids) if ids else [])
                lengths.append([t.numel() for t in ids])
            words, args = tokens, {**args, "bad_words_lengths": lengths}
        self._ragged(out, "bad_words_token_ids", words, args.get("cu_bad_words_token_ids"), r)
        self._ragged(out, "bad_words_lengths", args.get("bad_words_lengths"), args.get("cu_bad_words_lengths"), r)

    def _logit_bias(self, out: dict, args: dict, r: int) -> None:
        """logit_bias_*: from R dicts ``{id: bias}`` (``logit_bias``), R lists of ids and of values, or values
        with cu_logit_bias."""
        ids, values, cu = (args.get(n) for n in ("logit_bias_ids", "logit_bias_values", "cu_logit_bias"))
        if args.get("logit_bias") is not None:
            if ids is not None or values is not None or cu is not None:
                self.fail("logit_bias", "give logit_bias (R dicts) or logit_bias_ids / logit_bias_values, not both")
            biases = args["logit_bias"]
            if not isinstance(biases, (list, tuple)) or len(biases) != r or not all(
                    b is None or isinstance(b, dict) for b in biases):
                self.fail("logit_bias", f"expected a list of {r} dicts {{token id: bias}} (None: no bias)")
            ids = [list((b or {}).keys()) for b in biases]
            values = [list((b or {}).values()) for b in biases]
        if _per_request(ids) != _per_request(values) and ids is not None and values is not None:
            self.fail("logit_bias_values", "give logit_bias_ids and logit_bias_values in the same form (both R "
                                           "lists, or both flat with cu_logit_bias)")
        if _per_request(ids) and _per_request(values):
            if len(ids) == len(values):
                for i, (a, b) in enumerate(zip(ids, values)):
                    na, nb = (0 if x is None else len(x) for x in (a, b))
                    if na != nb:
                        self.fail("logit_bias_values", f"request {i}: {nb} values for {na} ids")
            self._ragged(out, "logit_bias_ids", ids, cu, r)
            self._ragged(out, "logit_bias_values", values, cu, r, real=True)
            return
        self._ragged(out, "logit_bias_ids", ids, cu, r)
        if values is not None:
            out["logit_bias_values"] = self.reals("logit_bias_values", values)

    # ------------------------------------------------------------------ what the engine emitted
    def emitted(self, args: dict[str, Any], step: Step) -> Emitted:
        r = step.num_requests
        width = step.max_drafts + 1 if r else 1
        tokens, counts = args["emitted_tokens"], args.get("emitted_counts")
        if _per_request(tokens):
            rows = [self._row("emitted_tokens", row, False).tolist() for row in tokens]
            if len(rows) != r:
                self.fail("emitted_tokens", f"{len(rows)} lists, expected one per request ({r})")
            if any(len(row) > width for row in rows):
                self.fail("emitted_tokens", f"a request emitted more than max_k+1={width} tokens")
            padded = [row + [-1] * (width - len(row)) for row in rows]
            tok = self.ints("emitted_tokens", padded if padded else np.zeros((0, width), np.int64))
            if counts is None:
                counts = [sum(1 for v in row if v >= 0) for row in rows]
        else:
            tok = self.ints("emitted_tokens", tokens)
            if counts is None:
                counts = (tok >= 0).sum(1) if tok.ndim == 2 else tok
        cnt = self.ints("emitted_counts", counts)
        if tok.ndim == 2 and tok.shape[1] > width and bool((tok[:, width:] == -1).all()):
            tok = tok[:, :width].contiguous()  # an impl padded wider than this step's max_k+1
        slots = None
        if tok.ndim == 2 and cnt.ndim == 1 and cnt.numel() == tok.shape[0] and tok.numel():
            # slots past the count are -1 by contract; engines often leave garbage there
            slots = torch.arange(tok.shape[1])[None, :] < cnt.long()[:, None]
            tok = torch.where(slots, tok, torch.full_like(tok, -1))
        routes = args.get("emitted_routes")
        rt = None if routes is None else self.ints("emitted_routes",
                                                   self._codes("emitted_routes", routes, ROUTES, "route"))
        extra = self._logprobs(args, step, slots if tok.shape == (r, width) else None)
        return Emitted(tokens=tok, counts=cnt, routes=rt, **extra)

    def _logprobs(self, args: dict[str, Any], step: Step, slots: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The emitted logprobs, ids, ranks and kept words given, in the [R, K+1, ...] layout, normalised where
        the layout is right (``slots`` [R, K+1]: the emitted slots; None when the tokens' shape is wrong)."""
        out: dict[str, torch.Tensor] = {}
        conv = {"emitted_logprobs": (lambda n, x: self.reals(n, x), 3, _NEG_INF),
                "emitted_logprob_ids": (lambda n, x: self.ints(n, x), 3, -1),
                "emitted_logprob_ranks": (lambda n, x: self.ints(n, x), 2, -1),
                "emitted_kept_mask": (self.words, 3, 0)}
        for name, (convert, ndim, fill) in conv.items():
            if args.get(name) is not None:
                out[name.removeprefix("emitted_")] = _slot_layout(convert(name, args[name]), step, ndim, fill)
        for name in EMITTED_KEYWORDS:  # a field added to the table later: converted by its dtype, as given
            if name not in conv and args.get(name) is not None:
                real = FIELD[name].dtype.is_floating_point
                out[name.removeprefix("emitted_")] = (self.reals if real else self.ints)(name, args[name])
        if slots is None:
            return out
        if "kept_mask" in out and out["kept_mask"].shape[:2] == slots.shape:
            out["kept_mask"] = torch.where(slots[:, :, None], out["kept_mask"], 0)
        if step.logprobs is None:
            return out
        asked = step.logprobs.long()
        got = slots & (asked[:, None] >= 0)  # emitted slots of requests that asked for logprobs
        if "logprob_ranks" in out and out["logprob_ranks"].shape == slots.shape:
            out["logprob_ranks"] = torch.where(got, out["logprob_ranks"], -1)
        need = 1 + int(asked.clamp(min=0).max()) if asked.numel() else 1
        for name, fill in (("logprobs", _NEG_INF), ("logprob_ids", -1)):
            t = out.get(name)
            if t is None or t.ndim != 3 or t.shape[:2] != slots.shape or t.shape[2] < need:
                continue  # validate reports the shape
            t = t[:, :, :need]
            used = got[:, :, None] & (torch.arange(need)[None, None, :] <= asked[:, None, None])
            out[name] = torch.where(used, t, torch.full_like(t, fill)).contiguous()
        return out


def _slot_layout(t: torch.Tensor, step: Step, ndim: int, fill: float) -> torch.Tensor:
    """[R, K+1, ...] from a per-row tensor [N, ...] (slot i of request r is row cu[r] + i; slots past a request's
    rows get ``fill``); a tensor already [R, ...] keeps its layout, slots past K+1 cut (nothing is emitted there)."""
    r, width, n = step.num_requests, step.max_drafts + 1, step.logits.shape[0]
    if t.ndim == ndim - 1 and t.ndim >= 1 and t.shape[0] == n and r:
        cu = step.cu_num_logits.long()
        request = torch.repeat_interleave(torch.arange(r), cu[1:] - cu[:-1])
        out = torch.full((r, width, *t.shape[1:]), fill, dtype=t.dtype)
        out[request, torch.arange(n) - cu[request]] = t
        return out
    if t.ndim == ndim and t.shape[0] == r and t.shape[1] > width:
        return t[:, :width].contiguous()
    return t



def _dname(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
