"""One small interface over the executable models, so the decoding loop has no per-model branches.

A sequence is decoded as committed tokens s_0..s_{L−1}. The model has processed s_0..s_{L−2};
the last committed token s_{L−1} is the root of the next tree and is processed by the next
`verify` (or `decode`), which is where the logits of the next token come from.

- `CachedModel` wraps anything with `Transformer`'s methods (`Transformer`, `HFCausalLM`): tree
  nodes go to cache slots after the committed ones; `commit` compacts the accepted path into
  consecutive slots.
- `HybridModel` wraps `Hybrid`: attention caches compacted, SSM state from the pass's record.
- `SSMModel` wraps `Mamba2`: the committed prefix is a recurrent state; trees are verified by
  STree's tree-masked pass or by unrolling every root-to-leaf path ("naive"); `commit` takes the
  state after the accepted path from what the verification computed (`TreeRecord`), without
  running the model again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from specscope.errors import InputError, first_line
from specscope.executor.runtime import Runtime, StepRunner, bucket
from specscope.models.hf_config import llama_spec
from specscope.models.torch import Hybrid, Mamba2, SSMState, Transformer, load_checkpoint
from specscope.models.torch.ssm import Layout, TreeRecord, tree_layout
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
    runtime: Runtime
    """Device, dtype and runtime its steps run under (token tensors may come from the CPU;
    logits are returned on the device)."""
    setup_s: float
    """Seconds spent compiling or capturing steps so far (0 under eager)."""

    def prepare(self, max_tree: int) -> None:
        """Compile or capture the steps of trees up to `max_tree` nodes, before a sequence."""
        ...

    def prefill(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        """Start a sequence: process all but the last prompt token (prompt (t,), t ≥ 2) and
        return their logits (t − 1, vocab). `capacity` bounds the tokens the sequence will hold
        (prompt, output and one tree)."""
        ...

    def verify(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        """Logits (n, vocab) of every node of `tree` (tokens (n,), node 0 = last committed)."""
        ...

    def verify_call(self, tokens: torch.Tensor, tree: Tree) -> Callable[[], object]:
        """A zero-argument call of the same verification with its inputs built on the device
        now, once: what a benchmark times as the step alone (it keeps no record to commit)."""
        ...

    def commit(self, tokens: torch.Tensor, path: Sequence[int]) -> None:
        """Keep the accepted `path` (root first) of the last verified tree."""
        ...

    def decode(self, token: int) -> torch.Tensor:
        """Process the last committed token alone and commit it; its logits (vocab,)."""
        ...


class CachedModel:
    """A KV-cached model: `Transformer`, or `HFCausalLM` (same methods, eager only).

    Under `eager` a tree is verified with exact shapes (`forward_tree`). Under `graph` or
    `compile` every step, a single decoded token included, goes through the Transformer's static
    `step` padded to a bucket: padded nodes attend to themselves only and write their keys and
    values to one scratch slot past the sequence's capacity, so the cache is allocated once (at
    the spec's `max_seq_len`) and a captured graph never sees its buffers move.
    """

    def __init__(self, model: Transformer | HFCausalLM, name: str, vocab_size: int,
                 runtime: Runtime | None = None, padded: bool | None = None,
                 max_len: int | None = None) -> None:
        """`padded` (default: unless eager) runs the padded static step even under eager, which
        is how tests check that padding changes nothing. `max_len` (default: the spec's
        `max_seq_len`) sizes the static cache: the static step reads all of it, so size it to
        what a run needs."""
        self.model, self.name, self.vocab_size = model, name, vocab_size
        self.runtime = runtime or Runtime.cpu()
        self.committed = 0
        """Tokens whose keys and values sit in consecutive slots 0..committed−1."""
        self._step: StepRunner | None = None
        if padded if padded is not None else self.runtime.kind != "eager":
            if not isinstance(model, Transformer):
                raise InputError(f"--runtime {self.runtime.kind} runs specscope's own models; "
                                 f"{name} is a Hugging Face model and runs eager")
            model.setup_caches(1, (max_len or model.spec.max_seq_len) + 1)
            self._step = StepRunner(model.step, self.runtime)

    @property
    def setup_s(self) -> float:
        """Seconds spent compiling or capturing steps so far."""
        return 0.0 if self._step is None else self._step.setup_s

    def prefill(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        if isinstance(self.model, Transformer):
            room = self.model.max_seq_len - (self._step is not None)
            if self._step is not None and capacity > room:
                raise InputError(f"{self.name}: {capacity} tokens exceed the {room}-token cache "
                                 f"of --runtime {self.runtime.kind}")
            if room < capacity:
                self.model.setup_caches(1, capacity)
        self.committed = prompt.numel() - 1
        return self.model.prefill(prompt[None, :-1].to(self.runtime.device))[0]

    def verify(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        if self._step is None:
            return self.model.forward_tree(tokens.to(self.runtime.device), tree, self.committed)
        return self._step(*self._step_inputs(tokens, tree))[0, :tree.size]

    def verify_call(self, tokens: torch.Tensor, tree: Tree) -> Callable[[], object]:
        if self._step is None:
            return partial(self.model.forward_tree, tokens.to(self.runtime.device), tree,
                           self.committed)
        return self._step.bind(*self._step_inputs(tokens, tree))

    def _step_inputs(self, tokens: torch.Tensor, tree: Tree) -> tuple[torch.Tensor, ...]:
        """The static step's inputs on the device, padded to the tree's bucket, as a batch of one
        row: tokens, positions and cache slots (1, size), the committed length (1,) and the
        (1, size, size) ancestor mask."""
        n = tree.size
        size = bucket(n)
        index = torch.arange(size)
        positions = torch.full((size,), self.committed)
        positions[:n] += torch.from_numpy(tree.depths.astype(np.int64))
        slots = torch.full((size,), self.model.max_seq_len - 1)
        slots[:n] = self.committed + index[:n]
        block = torch.eye(size, dtype=torch.bool)
        block[:n, :n] = torch.from_numpy(tree.ancestor_mask.copy())
        padded = torch.zeros(size, dtype=torch.long)
        padded[:n] = tokens
        device = self.runtime.device
        return (padded[None].to(device), positions[None].to(device), slots[None].to(device),
                torch.tensor([self.committed], device=device), block[None].to(device))

    def commit(self, tokens: torch.Tensor, path: Sequence[int]) -> None:
        self.model.compact(self.committed, path)
        self.committed += len(path)

    def decode(self, token: int) -> torch.Tensor:
        if self._step is not None:
            logits = self.verify(torch.tensor([token]), Tree.root())[0]
        else:
            device = self.runtime.device
            pos = torch.tensor([self.committed], device=device)
            logits = self.model(torch.tensor([[token]], device=device), pos)[0, 0]
        self.committed += 1
        return logits

    def prepare(self, max_tree: int) -> None:
        """Compile or capture every bucket up to `max_tree` nodes now, so that decoding times
        exclude it (`setup_s` says how long it took)."""
        if self._step is None:
            return
        committed = self.committed
        for size in sorted({bucket(n) for n in range(1, max_tree + 1)}):
            self.committed = 0
            self.verify(torch.zeros(size, dtype=torch.long), Tree.chain(size - 1))
        self.committed = committed


class SSMModel:
    """A `Mamba2` target whose committed prefix is a recurrent state.

    Under `compile` or `graph` (or `padded`), STree verification pads the tree to a bucket
    (padded nodes see only themselves) and runs `Mamba2.verify_static` through a `StepRunner`,
    and single tokens run `step_static` the same way; naive verification and prefill run eager.
    """

    def __init__(self, model: Mamba2, name: str, ssm_verify: str = "stree",
                 runtime: Runtime | None = None, padded: bool | None = None) -> None:
        if ssm_verify not in SSM_VERIFIERS:
            raise InputError(f"--ssm-verify must be one of {', '.join(SSM_VERIFIERS)}, "
                             f"got {ssm_verify!r}")
        self.model, self.name, self.vocab_size = model, name, model.spec.vocab_size
        self.ssm_verify = ssm_verify
        self.runtime = runtime or Runtime.cpu()
        self.state: SSMState = model.new_state()
        self.committed = 0
        self._record: TreeRecord | None = None
        self._verify: StepRunner | None = None
        self._step: StepRunner | None = None
        if padded if padded is not None else self.runtime.kind != "eager":
            self._verify = StepRunner(model.verify_static, self.runtime)
            self._step = StepRunner(model.step_static, self.runtime)

    @property
    def setup_s(self) -> float:
        """Seconds spent compiling or capturing steps so far."""
        return sum(r.setup_s for r in (self._verify, self._step) if r is not None)

    def prepare(self, max_tree: int) -> None:
        """Compile or capture every bucket up to `max_tree` nodes and the one-token step now
        (the state is left as it was)."""
        if self._verify is None:
            return
        state, committed = self.state, self.committed
        for size in sorted({bucket(n) for n in range(1, max_tree + 1)}):
            self.verify(torch.zeros(size, dtype=torch.long), Tree.chain(size - 1))
        self.decode(0)
        self.state, self.committed, self._record = state, committed, None

    def prefill(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        logits, self.state = self.model.prefill(prompt[None, :-1].to(self.runtime.device))
        self.committed = prompt.numel() - 1
        self._record = None
        return logits[0]

    def verify(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        device = self.runtime.device
        if self.ssm_verify == "naive":
            logits, self._record = self.model.verify_tree_naive(tokens.to(device), tree,
                                                                self.state)
        elif self._verify is None:
            logits, self._record = self.model.verify_tree_stree(tokens.to(device), tree,
                                                                 self.state)
        else:
            logits = self._verify_padded(tokens, tree)
        return logits

    def verify_call(self, tokens: torch.Tensor, tree: Tree) -> Callable[[], object]:
        device = self.runtime.device
        if self.ssm_verify == "naive":
            return partial(self.model.verify_tree_naive, tokens.to(device), tree, self.state)
        if self._verify is None:
            return partial(self.model.verify_tree_stree, tokens.to(device), tree, self.state)
        return self._verify.bind(*self._padded_inputs(tokens, tree)[1])

    def _padded_inputs(self, tokens: torch.Tensor, tree: Tree
                       ) -> tuple[Layout, tuple[torch.Tensor, ...]]:
        """The tree's layout, and the static verification's inputs on the device (tokens
        padded to the tree's bucket, mask, conv index, the committed state)."""
        n, size, device = tree.size, bucket(tree.size), self.runtime.device
        layout = tree_layout(tree, self.model.spec.conv_kernel, device, size)
        padded = torch.zeros(1, size, dtype=torch.long)
        padded[0, :n] = tokens
        return layout, (padded.to(device), layout.mask, layout.conv_index, self.state.conv,
                        self.state.ssm)

    def _verify_padded(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        layout, inputs = self._padded_inputs(tokens, tree)
        logits, *parts = self._verify(*inputs)
        self._record = TreeRecord.of_tree(parts, layout.conv_index, self.state.ssm)
        return logits[:tree.size]

    def commit(self, tokens: torch.Tensor, path: Sequence[int]) -> None:
        """The state after the accepted path, from what the verification computed (no replay)."""
        if path:
            self.state = self._record.state(path)
            self.committed += len(path)

    def decode(self, token: int) -> torch.Tensor:
        token_t = torch.tensor([token], device=self.runtime.device)
        if self._step is None:
            logits, self.state = self.model.step(token_t, self.state)
        else:
            logits, conv, ssm = self._step(token_t, self.state.conv, self.state.ssm)
            self.state = SSMState(conv, ssm)
        self.committed += 1
        return logits[0]


class HybridModel:
    """A `Hybrid` target: KV caches in its attention layers, a recurrent state in its SSM layers.

    A tree is verified in one pass (tree mask in attention, STree in SSM layers); `commit`
    compacts the attention caches and takes the SSM state after the accepted path from the
    pass's record. Runs eager.
    """

    def __init__(self, model: Hybrid, name: str, runtime: Runtime | None = None) -> None:
        self.model, self.name, self.vocab_size = model, name, model.spec.vocab_size
        self.runtime = runtime or Runtime.cpu()
        if self.runtime.kind != "eager":
            raise InputError(f"{name}: hybrid targets run eager for now, not --runtime "
                             f"{self.runtime.kind}")
        self.setup_s = 0.0
        self.state: SSMState = model.new_state()
        self.committed = 0
        self._record: TreeRecord | None = None

    def prepare(self, max_tree: int) -> None:
        """Nothing to compile or capture: hybrid steps run eager."""

    def prefill(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        if self.model.max_seq_len < capacity:
            self.model.setup_caches(1, capacity)
        logits, self.state = self.model.prefill(prompt[None, :-1].to(self.runtime.device))
        self.committed = prompt.numel() - 1
        return logits[0]

    def verify(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        logits, self._record = self.model.verify_tree(tokens.to(self.runtime.device), tree,
                                                      self.committed, self.state)
        return logits

    def verify_call(self, tokens: torch.Tensor, tree: Tree) -> Callable[[], object]:
        return partial(self.model.verify_tree, tokens.to(self.runtime.device), tree,
                       self.committed, self.state)

    def commit(self, tokens: torch.Tensor, path: Sequence[int]) -> None:
        if path:  # an empty path (a draft model catching up on one token) keeps nothing
            self.model.compact(self.committed, path)
            self.state = self._record.state(path)
            self.committed += len(path)

    def decode(self, token: int) -> torch.Tensor:
        token_t = torch.tensor([token], device=self.runtime.device)
        logits, self.state = self.model.decode(token_t, self.committed, self.state)
        self.committed += 1
        return logits


def wrap(model: Transformer | Mamba2 | Hybrid | HFCausalLM, name: str | None = None,
         ssm_verify: str = "stree", runtime: Runtime | None = None,
         max_len: int | None = None) -> Model:
    """The executor's view of a loaded model (already on `runtime`'s device and dtype):
    `SSMModel` for `Mamba2`, `HybridModel` for `Hybrid`, else `CachedModel` (whose KV cache holds
    `max_len` tokens when given)."""
    if isinstance(model, Hybrid):
        return HybridModel(model, name or model.spec.name, runtime)
    if isinstance(model, Mamba2):
        return SSMModel(model, name or model.spec.name, ssm_verify, runtime)
    if isinstance(model, Transformer):
        return CachedModel(model, name or model.spec.name, model.spec.vocab_size, runtime,
                           max_len=max_len)
    config = model.model.config  # HFCausalLM
    return CachedModel(model, name or str(config.name_or_path), int(config.vocab_size), runtime)


def load_model(
    name_or_path: str, ssm_verify: str = "stree", runtime: Runtime | None = None
) -> tuple[Model, object | None]:
    """(model, tokenizer) for a zoo model name or a local Hugging Face folder, its weights on
    `runtime`'s device in its dtype (default: float32, eager, CPU). A Llama folder that
    specscope's `Transformer` reproduces exactly (`llama_spec`) loads into it; other folders go
    through the Hugging Face adapter (eager only).

    The tokenizer is the zoo's, or the folder's `AutoTokenizer` when it has one (else None).
    """
    runtime = runtime or Runtime.cpu()
    path = Path(name_or_path)
    if path.is_dir():
        spec = llama_spec(path)
        if spec is not None:  # runs as specscope's own Transformer, under every runtime
            module = Transformer.random(spec, dtype=runtime.dtype, device=runtime.device)
            load_checkpoint(module, path)
            return wrap(module, path.name, runtime=runtime), _folder_tokenizer(path)
        from specscope.models.torch.hf import HFCausalLM

        try:
            module = HFCausalLM(path, dtype=runtime.dtype, device=runtime.device)
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(f"{path}: not a model folder transformers can load "
                             f"({first_line(exc)})") from None
        return wrap(module, path.name, runtime=runtime), _folder_tokenizer(path)
    if path.exists() or any(mark in name_or_path for mark in ("/", "\\", "~")):
        raise InputError(f"{name_or_path}: {'a file, not a' if path.exists() else 'no such'} "
                         "folder; a model is a zoo model's name or a Hugging Face folder")
    from specscope.models.zoo import load_zoo_model

    module, tokenizer = load_zoo_model(name_or_path, dtype=runtime.dtype)
    return wrap(module.to(runtime.device), name_or_path, ssm_verify, runtime), tokenizer


def _folder_tokenizer(path: Path) -> object | None:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        return None
