"""A tiny random Llama model saved as a transformers folder, for recording tests that need no download.

SYNTHETIC weights (random, seeded): 2 layers, hidden 32, vocabulary 257 (the 256 byte-level tokens and
``</s>``), with a byte-level tokenizer built with ``tokenizers`` and saved beside it as a
``PreTrainedTokenizerFast``. Loads offline in well under a second; ``replay record --model FOLDER`` decodes
with it like with any real model. :func:`hub_cache` lays the same files out as a Hugging Face cache entry,
so ``--model ORG/NAME`` can be tested with ``HF_HUB_OFFLINE=1`` and no network.
"""
from __future__ import annotations

import shutil
from pathlib import Path

EOS = "</s>"
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the cache entry's (made-up) revision


def save_tiny_llama(folder: Path, *, seed: int = 0, layers: int = 2) -> Path:
    """Write the tiny model and its tokenizer to ``folder`` (transformers' save_pretrained layout)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 byte-level symbols
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab[EOS] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bar on stderr
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS)
    config = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=512, eos_token_id=vocab[EOS], bos_token_id=None,
                                      pad_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # larger logits than the default init: tokens are not all near-ties
        model.lm_head.weight.mul_(40)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    fast.save_pretrained(str(folder))
    return folder


def hub_cache(cache: Path, repo: str, folder: Path) -> Path:
    """Copy ``folder`` into ``cache`` (an HF_HUB_CACHE) as the snapshot of Hub repo ``repo`` at :data:`COMMIT`."""
    entry = cache / f"models--{repo.replace('/', '--')}"
    (entry / "refs").mkdir(parents=True, exist_ok=True)
    (entry / "refs" / "main").write_text(COMMIT)
    shutil.copytree(folder, entry / "snapshots" / COMMIT)
    return entry
