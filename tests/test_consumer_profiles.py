"""The rtx-3090 and core-ultra profiles: they load, cite sources, and price a step sensibly."""

import math

import pytest

from specscope.hw_profiles import CostModel, list_profiles, load_profile
from specscope.models import get_model

ADDED = ["rtx-3090", "core-ultra"]


@pytest.mark.parametrize("name", ADDED)
def test_profile_loads_with_its_datasheet_facts_and_sources(name):
    assert name in list_profiles()
    hw = load_profile(name)
    assert hw.name == name and hw.sources and hw.default_runtime in hw.runtimes
    assert hw.peak_flops["bf16"] > 0 and hw.bandwidth > 0 and hw.memory_bytes > 0
    for params in hw.runtimes.values():
        assert params.engine and "not measured" in params.origin
        assert all(0 < v <= 1 for k, v in params.values().items() if k.endswith("_eff"))


def test_datasheet_numbers():
    gpu, cpu = load_profile("rtx-3090"), load_profile("core-ultra")
    assert (gpu.kind, gpu.bandwidth, gpu.memory_bytes) == ("gpu", 936e9, 24e9)
    assert gpu.peak_flops["bf16"] == 71e12 and gpu.peak_flops["int8"] == 284e12
    assert gpu.peak_flops["fp8"] == 0 and gpu.max_tp == 4
    assert set(gpu.runtimes) == {"eager", "graph", "compile"} and gpu.default_runtime == "graph"
    assert (cpu.kind, cpu.max_tp, cpu.link_bandwidth) == ("cpu", 1, 0)
    assert cpu.bandwidth == pytest.approx(119.5e9)
    assert cpu.peak_flops["bf16"] == pytest.approx(6 * 4.8e9 * 32)
    assert cpu.speculation_step_s > 0 and cpu.drafter_s["ngram"] > 0


@pytest.mark.parametrize(("name", "runtime"), [
    ("rtx-3090", "eager"), ("rtx-3090", "graph"), ("rtx-3090", "compile"),
    ("core-ultra", "eager"), ("core-ultra", "compile"),
])
def test_batch1_forward_of_llama3_8b_is_positive_and_finite(name, runtime):
    model = CostModel(load_profile(name), get_model("llama-3-8b"), runtime=runtime)
    for new, context in ((1, 512), (16, 512), (128, 0)):
        t = float(model.forward(1, new, context).time_s)
        assert t > 0 and math.isfinite(t)
    assert model.report(1, 1, 512)["fits"] is True


def test_rtx3090_decodes_4bit_llama3_8b_faster_than_16bit():
    hw, spec = load_profile("rtx-3090"), get_model("llama-3-8b")
    t16 = float(CostModel(hw, spec, weight_bits=16).forward(1, 1, 512).time_s)
    t4 = float(CostModel(hw, spec, weight_bits=4).forward(1, 1, 512).time_s)
    assert t4 < t16
    # bf16 decode streams 16 GB of weights: no faster than the 936 GB/s datasheet allows
    assert t16 > 16.06e9 / 936e9
