"""Export to engines: each engine's configuration read back as the engine reads it (its rules
transcribed from its source, or transformers itself), the families' optima, and the CLI."""

from __future__ import annotations

import ast
import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.hw_profiles.deployment import deployment
from specscope.interop import hf_transformers, sglang, tensorrt_llm, vllm
from specscope.interop.document import optimized_export
from specscope.interop.families import TopK, best_chain, best_levels, level_tree, topk_tree
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.tree import Tree

ENGINES = ("vllm", "sglang", "tensorrt-llm", "transformers")
P = [0.6, 0.2, 0.1, 0.05]


HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
"""An EAGLE-3 head's Hugging Face id: what a head method serves (a catalogue model is not one)."""


def optimized(p=P, budget=16, hw="h100", source=None, **kw):
    """Llama-3.1-8B drafted by Llama-3.2-1B (one vocabulary, so every engine serves the pair);
    `source` `draft:HEAD` for a head method."""
    setup = deployment(hw, target="llama-3.1-8b", drafter="llama-3.2-1b", **kw)
    return run_optimize(OptimizeRequest(setup, acceptance=list(p), budget=budget, source=source))


# ---- vLLM ---------------------------------------------------------------------------------

def vllm_reads(config: dict) -> list[tuple[int, ...]]:
    """vLLM 0.20.2's own handling of the tree (transcribed): `SpeculativeConfig.__post_init__`
    sorts the literal breadth-first; the proposer drafts n_L // n_{L-1} children per node of
    each level; the tree-attention mask looks up each path's parent by `.index`."""
    choices = ast.literal_eval(config["speculative_token_tree"])
    choices = sorted(choices, key=lambda t: (len(t), t))
    depth = len(choices[-1])
    per_level = [0] * depth
    for node in choices:
        per_level[len(node) - 1] += 1
    children = [per_level[0]] + [per_level[i] // per_level[i - 1] for i in range(1, depth)]
    drafted = [()]
    for b in children:  # each node of the level above drafts its top b, parent-major
        drafted = [*drafted, *[(*p, r) for p in drafted if len(p) == len(drafted[-1])
                               for r in range(b)]]
    for path in choices:  # the mask's parent lookup raises ValueError on an orphan
        for c in range(len(path) - 1):
            choices.index(path[: c + 1])
    return sorted(drafted[1:], key=lambda t: (len(t), t))


@pytest.mark.parametrize("text", ["[(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]",
                                  "[(0,), (1,), (2,), (0, 0), (1, 0), (2, 0)]",
                                  "[(0,), (0, 0), (0, 0, 0)]"])
def test_vllm_documented_trees_round_trip(text: str) -> None:
    config = {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
              "num_speculative_tokens": len(ast.literal_eval(text)),
              "speculative_token_tree": text}
    tree = vllm.parse(config)
    back = vllm.config_for(tree, "eagle", config["model"])
    if tree.is_chain:  # a chain is vLLM's default: no tree key
        assert "speculative_token_tree" not in back
        assert back["num_speculative_tokens"] == config["num_speculative_tokens"]
    else:
        assert back == config
        assert vllm_reads(back) == ast.literal_eval(text)


@pytest.mark.parametrize("budget", [4, 8, 16, 32])
def test_vllm_export_is_what_vllm_drafts(budget: int) -> None:
    doc = optimized_export(optimized(budget=budget), "vllm")
    config = doc["config"]
    tree = Tree.from_dict(doc["tree"]["tree"])
    assert vllm.parse(config, tree.sources[1]) == tree
    assert config["num_speculative_tokens"] == tree.size - 1 <= budget - 1
    if "speculative_token_tree" in config:
        paths = ast.literal_eval(config["speculative_token_tree"])
        assert vllm_reads(config) == paths  # breadth-first, parents first, uniform levels
        assert "--attention-backend TREE_ATTN" in doc["command"]
    assert doc["predicted"] <= doc["unconstrained"] + 1e-12


@pytest.mark.parametrize(("change", "word"), [
    ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"speculative_token_tree": "[(1,), (0,)]"}, "breadth-first"),
    ({"speculative_token_tree": "[(0,), (0, 0), (1, 0)]"}, "without its parent"),
    ({"num_speculative_tokens": 5}, "num_speculative_tokens is 5"),
    ({"speculative_token_tree": "[(0,), (1,), (0, 0)]", "num_speculative_tokens": 3}, "level 2"),
    ({"method": "ngram"}, "draft-model method"),
    ({"speculative_token_tree": "[[0]]"}, "tuples"),
    ({"model": ""}, "needs model"),
])
def test_vllm_rules_refuse(change: dict, word: str) -> None:
    config = {"method": "draft_model", "model": "m", "num_speculative_tokens": 2,
              "speculative_token_tree": "[(0,), (1,)]"} | change
    with pytest.raises(InputError, match=word):
        vllm.check(config)


# ---- SGLang -------------------------------------------------------------------------------

def sglang_tree(steps: int, topk: int, tokens: int, p: np.ndarray) -> list[tuple[int, ...]]:
    """SGLang 0.5.23's draft tree (transcribed from `_select_top_k_tokens_first/_later` and
    `organize_draft_results`): the root's top-k are the first beams; each step scores every
    beam's top-k children by the cumulative product and keeps the k best as beams; the tree is
    the N − 1 best of all candidates (`torch.topk`, then sorted by candidate index)."""
    def rate(depth: int, rank: int) -> float:
        row = p[min(depth, p.shape[0]) - 1]
        return float(row[rank]) if rank < row.size else 0.0

    def best(values: list[float], k: int) -> list[int]:
        return sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]

    scores = [rate(1, r) for r in range(topk)]
    paths = [(r,) for r in range(topk)]
    all_scores, all_paths = list(scores), list(paths)
    beams = list(range(topk))
    for step in range(2, steps + 1):
        expand = [scores[b] * rate(step, r) for b in beams for r in range(topk)]
        expand_paths = [(*paths[b], r) for b in beams for r in range(topk)]
        chosen = best(expand, topk)
        all_scores += expand
        all_paths += expand_paths
        scores, paths, beams = expand, expand_paths, chosen
    kept = sorted(best(all_scores, tokens - 1))
    return sorted((all_paths[i] for i in kept), key=lambda t: (len(t), t))


@pytest.mark.parametrize("seed", range(6))
def test_sglang_tree_matches_its_beam_search(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = np.sort(rng.dirichlet(np.ones(6)) * rng.uniform(0.5, 0.95))[::-1]
    table = np.vstack([p, p * 0.9])
    for steps, topk in ((1, 3), (3, 2), (4, 3), (5, 4)):
        for tokens in (2, 5, TopK(steps, topk, 0).candidates + 1):
            tree = topk_tree(table, TopK(steps, topk, tokens), "draft")
            assert sorted(tree.rank_paths(), key=lambda t: (len(t), t)) == sglang_tree(
                steps, topk, tokens, table)


def test_sglang_export_round_trips_and_keeps_its_rules() -> None:
    result = optimized()
    doc = optimized_export(result, "sglang")
    config = doc["config"]
    sglang.check(config)
    assert config["speculative_algorithm"] == "STANDALONE"
    setting = sglang.setting(config)
    assert setting.tokens - 1 <= setting.candidates
    assert sglang.parse(config, P, "draft") == Tree.from_dict(doc["tree"]["tree"])
    flags = doc["command"].split()
    assert flags[flags.index("--speculative-eagle-topk") + 1] == str(setting.topk)


def test_sglang_documented_command_round_trips() -> None:
    """SGLang's documented launch line (EAGLE3 on Llama 3.1 8B: 5 steps, top-4, 8 tokens):
    its flags read into the setting, whose tree specscope writes back into flags whose tree is
    the same."""
    line = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
            "--speculative-algorithm EAGLE3 --speculative-draft-model-path "
            "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --speculative-num-steps 5 "
            "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8")
    words = line.split()
    config = {w[2:].replace("-", "_"): (int(v) if v.isdigit() else v)
              for w, v in pairwise(words) if w.startswith("--speculative")}
    tree = sglang.parse(config, P)
    assert tree.size == 8
    back = sglang.config_for(tree, "EAGLE3", config["speculative_draft_model_path"])
    assert sglang.parse(back, P) == tree
    assert sglang.command(back, "meta-llama/Llama-3.1-8B-Instruct").startswith(
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
        "--speculative-algorithm EAGLE3")


@pytest.mark.parametrize(("change", "word"), [
    ({"speculative_eagle_topk": 1}, "steps \\+ 1"),
    ({"speculative_num_draft_tokens": 40}, "must lie in 2..11"),
    ({"speculative_algorithm": "LOOKAHEAD"}, "not one of"),
    ({"speculative_draft_model_path": None}, "needs speculative_draft_model_path"),
    ({"speculative_num_steps": 0}, "speculative_num_steps"),
])
def test_sglang_rules_refuse(change: dict, word: str) -> None:
    config = {"speculative_algorithm": "EAGLE", "speculative_draft_model_path": "d",
              "speculative_num_steps": 3, "speculative_eagle_topk": 2,
              "speculative_num_draft_tokens": 6} | change
    with pytest.raises(InputError, match=word):
        sglang.check(config)


# ---- TensorRT-LLM -------------------------------------------------------------------------

def trt_reads(config: dict) -> list[list[int]]:
    """TensorRT-LLM's `EagleDecodingConfig.check_eagle_choices` (transcribed): duplicates
    removed, sorted by (length, ranks), every path connected; max_draft_len becomes the
    depth, max_total_draft_tokens the count."""
    unique = {tuple(c) for c in config["eagle_choices"]}
    choices = sorted([list(t) for t in unique], key=lambda x: (len(x), x))
    for choice in choices:
        if len(choice) > 1:
            assert choice[:-1] in choices, f"Error: choice {choice} is not connected"
    assert config["max_draft_len"] == max(len(c) for c in choices)
    return choices


def test_trt_documented_choices_round_trip() -> None:
    documented = [[0], [0, 0], [1], [0, 1]]  # llm_args.py's example of medusa/eagle choices
    config = {"decoding_type": "Eagle3", "max_draft_len": 2, "speculative_model": "d",
              "eagle_choices": documented}
    tree = tensorrt_llm.parse(config)
    back = tensorrt_llm.config_for(tree, "Eagle3", "d")
    assert back["eagle_choices"] == trt_reads(config) == [[0], [1], [0, 0], [0, 1]]
    assert tensorrt_llm.parse(back) == tree


MC_SIM_7B_63 = [  # cpp/include/tensorrt_llm/runtime/medusaModule.h, the default tree
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0],
    [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2],
    [3, 0], [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4],
    [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7],
    [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1],
    [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1],
    [1, 6], [0, 7, 0]]


def test_trt_default_tree_round_trips() -> None:
    config = {"decoding_type": "Eagle3", "max_draft_len": 4, "speculative_model": "d",
              "eagle_choices": MC_SIM_7B_63}
    tree = tensorrt_llm.parse(config)
    assert tree.size == 64 and tree.depth == 4
    back = tensorrt_llm.config_for(tree, "Eagle3", "d")
    assert back["eagle_choices"] == trt_reads(config)
    assert sorted(map(tuple, back["eagle_choices"])) == sorted(map(tuple, MC_SIM_7B_63))


def test_trt_eagle_export_is_the_optimum_when_it_can_be() -> None:
    result = optimized(source=f"draft:{HEAD}")
    doc = optimized_export(result, "tensorrt-llm", "Eagle3")
    assert trt_reads(doc["config"]) == doc["config"]["eagle_choices"]
    assert doc["predicted"] == pytest.approx(doc["unconstrained"])
    tree = Tree.from_dict(doc["tree"]["tree"])
    assert tensorrt_llm.parse(doc["config"], tree.sources[1]) == tree


@pytest.mark.parametrize(("change", "word"), [
    ({"eagle_choices": [[0], [0, 1, 0]]}, "not connected"),
    ({"eagle_choices": [[0], [2], [0, 0]]}, "ranks \\[0, 2\\]"),
    ({"max_draft_len": 3}, "differs from the depth"),
    ({"decoding_type": "Medusa"}, "not one of"),
    ({"decoding_type": "NGram"}, "needs decoding_type Eagle3"),
    ({"speculative_model": None}, "needs speculative_model"),
])
def test_trt_rules_refuse(change: dict, word: str) -> None:
    config = {"decoding_type": "Eagle3", "max_draft_len": 2, "speculative_model": "d",
              "eagle_choices": [[0], [1], [0, 0]]} | change
    with pytest.raises(InputError, match=word):
        tensorrt_llm.check(config)


# ---- transformers -------------------------------------------------------------------------

def test_transformers_takes_the_export(tmp_path: Path) -> None:
    """transformers itself: the assistant's settings are its GenerationConfig's, and assisted
    and prompt-lookup generation run with them, drafting the exported chain, losslessly."""
    import torch
    from tiny_pair import save_tiny_llama
    from transformers import GenerationConfig, LlamaForCausalLM
    from transformers.generation import candidate_generator

    target = LlamaForCausalLM.from_pretrained(save_tiny_llama(tmp_path / "t", 64, 2))
    assistant = LlamaForCausalLM.from_pretrained(save_tiny_llama(tmp_path / "a", 64, 1))
    tree = Tree.chain(3)
    config = hf_transformers.config_for(tree, "assisted", "a")
    settings = config["assistant_generation_config"]
    GenerationConfig(**settings).validate(strict=True)
    for key, value in settings.items():
        setattr(assistant.generation_config, key, value)
    drafted = []
    original = candidate_generator.AssistedCandidateGenerator.get_candidates

    def spy(self, input_ids):
        out = original(self, input_ids)
        drafted.append(out[0].shape[1] - input_ids.shape[1])
        return out

    prompt = torch.tensor([[1, 5, 9, 5, 9, 5, 9, 2]])
    greedy = target.generate(prompt, max_new_tokens=12, do_sample=False)
    candidate_generator.AssistedCandidateGenerator.get_candidates = spy
    try:
        assisted = target.generate(prompt, max_new_tokens=12, do_sample=False,
                                   assistant_model=assistant)
    finally:
        candidate_generator.AssistedCandidateGenerator.get_candidates = original
    assert torch.equal(assisted, greedy)
    assert max(drafted) == 3
    assert hf_transformers.parse(config) == tree
    lookup = hf_transformers.config_for(tree, "prompt_lookup", None)
    out = target.generate(prompt, max_new_tokens=12, do_sample=False, **lookup["generate"])
    assert torch.equal(out, greedy)


def test_transformers_refuses_a_branching_tree() -> None:
    with pytest.raises(InputError, match="draft chains"):
        hf_transformers.config_for(Tree.from_rank_paths([(0,), (1,)]), "assisted", "a")


# ---- families and the document ------------------------------------------------------------

@pytest.mark.parametrize("hw", ["h100", "a100", "cpu-2core"])
@pytest.mark.parametrize("p", [P, [0.8, 0.1], [0.3, 0.2, 0.15, 0.1, 0.05]])
def test_constrained_never_beats_unconstrained(hw: str, p: list[float]) -> None:
    result = run_optimize(OptimizeRequest(
        deployment=deployment(hw, target="llama-2-7b", drafter="llama-68m"),
        acceptance=p, budget=12))
    for engine in ENGINES:
        doc = optimized_export(result, engine)
        assert doc["predicted"] <= doc["unconstrained"] + 1e-12
        assert doc["unconstrained"] >= result.comparison.scores[0].speedup - 1e-12
        assert 0 <= doc["loss"] < 1


@pytest.mark.parametrize("engine", ENGINES)
def test_a_chain_only_stack_exports_chains(engine: str) -> None:
    result = optimized(budget=8, hw="a100", engine="hf-eager", source=f"draft:{HEAD}")
    method = {"vllm": "eagle3", "sglang": "EAGLE3", "tensorrt-llm": "Eagle3"}.get(engine)
    doc = optimized_export(result, engine, method)
    assert Tree.from_dict(doc["tree"]["tree"]).is_chain
    assert doc["predicted"] <= doc["unconstrained"] + 1e-12


def test_best_chain_is_the_best_chain() -> None:
    setup = optimized().setup
    chains = [best_chain(setup, n).speedup for n in range(2, 14)]
    assert chains == sorted(chains)  # a bigger budget never loses: it may keep the shorter
    best = best_chain(setup, 13)
    brute = max(range(1, 13), key=lambda L: optimized_chain(setup, L))
    assert best.tree == Tree.chain(brute, setup.source)


def optimized_chain(setup, length: int) -> float:
    return optimized_tree(setup, Tree.chain(length, setup.source))


def every_branching(budget: int, cap: int, ranks: int) -> list[tuple[int, ...]]:
    """Every per-level branching of at most `budget` nodes, depth `cap`, b_d ≤ `ranks`."""
    out = []

    def grow(prefix: tuple[int, ...], width: int, nodes: int) -> None:
        if prefix:
            out.append(prefix)
        if len(prefix) < cap:
            for b in range(1, ranks + 1):
                if nodes + width * b <= budget - 1:
                    grow((*prefix, b), width * b, nodes + width * b)

    grow((), 1, 0)
    return out


@pytest.mark.parametrize("hw", ["h100", "a100", "cpu-2core"])
@pytest.mark.parametrize("p", [P, [0.9, 0.05], [0.8, 0.1, 0.05], [0.3, 0.25, 0.2, 0.1, 0.05]])
def test_vllm_family_search_is_exact(hw: str, p: list[float]) -> None:
    """The pruned search finds what scoring every branching finds (the depth cap binding
    included, where the best widens a late level)."""
    setup = optimized(p, budget=8, hw=hw).setup
    for budget in (6, 16, 24):
        _, found = best_levels(setup, budget)
        cap = min(budget - 1, setup.max_depth)
        brute = max(optimized_tree(setup, level_tree(b, setup.source))
                    for b in every_branching(budget, cap, len(p)))
        assert found.speedup == pytest.approx(brute, rel=1e-12)


def optimized_tree(setup, tree: Tree) -> float:
    from specscope.optimizers.scoring import score_tree

    return score_tree("levels", tree, setup.value(tree), setup.pricing).speedup


def test_level_tree_matches_its_branching() -> None:
    tree = level_tree((2, 1, 3), "draft")
    assert tree.size == 1 + 2 + 2 + 6 and tree.depth == 3
    assert vllm.uniform_levels(tree) == (2, 1, 3)


def test_export_cli(cli, tmp_path: Path) -> None:
    trace = tmp_path / "x.parquet"
    assert cli("trace", "synth", "--requests", 8, "--length", 64, "--seed", 1, "-o", trace)[0] == 0
    for engine in ENGINES:
        out = tmp_path / f"{engine}.json"
        code, stdout, err = cli("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
                                "--trace", trace, "--budget",
                                16, "--to", engine, "-o", out)
        assert code == 0, err
        doc = json.loads(out.read_text())
        assert {"engine", "config", "command", "predicted", "unconstrained"} <= set(doc)
        assert doc["predicted"] <= doc["unconstrained"]
        assert f"{engine} " in stdout and "unconstrained" in stdout
    code, out, _ = cli("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
                       "--trace", trace, "--budget", 16,
                       "--to", "vllm")
    assert code == 0 and "predicted" in out and "command: vllm serve" in out
    tree = tmp_path / "tree.json"
    assert cli("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
               "--trace", trace, "--budget", 8, "--algo",
               "sequoia", "-o", tree)[0] == 0
    code, out, err = cli("export", tree, "--to", "tensorrt-llm", "--export-method",
                         "Eagle3", "--drafter", HEAD, "--json")
    assert code == 0, err
    assert trt_reads(json.loads(out)["config"])


@pytest.mark.parametrize(("args", "word"), [
    (("--to", "ollama"), "--to ollama"),
    (("--export-method", "eagle"), "--export-method is used with --to only"),
    (("--to", "vllm", "--export-method", "medusa"), "not a vllm method"),
    (("--to", "sglang", "--source", "recycle"), "no proposer for source 'recycle'"),
])
def test_export_cli_refuses(cli, tmp_path: Path, args: tuple, word: str) -> None:
    trace = tmp_path / "x.parquet"
    cli("trace", "synth", "--requests", 4, "--length", 32, "--seed", 1, "-o", trace)
    code, _, err = cli("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
                       "--trace", trace, "--budget", 6,
                       *args)
    assert code == 2 and word in err and len(err.strip().splitlines()) == 1


def test_export_of_a_tree_an_engine_cannot_run(cli, tmp_path: Path) -> None:
    bare = tmp_path / "bare.json"
    bare.write_text(Tree.from_rank_paths([(0,), (1,), (0, 0)]).to_json())
    code, _, err = cli("export", bare, "--to", "vllm", "--target", "llama-3.1-8b")
    assert code == 2 and "verifies chains only" in err and "--engine-version 0.20.2" in err
    code, _, err = cli("export", bare, "--to", "vllm", "--target", "llama-3.1-8b",
                       "--engine-version", "0.20.2")
    assert code == 2 and "do not branch alike" in err
    code, _, err = cli("export", bare, "--to", "transformers", "--target", "x")
    assert code == 2 and "draft chains" in err
    code, _, err = cli("export", bare, "--to", "vllm")
    assert code == 2 and "--target" in err
    # a bare tree names no draft model: no engine config gets a placeholder for it
    code, _, err = cli("export", bare, "--to", "sglang", "--target", "llama-3.1-8b")
    assert code == 2 and "needs speculative_draft_model_path" in err
    code, out, err = cli("export", bare, "--to", "sglang", "--target", "llama-3.1-8b",
                         "--drafter", "llama-3.2-1b", "--json")
    assert code == 0, err
    assert json.loads(out)["config"]["speculative_draft_model_path"] == "meta-llama/Llama-3.2-1B"


def test_an_engine_configuration_exports_again(cli, tmp_path: Path) -> None:
    plan, again = tmp_path / "plan.json", tmp_path / "vllm.json"
    code, _, err = cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
                       "llama-3.2-1b", "--acceptance", "0.7,0.2", "--budget", 8, "--to", "sglang",
                       "-o", plan)
    assert code == 0, err
    old = ("--engine-version", "0.20.2")  # SGLang's tree branches: vLLM's last tree release
    code, out, err = cli("export", plan, "--to", "vllm", *old, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tree"] == json.loads(plan.read_text())["tree"]["tree"]
    assert doc["config"]["model"] == "meta-llama/Llama-3.2-1B"  # the drafter the file priced
    assert cli("export", plan, "--to", "vllm", *old, "-o", again)[0] == 0
    assert json.loads(cli("export", again, "--to", "vllm", *old, "--json")[1])["config"] == \
        doc["config"]
    code, _, err = cli("export", plan, "--to", "vllm", "--algo", "chain")
    assert code == 2 and "one engine configuration" in err


def test_nothing_is_lost_when_plain_decoding_is_the_best_choice() -> None:
    """With p = 0 no tree pays: plain decoding, which every engine runs, is the optimum, so
    the export loses nothing to the engine's family (issue 40 saw "8.3% lost")."""
    doc = optimized_export(optimized(p=[0.0, 0.0], budget=8), "vllm")
    assert doc["unconstrained"] <= 1 and doc["loss"] == 0.0
    assert any("no speculation pays" in note for note in doc["notes"])
