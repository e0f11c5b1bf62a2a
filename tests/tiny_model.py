"""A tiny random Llama model saved as a transformers folder, for recording tests that need no download.

SYNTHETIC weights (random, seeded): 2 layers, hidden 32, vocabulary 257 (the 256 byte-level tokens and
``</s>``), with a byte-level tokenizer built with ``tokenizers`` and saved beside it as a
``PreTrainedTokenizerFast``. Loads offline in well under a second; ``replay record --model FOLDER`` decodes
with it like with any real model. :func:`save_tiny_gguf` writes such a model as a GGUF file. :func:`hub_cache`
lays a folder out as a Hugging Face cache entry, so ``--model ORG/NAME`` can be tested with
``HF_HUB_OFFLINE=1`` and no network.
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


def save_tiny_gguf(path: Path, *, seed: int = 0, layers: int = 2) -> Path:
    """The same shape of model as one GGUF file (float32 tensors, llama.cpp's names, a byte-level "gpt2"
    tokenizer with no merges), written with the ``gguf`` package, for the GGUF loading paths."""
    import numpy as np
    from gguf import GGUFWriter
    from tokenizers import pre_tokenizers

    tokens = sorted(pre_tokenizers.ByteLevel.alphabet()) + [EOS]
    v, h, f, heads, kv_heads = len(tokens), 32, 64, 4, 2
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_context_length(512)
    w.add_embedding_length(h)
    w.add_block_count(layers)
    w.add_feed_forward_length(f)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(v)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * (v - 1) + [3])  # normal tokens, then a control token (</s>)
    w.add_token_scores([0.0] * v)
    w.add_token_merges([])
    w.add_eos_token_id(v - 1)

    def tensor(name: str, *shape: int, scale: float = 0.1) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    tensor("token_embd.weight", v, h)
    tensor("output_norm.weight", h, scale=1.0)
    tensor("output.weight", v, h, scale=2.0)
    for i in range(layers):
        for name, shape in (("attn_norm", (h,)), ("ffn_norm", (h,)), ("attn_q", (h, h)),
                            ("attn_k", (kv_heads * h // heads, h)), ("attn_v", (kv_heads * h // heads, h)),
                            ("attn_output", (h, h)), ("ffn_gate", (f, h)), ("ffn_up", (f, h)), ("ffn_down", (h, f))):
            tensor(f"blk.{i}.{name}.weight", *shape, scale=1.0 if name.endswith("norm") else 0.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def hub_cache(cache: Path, repo: str, folder: Path) -> Path:
    """Copy ``folder`` into ``cache`` (an HF_HUB_CACHE) as the snapshot of Hub repo ``repo`` at :data:`COMMIT`."""
    entry = cache / f"models--{repo.replace('/', '--')}"
    (entry / "refs").mkdir(parents=True, exist_ok=True)
    (entry / "refs" / "main").write_text(COMMIT)
    shutil.copytree(folder, entry / "snapshots" / COMMIT)
    return entry
