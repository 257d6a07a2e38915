"""`--drafter mtp` (issue 41, item 4): the target's own multi-token-prediction layer drafts,
priced as one decoder layer of the target's kind with its 2d → d projection, the target's
embedding and LM head, on the target's devices and in its formats; in `cost`,
`optimize-tree`, `simulate` and as the `mtp` reproduce system. A target without MTP layers,
and draft options that cannot apply to it, are one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Cli
from test_guards import refused

from specscope.hw_profiles import load_profile
from specscope.hw_profiles.deployment import deployment
from specscope.models import get_model
from specscope.models.catalogue import drafter_spec, mtp_spec
from specscope.models.ops import forward_ops, param_count

CONFIGS = Path(__file__).parent / "data" / "configs"
FP8_TP8 = ("--hw", "h200", "--tp", "8", "--precision", "fp8")


def test_the_mtp_module_is_one_layer_of_the_target_with_its_projection() -> None:
    target = get_model("deepseek-v3")
    module = drafter_spec("mtp", target)
    assert module == mtp_spec(target) and module.name == "deepseek-v3/mtp"
    assert (module.n_layers, module.first_dense_layers, module.fused_inputs) == (1, 0, 2)
    assert module.moe and module.mla and module.mtp_layers == 0
    # DeepSeek-V3's README: 671B main model + 14B of MTP module weights (rounded)
    assert abs(param_count(module) - 14e9) / 14e9 < 0.05


def test_its_rows_are_one_moe_layer_of_the_target_plus_the_projection() -> None:
    target = get_model("deepseek-v3")
    ours = {op.op: op for op in forward_ops(mtp_spec(target), 4, 1, 512, tp=8)}
    theirs = {op.op: op for op in forward_ops(target, 4, 1, 512, tp=8)}
    for name in ("router", "expert_gate_up", "shared_down", "q_a_proj", "attention"):
        per_layer = theirs[name].weight_bytes / theirs[name].count
        assert ours[name].weight_bytes == pytest.approx(per_layer, rel=1e-12)
    assert ours["lm_head"].weight_bytes == theirs["lm_head"].weight_bytes
    d = target.d_model
    assert ours["input_proj"].weight_bytes == pytest.approx(2 * d * d * 2)  # 16-bit, whole
    assert "input_proj" not in theirs and "mlp_gate_up" not in ours


def test_it_runs_on_the_targets_devices_and_formats() -> None:
    profile, target = load_profile("h200"), get_model("deepseek-v3")
    dep = deployment("h200", target=target, drafter="mtp", tp=8, ep=8, precision="fp8",
                     kv_bits=8)
    cost = dep.draft_cost(profile, dep.draft_spec(mtp_spec(target)))
    assert (cost.tp, cost.ep, cost.precision, cost.kv_bits) == (8, 8, "fp8", 8)
    plain = deployment("h200", target=target, drafter="mtp", tp=8)
    bf16 = plain.draft_cost(profile, mtp_spec(target))
    assert cost.forward_time(1, 1, 512) < bf16.forward_time(1, 1, 512)
    # a drafted level at batch 32 reads the experts 32 tokens touch, not 8
    assert bf16.forward_time(32, 1, 512) > 2 * bf16.forward_time(1, 1, 512)


def test_cost_optimize_and_simulate_price_it(cli: Cli, tmp_path: Path) -> None:
    code, out, err = cli("cost", "--target", "deepseek-v3", *FP8_TP8, "--drafter", "mtp",
                         "--new-tokens", "4", "--json")
    assert code == 0, err
    assert json.loads(out)["drafter"]["model"] == "deepseek-v3/mtp"
    tree = tmp_path / "tree.json"
    code, out, err = cli("optimize-tree", "--target", "deepseek-v3", *FP8_TP8, "--drafter",
                         "mtp", "--acceptance", "0.8,0.1", "--budget", "4", "--engine",
                         "sglang", "-o", tree)
    assert code == 0, err
    assert "deepseek-v3 on h200; best" in out
    code, out, err = cli("simulate", "--target", "deepseek-v3", *FP8_TP8, "--drafter", "mtp",
                         "--acceptance", "0.8,0.1", "--policy", "static", "--tree", tree,
                         "--rate", "2", "--requests", "20", "--seed", "0", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["throughput_tok_s"] > 0


def test_a_config_with_nextn_layers_drafts_with_them(cli: Cli) -> None:
    code, out, err = cli("cost", "--target", CONFIGS / "deepseek-v3" / "config.json",
                         *FP8_TP8, "--drafter", "mtp", "--json")
    assert code == 0, err
    assert json.loads(out)["drafter"]["model"] == "deepseek-v3/mtp"


@pytest.mark.parametrize(("target", "extra", "words"), [
    ("llama-3.1-8b", (), ("--drafter mtp", "llama-3.1-8b", "declares none")),
    ("deepseek-v3", ("--tp", "8", "--draft-tp", "4"), ("--draft-tp", "target's devices")),
    ("deepseek-v3", ("--tp", "8", "--draft-vocab", "32000"), ("--draft-vocab",)),
])
def test_what_cannot_apply_is_refused(cli: Cli, target: str, extra: tuple[str, ...],
                                      words: tuple[str, ...]) -> None:
    refused(cli("cost", "--target", target, "--hw", "h200", "--drafter", "mtp", *extra),
            *words)


def test_reproduce_prices_an_mtp_case(cli: Cli, tmp_path: Path) -> None:
    case = tmp_path / "mtp.toml"
    case.write_text('[[case]]\nname = "x"\nsystem = "mtp"\nhw = "h200"\nengine = "sglang"\n'
                    'target = "deepseek-v3"\nprecision = "fp8"\ntp = 8\nbatch = 1\n'
                    'tree = "1,1,1"\ntau = 3.0\npublished_speedup = 1.8\n')
    code, out, err = cli("reproduce", case, "--json")
    assert code == 0, err
    row = json.loads(out)[0]
    assert row["system"] == "mtp" and 1.0 < row["predicted_speedup"] < 3.0
    assert row["parts_ms"]["draft"] < row["parts_ms"]["verify"]
    case.write_text(case.read_text().replace("deepseek-v3", "llama-3.1-8b").replace(
        "tp = 8", "tp = 1"))
    refused(cli("reproduce", case), "case 'x'", "declares none")


@pytest.mark.parametrize(("engine", "method", "config"), [
    ("vllm", "mtp", {"method": "mtp", "num_speculative_tokens": 3}),
    ("sglang", "NEXTN", {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
                         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}),
    ("tensorrt-llm", "MTP", {"decoding_type": "MTP", "max_draft_len": 3}),
])
def test_exports_name_the_engines_mtp_method_and_no_draft_model(
        cli: Cli, tmp_path: Path, engine: str, method: str, config: dict) -> None:
    tree = tmp_path / "tree.json"
    assert cli("optimize-tree", "--target", "deepseek-v3", *FP8_TP8, "--drafter", "mtp",
               "--acceptance", "0.8,0.1", "--budget", "4", "--algo", "chain", "-o", tree)[0] == 0
    for args in (("optimize-tree", "--target", "deepseek-v3", *FP8_TP8, "--drafter", "mtp",
                  "--acceptance", "0.8,0.1", "--budget", "4", "--algo", "chain", "--to", engine,
                  "--json"),
                 ("export", tree, "--engine", engine, "--json")):
        code, out, err = cli(*args)
        assert code == 0, err
        doc = json.loads(out)
        doc = doc.get("export", doc)
        assert doc["method"] == method and doc["config"] == config
        assert "deepseek-ai/DeepSeek-V3" in doc["command"] and " mtp" not in doc["command"]


def test_an_mtp_export_needs_a_target_with_mtp_layers(cli: Cli, tmp_path: Path) -> None:
    refused(cli("optimize-tree", "--target", "llama-3.1-8b", "--hw", "h100", "--drafter",
                "ngram", "--acceptance", "0.8,0.1", "--budget", "4", "--to", "vllm",
                "--export-method", "mtp"), "vllm mtp", "llama-3.1-8b declares none")
    refused(cli("optimize-tree", "--target", "deepseek-v3", *FP8_TP8, "--drafter", "mtp",
                "--acceptance", "0.8,0.1", "--budget", "4", "--to", "transformers"),
            "transformers has no proposer", "draft:mtp")
