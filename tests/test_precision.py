"""FP8 / NVFP4 pricing, the 8-bit KV cache and the new datasheet profiles
(`specscope.models.precision`)."""

import dataclasses
import math

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.models import get_model, precision
from specscope.models.ops import forward_ops

NEW = ["b200", "mi300x", "h100-pcie", "l4", "a10g"]
N = np.arange(1, 65)[:, None]
CONTEXT = np.array([0, 512, 4096])[None, :]


def _same_peak(hw):
    """`hw` with its fp8 peak set to its bf16 peak."""
    return dataclasses.replace(hw, peak_flops={**hw.peak_flops, "fp8": hw.peak_flops["bf16"]})


@pytest.mark.parametrize("model", ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3"])
def test_fp8_at_bf16_bytes_peak_and_no_scale_cost_prices_as_bf16(monkeypatch, model):
    monkeypatch.setitem(precision.FORMATS, "fp8", dataclasses.replace(
        precision.FORMATS["fp8"], weight_bytes=2, act_bytes=2, scale_flops=0.0))
    hw, spec = _same_peak(load_profile("h100")), get_model(model)
    tp = 8 if model == "deepseek-v3" else 1
    bf16, fp8 = (CostModel(hw, spec, tp=tp, precision=p) for p in ("bf16", "fp8"))
    for batch in (1, 4):
        assert np.array_equal(bf16.forward_time(batch, N, CONTEXT),
                              fp8.forward_time(batch, N, CONTEXT))
    assert bf16.memory_bytes(2, 3000) == fp8.memory_bytes(2, 3000)


def test_kv_bits_16_is_today():
    hw, spec = load_profile("h100"), get_model("llama-3.1-8b")
    today, stated = CostModel(hw, spec), CostModel(hw, spec, kv_bits=16)
    assert np.array_equal(today.forward_time(2, N, CONTEXT), stated.forward_time(2, N, CONTEXT))
    assert today.memory_bytes(1, 8192) == stated.memory_bytes(1, 8192)


def test_kv_bits_8_halves_the_cache_and_its_reads():
    hw, spec = load_profile("h100"), get_model("llama-3.1-8b")
    k16, k8 = CostModel(hw, spec), CostModel(hw, spec, kv_bits=8)
    cache = k16.memory_bytes(1, 8192) - k16.memory_bytes(0, 8192)
    assert k8.memory_bytes(1, 8192) == pytest.approx(k16.memory_bytes(1, 8192) - cache / 2)
    reads = {bits: sum(op.kv_bytes for op in m.ops(1, 1, 8192) if op.kind == "attention")
             for bits, m in ((16, k16), (8, k8))}
    assert reads[8] == pytest.approx(reads[16] / 2)
    assert k8.forward_time(1, 1, 8192) < k16.forward_time(1, 1, 8192)
    with pytest.raises(InputError, match="--kv-bits 4"):
        CostModel(hw, spec, kv_bits=4)


def test_fp8_decode_reads_about_half_the_bf16_weight_bytes():
    hw, spec = load_profile("h100"), get_model("llama-3.1-8b")
    read = {p: sum(op.weight_bytes for op in CostModel(hw, spec, precision=p).ops(1, 1, 512))
            for p in ("bf16", "fp8")}
    # linear layers at 1 byte (+ 4 bytes per 128 x 128 block); the bf16 lm_head (0.5B weights)
    # keeps the ratio a little above one half
    assert 0.5 < read["fp8"] / read["bf16"] < 0.56
    bf16, fp8 = (CostModel(hw, spec, precision=p).forward_time(1, 1, 512)
                 for p in ("bf16", "fp8"))
    assert fp8 < bf16


def test_fp8_gemms_run_at_the_fp8_peak_with_the_block_scale_flops():
    spec = get_model("llama-3.1-8b")
    bf16, fp8 = (forward_ops(spec, 1, 128, 0, precision=p) for p in ("bf16", "fp8"))
    for a, b in zip(bf16, fp8, strict=True):
        if a.op == "lm_head" or a.kind != "linear":
            assert (b.peak, b.flops, b.weight_bytes) == ("bf16", a.flops, a.weight_bytes)
        else:
            assert b.peak == "fp8" and b.flops == pytest.approx(a.flops * (1 + 1 / 128))
            assert b.weight_bytes == pytest.approx(a.weight_bytes / 2 * (1 + 4 / 128**2))


def test_nvfp4_refused_on_h100_and_fp8_on_a100():
    spec = get_model("llama-3.1-8b")
    with pytest.raises(InputError, match=r"--precision nvfp4: profile h100 has no fp4"):
        CostModel(load_profile("h100"), spec, precision="nvfp4")
    with pytest.raises(InputError, match=r"--precision fp8: profile a100 has no fp8"):
        CostModel(load_profile("a100"), spec, precision="fp8")
    with pytest.raises(InputError, match="--precision fp8"):
        CostModel(load_profile("cpu-2core"), spec, precision="fp8")


def test_low_precision_with_weight_only_quantisation_or_int8_activations_is_refused():
    hw, spec = load_profile("h100"), get_model("llama-3.1-8b")
    with pytest.raises(InputError, match="weight-only quantisation"):
        CostModel(hw, spec, weight_bits=4, precision="fp8")
    with pytest.raises(InputError, match="8-bit integer activations"):
        CostModel(hw, spec, act_bits=8, precision="fp8")
    with pytest.raises(InputError, match="--precision 'fp6'"):
        CostModel(hw, spec, precision="fp6")


def test_nvfp4_on_b200_and_experts_alone():
    hw = load_profile("b200")
    assert hw.peak_flops["fp4"] == 9000e12 and hw.peak_flops["fp8"] == 4500e12
    dense = get_model("llama-3.1-8b")
    times = {p: CostModel(hw, dense, precision=p).forward_time(1, 1, 512)
             for p in ("bf16", "fp8", "nvfp4")}
    assert times["nvfp4"] < times["fp8"] < times["bf16"]
    moe = get_model("qwen3-30b-a3b")
    experts = CostModel(hw, moe, precision="bf16", expert_precision="nvfp4")
    ops = {op.op: op for op in experts.ops(4, 8, 512)}
    assert ops["expert_gate_up"].peak == "fp4" and ops["qkv_proj"].peak == "bf16"
    assert experts.memory_bytes(1, 0) < CostModel(hw, moe).memory_bytes(1, 0)
    # the measured tables are bf16 runs: a low precision prices from the formula
    assert experts.forward(4, 8, 512).source == "roofline"


def test_expert_precision_on_a_dense_model_is_refused():
    with pytest.raises(InputError, match=r"--expert-precision nvfp4: llama-3\.1-8b is dense"):
        CostModel(load_profile("b200"), get_model("llama-3.1-8b"), expert_precision="nvfp4")


def test_variant_and_under_keep_the_formats():
    model = CostModel(load_profile("b200"), get_model("qwen3-30b-a3b"), precision="fp8",
                      expert_precision="nvfp4", kv_bits=8)
    for other in (model.variant(CostModel), model.under(runtime="eager")):
        assert (other.precision, other.expert_precision, other.kv_bits) == ("fp8", "nvfp4", 8)


@pytest.mark.parametrize("name", NEW)
def test_new_profile_loads_and_prices_llama(name):
    hw = load_profile(name)
    assert hw.name == name and hw.sources and hw.assumed
    assert all(text.startswith("assumed:") for text in hw.assumed.values())
    for params in hw.runtimes.values():
        assert "scaled from h100" in params.origin and "not measured" in params.origin
    model = CostModel(hw, get_model("llama-3.1-8b"))
    for new, context in ((1, 512), (16, 512), (128, 0)):
        t = float(model.forward_time(1, new, context))
        assert t > 0 and math.isfinite(t)
    # batch-1 decode streams 16 GB of bf16 weights: no faster than the datasheet bandwidth
    assert model.forward_time(1, 1, 512) > 16.06e9 / hw.bandwidth
    assert hw.peak_flops["fp4"] == (9000e12 if name == "b200" else 0.0)
