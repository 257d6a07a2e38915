"""Self-speculation (layerskip): the skipped view is the target without those layers and shares
its weights; greedy decoding stays lossless for a fixed set, SWIFT and DEL, on specscope's
Transformer, the zoo target and Hugging Face models; collected traces replay the executor
exactly; SWIFT keeps its best-scored set; DEL's exit follows its recent-acceptance rule.

The random target is in float64 (a tree pass and a one-token pass give the same argmax) and its
layers' output projections are scaled down, so that a layer-skipped view agrees with it often
enough to accept drafts.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from tiny_pair import repeating_prompts, save_tiny_llama, tiny_spec
from transformers import LlamaConfig, LlamaForCausalLM

from specscope.errors import InputError
from specscope.executor.collect import collect_tokens
from specscope.executor.drafters import LAYERSKIP, LayerSkipOptions, make_drafter
from specscope.executor.drafters.layerskip import (
    DynamicExitDrafter,
    candidate_skips,
    choose_exit,
    parse_layer_skip,
    tokens_per_layer,
)
from specscope.executor.generate import calibration, generate
from specscope.executor.loop import decode_autoregressive, decode_speculative, speculative_generate
from specscope.executor.methods import resolve_method, static_method
from specscope.executor.targets import Model, load_model, wrap
from specscope.hw_profiles.deployment import deployment
from specscope.models.spec import ModelSpec
from specscope.models.torch import Mamba2, Transformer
from specscope.models.torch.hf import HFCausalLM
from specscope.models.torch.skip import skip_layers
from specscope.models.zoo import weights_path
from specscope.optimizers.baselines import best_first_tree
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.trace import replay, write_trace
from specscope.tree import Tree

torch.set_num_threads(1)

V = 61
MAX_NEW = 16
SPEC = tiny_spec("tiny-self", V, n_layers=4, max_seq_len=160)
FIXED = LayerSkipOptions("fixed", (2,))
SWIFT = LayerSkipOptions("swift", search_requests=2)
DEL = LayerSkipOptions("del", window=4)
BUSHY = best_first_tree([0.6, 0.2, 0.1], 10, 5, LAYERSKIP)


def drafter_of(target: Model, options: LayerSkipOptions):
    return make_drafter(LAYERSKIP, target.vocab_size, target=target, layer_skip=options)


@pytest.fixture(scope="module")
def target() -> Model:
    model = Transformer.random(SPEC, seed=0, dtype=torch.float64, std=0.2)
    with torch.no_grad():
        for block in model.model.layers:
            block.self_attn.o_proj.weight.mul_(0.1)
            block.mlp.down_proj.weight.mul_(0.1)
    return wrap(model)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return repeating_prompts(V, 5)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> str:
    """A tiny random 4-layer LlamaForCausalLM saved to a folder."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-4"), V, 4)


def assert_lossless(target: Model, drafter, method, prompts: list[list[int]]) -> list[int]:
    """Every prompt decodes to the autoregressive output; the accepted drafts of every step."""
    accepted = []
    for prompt in prompts:
        run = decode_speculative(target, drafter, method, prompt, MAX_NEW)
        assert run.output == decode_autoregressive(target, prompt, MAX_NEW).output
        accepted += run.accepted
    return accepted


# ---- the view -------------------------------------------------------------------------------


def test_a_view_keeping_every_layer_computes_what_the_target_does(target: Model) -> None:
    module = target.model
    view = skip_layers(module, range(SPEC.n_layers))
    tokens = torch.randint(0, V, (1, 12), generator=torch.Generator().manual_seed(0))
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2, 4])
    nodes = torch.arange(tree.size) % V
    for model in (module, view):
        model.setup_caches(1, 40)
    assert torch.equal(view.prefill(tokens), module.prefill(tokens))
    kept = module.kv_cache.kv.clone()
    assert torch.equal(view.forward_tree(nodes, tree, 12), module.forward_tree(nodes, tree, 12))
    assert not torch.equal(module.kv_cache.kv, kept)  # each wrote its own cache
    assert {p.data_ptr() for p in view.parameters()} <= {p.data_ptr() for p in module.parameters()}
    assert view.kv_cache.kv.data_ptr() != module.kv_cache.kv.data_ptr()


def test_skipping_layers_is_the_target_without_them(target: Model) -> None:
    module, kept = target.model, [0, 2, 3]
    smaller = Transformer(dataclasses.replace(SPEC, n_layers=3)).to(torch.float64)
    state = module.state_dict()
    mine = {k: v for k, v in state.items() if not k.startswith("model.layers.")}
    for j, i in enumerate(kept):
        prefix = f"model.layers.{i}."
        mine |= {f"model.layers.{j}." + k[len(prefix):]: v for k, v in state.items()
                 if k.startswith(prefix)}
    smaller.load_state_dict(mine)
    view = skip_layers(module, kept)
    tokens = torch.randint(0, V, (1, 20), generator=torch.Generator().manual_seed(1))
    for model in (module, smaller, view):
        model.setup_caches(1, 20)
    logits = view.prefill(tokens)
    torch.testing.assert_close(logits, smaller.prefill(tokens), atol=1e-12, rtol=0)
    assert (logits - module.prefill(tokens)).abs().max() > 1e-2
    assert view.kv_cache.kv.shape[0] == 3


def test_a_hugging_face_view_is_the_model_without_the_skipped_layers(llama_dir: str) -> None:
    model = HFCausalLM(llama_dir, dtype=torch.float64)
    tokens = torch.randint(0, V, (1, 15), generator=torch.Generator().manual_seed(2))
    full = skip_layers(model, range(4)).prefill(tokens)
    torch.testing.assert_close(full, model.prefill(tokens), atol=1e-12, rtol=0)
    config = LlamaConfig.from_pretrained(llama_dir, num_hidden_layers=2)
    smaller = LlamaForCausalLM(config).to(torch.float64).eval()
    state = model.model.state_dict()
    smaller.load_state_dict({k.replace("model.layers.3.", "model.layers.1."): v
                             for k, v in state.items()
                             if not k.startswith(("model.layers.1.", "model.layers.2."))})
    with torch.no_grad():
        expected = smaller(tokens).logits
    view = skip_layers(model, [0, 3])
    torch.testing.assert_close(view.prefill(tokens), expected, atol=1e-10, rtol=0)
    assert len(view.cache.layers) == 2 and len(model.cache.layers) == 4


# ---- lossless decoding ----------------------------------------------------------------------


@pytest.mark.parametrize("options, algo", [
    (FIXED, "chain"), (FIXED, "sequoia"), (FIXED, "dyspec"), (SWIFT, "chain"),
    (SWIFT, "sequoia"), (DEL, "chain"), (DEL, "sequoia")],
    ids=["fixed-chain", "fixed-sequoia", "fixed-dyspec", "swift-chain", "swift-sequoia",
         "del-chain", "del-sequoia"])
def test_greedy_self_speculation_equals_autoregressive(target: Model, prompts, options,
                                                       algo: str) -> None:
    drafter = drafter_of(target, options)
    calibrate = calibration(target, None, prompts[-2:], MAX_NEW, 0.0, 0, "test prompts")
    method = resolve_method(algo, 8, drafter, calibrate)
    accepted = assert_lossless(target, drafter, method, prompts[:3])
    assert max(accepted) >= 2  # deep paths and the view's compaction are exercised


@pytest.mark.parametrize("options", [FIXED, SWIFT], ids=["fixed", "swift"])
def test_a_hugging_face_target_drafts_for_itself_losslessly(llama_dir: str, prompts,
                                                             options) -> None:
    target = wrap(HFCausalLM(llama_dir, dtype=torch.float64), "hf")
    # a chain of one commits the root the view ran last (Hugging Face compaction keeps it)
    for tree in (BUSHY, Tree.chain(1, LAYERSKIP)):
        assert_lossless(target, drafter_of(target, options), static_method("t", tree, "test"),
                        prompts[:3])
    with pytest.raises(InputError, match="Hugging Face adapter"):
        drafter_of(target, DEL)


def test_a_llama_folder_loaded_as_a_transformer_drafts_for_itself_in_every_mode(
        llama_dir: str, prompts) -> None:
    target = load_model(llama_dir, runtime=None)[0]
    target.model.to(torch.float64)
    for options in (FIXED, SWIFT, DEL):
        assert_lossless(target, drafter_of(target, options), static_method("t", BUSHY, "test"),
                        prompts[:3])


@pytest.mark.slow
@pytest.mark.skipif(not weights_path("tiny-code").is_file(), reason="zoo model not trained yet")
@pytest.mark.parametrize("mode", ["1,2", "swift", "del"])
def test_the_zoo_target_drafts_for_itself_losslessly(mode: str) -> None:
    result = generate("tiny-code", LAYERSKIP, "builtin:code-edit", 3, 8, algo="chain",
                      budget=5, verify_lossless=True, threads=1, layer_skip=mode)
    assert result.lossless and result.drafter == LAYERSKIP


def test_sampled_self_speculation_follows_the_seed(target: Model, prompts) -> None:
    tree = Tree.from_rank_paths([(0,), (1,), (0, 0), (0, 1)], LAYERSKIP)

    def run(seed: int) -> list[list[int]]:
        g = torch.Generator().manual_seed(seed)
        drafter = make_drafter(LAYERSKIP, V, None, "with", 0.8, g, target=target,
                               layer_skip=FIXED)
        return speculative_generate(target, drafter, static_method("t", tree, "test"),
                                    prompts[:3], MAX_NEW, "specinfer", 0.8, seed,
                                    threads=1).outputs

    assert run(3) == run(3)
    assert run(3) != run(4)


# ---- replay, SWIFT's search, DEL's rule -------------------------------------------------------


@pytest.mark.parametrize("options, tree", [(FIXED, BUSHY), (SWIFT, BUSHY),
                                           (DEL, Tree.chain(1, LAYERSKIP)),
                                           (DEL, Tree.chain(4, LAYERSKIP)),
                                           (DEL, Tree.chain(7, LAYERSKIP))],
                         ids=["fixed", "swift", "del-chain-1", "del-chain-4", "del-chain-7"])
def test_replaying_the_trace_predicts_the_executors_steps_exactly(target: Model, prompts,
                                                                  options, tree: Tree) -> None:
    trace = collect_tokens(target, [drafter_of(target, options)], prompts, MAX_NEW)
    drafter = drafter_of(target, options)
    runs = [decode_speculative(target, drafter, static_method("t", tree, "test"), p, MAX_NEW)
            for p in prompts]
    assert sum(map(sum, (r.accepted for r in runs))) >= len(prompts)
    replayed = replay(trace, tree)
    steps = []
    for r in runs:  # replay accepts no node past a request's last position
        left = MAX_NEW - sum(a + 1 for a in r.accepted[:-1])
        steps += [*r.accepted[:-1], min(r.accepted[-1], left)]
    accepted = np.bincount(steps, minlength=tree.depth + 1)
    assert replayed.steps == sum(len(r.accepted) for r in runs)
    np.testing.assert_array_equal(replayed.accepted_hist[: tree.depth + 1], accepted)


def test_swift_keeps_the_best_of_the_sets_it_scored_on_the_first_requests(target: Model,
                                                                         prompts) -> None:
    drafter = drafter_of(target, SWIFT)
    chain = static_method("chain", Tree.chain(4, LAYERSKIP), "test")
    outputs = [decode_speculative(target, drafter, chain, p, MAX_NEW).output for p in prompts[:2]]
    assert len(drafter.search) == 2**4 - 2  # every non-empty proper subset of the 4 layers
    for label, score in drafter.search.items():
        skip = {int(i) for i in label.split(",")}
        view = skip_layers(target.model, [i for i in range(4) if i not in skip])
        view.setup_caches(1, 64)
        hits = 0
        for prompt, output in zip(prompts, outputs, strict=False):
            text = torch.tensor(prompt + output)
            guess = view.prefill(text[None, :-1])[0, len(prompt) - 1 :].argmax(-1)
            hits += int((guess == text[len(prompt):]).sum())
        assert score["match"] == hits / (2 * MAX_NEW)
        assert score["tokens_per_layer"] == tokens_per_layer(hits / (2 * MAX_NEW), 4,
                                                             4 - len(skip), 4)
    best = max(drafter.search, key=lambda s: drafter.search[s]["tokens_per_layer"])
    assert drafter.skipped == best
    assert drafter.model.model.spec.n_layers == 4 - len(best.split(","))
    decode_speculative(target, drafter, chain, prompts[2], MAX_NEW)
    assert drafter.skipped == best  # fixed after the search


def test_dels_exit_maximises_tokens_per_layer_at_the_recent_match_rates() -> None:
    exits, gamma, total = (1, 2, 3), 4, 4
    # TPL = Σ_{i≤4} α^i / (4E + 4): α = (0, 1, 1) gives 1/8, 5/12, 5/16
    assert choose_exit(torch.tensor([0, 8, 8]), 8, exits, gamma, total) == 1
    assert choose_exit(torch.tensor([8, 8, 8]), 8, exits, gamma, total) == 0  # 5/8 cheapest
    # α = (¼, ½, 1): 1.332/8 = 0.167, 1.9375/12 = 0.161, 5/16 = 0.3125
    assert choose_exit(torch.tensor([2, 4, 8]), 8, exits, gamma, total) == 2
    assert choose_exit(torch.tensor([0, 0, 0]), 0, exits, gamma, total) == 0  # nothing seen


class RecordingExits(DynamicExitDrafter):
    """DEL, recording (committed tokens, exit) at every step."""

    def _catch_up(self) -> None:
        super()._catch_up()
        self.chosen.append((len(self.context), self.model.exit))


def test_dels_exit_per_step_follows_its_rule_and_collect_reproduces_it(target: Model,
                                                                       prompts) -> None:
    drafter = RecordingExits(target, DEL)
    drafter.chosen = []
    prompt = prompts[0]
    run = decode_speculative(target, drafter, static_method("c", Tree.chain(3, LAYERSKIP), "t"),
                             prompt, MAX_NEW)
    truth = torch.tensor(prompt + run.output)
    exit_logits = []
    for e in (1, 2, 3):
        view = skip_layers(target.model, range(e))
        view.setup_caches(1, truth.numel())
        exit_logits.append(view.prefill(truth[None, :-1])[0])
    hits = torch.stack([x.argmax(-1) == truth[1:] for x in exit_logits]).long()
    drafter.start(prompt, truth.numel())
    collected = drafter.truth_logits(truth.tolist())
    for length, chosen in drafter.chosen:
        lo = max(0, length - 1 - DEL.window)
        expected = choose_exit(hits[:, lo : length - 1].sum(1), length - 1 - lo, (1, 2, 3), 4, 4)
        assert chosen == expected + 1
        torch.testing.assert_close(collected[length - 1], exit_logits[chosen - 1][length - 1])
    assert len({e for _, e in drafter.chosen}) > 1  # the window moves the choice


# ---- options, seeds, pricing ------------------------------------------------------------------


def test_swifts_random_candidates_follow_the_seed() -> None:
    first = candidate_skips(6, 8, 0, (2, 3))
    assert first == candidate_skips(6, 8, 0, (2, 3)) != candidate_skips(6, 8, 1, (2, 3))
    assert first[0] == (2, 3) and len(set(first)) == 8 and all(0 < len(s) < 6 for s in first)
    assert len(candidate_skips(4, 16, 0, (1, 2))) == 14  # exhaustive when it fits
    assert parse_layer_skip("1,2", seed=5) == LayerSkipOptions("fixed", (1, 2), seed=5)


def test_bad_layer_skip_options_are_one_line_input_errors(target: Model) -> None:
    for text in ("fast", "1;2"):
        with pytest.raises(InputError, match="--layer-skip"):
            parse_layer_skip(text)
    with pytest.raises(InputError, match="proper subset"):
        drafter_of(target, LayerSkipOptions("fixed", (0, 1, 2, 3)))
    with pytest.raises(InputError, match="needs the target"):
        make_drafter(LAYERSKIP, V)
    ssm = ModelSpec(name="s", arch="ssm", n_layers=2, d_model=32, vocab_size=V, d_state=16,
                    ssm_heads=8, ssm_head_dim=8, ssm_groups=2)
    with pytest.raises(InputError, match="Transformer or Hugging Face"):
        drafter_of(wrap(Mamba2.random(ssm)), SWIFT)


def test_optimize_tree_prices_the_drafter_as_the_target_with_its_kept_layers(
        target: Model, prompts, tmp_path) -> None:
    trace = collect_tokens(target, [drafter_of(target, FIXED)], prompts[:2], MAX_NEW)
    settings = trace.metadata["drafters"][LAYERSKIP]
    assert settings["mean_layers"] == 3 and settings["target_layers"] == 4
    assert json.loads(json.dumps(settings))["options"]["skip"] == [2]
    path = write_trace(trace, tmp_path / "self.parquet")
    doc = run_optimize(OptimizeRequest(
        deployment=deployment("cpu-2core", target="llama-2-7b"),
        trace_path=path, budget=8)).to_dict()
    # the trace's target is not in the catalogue: priced on llama-2-7b, 3/4 of its 32 layers
    assert doc["source"] == LAYERSKIP and doc["drafter"] == "llama-2-7b[24/32 layers]"
