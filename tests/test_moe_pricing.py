"""Mixture-of-experts, latent-attention and sliding-window pricing (issue 41): the routing law,
expert reads that grow with the step's tokens, the host issue of an eager MoE's router and
experts (none under graphs), expert parallelism, MLA's cache and the parameter counts of
Mixtral-8x7B and DeepSeek-V3 shapes."""

import dataclasses
import json

import numpy as np
import pytest
from test_guards import refused

from specscope.errors import InputError
from specscope.hw_profiles.cost import CostModel
from specscope.hw_profiles.profile import load_profile
from specscope.models.moe_ops import (
    EXPERT_HOST_LAYERS,
    ROUTER_HOST_LAYERS,
    expected_experts,
    moe_host_layers,
    touched_experts,
)
from specscope.models.ops import (
    ACT_BYTES,
    active_param_count,
    forward_ops,
    kv_bytes_per_token,
    kv_cache_bytes,
    param_count,
    weight_bytes,
)
from specscope.models.spec import ModelSpec

MIXTRAL = ModelSpec(name="mixtral-shape", arch="transformer", n_layers=32, d_model=4096,
                    vocab_size=32000, n_heads=32, n_kv_heads=8, head_dim=128, n_experts=8,
                    experts_per_token=2, d_expert=14336)
DENSE_12B = dataclasses.replace(MIXTRAL, name="dense-shape", n_experts=0, experts_per_token=0,
                                d_expert=0, d_ff=2 * 14336)
DEEPSEEK_V3 = ModelSpec(name="deepseek-v3-shape", arch="transformer", n_layers=61, d_model=7168,
                        vocab_size=129280, n_heads=128, n_kv_heads=128, head_dim=192,
                        d_ff=18432, n_experts=256, experts_per_token=8, d_expert=2048,
                        d_shared=2048, first_dense_layers=3, kv_lora_rank=512,
                        q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64,
                        v_head_dim=128, mtp_layers=1)
SIX_EXPERTS = dataclasses.replace(MIXTRAL, name="six-experts", n_experts=6)
SLIDING = dataclasses.replace(DENSE_12B, name="sliding-shape", n_layers=4, sliding_window=128,
                              sliding_layers=(0, 2))


def by_name(ops):
    return {op.op: op for op in ops}


def test_expected_experts_runs_from_k_at_one_token_to_all_experts():
    tokens = np.arange(1, 2001)
    touched = expected_experts(256, 8, tokens)
    assert touched[0] == pytest.approx(8)
    assert touched[-1] == pytest.approx(256)
    assert np.all(np.diff(touched) >= 0) and np.all(np.diff(touched[:200]) > 0)
    assert expected_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))


def test_routing_skew_touches_fewer_experts_with_the_same_limits():
    tokens = np.array([1, 4, 16, 64, 100_000])
    uniform = expected_experts(64, 4, tokens)
    assert np.array_equal(expected_experts(64, 4, tokens, skew=0.0), uniform)
    skewed = expected_experts(64, 4, tokens, skew=1.2)
    assert skewed[0] == pytest.approx(4) and skewed[-1] == pytest.approx(64)
    assert np.all(skewed[1:-1] < uniform[1:-1])
    with pytest.raises(InputError):
        expected_experts(64, 4, 3, skew=-1.0)


def test_routed_expert_reads_follow_the_coverage_law():
    expert = 3 * 4096 * 14336 * 2  # bytes of one expert at 16 bits
    for tokens, experts in ((1, 2), (10_000, 8)):
        ops = by_name(forward_ops(MIXTRAL, 1, tokens, 100))
        read = ops["expert_gate_up"].weight_bytes + ops["expert_down"].weight_bytes
        assert read == pytest.approx(32 * experts * expert, rel=1e-9)
        flops = ops["expert_gate_up"].flops + ops["expert_down"].flops
        assert flops == pytest.approx(32 * tokens * 2 * 2 * 3 * 4096 * 14336)
    ops = by_name(forward_ops(MIXTRAL, 1, 1, 100))
    assert ops["router"].weight_bytes == 32 * 4096 * 8 * ACT_BYTES
    assert "mlp_gate_up" not in ops


def test_moe_step_cost_grows_with_new_tokens_where_a_dense_models_does_not():
    hw = load_profile("h100")
    ratios = {}
    for spec in (MIXTRAL, DENSE_12B):
        cost = CostModel(hw, spec, tp=2)
        ratios[spec.name] = cost.forward_time(1, 16, 512) / cost.forward_time(1, 1, 512)
    assert active_param_count(MIXTRAL) == pytest.approx(param_count(DENSE_12B), rel=0.01)
    assert ratios["dense-shape"] < 1.3
    assert ratios["mixtral-shape"] > 2.5
    assert ratios["mixtral-shape"] > 2 * ratios["dense-shape"]


def test_an_eager_moe_issues_its_router_and_touched_experts_from_the_host():
    hw = load_profile("cpu-2core")
    small = dataclasses.replace(MIXTRAL, name="small-moe", n_layers=4, d_model=256, n_heads=4,
                                n_kv_heads=4, head_dim=64, n_experts=16, d_expert=344)
    cost = CostModel(hw, small, runtime="eager")
    r = cost.runtime
    n = np.array([1, 4, 32])
    per_layer = ROUTER_HOST_LAYERS + EXPERT_HOST_LAYERS * expected_experts(16, 2, 4 * n)
    np.testing.assert_allclose(cost.moe_host_time(4, n, 128),
                               4 * per_layer * r.host_layer_s / hw.host_speed, rtol=1e-12)
    np.testing.assert_allclose(moe_host_layers(small, 4, 4 * n), 4 * per_layer, rtol=1e-12)
    assert cost.moe_host_time(1, 8, 0) == pytest.approx(
        4 * (ROUTER_HOST_LAYERS + EXPERT_HOST_LAYERS * expected_experts(16, 2, 8))
        * r.prefill_host_layer_s / hw.host_speed)  # a prompt: the prefill host time per layer
    _, terms = cost.roofline_terms(1, 8, 128)
    assert terms["host"] == pytest.approx(cost.host_time(128) + cost.moe_host_time(1, 8, 128))
    dense = CostModel(hw, dataclasses.replace(small, n_experts=0, experts_per_token=0,
                                              d_expert=0, d_ff=688), runtime="eager")
    assert dense.moe_host_time(4, 8, 128) == 0


@pytest.mark.parametrize(("profile", "runtime"), [("h200", "graph"), ("h200", "compile"),
                                                  ("cpu-2core", "compile")])
def test_graphs_and_compiled_steps_issue_no_per_expert_host_work(profile, runtime):
    cost = CostModel(load_profile(profile), DEEPSEEK_V3, runtime=runtime, tp=1, weight_bits=4)
    n = np.arange(1, 65)
    assert np.all(cost.moe_host_time(8, n, 4096) == 0)
    _, terms = cost.roofline_terms(8, n, 4096)
    device = sum(seconds for _, seconds, _ in cost.roofline_terms(8, n, 4096)[0]) + sum(
        v for k, v in terms.items() if k != "host")
    host = cost.host_time(4096) + cost.batch_host_time(8)
    expected = np.maximum(host - device, 0.0) if cost.hw.kind == "gpu" else host
    np.testing.assert_allclose(terms["host"], expected, rtol=1e-12)


def test_ep_1_is_the_unparallel_pricing_and_ep_spreads_experts_over_all_to_alls():
    hw = load_profile("h100")
    n = np.arange(1, 65)
    plain = CostModel(hw, MIXTRAL, tp=2)
    one = CostModel(hw, MIXTRAL, tp=2, ep=1)
    np.testing.assert_allclose(one.forward_time(4, n, 1000), plain.forward_time(4, n, 1000),
                               rtol=1e-12, atol=0)
    spread = by_name(forward_ops(MIXTRAL, 4, 8, 1000, tp=2, ep=2))
    split = by_name(forward_ops(MIXTRAL, 4, 8, 1000, tp=2))
    tokens = 32
    assert spread["expert_gate_up"].weight_bytes == pytest.approx(
        split["expert_gate_up"].weight_bytes)  # half the experts, each whole
    assert spread["expert_gate_up"].a2a_bytes == pytest.approx(tokens * 2 * 4096 * 2 / 2)
    assert split["expert_gate_up"].a2a_bytes == 0
    assert spread["expert_down"].reduce_bytes == 0 < split["expert_down"].reduce_bytes
    ep2 = CostModel(hw, MIXTRAL, tp=2, ep=2)
    a2a = 2 * 32 * (hw.allreduce_latency_s + tokens * 2 * 4096 * 2 / 2 / hw.link_bandwidth)
    reduce = 32 * (hw.allreduce_latency_s + 2 * 0.5 / hw.link_bandwidth * tokens * 4096 * 2)
    comm = ep2.extras(ep2.ops(4, 8, 1000))["comm"] - plain.extras(plain.ops(4, 8, 1000))["comm"]
    assert comm == pytest.approx(a2a - reduce)


@pytest.mark.parametrize(("spec", "ep", "tp"), [(SIX_EXPERTS, 4, 4), (DENSE_12B, 2, 2),
                                                 (MIXTRAL, 4, 2), (MIXTRAL, 0, 1)])
def test_an_impossible_ep_is_refused_naming_the_option(spec, ep, tp):
    with pytest.raises(InputError, match="--ep"):
        forward_ops(spec, 1, 1, 10, tp=tp, ep=ep)


def test_mla_caches_one_latent_and_rope_key_per_token_and_layer():
    assert kv_bytes_per_token(DEEPSEEK_V3) == 61 * (512 + 64) * 2
    hw = load_profile("h100")
    one, eight = CostModel(hw, DEEPSEEK_V3, weight_bits=4), CostModel(hw, DEEPSEEK_V3, tp=8,
                                                                      weight_bits=4)
    cache = one.memory_bytes(1, 1000) - one.memory_bytes(0, 0)
    assert cache == pytest.approx(1000 * 61 * 576 * 2)
    assert eight.memory_bytes(1, 1000) - eight.memory_bytes(0, 0) == pytest.approx(8 * cache)
    ops = by_name(forward_ops(DEEPSEEK_V3, 2, 3, 1000, tp=8))
    keys, heads = 1003, 16
    assert ops["attention"].kv_bytes == pytest.approx(61 * 2 * (keys + 3) * 576 * 2)
    assert ops["attention"].flops == pytest.approx(
        61 * 2 * heads * 3 * keys * (2 * (512 + 64) + 2 * 512 + 5))
    assert ops["kv_b_absorbed"].flops == pytest.approx(61 * 6 * 2 * 512 * heads * (128 + 128))
    assert {"q_a_proj", "q_b_proj", "kv_a_proj", "o_proj"} <= set(ops)


def test_parameter_counts_of_the_published_shapes():
    assert param_count(MIXTRAL) == pytest.approx(46.7e9, rel=0.02)
    assert active_param_count(MIXTRAL) == pytest.approx(12.9e9, rel=0.02)
    # the 671B main model; the 14B multi-token-prediction module (685B on disk) is a drafter
    assert param_count(DEEPSEEK_V3) == pytest.approx(671e9, rel=0.03)
    assert active_param_count(DEEPSEEK_V3) == pytest.approx(37e9, rel=0.03)
    router = 58 * 7168 * 256
    assert weight_bytes(DEEPSEEK_V3) == 2 * param_count(DEEPSEEK_V3)
    assert weight_bytes(DEEPSEEK_V3, 8) == pytest.approx(param_count(DEEPSEEK_V3), rel=0.01)
    assert weight_bytes(DEEPSEEK_V3, 8) > param_count(DEEPSEEK_V3) + router


def test_sliding_layers_bound_their_keys_and_cache():
    near, far = (by_name(forward_ops(SLIDING, 1, 4, c)) for c in (128, 10_000))
    assert far["sliding_attention"].flops == near["sliding_attention"].flops
    assert far["sliding_attention"].kv_bytes == near["sliding_attention"].kv_bytes
    assert far["attention"].flops > near["attention"].flops
    assert far["attention"].count == far["sliding_attention"].count == 2
    row = 2 * 8 * 128 * 2
    assert kv_bytes_per_token(SLIDING) == 2 * row
    assert kv_cache_bytes(SLIDING, 10_000) == 10_000 * 2 * row + 128 * 2 * row
    assert kv_cache_bytes(SLIDING, 50) == 50 * 4 * row


def test_a_sequences_tokens_routing_alike_count_as_fewer_draws():
    tokens, rows = np.array([1.0, 4, 32, 128]), 4
    independent = expected_experts(16, 2, tokens * rows)
    np.testing.assert_array_equal(expected_experts(16, 2, tokens * rows, rows=rows,
                                                   row_exponent=1.0), independent)
    alike = expected_experts(16, 2, tokens * rows, rows=rows, row_exponent=0.5)
    # one token a row is unaffected; more tokens a row touch fewer experts, still at most E
    assert alike[0] == pytest.approx(independent[0])
    assert np.all(alike[1:] < independent[1:]) and np.all(alike <= 16)
    # rows · n^α draws: 4 rows of 16 tokens at α = 0.5 are 16 independent tokens
    assert expected_experts(16, 2, 64, rows=4, row_exponent=0.5) == pytest.approx(
        expected_experts(16, 2, 16))
    for bad in (0.0, 1.5):
        with pytest.raises(InputError, match="row exponent"):
            expected_experts(16, 2, 8, rows=1, row_exponent=bad)


def test_a_specs_routing_statistics_reach_the_expert_reads():
    small = dataclasses.replace(MIXTRAL, name="small-moe", n_layers=4, d_model=256, n_heads=4,
                                n_kv_heads=4, head_dim=64, n_experts=16, d_expert=344)
    measured = dataclasses.replace(small, routing_skew=0.5, routing_row_exponent=0.6)
    assert touched_experts(measured, 4, 32) == pytest.approx(
        expected_experts(16, 2, 32, skew=0.5, rows=4, row_exponent=0.6))
    hw = load_profile("cpu-2core")
    plain, fewer = (CostModel(hw, m, runtime="eager") for m in (small, measured))
    assert fewer.forward_time(1, 16, 128) < plain.forward_time(1, 16, 128)
    assert fewer.forward_time(1, 1, 128) == pytest.approx(plain.forward_time(1, 1, 128))


def test_the_routing_options_reach_cost_and_are_checked(cli):
    def step(*extra):
        code, out, err = cli("cost", "--hw", "h200", "--target", "qwen3-30b-a3b", "--tp", "2",
                             "--batch", "8", "--new-tokens", "8", *extra, "--json")
        assert code == 0, err
        return json.loads(out)["step_time_ms"]

    assert step("--routing-skew", "0.5", "--routing-row-exponent", "0.6") < step()
    assert step("--routing-row-exponent", "1") == step()
    refused(cli("cost", "--hw", "h200", "--target", "llama-3.1-8b", "--routing-skew", "0.5"),
            "--routing-skew", "dense")
    refused(cli("cost", "--hw", "h200", "--target", "qwen3-30b-a3b", "--routing-row-exponent",
                "0"), "--routing-row-exponent", "(0, 1]")
    refused(cli("cost", "--hw", "h200", "--target", "qwen3-30b-a3b", "--routing-skew", "0.5",
                "--system", "head"), "--routing-skew", "--system head")
