"""The cost model: runtimes, calibration against gpt-fast and the H100 rows, bounds,
quantisation, TP, SSM trees, tree attention, profiles found by name."""

import dataclasses

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, MeasuredTable, list_profiles, load_profile
from specscope.hw_profiles.cost import CUSTOM_MASK_SLOWDOWN
from specscope.hw_profiles.cost_report import cost_report
from specscope.hw_profiles.profile import PROFILE_DIR_ENV, profile_path, with_runtime
from specscope.models import get_model
from specscope.profiling.fit import (
    A100_FIELDS,
    GPTFAST_A100,
    H100_STEPS,
    a100_start,
    current_values,
    fit,
    fit_h100,
    load_published,
    load_steps,
    predict_tokens_per_s,
    step_errors,
    write_params,
    write_runtime,
)
from specscope.profiling.fit import main as fit_main

PROFILES = ["a100", "h100", "h200", "gaudi2", "tpu-v5e", "tpu-v4", "cpu-2core"]
GPTFAST = load_published(GPTFAST_A100)


def cost(model="llama-2-7b", hw="a100", **kw):
    return CostModel(load_profile(hw), get_model(model), **kw)


def test_every_builtin_profile_loads_and_cites_its_sources():
    assert set(PROFILES) <= set(list_profiles())
    for name in PROFILES:
        hw = load_profile(name)
        assert hw.name == name and hw.sources
        assert hw.peak_flops["bf16"] > 0 and hw.bandwidth > 0
        assert hw.default_runtime in hw.runtimes and hw.kind in ("gpu", "cpu")
        for params in hw.runtimes.values():
            assert params.engine and params.origin
            assert all(0 < v <= 1 for k, v in params.values().items() if k.endswith("_eff"))
    assert load_profile("h200").memory_bytes == 141e9
    assert load_profile("a100").link_bandwidth == 300e9


@pytest.mark.parametrize("row", [r for r in GPTFAST if r.tokens_per_s],
                         ids=lambda r: f"{r.model}-w{r.weight_bits}-tp{r.tp}")
def test_cost_model_reproduces_every_gptfast_row_within_10_percent(row):
    assert predict_tokens_per_s(load_profile("a100"), row) == pytest.approx(
        row.tokens_per_s, rel=0.10)


def test_llama2_70b_bf16_does_not_fit_one_a100_but_int8_and_tp2_do():
    (oom,) = [r for r in GPTFAST if r.tokens_per_s is None]
    assert (oom.model, oom.weight_bits, oom.tp) == ("llama-2-70b", 16, 1)
    assert cost_report(cost("llama-2-70b"), 1, 1, oom.context)["fits"] is False
    assert cost_report(cost("llama-2-70b", weight_bits=8), 1, 1, oom.context)["fits"] is True
    assert cost_report(cost("llama-2-70b", tp=2), 1, 1, oom.context)["fits"] is True


def test_refitting_reproduces_the_stored_a100_parameters():
    stored = load_profile("a100")
    refit = fit(a100_start(), GPTFAST)
    for name, value in current_values(stored, "compile", A100_FIELDS).items():
        assert refit[name] == pytest.approx(value, rel=0.02, abs=0.5 if "us" in name else 1e-3)


def test_batch1_decode_is_memory_bound_and_long_forwards_compute_bound():
    model = cost(hw="h100")
    small = {op["op"]: op["bound"] for op in cost_report(model, 1, 1, 512)["operators"]}
    large = {op["op"]: op["bound"] for op in cost_report(model, 1, 768, 512)["operators"]}
    for op in ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down", "lm_head"):
        assert small[op] == "memory" and large[op] == "compute"


def test_time_grows_with_new_tokens_context_and_batch():
    model = cost(hw="h100")
    t = model.forward_time(1, np.arange(1, 769), 512)
    assert np.all(np.diff(t) >= 0) and t[-1] > 2 * t[0]
    assert model.forward_time(1, 1, 4096) > model.forward_time(1, 1, 128)
    assert model.forward_time(8, 1, 2048) > model.forward_time(1, 1, 2048)


def test_vectorised_forward_matches_scalar_calls():
    model = cost("bamba-9b", hw="h200", weight_bits=4)
    n = np.array([1, 3, 17, 64, 300])
    vector = model.forward_time(2, n, 1000)
    assert vector.shape == n.shape
    assert vector == pytest.approx([model.forward_time(2, int(k), 1000) for k in n])


@pytest.mark.parametrize("hw", PROFILES)
def test_fewer_weight_bits_lower_the_batch1_step_time(hw):
    t = [cost(hw=hw, weight_bits=b).forward_time(1, 1, 512) for b in (16, 8, 4)]
    assert t[0] > t[1] > t[2]


def test_dequantisation_erodes_the_4bit_advantage_on_large_trees():
    bf16, int4 = cost(weight_bits=16), cost(weight_bits=4)
    gain_1 = bf16.forward_time(1, 1, 512) / int4.forward_time(1, 1, 512)
    gain_64 = bf16.forward_time(1, 64, 512) / int4.forward_time(1, 64, 512)
    assert gain_1 > 1.5 and gain_64 < gain_1
    assert cost_report(int4, 1, 64, 512)["dequant_ms"] > cost_report(int4, 1, 1, 512)["dequant_ms"]


def test_tensor_parallel_adds_two_ring_all_reduces_per_layer():
    hw = load_profile("a100")
    spec = get_model("llama-2-70b")
    t = {k: CostModel(hw, spec, tp=k).forward_time(1, 1, 205) for k in (2, 4, 8)}
    assert t[2] > t[4] > t[8]
    model = CostModel(hw, spec, tp=4)
    message = 1 * spec.d_model * 2
    expected = 2 * spec.n_layers * (hw.allreduce_latency_s + 2 * 3 / 4 * message / 300e9)
    assert cost_report(model, 1, 1, 205)["comm_ms"] == pytest.approx(expected * 1e3)
    assert cost_report(cost("llama-2-70b", weight_bits=8), 1, 1, 205)["comm_ms"] == 0


def measured_profile(context=512, tp=1):
    table = MeasuredTable(model="llama-2-7b", batch=1, context=context,
                          new_tokens=np.array([1.0, 8.0, 32.0]),
                          time_s=np.array([0.020, 0.024, 0.040]), tp=tp)
    return dataclasses.replace(load_profile("a100"), measured=(table,))


def test_measured_points_win_and_the_roofline_fills_the_gaps():
    model = CostModel(measured_profile(), get_model("llama-2-7b"))
    step = model.forward(1, np.array([1, 4, 8, 32, 64]), 512)
    assert step.time_s[[0, 2, 3]] == pytest.approx([0.020, 0.024, 0.040])
    assert step.time_s[1] == pytest.approx(0.020 + 3 / 7 * 0.004, rel=0.01)
    assert list(step.source) == ["measured"] * 4 + ["roofline"]
    roof = model.roofline_time(1, np.array([32, 64]), 512)
    assert step.time_s[4] == pytest.approx(0.040 * roof[1] / roof[0])
    assert model.forward(1, 1, 512).source == "measured"
    other = cost()
    assert other.forward(1, 1, 512).source == "roofline"
    assert other.forward_time(1, 1, 512) < 0.015


def test_an_unpriced_table_leaves_the_step_to_the_roofline() -> None:
    unpriced = dataclasses.replace(measured_profile().measured[0], priced=False)
    hw = dataclasses.replace(load_profile("a100"), measured=(unpriced,))
    model = CostModel(hw, get_model("llama-2-7b"))
    assert model.forward(1, 8, 512).source == "roofline"
    assert model.forward_time(1, 8, 512) == cost().forward_time(1, 8, 512)


def test_measured_table_is_scaled_by_the_roofline_for_another_context():
    model = CostModel(measured_profile(context=512), get_model("llama-2-7b"))
    ratio = model.roofline_time(1, 8, 4096) / model.roofline_time(1, 8, 512)
    assert model.forward_time(1, 8, 4096) == pytest.approx(0.024 * ratio)


def test_measured_table_applies_only_to_its_model_batch_bits_and_tp():
    hw = measured_profile()
    assert CostModel(hw, get_model("llama-2-7b"), weight_bits=8).forward(1, 1, 512).source \
        == "roofline"
    assert CostModel(hw, get_model("llama-2-13b")).forward(1, 1, 512).source == "roofline"
    assert CostModel(hw, get_model("llama-2-7b")).forward(2, 1, 512).source == "roofline"


def test_measured_tables_load_from_a_profile_file(tmp_path):
    text = profile_path("a100").read_text()
    good = tmp_path / "mine.toml"
    good.write_text(text + '\n[[measured]]\nmodel = "llama-2-7b"\nbatch = 1\ncontext = 512\n'
                    'new_tokens = [1, 2, 4]\ntime_ms = [9.5, 9.6, 9.8]\n')
    hw = load_profile(good)
    assert hw.measured[0].time_s == pytest.approx([0.0095, 0.0096, 0.0098])
    assert CostModel(hw, get_model("llama-2-7b")).forward_time(1, 2, 512) == pytest.approx(0.0096)
    bad = tmp_path / "bad.toml"
    bad.write_text(text + '\n[[measured]]\nmodel = "llama-2-7b"\nnew_tokens = [4, 2]\n'
                   'time_ms = [9.5, 9.6]\n')
    with pytest.raises(InputError, match=r"bad\.toml.*measured"):
        load_profile(bad)
    unpriced = tmp_path / "unpriced.toml"
    unpriced.write_text(good.read_text() + "priced = false\n")
    assert not load_profile(unpriced).measured[0].priced
    odd = tmp_path / "odd.toml"
    odd.write_text(good.read_text() + 'priced = "no"\n')
    with pytest.raises(InputError, match=r"odd\.toml.*priced must be true or false"):
        load_profile(odd)


@pytest.mark.parametrize("model", ["mamba2-2.7b", "bamba-9b"])
def test_naive_ssm_verification_costs_more_than_stree_on_bushy_trees(model):
    cm = cost(model, hw="h100")
    for n, depth, leaves in [(64, 6, 32), (32, 3, 20), (128, 8, 64)]:
        naive = cm.verify_time(n, 1024, depth=depth, leaves=leaves, ssm_verify="naive")
        assert naive > 1.1 * cm.verify_time(n, 1024)  # per-layer device time is common to both
    chain_naive = cm.verify_time(8, 1024, depth=7, leaves=1, ssm_verify="naive")
    assert chain_naive == pytest.approx(cm.verify_time(8, 1024), rel=0.05)


def test_transformer_verification_is_one_forward_over_the_tree():
    cm = cost(hw="h100")
    assert cm.verify_time(64, 512) == cm.forward_time(1, 64, 512)
    sizes = np.array([1, 16, 64])
    assert cm.verify_time(sizes, 512) == pytest.approx(cm.forward_time(1, sizes, 512))


def test_report_lists_operators_memory_and_source():
    report = cost_report(cost("llama-3.1-8b", hw="h200"), 4, 16, 1000)
    assert report["source"] == "roofline" and report["fits"] is True
    assert report["step_time_ms"] == pytest.approx(report["roofline_ms"])
    parts = sum(op["time_ms"] for op in report["operators"])
    parts += report["overhead_ms"] + report["dequant_ms"] + report["comm_ms"]
    assert parts == pytest.approx(report["step_time_ms"])
    assert {op["bound"] for op in report["operators"]} <= {"memory", "compute"}
    assert report["memory_gb"] == pytest.approx((16.06e9 + 4 * 1016 * 131072) / 1e9, rel=1e-3)


@pytest.mark.parametrize("make", [
    lambda: load_profile("b300"),
    lambda: load_profile("missing.toml"),
    lambda: cost(weight_bits=6),
    lambda: cost(tp=0),
    lambda: cost(tp=16),
    lambda: cost(hw="cpu-2core", tp=2),
    lambda: cost(runtime="jit"),
    lambda: cost(hw="tpu-v4", runtime="eager"),
    lambda: cost(tree_attention="flex"),
    lambda: cost().forward_time(0, 1, 10),
    lambda: cost().forward_time(1, 0, 10),
    lambda: cost().forward_time(1, 1, -1),
    lambda: cost("mamba2-2.7b").verify_time(8, 10, ssm_verify="tree"),
    lambda: cost("mamba2-2.7b").verify_time(8, 10, ssm_verify="naive"),
    lambda: cost("mamba2-2.7b").verify_time(8, 10, depth=9, leaves=1, ssm_verify="naive"),
    lambda: cost("mamba2-2.7b").verify_time(8, 10, depth=2, leaves=2, ssm_verify="naive"),
])
def test_bad_inputs_raise_input_error(make):
    with pytest.raises(InputError):
        make()


def test_fit_script_prints_every_published_row(capsys):
    fit_main(["a100"])
    out = capsys.readouterr().out
    assert "gemv_memory_eff" in out and "out of memory" in out
    assert out.count("llama-2-70b") == 6


def test_writing_fitted_values_keeps_the_profile_loadable(tmp_path):
    path = tmp_path / "a100.toml"
    path.write_text(profile_path("a100").read_text())
    write_params(path, {"int4_ps_per_weight": 0.25})
    changed = with_runtime(load_profile(path), "graph", step_us=123.0, blend=3.0)
    write_runtime(path, changed.runtime("graph"))
    hw = load_profile(path)
    assert hw.runtime("graph").step_s == pytest.approx(123e-6) and hw.runtime("graph").blend == 3
    assert hw.runtime("compile") == load_profile("a100").runtime("compile")
    assert hw.dequant_s_per_weight[4] == pytest.approx(0.25e-12)
    assert "# fitted (see header)" in path.read_text()


# ---- runtimes, tree attention and the H100 rows --------------------------------------------------

H100_ROWS = load_steps(H100_STEPS)


def _errors(rows, runtime=None):
    return np.abs([e for *_, e in step_errors(load_profile("h100"), rows, runtime)])


def test_h100_graph_runtime_matches_the_shared_verify_rows():
    errors = _errors([r for r in H100_ROWS if (r.phase, r.runtime) == ("verify", "graph")])
    assert errors.size == 45 and np.median(errors) <= 0.05 and errors.max() <= 0.12


def test_h100_eager_runtime_matches_the_shared_verify_rows_within_their_noise():
    errors = _errors([r for r in H100_ROWS if (r.phase, r.runtime) == ("verify", "eager")])
    assert errors.size == 45 and np.median(errors) <= 0.15


def test_h100_prefill_has_its_own_terms_and_matches_the_prefill_rows():
    errors = _errors([r for r in H100_ROWS if r.phase == "prefill"])
    assert errors.size == 8 and errors.max() <= 0.15
    eager = load_profile("h100").runtime("eager")
    assert eager.prefill_host_layer_s != eager.host_layer_s


def test_refitting_the_h100_rows_reproduces_the_stored_runtimes():
    stored = load_profile("h100")
    refit = fit_h100(stored, H100_ROWS)
    for name in ("eager", "graph", "compile"):
        for key, value in stored.runtime(name).values().items():
            assert refit.runtime(name).values()[key] == pytest.approx(value, rel=1e-3, abs=1e-6)


def test_the_runtime_moves_a_step_as_on_the_h100():
    eager, graph, compiled = (cost("llama-3.1-8b", hw="h100", runtime=r).forward_time(1, 1, 2048)
                              for r in ("eager", "graph", "compile"))
    assert eager > 2 * graph and graph > 1.3 * compiled  # measured: 22-41, 8.6 and 6.0 ms
    assert compiled == pytest.approx(6.0e-3, rel=0.01)
    draft = [cost("llama-68m", hw="h100", runtime=r).forward_time(1, 1, 256)
             for r in ("eager", "graph")]
    assert draft[0] > 5 * draft[1]
    assert cost(hw="h100").runtime.name == "graph" and cost(hw="a100").runtime.name == "compile"


def test_dense_tree_attention_costs_more_at_long_context_only_for_several_tokens():
    split, dense = (cost("llama-3.1-8b", hw="h100", tree_attention=a) for a in ("split", "dense"))
    assert dense.forward_time(1, 64, 8192) > 1.3 * split.forward_time(1, 64, 8192)
    assert dense.forward_time(1, 64, 256) == pytest.approx(split.forward_time(1, 64, 256),
                                                           rel=0.05)
    assert dense.forward_time(1, 1, 8192) == pytest.approx(split.forward_time(1, 1, 8192),
                                                           rel=0.01)


def _attention_s(model: CostModel, batch: int, new: int, context: int) -> float:
    """Device seconds of a forward's attention operators."""
    ops = [op for op in model.ops(batch, new, context) if op.kind == "attention"]
    return sum(float(np.sum(model.op_time(op, new, context)[0])) for op in ops)


@pytest.mark.parametrize(("batch", "new", "context", "ratio"), [
    (64, 7, 900, CUSTOM_MASK_SLOWDOWN),  # a tree under FlashInfer's custom mask
    (1, 22, 4096, CUSTOM_MASK_SLOWDOWN),
    (64, 1, 900, 1.0),                   # plain decoding: no mask
    (4, 512, 0, 1.0),                    # a prompt: the causal flash kernel
])
def test_masked_attention_is_the_flash_kernels_slowed_by_the_custom_mask(
        batch: int, new: int, context: int, ratio: float) -> None:
    split, masked = (cost("qwen3-8b", hw="h100", tree_attention=a) for a in ("split", "masked"))
    assert _attention_s(masked, batch, new, context) == pytest.approx(
        ratio * _attention_s(split, batch, new, context), rel=1e-12)
    others = (masked.forward_time(batch, new, context) - split.forward_time(batch, new, context))
    assert others == pytest.approx((ratio - 1) * _attention_s(split, batch, new, context),
                                   rel=1e-9, abs=1e-12)


def test_a_gpu_overlaps_host_and_device_and_a_cpu_adds_them():
    gpu = load_profile("h100")
    cpu = dataclasses.replace(gpu, kind="cpu")
    spec = get_model("llama-68m")
    host = CostModel(gpu, spec, runtime="eager").host_time(256)
    device_bound = CostModel(gpu, spec, runtime="graph")
    both = CostModel(cpu, spec, runtime="eager").forward_time(1, 1, 256)
    assert CostModel(gpu, spec, runtime="eager").forward_time(1, 1, 256) == pytest.approx(host)
    assert device_bound.host_time(256) < device_bound.forward_time(1, 1, 256)  # device-bound
    assert both == pytest.approx(host + device_bound.forward_time(1, 1, 256), rel=1e-6)


def test_user_profiles_are_found_by_name_before_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path))
    text = profile_path("h100").read_text().replace('name = "h100"', 'name = "mine"')
    (tmp_path / "mine.toml").write_text(text)
    assert load_profile("mine").name == "mine" and "mine" in list_profiles()
    with pytest.raises(InputError, match="unknown hardware profile"):
        load_profile("../mine")


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('default_runtime = "graph"', 'default_runtime = "jit"'),
     "default_runtime"),
    (lambda t: t.replace("[runtime.eager]", "[runtime.lazy]"), "unknown runtime"),
    (lambda t: t.replace("blend = ", "blend = 99 #", 1), "blend"),
    (lambda t: t.replace("gemv_memory_eff = ", "gemv_memory_eff = 1.5 #", 1), "gemv_memory_eff"),
    (lambda t: t.replace("layer_us = ", "layer_usx = ", 1), "unknown key .*layer_usx"),
    (lambda t: t.replace('kind = "gpu"', 'kind = "fpga"'), "kind"),
])
def test_bad_runtime_sections_name_the_file_and_field(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(edit(profile_path("h100").read_text()))
    with pytest.raises(InputError, match=message):
        load_profile(path)
