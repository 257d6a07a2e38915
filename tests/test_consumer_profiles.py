"""The rtx-3090, core-ultra, rtx-4090, l40, a100-40gb and a100-pcie profiles: they load, cite
sources, and price a step sensibly."""

import math

import pytest

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, list_profiles, load_profile
from specscope.hw_profiles.cost_report import cost_report
from specscope.models import get_model

ADDED = ["rtx-3090", "core-ultra", "rtx-4090", "l40", "a100-40gb", "a100-pcie"]
DATASHEET_GPUS = ["rtx-4090", "l40", "a100-40gb", "a100-pcie"]


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
    assert cpu.loop.step > 0 and cpu.loop.drafter["ngram"] > 0


@pytest.mark.parametrize(("name", "runtime"), [
    ("rtx-3090", "eager"), ("rtx-3090", "graph"), ("rtx-3090", "compile"),
    ("core-ultra", "eager"), ("core-ultra", "compile"),
    *((name, "graph") for name in DATASHEET_GPUS),
])
def test_batch1_forward_of_llama3_8b_is_positive_and_finite(name, runtime):
    model = CostModel(load_profile(name), get_model("llama-3-8b"), runtime=runtime)
    for new, context in ((1, 512), (16, 512), (128, 0)):
        t = float(model.forward(1, new, context).time_s)
        assert t > 0 and math.isfinite(t)
    assert cost_report(model, 1, 1, 512)["fits"] is True


def test_rtx3090_decodes_4bit_llama3_8b_faster_than_16bit():
    hw, spec = load_profile("rtx-3090"), get_model("llama-3-8b")
    t16 = float(CostModel(hw, spec, weight_bits=16).forward(1, 1, 512).time_s)
    t4 = float(CostModel(hw, spec, weight_bits=4).forward(1, 1, 512).time_s)
    assert t4 < t16
    # bf16 decode streams 16 GB of weights: no faster than the 936 GB/s datasheet allows
    assert t16 > 16.06e9 / 936e9


@pytest.mark.parametrize(("name", "bf16", "int8", "fp8", "memory", "bandwidth", "link", "max_tp"), [
    # Ada whitepaper Appendix A: FP32-accumulate rates, half the FP16-accumulate ones on GeForce
    ("rtx-4090", 165.2e12, 660.6e12, 330.3e12, 24e9, 1008e9, 31.5e9, 4),
    ("l40", 181.05e12, 362e12, 362e12, 48e9, 864e9, 31.5e9, 8),  # L40 datasheet
    ("a100-40gb", 312e12, 624e12, 0, 40e9, 1555e9, 300e9, 8),  # A100 datasheet, 40GB SXM
    ("a100-pcie", 312e12, 624e12, 0, 80e9, 1935e9, 31.5e9, 8),  # A100 datasheet, 80GB PCIe
])
def test_datasheet_gpu_numbers(name, bf16, int8, fp8, memory, bandwidth, link, max_tp):
    hw = load_profile(name)
    assert hw.kind == "gpu" and hw.default_runtime == "graph"
    assert set(hw.runtimes) == {"eager", "graph", "compile"}
    assert (hw.peak_flops["bf16"], hw.peak_flops["int8"], hw.peak_flops["fp8"]) == (bf16, int8, fp8)
    assert (hw.memory_bytes, hw.bandwidth) == (memory, bandwidth)
    assert (hw.link_bandwidth, hw.max_tp) == (link, max_tp)
    # the graph runtime is h100's fit applied to the datasheet, as rtx-3090's is
    assert hw.runtimes["graph"].values() == load_profile("rtx-3090").runtimes["graph"].values()


def test_the_a100_variants_keep_the_a100_dequantisation_fit():
    a100 = load_profile("a100")
    for name in ("a100-40gb", "a100-pcie"):
        assert load_profile(name).dequant_s_per_weight == a100.dequant_s_per_weight


def test_llama31_8b_batch1_graph_step_is_ordered_by_memory_bandwidth():
    spec = get_model("llama-3.1-8b")

    def step(name):
        return float(CostModel(load_profile(name), spec, runtime="graph").forward(1, 1, 512).time_s)

    # 1,935 > 1,555 > 1,008 > 864 GB/s: a bf16 decode step streams the same 16 GB on each
    times = [step(name) for name in ("a100-pcie", "a100-40gb", "rtx-4090", "l40")]
    assert times == sorted(times)
    floors = [16.06e9 / bw for bw in (1935e9, 1555e9, 1008e9, 864e9)]
    assert all(t > floor for t, floor in zip(times, floors, strict=True))


def test_an_a100_pcie_all_reduce_is_slower_than_over_the_sxm4_nvlink():
    spec = get_model("llama-2-7b")

    def step(name):
        return float(CostModel(load_profile(name), spec, runtime="graph", tp=2)
                     .forward(8, 1, 512).time_s)

    assert load_profile("a100-pcie").link_bandwidth < load_profile("a100").link_bandwidth
    assert step("a100-pcie") > step("a100")
    with pytest.raises(InputError):
        CostModel(load_profile("rtx-4090"), spec, tp=8)
