"""Mamba-2-style state-space model built from a `ModelSpec`, with two tree verifiers.

Parameter names and layouts are those of Hugging Face `Mamba2ForCausalLM` (`backbone.layers.{i}.
mixer.in_proj`, `conv1d`, `dt_bias`, `A_log`, `D`, `norm`, `out_proj`, …), so its checkpoints load
with `load_checkpoint`. A spec with d_ff > 0 adds a SwiGLU MLP to every block.

The mixer runs in two forms (docs/methods.md#state-space-targets):
- `step`, the recurrence: h ← exp(Δ·A)·h + Δ·x⊗B, y = C·h + D·x, one token per call;
- the masked dual form over n new tokens at once, given an ancestor mask. With a lower-triangular
  mask it is a chunk of Mamba-2's SSD (chunked prefill, naive per-leaf verification); with a
  tree's ancestor mask it is STree's one-pass tree verification. The causal conv reads each
  token's ancestor chain, reaching into the committed conv inputs above the first token.

States are values: every method returns a new `SSMState` and leaves its argument untouched, so a
committed state can be verified against many trees. A state covers the tokens before the tree's
root; the root is the first token the verifiers process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from specscope.errors import InputError
from specscope.models.spec import ModelSpec
from specscope.models.torch.layers import CausalLM, FeedForward, RMSNorm
from specscope.tree import Tree

CHUNK = 64
"""Prefill chunk length: the masked form costs O(chunk²) per token group."""


@dataclass(frozen=True)
class SSMState:
    """Recurrent state of every layer after the tokens seen so far.

    conv: (layers, batch, conv_dim, conv_kernel − 1), the last conv inputs, oldest first, in the
    weights' dtype; ssm: (layers, batch, heads, head_dim, d_state) in `state_dtype`.
    """

    conv: torch.Tensor
    ssm: torch.Tensor


LayerRecord = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""What one mixer's masked pass computed per token: cumulative log decay L (b, n, H), Δ (b, n, H),
x (b, n, H, P), B (b, n, H, N) and the conv inputs [committed | new] (b, conv_dim, K − 1 + n)."""


@dataclass(frozen=True)
class TreeRecord:
    """A verification pass's per-token quantities, stacked over layers (see `LayerRecord`), from
    which the state after any verified token follows without running the model again:

    h_a = e^{L_a}·h0 + Σ_{j ∈ path(a)} e^{L_a − L_j}·Δ_j·x_j ⊗ B_j,

    and the conv state is the last K − 1 conv inputs of a's window. `locate(path)` gives the batch
    row and the token columns that hold a path (root first) in this pass.
    """

    log_decay: torch.Tensor
    dt: torch.Tensor
    x: torch.Tensor
    b: torch.Tensor
    inputs: torch.Tensor
    conv_index: torch.Tensor
    h0: torch.Tensor
    """The SSM state the pass started from, (layers, rows, H, P, N)."""
    locate: Callable[[Sequence[int]], tuple[int, list[int]]]

    @classmethod
    def of_tree(cls, parts: Sequence[torch.Tensor], conv_index: torch.Tensor,
                h0: torch.Tensor) -> TreeRecord:
        """The record of a one-row tree pass (node i in column i) from its stacked per-layer
        `parts` (log decay, Δ, x, B, conv inputs), its layout's `conv_index` and start state h0."""
        return cls(*parts, conv_index, h0, lambda path: (0, list(path)))

    def state(self, path: Sequence[int]) -> SSMState:
        """The state (batch 1) after the tokens of `path` (root first), from this record."""
        row, cols = self.locate(path)
        at = torch.tensor(cols, device=self.x.device)
        log_decay = self.log_decay[:, row, at]  # (layers, k, H)
        last = log_decay[:, -1]
        weights = (last[:, None] - log_decay).exp() * self.dt[:, row, at]
        h = last.exp()[..., None, None] * self.h0[:, row]
        h = h + torch.einsum("lkh,lkhp,lkhn->lhpn", weights, self.x[:, row, at],
                             self.b[:, row, at])
        conv = self.inputs[:, row][:, :, self.conv_index[cols[-1], 1:]]
        return SSMState(conv[:, None], h[:, None])


@dataclass(frozen=True)
class Layout:
    """How n new tokens connect: who precedes whom and which inputs each conv window reads.

    mask: bool (n, n), [i, j] True when j is an ancestor-or-self of i (a chain: lower triangle).
    conv_index: long (n, K), for each token the columns of [committed conv inputs | new tokens]
    in its conv window, oldest first, itself last.
    """

    mask: torch.Tensor
    conv_index: torch.Tensor


def chain_layout(n: int, kernel: int, device: torch.device | str) -> Layout:
    """The layout of n consecutive tokens."""
    mask = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    index = torch.arange(n, device=device)[:, None] + torch.arange(kernel, device=device)
    return Layout(mask, index)


def tree_layout(tree: Tree, kernel: int, device: torch.device | str,
                size: int | None = None) -> Layout:
    """The layout of a tree's nodes: each conv window walks up the node's ancestors (all nodes at
    once, one parent lookup per window position), then into the committed conv inputs.

    `size` (≥ the tree's size) pads it for static shapes with nodes that see only themselves: an
    identity mask row and a conv window of their own input, so they change no tree node.
    """
    n = tree.size
    size = size or n
    parents = np.append(tree.parents.astype(np.int64), -1)  # index −1 reads the sentinel −1
    node = np.arange(n)
    above = np.zeros(n, dtype=np.int64)  # steps taken above the root so far
    index = np.repeat(kernel - 1 + np.arange(size)[:, None], kernel, axis=1)
    for k in range(kernel - 1, -1, -1):
        index[:n, k] = np.where(node >= 0, kernel - 1 + node, kernel - 2 - above)
        above += node < 0
        node = np.where(node >= 0, parents[node], -1)
    mask = np.eye(size, dtype=bool)
    mask[:n, :n] = tree.ancestor_mask
    return Layout(torch.from_numpy(mask).to(device), torch.from_numpy(index).to(device))


def ssd(
    x: torch.Tensor,
    dt: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    h0: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Masked SSD: outputs of n tokens after state h0, the state after the last token's path, and
    every token's cumulative log decay L (b, n, H) (what `TreeRecord` needs to commit any token).

    x (b, n, H, P), dt (b, n, H), a (H,), b and c (b, n, H, N), h0 (b, H, P, N), mask (n, n).
    With L_i = Σ_{j ∈ anc(i)} Δ_j·A:
    y_i = e^{L_i}·C_i·h0 + Σ_{j ∈ anc(i)} e^{L_i−L_j}·(C_i·B_j)·Δ_j·x_j.
    Computed per head as batched matrix products over (b, H).
    """
    log_decay = mask.to(dt.dtype) @ (dt * a)
    lh, dth = log_decay.transpose(1, 2), dt.transpose(1, 2)  # (b, H, n)
    xh, bh, ch = x.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2)  # (b, H, n, ·)
    decay = (lh[..., :, None] - lh[..., None, :]).masked_fill(~mask, -math.inf).exp()
    weights = (ch @ bh.transpose(-1, -2)) * decay * dth[..., None, :]  # (b, H, i, j)
    y = weights @ xh + lh.exp()[..., None] * (ch @ h0.transpose(-1, -2))
    last = (decay[..., -1, :] * dth)[..., None, :]  # (b, H, 1, n)
    h = lh[..., -1].exp()[..., None, None] * h0 + (xh.transpose(-1, -2) * last) @ bh
    return y.transpose(1, 2), h, log_decay


def state_dtype(weights: torch.dtype) -> torch.dtype:
    """The SSM's arithmetic and state dtype: at least float32, as decays compound over tokens."""
    return torch.promote_types(weights, torch.float32)


class GatedRMSNorm(nn.Module):
    """RMSNorm of y·silu(z) over each group of channels (Mamba-2's output norm)."""

    def __init__(self, dim: int, groups: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.groups, self.eps = groups, eps

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        work = torch.promote_types(y.dtype, torch.float32)
        h = y.to(work) * F.silu(z.to(work))
        h = h.unflatten(-1, (self.groups, -1))
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2)
        return self.weight * h.to(y.dtype)


class Mamba2Mixer(nn.Module):
    """In projection, causal depthwise conv over (x, B, C), SSD, gated norm, out projection."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.heads, self.head_dim = spec.ssm_heads, spec.ssm_head_dim
        self.groups, self.d_state = spec.ssm_groups, spec.d_state
        self.d_inner = spec.d_inner
        self.conv_dim = self.d_inner + 2 * self.groups * self.d_state
        projected = self.d_inner + self.conv_dim + self.heads
        self.in_proj = nn.Linear(spec.d_model, projected, bias=False)
        self.conv1d = nn.Conv1d(
            self.conv_dim,
            self.conv_dim,
            spec.conv_kernel,
            groups=self.conv_dim,
            padding=spec.conv_kernel - 1,
        )
        self.dt_bias = nn.Parameter(torch.zeros(self.heads))
        self.A_log = nn.Parameter(torch.zeros(self.heads))
        self.D = nn.Parameter(torch.ones(self.heads))
        self.norm = GatedRMSNorm(self.d_inner, self.groups, spec.norm_eps)
        self.out_proj = nn.Linear(self.d_inner, spec.d_model, bias=False)

    def forward(
        self, u: torch.Tensor, conv: torch.Tensor, ssm: torch.Tensor, layout: Layout
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, LayerRecord]:
        """Masked form: outputs (b, n, d_model), the states after the last token's path, and
        what it computed per token (enough to commit any token's path, see `TreeRecord`)."""
        z, xbc, dt = self._project(u)
        inputs = torch.cat([conv, xbc.transpose(1, 2)], dim=-1)
        windows = inputs.index_select(-1, layout.conv_index.flatten()).unflatten(
            -1, layout.conv_index.shape)  # (b, conv_dim, n, K)
        xbc = torch.einsum("bcnk,ck->bnc", windows, self.conv1d.weight[:, 0])
        x, b, c = self._split(F.silu(xbc + self.conv1d.bias))
        y, h, log_decay = ssd(x, dt, -self.A_log.exp(), b, c, ssm, layout.mask)
        out = self._output(y, x, z)
        # the conv state after the last token: its window without the oldest input
        return out, windows[:, :, -1, 1:], h, (log_decay, dt, x, b, inputs)

    def step(
        self, u: torch.Tensor, conv: torch.Tensor, ssm: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Recurrent form for one token per row, u (b, d_model): output and the next states."""
        z, xbc, dt = self._project(u)
        window = torch.cat([conv, xbc[..., None]], dim=-1)
        xbc = torch.einsum("bck,ck->bc", window, self.conv1d.weight[:, 0])
        x, b, c = self._split(F.silu(xbc + self.conv1d.bias))
        decay = torch.exp(dt * -self.A_log.exp())
        h = torch.addcmul(decay[..., None, None] * ssm, (dt[..., None] * x)[..., None],
                          b[..., None, :])
        y = (h @ c[..., None])[..., 0]
        return self._output(y, x, z), window[..., 1:], h

    def _project(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gate z, conv input (x, B, C) and step size Δ = softplus(dt + bias) of every token."""
        z, xbc, dt = self.in_proj(u).split([self.d_inner, self.conv_dim, self.heads], dim=-1)
        return z, xbc, F.softplus(dt + self.dt_bias).to(state_dtype(u.dtype))

    def _split(self, xbc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (…, H, P) and B, C (…, H, N), each group's B and C shared by its heads."""
        xbc = xbc.to(state_dtype(xbc.dtype))
        bc = self.groups * self.d_state
        x, b, c = xbc.split([self.d_inner, bc, bc], dim=-1)
        # each group's heads share its B and C: a broadcast view (no copy with one group)
        shape = (*xbc.shape[:-1], self.groups, self.heads // self.groups, self.d_state)
        b = b.unflatten(-1, (self.groups, 1, self.d_state)).expand(shape).flatten(-3, -2)
        c = c.unflatten(-1, (self.groups, 1, self.d_state)).expand(shape).flatten(-3, -2)
        return x.unflatten(-1, (self.heads, self.head_dim)), b, c

    def _output(self, y: torch.Tensor, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = (y + self.D[:, None] * x).flatten(-2)
        return self.out_proj(self.norm(y, z).to(z.dtype))


@torch.no_grad()
def reset_mixer_parameters(mixer: Mamba2Mixer, generator: torch.Generator) -> None:
    """Mamba-2's initialisation of a mixer's decays: A ~ U(1, 16), Δ ~ logU(1e-3, 1e-1), D = 1."""
    a = torch.empty_like(mixer.A_log).uniform_(1.0, 16.0, generator=generator)
    mixer.A_log.copy_(a.log())
    u = torch.empty_like(mixer.dt_bias).uniform_(generator=generator)
    dt = torch.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    mixer.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)
    mixer.D.fill_(1.0)
    mixer.conv1d.bias.zero_()


class Mamba2Block(nn.Module):
    """Pre-norm mixer with a residual; a pre-norm SwiGLU MLP too when the spec has d_ff > 0."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.norm = RMSNorm(spec.d_model, spec.norm_eps)
        self.mixer = Mamba2Mixer(spec)
        has_mlp = spec.d_ff > 0
        self.post_mixer_norm = RMSNorm(spec.d_model, spec.norm_eps) if has_mlp else None
        self.mlp = FeedForward(spec.d_model, spec.d_ff) if has_mlp else None

    def forward(
        self, x: torch.Tensor, conv: torch.Tensor, ssm: torch.Tensor, layout: Layout | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, LayerRecord | None]:
        """`layout` None: x (b, d_model) is one token per row, run recurrently (no record)."""
        u = self.norm(x)
        parts = None
        if layout is None:
            mixed, conv, ssm = self.mixer.step(u, conv, ssm)
        else:
            mixed, conv, ssm, parts = self.mixer(u, conv, ssm, layout)
        x = x + mixed
        if self.mlp is not None:
            x = x + self.mlp(self.post_mixer_norm(x))
        return x, conv, ssm, parts


class Backbone(nn.Module):
    """Embedding, blocks and final norm: the `backbone.` prefix of a Mamba-2 state dict."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(spec.vocab_size, spec.d_model)
        self.layers = nn.ModuleList(Mamba2Block(spec) for _ in range(spec.n_layers))
        self.norm_f = RMSNorm(spec.d_model, spec.norm_eps)


class Mamba2(CausalLM):
    """A Mamba-2-style causal LM from a `ModelSpec` with arch "ssm"."""

    embedding_key = "backbone.embeddings.weight"

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        if spec.arch != "ssm":
            raise InputError(f"model {spec.name}: Mamba2 needs arch 'ssm', not {spec.arch!r}")
        if spec.ssm_heads % spec.ssm_groups:
            raise InputError(
                f"model {spec.name}: {spec.ssm_heads} SSM heads do not split into "
                f"{spec.ssm_groups} groups"
            )
        self.spec = spec
        self.backbone = Backbone(spec)
        self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.tie_weights()

    @property
    def embedding(self) -> nn.Embedding:
        return self.backbone.embeddings

    @torch.no_grad()
    def reset_special_parameters(self, generator: torch.Generator) -> None:
        """Mamba-2's initialisation of every layer's decays (see `reset_mixer_parameters`)."""
        for block in self.backbone.layers:
            reset_mixer_parameters(block.mixer, generator)

    @property
    def mixers(self) -> list[Mamba2Mixer]:
        """The Mamba-2 mixers, in layer order."""
        return [block.mixer for block in self.backbone.layers]

    def new_state(self, batch: int = 1) -> SSMState:
        """The zero state before any token, on the device of the weights (see `state_dtype`)."""
        s, w = self.spec, self.lm_head.weight
        conv_dim = self.backbone.layers[0].mixer.conv_dim
        return SSMState(
            w.new_zeros(s.n_layers, batch, conv_dim, s.conv_kernel - 1),
            w.new_zeros(
                s.n_layers,
                batch,
                s.ssm_heads,
                s.ssm_head_dim,
                s.d_state,
                dtype=state_dtype(w.dtype),
            ),
        )

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, state: SSMState) -> tuple[torch.Tensor, SSMState]:
        """Logits (b, vocab) of one token per row (b,) by the recurrence, and the next state."""
        hidden, state, _ = self._run(tokens, state, None)
        return self.lm_head(hidden), state

    @torch.no_grad()
    def prefill(
        self, tokens: torch.Tensor, state: SSMState | None = None
    ) -> tuple[torch.Tensor, SSMState]:
        """Logits (b, t, vocab) of tokens (b, t) after `state` (default: empty), and the new state.

        Runs `CHUNK` tokens at a time in the masked form.
        """
        if state is None:
            state = self.new_state(tokens.shape[0])
        hidden, state = self._chain(tokens, state)
        return self.lm_head(hidden), state

    @torch.no_grad()
    def verify_tree_naive(
        self, tokens: torch.Tensor, tree: Tree, state: SSMState
    ) -> tuple[torch.Tensor, TreeRecord]:
        """Logits (n, vocab) of every node, unrolling each root-to-leaf path from `state` (batch
        1), and the pass's record (commit any node's path with `TreeRecord.state`).

        One pass with a batch row (and a copy of the state) per leaf, leaves × (depth + 1) tokens;
        shorter paths are padded at the end, which causality keeps from changing them.
        """
        paths = [tree.path(int(leaf)) for leaf in tree.leaves]
        width = tree.depth + 1
        rows = torch.tensor([p + p[-1:] * (width - len(p)) for p in paths], device=tokens.device)
        first_row: dict[int, int] = {}
        for r, path in enumerate(paths):
            for node in path:
                first_row.setdefault(node, r)
        copies = SSMState(
            state.conv.expand(-1, len(paths), -1, -1), state.ssm.expand(-1, len(paths), -1, -1, -1)
        )
        layout = chain_layout(width, self.spec.conv_kernel, tokens.device)
        hidden, _, parts = self._run(tokens[rows], copies, layout)
        rows_of = [first_row[v] for v in range(tree.size)]
        row = torch.tensor(rows_of, device=tokens.device)
        col = torch.tensor(tree.depths, device=tokens.device)
        record = TreeRecord(*parts, layout.conv_index, copies.ssm,
                            lambda path: (rows_of[path[-1]], list(range(len(path)))))
        return self.lm_head(hidden[row, col]), record

    @torch.no_grad()
    def verify_tree_stree(
        self, tokens: torch.Tensor, tree: Tree, state: SSMState
    ) -> tuple[torch.Tensor, TreeRecord]:
        """Logits (n, vocab) of every node in one tree-masked pass from `state` (batch 1), STree,
        and the pass's record (commit any node's path with `TreeRecord.state`)."""
        layout = tree_layout(tree, self.spec.conv_kernel, tokens.device)
        hidden, _, parts = self._run(tokens[None], state, layout)
        record = TreeRecord.of_tree(parts, layout.conv_index, state.ssm)
        return self.lm_head(hidden[0]), record

    @torch.no_grad()
    def verify_static(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor,
        conv_index: torch.Tensor,
        conv: torch.Tensor,
        ssm: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """STree verification in static shapes, for compiling and CUDA graphs: tokens (1, t) laid
        out by `mask` (t, t) and `conv_index` (t, K) (see `Layout`) after the state (conv, ssm).
        Returns the logits (t, vocab) and the record's per-layer tensors (see `TreeRecord`); a
        padding token whose mask row holds only itself changes no other token."""
        hidden, _, parts = self._run(tokens, SSMState(conv, ssm), Layout(mask, conv_index))
        return (self.lm_head(hidden[0]), *parts)

    @torch.no_grad()
    def step_static(
        self, tokens: torch.Tensor, conv: torch.Tensor, ssm: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`step` on plain tensors (for compiling): logits (b, vocab) and the next (conv, ssm)."""
        hidden, state, _ = self._run(tokens, SSMState(conv, ssm), None)
        return self.lm_head(hidden), state.conv, state.ssm

    @torch.no_grad()
    def advance(self, state: SSMState, tokens: torch.Tensor) -> SSMState:
        """The state after the accepted path's tokens (k,), root first, recomputed from `state`.

        Activation replay: the k accepted tokens run through the model again in the chain form;
        nothing off the path is touched.
        """
        return self._chain(tokens[None], state)[1]

    def _chain(self, tokens: torch.Tensor, state: SSMState) -> tuple[torch.Tensor, SSMState]:
        hidden = []
        for start in range(0, tokens.shape[1], CHUNK):
            chunk = tokens[:, start : start + CHUNK]
            layout = chain_layout(chunk.shape[1], self.spec.conv_kernel, tokens.device)
            h, state, _ = self._run(chunk, state, layout)
            hidden.append(h)
        return torch.cat(hidden, dim=1), state

    def _run(
        self, tokens: torch.Tensor, state: SSMState, layout: Layout | None
    ) -> tuple[torch.Tensor, SSMState, tuple[torch.Tensor, ...] | None]:
        """Final hidden states of `tokens`, the state after the last token's path, and under a
        layout the per-layer records stacked over layers (log decay, Δ, x, B, conv inputs)."""
        x = self.backbone.embeddings(tokens)
        conv, ssm, parts = [], [], []
        for block, c, h in zip(self.backbone.layers, state.conv, state.ssm, strict=True):
            x, c, h, part = block(x, c, h, layout)
            conv.append(c)
            ssm.append(h)
            parts.append(part)
        stacked = None if layout is None else tuple(torch.stack(t) for t in zip(*parts,
                                                                                 strict=True))
        return self.backbone.norm_f(x), SSMState(torch.stack(conv), torch.stack(ssm)), stacked
