"""Layers and helpers shared by the torch models: norms, rotary embeddings, the SwiGLU MLP,
seeded random initialisation and Hugging Face-layout checkpoint loading."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from specscope.errors import InputError, first_line
from specscope.models.spec import ModelSpec

M = TypeVar("M", bound=nn.Module)


class RMSNorm(nn.Module):
    """x / rms(x) · weight, computed in at least float32 as Hugging Face does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (t, head_dim) of rotary embeddings at `positions` (t,), halves concatenated;
    (b, 1, t, head_dim) at positions (b, t), one row per sequence (they broadcast over heads)."""
    work = torch.promote_types(dtype, torch.float32)
    exponents = torch.arange(0, head_dim, 2, device=positions.device, dtype=work) / head_dim
    freqs = positions.to(work)[..., None] / theta ** exponents
    emb = torch.cat([freqs, freqs], dim=-1)
    if emb.ndim == 3:
        emb = emb[:, None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (..., t, head_dim) by position; the half-split convention of Llama checkpoints."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class FeedForward(nn.Module):
    """SwiGLU: down(silu(gate(x)) · up(x))."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class CausalLM(nn.Module):
    """What every specscope torch model shares: its `spec`, an LM head tied to the input
    embedding when the spec says so, and seeded random construction (`random`)."""

    spec: ModelSpec
    lm_head: nn.Linear

    @property
    def embedding(self) -> nn.Embedding:
        """The input embedding (the tied LM head's weight)."""
        raise NotImplementedError

    def tie_weights(self) -> None:
        """Share the embedding with the LM head when the spec ties them."""
        if self.spec.tie_embeddings:
            self.lm_head.weight = self.embedding.weight

    @classmethod
    def random(
        cls,
        spec: ModelSpec,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        std: float = 0.02,
    ) -> CausalLM:
        """A seeded random model, e.g. for latency runs of catalogue shapes (see `random_init`)."""
        return random_init(cls, spec, seed, dtype, device, std)


def random_init(
    cls: type[M],
    spec: ModelSpec,
    seed: int,
    dtype: torch.dtype,
    device: torch.device | str,
    std: float,
) -> M:
    """Build `cls(spec)` in `dtype` on `device`: seeded N(0, std²) matrices, 1-D weights 1.

    The model is laid out on the meta device first, so a catalogue-sized model is allocated once.
    The same seed, dtype and device give the same weights. Models with extra parameter rules
    (SSM decays) apply them in their own `reset_special_parameters(generator)`.
    """
    with torch.device("meta"):
        model = cls(spec)
    model = model.to(dtype=dtype).to_empty(device=device)
    model.tie_weights()
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, std, generator=generator)
            else:
                p.fill_(1.0)
        reset = getattr(model, "reset_special_parameters", None)
        if reset is not None:
            reset(generator)
    return model.eval()


def load_checkpoint(model: nn.Module, path: str | Path) -> None:
    """Load Hugging Face-layout safetensors weights (a file, or every one in a folder) into `model`
    (a specscope torch model: it has `spec` and `embedding_key`).

    A tied LM head is saved once under the embedding's name; it is filled from there.
    """
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    if not files:
        raise InputError(f"{path}: no .safetensors weights found")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            state.update(load_file(f))
        except (SafetensorError, OSError) as exc:
            raise InputError(f"{f}: not readable as safetensors ({first_line(exc)})") from None
    if model.spec.tie_embeddings and model.embedding_key in state:
        state.setdefault("lm_head.weight", state[model.embedding_key])
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        last = str(exc).strip().splitlines()[-1].strip()
        raise InputError(f"{path}: weights do not fit model {model.spec.name}: {last}") from None
