"""Executable torch models: a Llama-style `Transformer`, a Mamba-2-style `Mamba2`, a Bamba-style
`Hybrid` of the two, and
`hf.HFCausalLM` for local Hugging Face checkpoints (imported from `specscope.models.torch.hf`, so
that using the first two does not load transformers).

`Transformer` and `HFCausalLM` share the executor's interface: `prefill(tokens)`,
`forward(tokens, input_pos)`, `forward_tree(tokens, tree, committed_len)` and
`compact(committed_len, accepted_nodes)`. `Mamba2` verifies trees from a recurrent state instead:
`verify_tree_naive` or `verify_tree_stree`, then the state after the accepted path from their
`TreeRecord` (or `advance`, which replays it).
"""

from specscope.models.torch.hybrid import Hybrid
from specscope.models.torch.layers import load_checkpoint
from specscope.models.torch.ssm import Mamba2, SSMState
from specscope.models.torch.transformer import KVCache, Transformer

__all__ = ["Hybrid", "KVCache", "Mamba2", "SSMState", "Transformer", "load_checkpoint"]
