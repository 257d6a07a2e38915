"""Write a specscope `Transformer` as a local Hugging Face `LlamaForCausalLM` folder.

The state dict names are already Llama's, so the export is the config plus the weights, written
by transformers' own `save_pretrained` (so transformers reads back exactly what it wrote), and the
zoo's byte-level BPE as a fast tokenizer (`tokenizer.json`). The folder is assembled under a
temporary name beside `folder` and renamed into place: an interrupted export leaves nothing
half-written, and an existing folder is replaced only once the new one is complete. Used to run
the zoo through other engines (`benchmarks/peers.py`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from specscope.errors import InputError
from specscope.models.torch.transformer import Transformer
from specscope.models.zoo.tokenizer import ZooTokenizer


def export_llama(name_or_model: str | Transformer, folder: str | Path,
                 tokenizer: ZooTokenizer | None = None) -> Path:
    """Save a zoo model (by name, with the zoo's tokenizer) or a `Transformer` (with `tokenizer`
    when given) as a float32 Hugging Face Llama folder at `folder`; returns the folder.

    Raises `InputError` for a model that is not a Llama-style `Transformer` (e.g. tiny-ssm).
    """
    if isinstance(name_or_model, str):
        from specscope.models.zoo import load_zoo_model

        model, zoo_tokenizer = load_zoo_model(name_or_model)
        tokenizer = tokenizer or zoo_tokenizer
    else:
        model = name_or_model
    if not isinstance(model, Transformer):
        raise InputError(f"only Llama-style Transformers export to a Llama folder, not "
                         f"{type(model).__name__} ({model.spec.name})")
    hf = _llama(model)
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    old = tmp.with_name(tmp.name + ".old")
    try:
        hf.save_pretrained(tmp)
        if tokenizer is not None:
            _fast_tokenizer(tokenizer, model.spec.max_seq_len).save_pretrained(tmp)
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return folder


def _llama(model: Transformer) -> torch.nn.Module:
    """transformers' `LlamaForCausalLM` holding `model`'s weights in float32 on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = model.spec
    config = LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.d_model,
        intermediate_size=spec.d_ff,
        num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads,
        num_key_value_heads=spec.n_kv_heads,
        head_dim=spec.head_dim,
        rms_norm_eps=spec.norm_eps,
        rope_theta=spec.rope_theta,
        tie_word_embeddings=spec.tie_embeddings,
        max_position_embeddings=spec.max_seq_len,
        architectures=["LlamaForCausalLM"],
        bos_token_id=None,  # the zoo has no special tokens but a document separator
        eos_token_id=None,
    )
    with torch.device("meta"):
        hf = LlamaForCausalLM(config)
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    hf.load_state_dict(state, assign=True)
    hf.tie_weights()
    return hf


def _fast_tokenizer(tokenizer: ZooTokenizer, max_len: int) -> object:
    """The zoo tokenizer as transformers' fast tokenizer (the same `tokenizers` object)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer, model_max_length=max_len)
