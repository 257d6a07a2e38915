"""The per-layer device term an MoE or latent-attention layer pays (`ops.layer_equivalents`):
once per operator row over the dense Transformer layer's, so a dense model pays it once a
layer, as the runtimes were measured, and DeepSeek-V3's layers (latent attention, shared and
routed experts) about twice."""

from __future__ import annotations

import pytest

from specscope.hw_profiles import load_profile
from specscope.hw_profiles.cost import CostModel
from specscope.models import get_model
from specscope.models.ops import DENSE_LAYER_OPS, forward_ops, layer_equivalents, layer_ops


@pytest.mark.parametrize("name", ["llama-3.1-8b", "mistral-7b", "mamba2-2.7b"])
def test_a_dense_or_ssm_model_pays_it_once_a_layer(name: str) -> None:
    spec = get_model(name)
    assert layer_equivalents(spec) == spec.n_layers


def test_the_dense_layer_has_the_rows_the_term_was_measured_on() -> None:
    ops = layer_ops(forward_ops(get_model("llama-3.1-8b"), 1, 1, 1))
    assert len(ops) == DENSE_LAYER_OPS


def test_moe_and_latent_layers_pay_per_row() -> None:
    deepseek = get_model("deepseek-v3")  # 3 dense MLA layers (12 rows), 58 MoE MLA layers (15)
    assert layer_equivalents(deepseek) == pytest.approx((3 * 12 + 58 * 15) / 7)
    qwen = get_model("qwen3-30b-a3b")  # attention (4 rows) + norm, router, gate-up, down
    assert layer_equivalents(qwen) == pytest.approx(qwen.n_layers * 8 / 7)


def test_the_step_overhead_follows() -> None:
    hw = load_profile("h200")
    cost = CostModel(hw, get_model("deepseek-v3"), tp=8, runtime="graph")
    r = cost.runtime
    overhead = float(cost.extras(cost.ops(1, 1, 512))["overhead"])
    assert overhead == pytest.approx(r.step_s + layer_equivalents(cost.model) * r.layer_s)
