"""Structured output for `replay record` through a real grammar engine, xgrammar (the ``record`` extra): a
request's JSON schema or regex is compiled against the model's tokenizer, and each step gets the request's
rows of vLLM's packed bitmask ``[N, ceil(V/32)]`` int32 (bit v % 32 of word v // 32 set = token v allowed),
filled by xgrammar's own ``fill_next_token_bitmask``.

Facts from vLLM 0.33 (``v1/structured_output``): JSON schemas compile with any whitespace allowed and
regexes as given, against the tokenizer's vocabulary with its special tokens blanked (no grammar text
matches them; the end-of-sequence ids stay the grammar's stop tokens); with drafts, row l of a request
holds the mask of the grammar's state after drafts 0..l-1; after a draft the grammar refuses, or once it
has terminated (accepted a stop token), the rows are permissive (all ones); after the step the grammar
advances by the tokens the sampler emitted.
"""
from __future__ import annotations

import re
from typing import Any

import torch

from replay_harness.errors import EnvironmentProblem, UsageError

OPTION = {"json_schema": "--json-schema", "regex": "--regex"}


def xgrammar() -> Any:
    """The xgrammar module, or EnvironmentProblem (exit 3) naming the extra that brings it."""
    try:
        import xgrammar as xgr
    except ImportError:
        raise EnvironmentProblem("--json-schema / --regex need xgrammar (part of the record extra: pip install -e "
                                 "'.[record]')") from None
    return xgr


def _why(e: Exception) -> str:
    """xgrammar's first line, without the time and source location its C++ side prefixes."""
    line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return re.sub(r"^\[[0-9:]+\] \S+:[0-9]+: ", "", line)


def check_grammar(kind: str, text: str, where: str) -> None:
    """UsageError (exit 2) when xgrammar cannot read the grammar (``kind`` "json_schema" or "regex"); needs
    no tokenizer, so it runs before the model loads."""
    xgr = xgrammar()
    try:
        if kind == "regex":
            xgr.Grammar.from_regex(text)
        else:
            xgr.Grammar.from_json_schema(text, any_whitespace=True)
    except Exception as e:  # RuntimeError, xgrammar's InvalidJSONError: what the grammar text got wrong
        raise UsageError(f"{OPTION[kind]}: {where}: xgrammar cannot compile it: {_why(e)}") from None


class RequestGrammar:
    """One request's grammar state (an xgrammar ``GrammarMatcher``) and the bitmask rows it gives."""

    def __init__(self, xgr: Any, matcher: Any, vocab_size: int, blanked: frozenset[int] = frozenset()):
        self._xgr, self.matcher, self.vocab_size = xgr, matcher, vocab_size
        self.blanked = blanked  # special tokens that are no stop token: refused without asking xgrammar (which logs)

    def _accept(self, token: int) -> bool:
        return token not in self.blanked and bool(self.matcher.accept_token(token))

    @property
    def terminated(self) -> bool:
        return bool(self.matcher.is_terminated())

    def rows(self, drafts: list[int]) -> torch.Tensor:
        """[k+1, ceil(V/32)] int32: row l the mask after drafts 0..l-1 (all ones once a draft was refused or
        the grammar terminated). The matcher is left in the state it was in."""
        bitmask = self._xgr.allocate_token_bitmask(len(drafts) + 1, self.vocab_size)  # all ones
        accepted, live = 0, True
        for row in range(len(drafts) + 1):
            if live and not self.matcher.is_terminated():
                self.matcher.fill_next_token_bitmask(bitmask, row)
            if row < len(drafts) and live:
                if not self.matcher.is_terminated() and self._accept(int(drafts[row])):
                    accepted += 1
                else:
                    live = False
        if accepted:
            self.matcher.rollback(accepted)
        return bitmask.to(torch.int32)

    def advance(self, tokens: list[int]) -> bool:
        """Accept the tokens the sampler emitted (those after termination are ignored); False when the
        grammar refuses one (the sampler broke the mask)."""
        for token in tokens:
            if self.matcher.is_terminated():
                return True
            if not self._accept(int(token)):
                return False
        return True


class Grammars:
    """xgrammar's compiler for one tokenizer: :meth:`start` gives a request its :class:`RequestGrammar`."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: list[int]):
        xgr = self._xgr = xgrammar()
        full = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(stop_ids))
        special = {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if t.special}
        vocab = [""] * full.vocab_size
        for token, i in tokenizer.get_vocab().items():
            if i < len(vocab) and i not in special:
                vocab[i] = token
        info = xgr.TokenizerInfo.from_vocab_and_metadata(vocab, full.dump_metadata())
        self.compiler = xgr.GrammarCompiler(info, max_threads=1)
        self.vocab_size = vocab_size
        self.blanked = frozenset(special - set(stop_ids))

    def start(self, kind: str, text: str, where: str) -> RequestGrammar:
        """A fresh matcher for the grammar (``kind`` "json_schema" or "regex"); UsageError if it does not
        compile against this tokenizer."""
        try:
            if kind == "regex":
                compiled = self.compiler.compile_regex(text)
            else:
                compiled = self.compiler.compile_json_schema(text, any_whitespace=True)
        except Exception as e:  # what the grammar text got wrong, as check_grammar
            raise UsageError(f"{OPTION[kind]}: {where}: xgrammar cannot compile it: {_why(e)}") from None
        return RequestGrammar(self._xgr, self._xgr.GrammarMatcher(compiled), self.vocab_size, self.blanked)
