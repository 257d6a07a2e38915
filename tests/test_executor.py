"""The executor: greedy speculative decoding equals autoregressive decoding token for token, for
every drafter × method on a Transformer, a Mamba-2 (both tree verifiers, which agree) and a
Hugging Face Llama; sampled decoding is deterministic for a seed.

Models are tiny and random (losslessness does not depend on the weights), in float64 so that a
tree pass and a one-token pass give the same argmax. The draft model is a perturbed copy of the
target, so drafts are often accepted and deep paths and compaction are exercised; each prompt
repeats its start after the target's own continuation of it, so the copying drafters (n-gram,
suffix, Goose's spine) find matches too.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch
from tiny_pair import noisy_copy, save_tiny_llama, self_repeating_prompts, tiny_spec

from specscope.errors import InputError
from specscope.executor.drafters import DRAFTERS, make_drafter
from specscope.executor.generate import calibration, generate, with_branches
from specscope.executor.loop import (
    commit,
    decode_autoregressive,
    decode_speculative,
    prefill,
    speculative_generate,
    verify_step,
)
from specscope.executor.methods import Method, resolve_method, static_method
from specscope.executor.targets import Model, wrap
from specscope.executor.verify import greedy
from specscope.models.spec import ModelSpec
from specscope.models.torch import Mamba2, Transformer
from specscope.models.torch.hf import HFCausalLM
from specscope.models.zoo import load_zoo_model, weights_path
from specscope.models.zoo.prompts import load_prompts
from specscope.tree import Tree

torch.set_num_threads(1)

V = 61
PROMPTS = 32
MAX_NEW = 10
BUDGET = 10
METHODS = ("sequoia", "dyspec", "specdecpp", "goose", "chain")
BASE_DRAFTERS = ("draft", "ngram", "suffix", "recycle", "goose")
"""Drafters the trained-zoo and SSM matrices run with every method. What those matrices add
over the synthetic Transformer's full one is the target side (SSM verification, a trained
model's deep paths), so the later drafters (stand, rasd, layerskip: their own test files check
them on the zoo) run there with one static and one dynamic method only."""
SSM_DRAFTERS = ("draft", "ngram", "goose")
"""Drafters of the trained-SSM matrix: what it adds is the target side (STree and naive
verification of every method's tree shapes), which a draft model, a sequence drafter and Goose's
mixed trees cover; suffix and recycling draft the same shapes as n-gram (the synthetic Mamba-2
and the zoo Transformer matrices run them). Self-speculation skips layers of a Transformer."""
SSM_METHODS = ("sequoia", "dyspec", "goose", "specdecpp")
"""Methods of the trained-SSM matrix: a chain is the shape SpecDec++'s trees take, so its own
column adds no shape the others lack."""
SSM_PROMPTS = 12
"""Prompts of the trained-SSM matrix: each of its 12 cases decodes them twice (STree and naive),
in float64 (about 8 s a case at 16 prompts on a slow run of the 2-core box, 94 s in all)."""
ZOO_PROMPTS = 16
"""Prompts of the trained zoo Transformer's matrix: 31 cases in float64 (3.3 s a case at 32
prompts, 101 s in all, on a slow run); the synthetic models keep `PROMPTS`."""
ZOO_CASES = [(d, a) for d in DRAFTERS for a in METHODS
             if d in BASE_DRAFTERS or a in ("sequoia", "dyspec")]
LLAMA = tiny_spec("tiny-llama", V, max_seq_len=64)
MAMBA = ModelSpec(name="tiny-mamba2", arch="ssm", n_layers=2, d_model=32, vocab_size=V,
                  d_state=16, ssm_heads=8, ssm_head_dim=8, ssm_groups=2)


class Case:
    """A target, its draft model, evaluation prompts with their autoregressive outputs, and
    other prompts for calibration passes (the last 4; default: self-repeating ones)."""

    def __init__(self, target: Model, draft: Model | None,
                 prompts: list[list[int]] | None = None) -> None:
        self.target, self.draft = target, draft
        prompts = prompts or self_repeating_prompts(target, PROMPTS + 4)
        self.prompts, self.others = prompts[:-4], prompts[-4:]
        self.reference = [decode_autoregressive(target, p, MAX_NEW).output for p in self.prompts]

    def method(self, drafter_name: str, algo: str):
        vocab = self.target.vocab_size
        drafter = make_drafter(drafter_name, vocab, self.draft, target=self.target)
        if algo == "goose":
            drafter = with_branches(drafter, vocab)
        calibrate = calibration(self.target, self.draft, self.others, MAX_NEW, 0.0, 0,
                                "test prompts")
        return drafter, resolve_method(algo, BUDGET, drafter, calibrate)


@pytest.fixture(scope="module")
def transformer() -> Case:
    model = Transformer.random(LLAMA, seed=0, dtype=torch.float64, std=0.2)
    return Case(wrap(model), wrap(noisy_copy(model, LLAMA), "draft"))


@pytest.fixture(scope="module")
def mamba() -> Case:
    model = Mamba2.random(MAMBA, seed=0, dtype=torch.float64, std=0.3)
    return Case(wrap(model), wrap(noisy_copy(model, MAMBA), "draft"))


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> str:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), V, 2)


@pytest.fixture(scope="module")
def hf(llama_dir: str) -> Case:
    target = HFCausalLM(llama_dir, dtype=torch.float64)
    ours = Transformer(LLAMA)
    ours.load_state_dict(target.model.state_dict())
    return Case(wrap(target), wrap(noisy_copy(ours, LLAMA), "draft"))


def assert_lossless(case: Case, drafter_name: str, algo: str) -> list[list[int]]:
    """Decode every prompt speculatively; outputs equal the autoregressive ones. Returns the
    accepted lengths of every step."""
    drafter, method = case.method(drafter_name, algo)
    steps = []
    for prompt, expected in zip(case.prompts, case.reference, strict=True):
        run = decode_speculative(case.target, drafter, method, prompt, MAX_NEW)
        assert run.output == expected
        steps.append(run.accepted)
    return steps


@pytest.mark.parametrize("algo", METHODS)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_transformer_greedy_equals_autoregressive(transformer: Case, drafter: str,
                                                   algo: str) -> None:
    assert_lossless(transformer, drafter, algo)


def test_the_perturbed_draft_is_accepted_often_enough_to_exercise_deep_paths(
    transformer: Case,
) -> None:
    steps = assert_lossless(transformer, "draft", "sequoia")
    accepted = [a for s in steps for a in s]
    assert np.mean(accepted) > 1.5 and max(accepted) >= 4


def assert_lossless_with_both_ssm_verifiers(case: Case, drafter: str, algo: str) -> None:
    """Lossless with STree and with naive verification, and the two accept the same drafts."""
    stree = assert_lossless(case, drafter, algo)
    case.target.ssm_verify = "naive"
    try:
        naive = assert_lossless(case, drafter, algo)
    finally:
        case.target.ssm_verify = "stree"
    assert naive == stree


def test_mamba2_greedy_equals_autoregressive_with_a_draft_model(mamba: Case) -> None:
    assert_lossless_with_both_ssm_verifiers(mamba, "draft", "sequoia")


def test_hf_llama_greedy_equals_autoregressive_with_a_draft_model(hf: Case) -> None:
    assert_lossless(hf, "draft", "sequoia")


@pytest.mark.slow
@pytest.mark.parametrize("algo", METHODS)
@pytest.mark.parametrize("drafter", SSM_DRAFTERS)
def test_mamba2_greedy_equals_autoregressive_with_both_verifiers(mamba: Case, drafter: str,
                                                                  algo: str) -> None:
    assert_lossless_with_both_ssm_verifiers(mamba, drafter, algo)


@pytest.mark.slow
@pytest.mark.parametrize("algo", METHODS)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_hf_llama_greedy_equals_autoregressive(hf: Case, drafter: str, algo: str) -> None:
    assert_lossless(hf, drafter, algo)


@pytest.mark.parametrize("rule", ["deterministic", "specinfer", "sequoia"])
def test_sampled_decoding_is_deterministic_for_a_seed(transformer: Case, rule: str) -> None:
    sample = {"specinfer": "with", "sequoia": "without"}.get(rule)
    tree = Tree.from_rank_paths([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)])

    def run(seed: int) -> list[list[int]]:
        g = torch.Generator().manual_seed(seed)
        drafter = make_drafter("draft", V, transformer.draft, sample, 0.8, g)
        result = speculative_generate(transformer.target, drafter,
                                      static_method("t", tree, "test"), transformer.prompts[:4],
                                      MAX_NEW, rule, 0.8, seed, threads=1)
        return result.outputs

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_result_reports_rates_phases_and_lossless(transformer: Case) -> None:
    drafter, method = transformer.method("draft", "sequoia")
    result = speculative_generate(transformer.target, drafter, method, transformer.prompts[:4],
                                  MAX_NEW, verify_lossless=True, threads=1)
    assert result.lossless and result.mismatches == 0
    assert result.outputs == transformer.reference[:4]
    assert result.new_tokens == 4 * MAX_NEW and result.threads == 1
    assert result.tokens_per_step == pytest.approx(result.mean_accepted + 1)
    assert result.steps == result.accepted.size == result.tree_sizes.size
    assert min(result.phases.draft_s, result.phases.verify_s, result.ar_decode_s) > 0
    assert result.tokens_per_s > 0 and result.ar_tokens_per_s > 0
    assert "calibration pass on 4 test prompts" in result.tree_origin
    assert result.to_dict()["speedup"] == pytest.approx(result.speedup)


def test_rules_that_draw_children_refuse_dynamic_trees(transformer: Case) -> None:
    drafter, method = transformer.method("draft", "dyspec")
    with pytest.raises(InputError, match="static tree"):
        speculative_generate(transformer.target, drafter, method, transformer.prompts[:1], 4,
                             "sequoia", 0.8, threads=1)
    with pytest.raises(InputError, match="temperature"):
        speculative_generate(transformer.target, drafter, method, transformer.prompts[:1], 4,
                             "greedy", 0.8, threads=1)


def test_a_root_only_tree_is_autoregressive_decoding(transformer: Case) -> None:
    drafter = make_drafter("ngram", V)
    method = Method("root", static_method("root", Tree.root(), "test").build, 1, "test", True)
    run = decode_speculative(transformer.target, drafter, method, transformer.prompts[0], MAX_NEW)
    assert run.output == transformer.reference[0]
    assert run.accepted == [0] * MAX_NEW


ZOO = weights_path("tiny-code").is_file()
needs_zoo = pytest.mark.skipif(not ZOO, reason="zoo model tiny-code not trained yet")


@needs_zoo
def test_generate_by_name_on_the_zoo_model_is_lossless() -> None:
    result = generate("tiny-code", "ngram", "builtin:code-edit", 2, 8, algo="sequoia", budget=8,
                      verify_lossless=True, threads=1)
    assert result.lossless and result.requests == 2 and result.new_tokens == 16
    assert "calibration pass on 4 other prompts" in result.tree_origin


@needs_zoo
def test_the_zoo_target_carries_out_edits_by_copying() -> None:
    # greedy decoding is deterministic, so this is the shipped weights' measured behaviour: the
    # target copies the body it is asked to edit, and prompt lookup drafts the copy (weights
    # trained without edit examples, or prompts ending in a bare newline, gave 1.3-2.2 here)
    result = generate("tiny-code", "ngram", "builtin:code-edit", 8, 64, algo="chain", budget=16,
                      threads=1)
    assert result.tokens_per_step > 3.0


@pytest.mark.slow
@needs_zoo
@pytest.mark.parametrize(("drafter", "algo"), ZOO_CASES)
def test_zoo_greedy_equals_autoregressive_on_code_edit(drafter: str, algo: str) -> None:
    if drafter == "draft" and not weights_path("tiny-code-draft").is_file():
        pytest.skip("zoo draft model tiny-code-draft not trained yet")
    case = zoo_case()
    assert_lossless(case, drafter, algo)


@pytest.mark.slow
@pytest.mark.skipif(not weights_path("tiny-ssm").is_file(), reason="tiny-ssm not trained yet")
@pytest.mark.parametrize("algo", SSM_METHODS)
@pytest.mark.parametrize("drafter", SSM_DRAFTERS)
def test_zoo_ssm_greedy_equals_autoregressive_with_both_verifiers(drafter: str,
                                                                   algo: str) -> None:
    """The trained tiny-ssm on 16 code-edit prompts: STree and naive are lossless and agree."""
    if drafter == "draft" and not weights_path("tiny-code-draft").is_file():
        pytest.skip("zoo draft model tiny-code-draft not trained yet")
    assert_lossless_with_both_ssm_verifiers(zoo_case("tiny-ssm", SSM_PROMPTS), drafter, algo)


@cache
def zoo_case(target: str = "tiny-code", prompts: int = ZOO_PROMPTS) -> Case:
    """A zoo target with the zoo's draft in float64 on the first `prompts` code-edit prompts
    (and 4 more to calibrate)."""
    module, tokenizer = load_zoo_model(target, dtype=torch.float64)
    draft = None
    if weights_path("tiny-code-draft").is_file():
        draft = wrap(load_zoo_model("tiny-code-draft", dtype=torch.float64)[0])
    texts = load_prompts("builtin:code-edit")[: prompts + 4]
    return Case(wrap(module), draft, [tokenizer.encode(t) for t in texts])


def subtree(tree: Tree, keep: list[int]) -> Tree:
    """The tree induced by the ancestor-closed, sorted node list `keep`."""
    index = {v: i for i, v in enumerate(keep)}
    return Tree(np.array([-1] + [index[int(tree.parents[v])] for v in keep[1:]]),
                tree.ranks[keep], tuple(tree.sources[v] for v in keep))


def test_goose_accepts_at_least_what_its_spine_or_its_root_branches_would_alone(
    transformer: Case,
) -> None:
    """docs/methods.md#goose: the Goose tree contains the spine chain and the root branches, so
    every step accepts at least as many tokens as either would on its own."""
    drafter, method = transformer.method("ngram", "goose")
    gains = 0
    for prompt in transformer.prompts[:12]:
        prefill(transformer.target, drafter, prompt, len(prompt) + MAX_NEW + method.max_size)
        context = list(prompt)
        while len(context) < len(prompt) + MAX_NEW:
            drafter.begin(context)
            drafted = method.build(drafter, context[-1])
            verdict, tokens, logits = verify_step(transformer.target, drafted, drafter, "greedy",
                                                  0.0, torch.Generator())
            tree = drafted.tree
            spine = [v for v in range(tree.size) if tree.sources[v] in ("root", "spine")]
            roots = [v for v in range(tree.size)
                     if v == 0 or tree.sources[tree.path(v)[1]] == "recycle"]
            alone = [greedy(subtree(tree, keep), tokens[keep].tolist(), logits[keep]).accepted
                     for keep in (spine, roots)]
            assert verdict.accepted >= max(alone)
            gains += verdict.accepted > max(alone)
            context += commit(transformer.target, drafter, verdict, tokens, logits)
            method.observe(drafted, verdict)
    assert gains > 0  # spine and branches together beat both somewhere


def test_mismatches_count_differing_and_missing_tokens() -> None:
    from specscope.executor.loop import mismatched

    assert mismatched([1, 2, 3], [1, 2, 3]) == 0
    assert mismatched([1, 9, 3], [1, 2, 3]) == 1
    assert mismatched([1, 2], [1, 2, 3]) == 1
    assert mismatched([7, 2, 3, 4], [1, 2, 3]) == 2
