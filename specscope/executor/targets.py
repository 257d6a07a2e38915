"""One small interface over the executable models, so the decoding loop has no per-model branches.

A sequence is decoded as committed tokens s_0..s_{L−1}. The model has processed s_0..s_{L−2};
the last committed token s_{L−1} is the root of the next tree and is processed by the next
`verify` (or `decode`), which is where the logits of the next token come from.

- `CachedModel` wraps anything with `Transformer`'s methods (`Transformer`, `HFCausalLM`): tree
  nodes go to cache slots after the committed ones; `commit` compacts the accepted path into
  consecutive slots.
- `SSMModel` wraps `Mamba2`: the committed prefix is a recurrent state; trees are verified by
  STree's tree-masked pass or by unrolling every root-to-leaf path ("naive"); `commit` replays the
  accepted path from the state (activation replay).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from specscope.errors import InputError
from specscope.models.torch import Mamba2, SSMState, Transformer
from specscope.tree import Tree

if TYPE_CHECKING:
    from specscope.models.torch.hf import HFCausalLM

SSM_VERIFIERS = ("stree", "naive")
"""SSM tree verifiers: STree's one tree-masked pass, or one unrolled path per leaf."""


class Model(Protocol):
    """What the executor needs from a target (and a draft model)."""

    name: str
    vocab_size: int
    committed: int
    """Tokens the model has processed into its cache or state (the root excluded)."""

    def prefill(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        """Start a sequence: process all but the last prompt token (prompt (t,), t ≥ 2) and
        return their logits (t − 1, vocab). `capacity` bounds the tokens the sequence will hold
        (prompt, output and one tree)."""
        ...

    def verify(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        """Logits (n, vocab) of every node of `tree` (tokens (n,), node 0 = last committed)."""
        ...

    def commit(self, tokens: torch.Tensor, path: Sequence[int]) -> None:
        """Keep the accepted `path` (root first) of the last verified tree."""
        ...

    def decode(self, token: int) -> torch.Tensor:
        """Process the last committed token alone and commit it; its logits (vocab,)."""
        ...


class CachedModel:
    """A KV-cached model: `Transformer`, or `HFCausalLM` (same methods)."""

    def __init__(self, model: Transformer | HFCausalLM, name: str, vocab_size: int) -> None:
        self.model, self.name, self.vocab_size = model, name, vocab_size
        self.committed = 0
        """Tokens whose keys and values sit in consecutive slots 0..committed−1."""

    def prefill(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        if isinstance(self.model, Transformer) and self.model.max_seq_len < capacity:
            self.model.setup_caches(1, capacity)
        self.committed = prompt.numel() - 1
        return self.model.prefill(prompt[None, :-1])[0]

    def verify(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        return self.model.forward_tree(tokens, tree, self.committed)

    def commit(self, tokens: torch.Tensor, path: Sequence[int]) -> None:
        self.model.compact(self.committed, path)
        self.committed += len(path)

    def decode(self, token: int) -> torch.Tensor:
        pos = torch.tensor([self.committed])
        logits = self.model(torch.tensor([[token]]), pos)[0, 0]
        self.committed += 1
        return logits


class SSMModel:
    """A `Mamba2` target whose committed prefix is a recurrent state."""

    def __init__(self, model: Mamba2, name: str, ssm_verify: str = "stree") -> None:
        if ssm_verify not in SSM_VERIFIERS:
            raise InputError(f"--ssm-verify must be one of {', '.join(SSM_VERIFIERS)}, "
                             f"got {ssm_verify!r}")
        self.model, self.name, self.vocab_size = model, name, model.spec.vocab_size
        self.ssm_verify = ssm_verify
        self.state: SSMState = model.new_state()
        self.committed = 0

    def prefill(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        logits, self.state = self.model.prefill(prompt[None, :-1])
        self.committed = prompt.numel() - 1
        return logits[0]

    def verify(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        if self.ssm_verify == "stree":
            return self.model.verify_tree_stree(tokens, tree, self.state)
        return self.model.verify_tree_naive(tokens, tree, self.state)

    def commit(self, tokens: torch.Tensor, path: Sequence[int]) -> None:
        if path:
            self.state = self.model.advance(self.state, tokens[list(path)])
            self.committed += len(path)

    def decode(self, token: int) -> torch.Tensor:
        logits, self.state = self.model.step(torch.tensor([token]), self.state)
        self.committed += 1
        return logits[0]


def wrap(model: Transformer | Mamba2 | HFCausalLM, name: str | None = None,
         ssm_verify: str = "stree") -> Model:
    """The executor's view of a loaded model: `SSMModel` for `Mamba2`, else `CachedModel`."""
    if isinstance(model, Mamba2):
        return SSMModel(model, name or model.spec.name, ssm_verify)
    if isinstance(model, Transformer):
        return CachedModel(model, name or model.spec.name, model.spec.vocab_size)
    config = model.model.config  # HFCausalLM
    return CachedModel(model, name or str(config.name_or_path), int(config.vocab_size))


def load_model(
    name_or_path: str, ssm_verify: str = "stree", dtype: torch.dtype = torch.float32
) -> tuple[Model, object | None]:
    """(model, tokenizer) for a zoo model name or a local Hugging Face folder.

    The tokenizer is the zoo's, or the folder's `AutoTokenizer` when it has one (else None).
    """
    path = Path(name_or_path)
    if path.is_dir():
        from specscope.models.torch.hf import HFCausalLM

        model = wrap(HFCausalLM(path, dtype=dtype), path.name)
        return model, _folder_tokenizer(path)
    from specscope.models.zoo import load_zoo_model

    module, tokenizer = load_zoo_model(name_or_path, dtype=dtype)
    return wrap(module, name_or_path, ssm_verify), tokenizer


def _folder_tokenizer(path: Path) -> object | None:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        return None
