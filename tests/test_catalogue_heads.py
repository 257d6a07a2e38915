"""The EAGLE-3 heads published for the catalogue's MoE targets (issue 41, item 2): each a
one-layer Llama of its config's shape drafting on three of its target's hidden states
(`fused_inputs` 3) over a 32,000-token draft vocabulary; priced as a draft for a target of its
width only, and exported by the engines' EAGLE-3 methods with its Hugging Face id."""

from __future__ import annotations

import json

import pytest
from conftest import Cli
from test_guards import refused

from specscope.models import get_model
from specscope.models.catalogue import is_head
from specscope.models.ops import forward_ops

HEADS = {"qwen3-30b-a3b-eagle3": ("qwen3-30b-a3b", 2),
         "qwen3-235b-a22b-eagle3": ("qwen3-235b-a22b", 8),
         "gpt-oss-20b-eagle3": ("gpt-oss-20b", 1),
         "gpt-oss-120b-eagle3": ("gpt-oss-120b", 2)}
"""Each head, its target and a tp the target fits at on an H200."""


@pytest.mark.parametrize("head", sorted(HEADS))
def test_each_head_is_a_one_layer_llama_on_its_targets_features(head: str) -> None:
    spec, target = get_model(head), get_model(HEADS[head][0])
    assert is_head(head) and not is_head(HEADS[head][0])
    assert (spec.n_layers, spec.fused_inputs, spec.vocab_size) == (1, 3, 32000)
    assert spec.d_model == target.d_model and not spec.moe and "huggingface.co/" in spec.source
    rows = {op.op: op for op in forward_ops(spec, 1, 1, 512)}
    assert rows["input_proj"].weight_bytes == 3 * spec.d_model * spec.d_model * 2


@pytest.mark.parametrize(("engine", "method"), [("vllm", "eagle3"), ("sglang", "EAGLE3"),
                                                ("tensorrt-llm", "Eagle3")])
def test_a_head_exports_by_the_engines_eagle3_method(cli: Cli, engine: str, method: str) -> None:
    code, out, err = cli("optimize-tree", "--hw", "h200", "--target", "qwen3-30b-a3b", "--tp",
                         "2", "--drafter", "qwen3-30b-a3b-eagle3", "--acceptance", "0.7,0.15",
                         "--budget", "6", "--to", engine, "--json")
    assert code == 0, err
    doc = json.loads(out)
    doc = doc.get("export", doc)
    assert doc["method"] == method
    assert "lmsys/SGLang-EAGLE3-Qwen3-30B-A3B-Instruct-2507-SpecForge-Nex" in doc["command"]


def test_what_a_head_cannot_do_is_refused(cli: Cli) -> None:
    refused(cli("cost", "--hw", "h200", "--target", "llama-3.1-8b", "--drafter",
                "qwen3-30b-a3b-eagle3"), "qwen3-30b-a3b-eagle3", "width 2048", "4096")
    refused(cli("optimize-tree", "--hw", "h200", "--target", "qwen3-30b-a3b", "--tp", "2",
                "--drafter", "qwen3-30b-a3b-eagle3", "--acceptance", "0.7,0.15", "--budget",
                "6", "--to", "vllm", "--export-method", "draft_model"),
            "draft_model loads a draft language model", "EAGLE3 head")
    refused(cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
                "llama-3.2-1b", "--acceptance", "0.7,0.15", "--budget", "6", "--to", "vllm",
                "--export-method", "eagle3"), "llama-3.2-1b is a catalogue language model")
