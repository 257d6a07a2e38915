"""Model architectures: `ModelSpec`, the catalogue of real models, per-operator FLOPs and bytes."""

from specscope.models.catalogue import get_model, list_models, published_params
from specscope.models.ops import (
    OpCost,
    forward_ops,
    kv_bytes_per_token,
    param_count,
    ssm_state_bytes,
    weight_bytes,
)
from specscope.models.spec import ModelSpec

__all__ = [
    "ModelSpec",
    "OpCost",
    "forward_ops",
    "get_model",
    "kv_bytes_per_token",
    "list_models",
    "param_count",
    "published_params",
    "ssm_state_bytes",
    "weight_bytes",
]
