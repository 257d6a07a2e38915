"""RSD (RSD-C: Gumbel-top-k children on a k-ary tree; RSD-S: stochastic beam search) and
Traversal Verification reproduce the target's distribution of the first two emitted tokens
(chi-square on a small vocabulary, with a drafter whose q the test sets), and biased variants are
caught; traversal reduces to SpecInfer on one level and to Block Verification on a chain, draw
for draw; the executor runs RSD-S only with the rule its draws need."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from tiny_pair import tiny_spec

from specscope.draft import DraftedTree, DraftNode, Proposal
from specscope.errors import InputError
from specscope.executor.drafters import Drafter, DraftModelDrafter, make_drafter
from specscope.executor.loop import speculative_generate
from specscope.executor.methods import (
    MAX_DEPTH,
    Method,
    dyspec_method,
    resolve_method,
    rsd_s_method,
    static_method,
)
from specscope.executor.rsd import draft_sbs, sbs_widths
from specscope.executor.targets import wrap
from specscope.executor.verify import DRAFT_SAMPLING, Verdict, draw_children, specinfer, verify
from specscope.models.torch import Transformer
from specscope.optimizers.baselines import kary_tree
from specscope.optimizers.sequoia import SequoiaDP
from specscope.tree import Tree

torch.set_num_threads(1)

V = 5
SAMPLES = 2500


def tables(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Target r(·|last token) and draft q(·|last token), rows (V,) per token, deliberately apart."""
    rng = np.random.default_rng(seed)
    r = rng.dirichlet(np.full(V, 1.0), size=V)
    q = rng.dirichlet(np.full(V, 0.5), size=V)
    return torch.tensor(r), torch.tensor(q)


class TableDrafter(Drafter):
    """A drafter whose q after a node is the row of `q` for the node's token. `floor` > 0 drops
    the continuations below that draft probability before drawing, while `draft_probs` keeps the
    real q (a cut on the token itself: the biased variant of RSD-S's truncation)."""

    source = "draft:table"

    def __init__(self, q: torch.Tensor, sample: str, generator: torch.Generator,
                 floor: float = 0.0) -> None:
        super().__init__()
        self.q, self.sample, self.generator, self.floor = q, sample, generator, floor

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        self.draft_probs = {}

    def distributions(self, nodes: Sequence[DraftNode]) -> list[torch.Tensor]:
        out = []
        for v in nodes:
            q = self.q[v.token]
            self.draft_probs[v.id] = q
            kept = torch.where(q >= self.floor, q, 0.0)
            out.append(kept / kept.sum())
        return out

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        out = []
        for q in self.distributions(nodes):
            kids = draw_children(q, k, self.sample == "with", self.generator)
            out.append((kids, q[kids].tolist()))
        return out


Build = Callable[[Drafter, int], DraftedTree]


def two_tokens(build: Build, rule: str, r: torch.Tensor, drafter: TableDrafter,
               g: torch.Generator) -> tuple[int, int]:
    """The first two tokens emitted after token 0: steps of `build`'s tree verified by `rule`."""
    out: list[int] = []
    while len(out) < 2:
        context = [0, *out]
        drafter.begin(context)
        drafted = build(drafter, context[-1])
        tokens = drafted.tokens.tolist()
        draft_probs = [drafter.draft_probs.get(i) for i in range(drafted.tree.size)]
        verdict = verify(rule, drafted.tree, tokens, r[tokens].log(), 1.0, draft_probs, g)
        out += [tokens[v] for v in verdict.path[1:]] + [verdict.bonus]
    return out[0], out[1]


def joint_pvalue(build: Build, rule: str, sample: str, seed: int = 1, floor: float = 0.0
                 ) -> float:
    """Chi-square p-value of the first two tokens' counts against r(a|0)·r(b|a)."""
    r, q = tables(seed)
    g = torch.Generator().manual_seed(seed)
    drafter = TableDrafter(q, sample, g, floor)
    counts = np.zeros((V, V))
    for _ in range(SAMPLES):
        a, b = two_tokens(build, rule, r, drafter, g)
        counts[a, b] += 1
    expected = (r[0][:, None] * r).numpy() * SAMPLES
    return float(chisquare(counts.ravel(), expected.ravel()).pvalue)


def static(tree: Tree) -> Build:
    return static_method("test", tree, "test").build


def sbs(*widths: int) -> Build:
    return partial(draft_sbs, widths=widths)


# a chain of 3 under the first child, two children with two each: multi-child internal nodes,
# siblings above a deeper path, and a root with three children
TREE = Tree.from_rank_paths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (1, 1), (0, 0, 0)])
DELAYED = Tree.from_rank_paths([(0,), (0, 0), (0, 1), (0, 2), (0, 0, 0), (0, 1, 0)])


# ---- RSD ---------------------------------------------------------------------------------------


def test_rsd_c_k_ary_tree_with_gumbel_top_k_children_preserves_the_target() -> None:
    assert joint_pvalue(static(kary_tree(2, 7)), "rsd", "without") > 1e-3


@pytest.mark.parametrize("widths", [(3, 3), pytest.param((1, 3), marks=pytest.mark.slow)],
                         ids=["beam", "delayed"])
def test_rsd_s_stochastic_beam_search_preserves_the_target(widths: tuple[int, ...]) -> None:
    assert joint_pvalue(sbs(*widths), "rsd", "without") > 1e-3


def test_rsd_s_with_a_fixed_probability_floor_is_detected_as_biased() -> None:
    assert joint_pvalue(sbs(3, 3), "rsd", "without", floor=0.15) < 1e-6


def test_rsd_s_keeps_the_w_sequences_of_largest_perturbed_probability_in_draw_order() -> None:
    """Each level holds min(W, candidates) distinct sequences; a parent's children are distinct
    tokens; node ids are breadth-first; q is kept at every expanded node."""
    _, q = tables(2)
    g = torch.Generator().manual_seed(0)
    drafter = TableDrafter(q, "without", g)
    for _ in range(50):
        drafter.begin([0])
        drafted = draft_sbs(drafter, 0, sbs_widths(12, 4, delay=1))
        tree = drafted.tree
        assert np.bincount(tree.depths).tolist() == [1, 1, 4, 4, 2]
        for u, kids in enumerate(tree.children):
            assert len({int(drafted.tokens[c]) for c in kids}) == len(kids)
            assert [int(tree.ranks[c]) for c in kids] == list(range(len(kids)))
            assert (u in drafter.draft_probs) == (tree.depths[u] < tree.depth)


def test_generate_resolves_rsd_s_to_the_size_and_depth_of_the_sequoia_tree() -> None:
    p = np.array([0.6, 0.2, 0.1, 0.05])
    _, q = tables(3)
    drafter = TableDrafter(q, "without", torch.Generator().manual_seed(0))
    method = resolve_method("rsd-s", 16, drafter, calibrate=None, stored=p)
    assert method.draws == "without" and not method.static and method.max_size == 16
    drafter.begin([0])
    tree = method.build(drafter, 0).tree
    assert tree.size == 16 and tree.depth <= SequoiaDP(p, 16, MAX_DEPTH).tree(16).depth


def test_sbs_widths_fill_the_budget_after_the_delay_within_the_depth_cap() -> None:
    assert sbs_widths(16, 4) == [4, 4, 4, 3]
    assert sbs_widths(16, 4, delay=2) == [1, 1, 4, 4, 4, 1]
    assert sbs_widths(32, 2, max_depth=4) == [2, 2, 2, 2]
    with pytest.raises(InputError, match="beam"):
        sbs_widths(8, 0)


# ---- Traversal Verification --------------------------------------------------------------------


@pytest.mark.parametrize("tree", [TREE, pytest.param(DELAYED, marks=pytest.mark.slow)],
                         ids=["tree", "delayed"])
def test_traversal_verification_preserves_the_target(tree: Tree) -> None:
    assert joint_pvalue(static(tree), "traversal", "with") > 1e-3


def test_traversal_on_children_drawn_without_replacement_is_detected_as_biased() -> None:
    assert joint_pvalue(static(TREE), "traversal", "without") < 1e-6


def random_rows(seed: int, n: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    rng = np.random.default_rng(seed)
    r = torch.tensor(rng.dirichlet(np.full(V, 1.0), size=n))
    return r, list(torch.tensor(rng.dirichlet(np.full(V, 0.7), size=n)))


def test_traversal_on_one_level_is_specinfer_draw_for_draw() -> None:
    tree = Tree.from_rank_paths([(0,), (1,), (2,)])
    for seed in range(40):
        r, q = random_rows(seed, 4)
        tokens = [0, *draw_children(q[0], 3, True, torch.Generator().manual_seed(seed))]
        a = verify("traversal", tree, tokens, r.log(), 1.0, q, torch.Generator().manual_seed(7))
        b = specinfer(tree, tokens, r, q, torch.Generator().manual_seed(7))
        assert a == b


def block_verification(tokens: list[int], r: torch.Tensor, q: list[torch.Tensor],
                       g: torch.Generator) -> Verdict:
    """Block Verification (Sun et al. 2024) of a chain, written from its definition: weights
    p_i = min(1, p_{i-1}·r(x_i)/q(x_i)), acceptance h_i = Σ max(p_i r − q, 0) / (that + 1 − p_i)
    below the last token (h = p there), tried from the deepest; the bonus from the residual."""
    depth = len(tokens) - 1
    p = [1.0]
    for i in range(1, depth + 1):
        x = tokens[i]
        p.append(min(1.0, p[-1] * float(r[i - 1][x]) / float(q[i - 1][x])))
    for i in range(depth, -1, -1):
        if i == depth:
            h, rest = p[i], r[i]
        else:
            m = (p[i] * r[i] - q[i]).clamp_min(0.0)
            h, rest = float(m.sum()) / (float(m.sum()) + 1.0 - p[i]), m / m.sum()
        if i == 0 or float(torch.rand((), generator=g, dtype=torch.float64)) < h:
            return Verdict(list(range(i + 1)), int(torch.multinomial(rest, 1, generator=g)))
    raise AssertionError("unreachable")


def test_traversal_on_a_chain_is_block_verification_draw_for_draw() -> None:
    tree = Tree.chain(4)
    for seed in range(60):
        r, q = random_rows(seed, 5)
        g = torch.Generator().manual_seed(seed)
        tokens = [0]
        for i in range(4):
            tokens += draw_children(q[i], 1, True, g)
        a = verify("traversal", tree, tokens, r.log(), 1.0, q, torch.Generator().manual_seed(3))
        b = block_verification(tokens, r, q, torch.Generator().manual_seed(3))
        assert a == b


@pytest.mark.slow
@pytest.mark.parametrize("tree", [TREE, Tree.chain(4)], ids=["tree", "chain"])
def test_traversal_accepts_more_per_step_than_token_level_rejection_on_the_same_trees(
    tree: Tree,
) -> None:
    """Sequence-level acceptance is the point of the method: on the same drafted trees it
    accepts more drafts per step than SpecInfer's token-level rule (paired z-score > 3)."""
    r, q = tables(1)
    g = torch.Generator().manual_seed(0)
    drafter = TableDrafter(q, "with", g)
    gains = []
    for step in range(3000):
        drafter.begin([0])
        drafted = static(tree)(drafter, 0)
        tokens = drafted.tokens.tolist()
        dists = [drafter.draft_probs.get(i) for i in range(tree.size)]
        a, b = (verify(rule, tree, tokens, r[tokens].log(), 1.0, dists,
                       torch.Generator().manual_seed(step)).accepted
                for rule in ("traversal", "specinfer"))
        gains.append(a - b)
    assert np.mean(gains) / (np.std(gains) / np.sqrt(len(gains))) > 3


# ---- the executor ------------------------------------------------------------------------------


SPEC = tiny_spec("tiny", 50)


@pytest.fixture(scope="module")
def models() -> tuple:
    target = Transformer.random(SPEC, seed=0, dtype=torch.float64, std=0.3)
    draft = Transformer.random(SPEC, seed=1, dtype=torch.float64, std=0.3)
    return wrap(target, "target"), wrap(draft, "draft")


def generate_rsd_s(models: tuple, rule: str, method: Method, seed: int = 0):
    target, draft = models
    g = torch.Generator().manual_seed(seed)
    drafter = DraftModelDrafter(draft, DRAFT_SAMPLING.get(rule), 0.9, g)
    prompts = [[1, 2, 3, 4], [5, 6, 7, 8, 9]]
    return speculative_generate(target, drafter, method, prompts, 12, rule, 0.9, seed, threads=1)


def test_rsd_s_runs_in_the_executor_within_budget_and_is_deterministic(models: tuple) -> None:
    method = rsd_s_method(10, 3, delay=1)
    first = generate_rsd_s(models, "rsd", method)
    assert first.tree_sizes.max() <= 10 and first.new_tokens == 24
    assert first.outputs == generate_rsd_s(models, "sequoia", method).outputs
    assert first.outputs != generate_rsd_s(models, "rsd", method, seed=1).outputs


@pytest.mark.parametrize("rule", ["specinfer", "traversal"])
def test_rules_for_draws_with_replacement_refuse_rsd_s(models: tuple, rule: str) -> None:
    with pytest.raises(InputError, match="draws children without replacement"):
        generate_rsd_s(models, rule, rsd_s_method(10, 3))


def test_rsd_s_needs_a_drafter_with_a_distribution(models: tuple) -> None:
    with pytest.raises(InputError, match="--drafter draft"):
        speculative_generate(models[0], make_drafter("ngram", 50), rsd_s_method(8, 2),
                             [[1, 2, 3]], 4, "rsd", 0.9, threads=1)


def test_sampled_draft_rules_still_refuse_trees_picked_by_value(models: tuple) -> None:
    with pytest.raises(InputError, match="picks children by their value"):
        generate_rsd_s(models, "rsd", dyspec_method(8))
