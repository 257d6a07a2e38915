"""Write a specscope `Transformer` as a local Hugging Face `LlamaForCausalLM` folder.

The state dict names are already Llama's, so the export is the config plus the weights, written
by transformers' own `save_pretrained` (so transformers reads back exactly what it wrote) into a
temporary folder that is renamed into place: an interrupted export leaves nothing half-written.
Used to run the zoo through other engines (`benchmarks/peers.py`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from specscope.errors import InputError
from specscope.models.torch.transformer import Transformer


def export_llama(model: Transformer, folder: str | Path) -> Path:
    """Save `model` (float32) as a Hugging Face Llama folder at `folder`; returns the folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if not isinstance(model, Transformer):
        raise InputError(f"only Llama-style Transformers export to a Llama folder, not "
                         f"{type(model).__name__}")
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
    hf.load_state_dict(state, assign=True, strict=False)
    hf.tie_weights()
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        hf.save_pretrained(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
