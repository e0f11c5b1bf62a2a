"""A real causal LM, loaded from where users keep weights: :class:`CausalLM` (tokenizer, next-token and
early-exit logits, provenance) and :func:`load_model`, which loads it through transformers from what
:mod:`replay_harness.record.weights` makes of ``--model`` (or ``--draft-model``): a Hugging Face Hub repo id, a
local folder or ``.gguf`` file, or a built-in name. The speculative decode loop that runs it and records every
step is :mod:`replay_harness.record.decode`. transformers is imported lazily (only when a model loads):
``replay`` starts fast without the ``record`` extra.
"""
from __future__ import annotations

import os
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any, Iterator

import torch

from replay_harness.errors import EnvironmentProblem, UsageError
from replay_harness.record.kv_cache import SequenceCache, forward_inputs
from replay_harness.record.weights import _import_transformers, _weights

DEFAULT_MODEL = "smollm2-135m"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CausalLM:
    """A loaded target model: tokenizer, next-token logits, early-exit logits, provenance.

    ``source`` describes the weights (package, version, file, sha256) for manifests.
    """

    def __init__(self, model, tokenizer, name: str, source: dict[str, Any]):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.source = source
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.num_layers = int(model.config.num_hidden_layers)
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def new_cache(self) -> SequenceCache:
        """An empty KV cache for one sequence (transformers' DynamicCache for this model's layers)."""
        return SequenceCache(_import_transformers().DynamicCache(config=self.model.config))

    @torch.inference_mode()
    def next_logits(self, ids: list[int], keep: int, cache: SequenceCache | None = None) -> torch.Tensor:
        """[keep, V] the target's logits at the last ``keep`` positions of ``ids`` (dtype as computed); row i
        predicts position len(ids) - keep + 1 + i. ``cache`` (:meth:`new_cache`, one per sequence): run only
        the ids it does not hold."""
        out = self.model(**forward_inputs(ids, keep, cache), logits_to_keep=keep)
        return out.logits[0, -keep:].clone()

    @contextmanager
    def _first_layers(self, layers: int) -> Iterator[None]:
        config = self.model.model.config
        saved = config.num_hidden_layers
        config.num_hidden_layers = layers  # the Llama forward runs self.layers[:num_hidden_layers]
        try:
            yield
        finally:
            config.num_hidden_layers = saved

    @torch.inference_mode()
    def early_exit_logits(self, ids: list[int], layers: int, cache: SequenceCache | None = None) -> torch.Tensor:
        """[V] logits after ``ids`` from the first ``layers`` decoder layers + final norm + the LM head
        (``cache``: as for :meth:`next_logits`, one per sequence and per ``layers``)."""
        if not 1 <= layers <= self.num_layers:
            raise UsageError(f"early exit after {layers} layers: the model has {self.num_layers}")
        with self._first_layers(layers):
            hidden = self.model.model(**forward_inputs(ids, 1, cache)).last_hidden_state[:, -1:]
        return self.model.lm_head(hidden)[0, 0].clone()


def load_model(name: str = DEFAULT_MODEL, dtype: str = "float32", gguf_file: str | None = None,
               option: str = "--model") -> CausalLM:
    """Load a causal LM: a Hugging Face Hub repo id (from the local HF cache, downloading what it lacks unless
    HF_HUB_OFFLINE=1), a local transformers folder, a .gguf file, or a name in
    :data:`replay_harness.record.weights.PACKAGED`. ``gguf_file``: a GGUF file inside the folder or Hub repo.
    ``option`` names the option in error lines."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown --dtype '{dtype}' ({', '.join(DTYPES)})")
    tf = _import_transformers()
    where, kwargs, source = _weights(name, gguf_file, option, tf)
    kwargs["local_files_only"] = Path(where).is_dir()  # a local folder never reaches for the Hub
    try:
        with open(os.devnull, "w") as quiet, redirect_stderr(quiet):  # transformers' tqdm bars ignore the switch
            tok = tf.AutoTokenizer.from_pretrained(where, **kwargs)
            model = tf.AutoModelForCausalLM.from_pretrained(where, dtype=DTYPES[dtype], **kwargs)
    except Exception as e:  # a repo's file not cached offline; a folder or GGUF it cannot read (any error inside)
        why = f"transformers cannot load it: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        if "hub_repo" not in source:
            raise UsageError(f"{option} {name}: {why}") from None
        raise EnvironmentProblem(f"{option} {name}: {why} (on a machine with network: hf download {name} "
                                 f"--local-dir DIR, then {option} DIR)") from None
    lm = CausalLM(model, tok, name, {**source, "dtype": dtype, "architecture": type(model).__name__})
    lm.gguf_file = gguf_file  # what a draft model of the same name is compared on (make_drafter)
    return lm
