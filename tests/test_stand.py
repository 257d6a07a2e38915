"""STAND: the n-gram table learns only committed text, greedy decoding is lossless, Gumbel-top-k
children verified by the Sequoia rule keep the target's distribution (and the biased pairing is
caught), a collected trace replays the executor exactly, and the data-driven tree keeps the most
accepted nodes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from scipy.stats import chisquare
from tiny_pair import self_repeating_prompts, tiny_spec

from specscope.draft import DraftNode
from specscope.errors import InputError
from specscope.executor.collect import collect_tokens
from specscope.executor.drafters import StandDrafter, make_drafter
from specscope.executor.drafters.stand import HORIZON
from specscope.executor.generate import calibration, generate
from specscope.executor.loop import decode_autoregressive, decode_speculative, speculative_generate
from specscope.executor.methods import MAX_DEPTH, fill_tree, resolve_method, static_method
from specscope.executor.targets import Model, wrap
from specscope.executor.verify import sequoia, specinfer
from specscope.hw_profiles.deployment import deployment
from specscope.models.torch import Transformer
from specscope.models.zoo import load_zoo_model, weights_path
from specscope.models.zoo.prompts import load_prompts
from specscope.optimizers.baselines import best_first_tree
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.optimizers.stand import data_driven_tree, template_tree
from specscope.trace import SCHEMA, Trace, accepted_lengths, replay, write_trace
from specscope.tree import Tree

torch.set_num_threads(1)

V = 61
MAX_NEW = 16
SPEC = tiny_spec("tiny-target", V, max_seq_len=96)


@pytest.fixture(scope="module")
def target():
    return wrap(Transformer.random(SPEC, seed=0, dtype=torch.float64, std=0.2))


@pytest.fixture(scope="module")
def prompts(target) -> list[list[int]]:
    """`start + continuation(start) + start`: the continuation repeats, so STAND has matches."""
    return self_repeating_prompts(target, 6)


def logits_of(*rows: list[float]) -> torch.Tensor:
    """Logits whose softmax at temperature 1 is each row (zeros become −inf)."""
    return torch.tensor(rows, dtype=torch.float64).log()


def proposal(d: StandDrafter, path: list[int], k: int = 8) -> tuple[list[int], list[float]]:
    """The candidates at the node below the root reached by `path` (tokens)."""
    node = DraftNode(0, -1, d.context[-1], 0)
    d.nodes = {0: node}
    for i, token in enumerate(path, start=1):
        node = DraftNode(i, i - 1, token, i)
        d.nodes[i] = node
    tokens, scores = d.propose([node], k)[0]
    return list(tokens), list(scores)


# ---- the table -------------------------------------------------------------------------------


def test_prompt_positions_learn_their_next_token_and_generated_ones_the_targets_mass() -> None:
    d = StandDrafter(6, max_n=1, width=2, horizon=0)
    prompt = [0, 3, 0]
    d.start(prompt, 16)
    d.learn(torch.tensor(prompt[:-1]), logits_of([0.9, 0.1, 0, 0, 0, 0], [1 / 6] * 6))
    d.begin(prompt)
    assert proposal(d, []) == ([3], [1.0])  # the prompt's "0 3", not the logits' guess
    # the root's distribution: top-2 of (0.1, 0.5, 0.4) merged into the entry of "0"
    d.learn(torch.tensor([0]), logits_of([0.1, 0.5, 0.4, 0, 0, 0]))
    d.begin([0, 3, 0, 1])
    # "0": {3: 1.0, 1: 0.5, 2: 0.4} over 2 observations, width 2 drops token 2
    tokens, scores = proposal(d, [0])
    assert tokens == [3, 1] and scores == pytest.approx([0.5, 0.25])
    assert proposal(d, []) == ([], [])  # nothing ever followed "1"


def test_the_last_horizon_positions_count_as_the_token_that_followed() -> None:
    d = StandDrafter(6, max_n=1, width=2, horizon=2)
    d.start([0, 3, 0], 16)
    d.learn(torch.tensor([0, 3]), logits_of([1 / 6] * 6, [1 / 6] * 6))
    d.learn(torch.tensor([0]), logits_of([0.1, 0.5, 0.4, 0, 0, 0]))
    d.begin([0, 3, 0, 1])
    # below the root "1" comes "0": position 0 (prompt: 3) and position 2, still within the
    # horizon of the node's text, as the token 1 that followed it (tie broken by token id)
    tokens, scores = proposal(d, [0])
    assert tokens == [1, 3] and scores == pytest.approx([0.5, 0.5])


@pytest.mark.parametrize("horizon", [2, 0])
def test_candidates_depend_on_the_nodes_text_alone_within_the_horizon(horizon: int) -> None:
    """What replay needs: a node two levels below the root gets the candidates that collection,
    drafting from the true prefix with the root and the path committed, gets. Horizon 0 (use
    every distribution as soon as it is committed) breaks it: the executor cannot know the
    root's distribution while drafting below it."""
    root = [0.0, 0.0, 0.6, 0.4, 0.0, 0.0]

    def drafter(rows: int) -> StandDrafter:
        d = StandDrafter(6, max_n=1, horizon=horizon)
        d.start([0, 1], 16)
        d.learn(torch.tensor([0, 1, 2][:rows]), logits_of([1 / 6] * 6, root, [1 / 6] * 6)[:rows])
        return d

    executor, collection = drafter(1), drafter(3)
    executor.begin([0, 1])
    collection.begin([0, 1, 2, 1])
    below = proposal(executor, [2, 1])
    assert (below == proposal(collection, [])) == (horizon == 2)


def test_longest_matching_context_decides() -> None:
    d = StandDrafter(9, horizon=0)
    prompt = [1, 2, 3, 4, 9, 2, 3, 6, 5, 2, 3]
    d.start(prompt, 32)
    d.learn(torch.tensor(prompt[:-1]), torch.zeros(len(prompt) - 1, 9))
    d.begin(prompt)
    assert proposal(d, [])[0] == [4, 6]  # "2 3" (twice) over "3"; "5 2 3" is new
    assert proposal(d, [4])[0] == [9]  # along the path: "2 3 4" → 9


def test_the_table_learns_only_committed_positions(target, prompts) -> None:
    """Decode with a bushy tree (rejected nodes every step); the drafter ends up proposing what a
    fresh one taught only the committed text and the target's logits there proposes."""
    tree = best_first_tree([0.5, 0.3, 0.2], 12, 4, "stand")
    for prompt in prompts[:3]:
        live = StandDrafter(V, horizon=2)
        run = decode_speculative(target, live, static_method("t", tree, "t"), prompt, MAX_NEW)
        assert any(n > a + 1 for n, a in zip(run.tree_sizes, run.accepted, strict=True))
        truth = prompt + run.output
        taught = StandDrafter(V, horizon=2)
        taught.start(prompt, len(truth))
        logits = target.prefill(torch.tensor(truth), len(truth))
        taught.learn(torch.tensor(truth[:-1]), logits)
        for d in (live, taught):
            d.begin(truth)
        for path in ([], [truth[3]], [truth[3], truth[4]], [truth[-3], truth[-2]]):
            (a, sa), (b, sb) = proposal(live, path), proposal(taught, path)
            assert a == b and np.allclose(sa, sb)


# ---- greedy: lossless, exact replay, the data-driven tree ----------------------------------


@pytest.mark.skipif(not weights_path("tiny-code").is_file(), reason="zoo model not trained yet")
@pytest.mark.parametrize(("algo", "budget"), [("stand", 16), ("chain", 9)])
def test_zoo_greedy_is_lossless(algo: str, budget: int) -> None:
    result = generate("tiny-code", "stand", "builtin:code-edit", 2, 16, algo=algo,
                      budget=budget, verify_lossless=True, threads=1)
    assert result.lossless and result.new_tokens == 32
    assert result.tokens_per_step > 1.5


@pytest.mark.parametrize("algo", ["stand", "best-first"])
def test_greedy_is_lossless_with_every_kind_of_method(target, prompts, algo: str) -> None:
    drafter = make_drafter("stand", V)
    method = resolve_method(algo, 10, drafter,
                            calibration(target, None, prompts[4:], MAX_NEW, 0.0, 0, "others"))
    for prompt in prompts[:4]:
        run = decode_speculative(target, drafter, method, prompt, MAX_NEW)
        assert run.output == decode_autoregressive(target, prompt, MAX_NEW).output


@pytest.fixture(scope="module")
def zoo() -> tuple[Model, list[list[int]]]:
    """The zoo target in float64 (a tree pass and a one-token pass agree on every ranking) and
    three code-edit prompts, where STAND's drafts are often accepted."""
    if not weights_path("tiny-code").is_file():
        pytest.skip("zoo model not trained yet")
    module, tokenizer = load_zoo_model("tiny-code", dtype=torch.float64)
    return wrap(module), [tokenizer.encode(t) for t in load_prompts("builtin:code-edit")[:3]]


def steps_of(accepted: np.ndarray, length: int) -> list[int]:
    """Accepted drafts of each step of one request, from its row of `accepted_lengths`."""
    pos, out = 0, []
    while pos < length:
        out.append(int(accepted[pos]))
        pos += out[-1] + 1
    return out


def test_replaying_a_stand_trace_predicts_the_executors_steps_exactly(zoo) -> None:
    """Long enough that the learned distributions decide candidates: learning from every tree
    node instead of the committed path makes requests here mismatch."""
    target, prompts = zoo
    vocab, new = target.vocab_size, 48
    trace = collect_tokens(target, [make_drafter("stand", vocab)], prompts, new)
    trees = [Tree.chain(8, "stand"), best_first_tree([0.6, 0.2, 0.1], 16, 8, "stand"),
             data_driven_tree(trace, "stand", 16, MAX_DEPTH)]
    for tree in trees:
        predicted = accepted_lengths(trace, tree)
        for prompt, row in zip(prompts, predicted, strict=True):
            run = decode_speculative(target, make_drafter("stand", vocab),
                                     static_method("t", tree, "test"), prompt, new)
            # the executor's last step may run past the request's end, where replay stops
            left = new - np.cumsum([0, *[a + 1 for a in run.accepted[:-1]]])
            assert steps_of(row, new) == np.minimum(run.accepted, left).tolist()
        assert replay(trace, tree).tokens_per_step > 2.5  # deep paths: the check has teeth


def test_stand_traces_drive_optimize_tree(target, prompts, tmp_path) -> None:
    trace = collect_tokens(target, [make_drafter("stand", V)], prompts, MAX_NEW)
    path = write_trace(trace, tmp_path / "stand.parquet")
    doc = run_optimize(OptimizeRequest(
        deployment=deployment("cpu-2core", target="llama-2-7b"),
        trace_path=path, source="stand", algos="sequoia,chain,best-first", budget=12)).to_dict()
    assert doc["source"] == "stand"
    assert {r["algo"] for r in doc["results"]} - {"any-size"} == {"sequoia", "chain",
                                                                    "best-first"}


def rank_trace(ranks: list[int]) -> Trace:
    """A one-request greedy trace of source "stand" whose true token has these ranks."""
    n = len(ranks)
    cand = [[10 + j for j in range(8)] for _ in range(n)]
    df = pl.DataFrame({
        "request_id": [0] * n, "pos": list(range(n)), "context_len": [4 + i for i in range(n)],
        "token": [c[r] if r >= 0 else 0 for c, r in zip(cand, ranks, strict=True)],
        "target_prob": [1.0] * n, "source": ["stand"] * n, "cand_tokens": cand,
        "cand_scores": [[0.1] * 8] * n, "cand_target_probs": [[0.0] * 8] * n, "rank": ranks,
        "proposal": [[]] * n, "match_len": [0] * n,
    }, schema=SCHEMA)
    return Trace(df, {"temperature": 0.0})


def test_data_driven_tree_keeps_the_most_accepted_nodes_and_their_ancestors() -> None:
    # the true token is always the second candidate: only the rank-1 path is ever accepted, and
    # the template holds it down to depth 3 (2·2·2 ≤ spread 8)
    tree = data_driven_tree(rank_trace([1] * 40), "stand", 16, 12)
    assert tree == Tree.from_rank_paths([(1,), (1, 1), (1, 1, 1)], "stand")
    rng = np.random.default_rng(0)
    trace = rank_trace(rng.choice([0, 0, 0, 1, 2, -1], 400).tolist())
    template = template_tree(8, 6)
    counts = replay(trace, template).node_accepts
    tree = data_driven_tree(trace, "stand", 10, 6)
    ranks_of = {tuple(int(template.ranks[u]) for u in template.path(v)[1:]): int(counts[v])
                for v in range(1, template.size)}
    kept = {tuple(int(tree.ranks[u]) for u in tree.path(v)[1:]) for v in range(1, tree.size)}
    assert tree.size == 10 and all(p[:-1] in kept or len(p) == 1 for p in kept)
    assert min(ranks_of[p] for p in kept) >= max(c for p, c in ranks_of.items() if p not in kept)


# ---- sampling: Gumbel-top-k children and the Sequoia rule ----------------------------------

W = 4
SAMPLES = 4000


def markov_target() -> torch.Tensor:
    """r(next | last token), rows (W,): what the target emits."""
    return torch.tensor(np.random.default_rng(1).dirichlet(np.full(W, 1.0), size=W))


def taught_drafter(generator: torch.Generator) -> StandDrafter:
    """A sampling STAND drafter whose table learned 200 positions of a different process: its
    q is far from the target's r."""
    rng = np.random.default_rng(2)
    q = rng.dirichlet(np.full(W, 0.4), size=W)
    history = [0]
    for _ in range(200):
        history.append(int(rng.choice(W, p=q[history[-1]])))
    # horizon 0: every learned position is in the table at `begin`, so the longer contexts of
    # the trials add nothing to it
    d = StandDrafter(W, horizon=0, sample="without", temperature=1.0, generator=generator)
    d.start(history[:2], 512)
    d.learn(torch.tensor(history[:-1]), torch.tensor(q[history[:-1]]).log())
    d.begin(history)
    return d


def two_tokens(d: StandDrafter, context: list[int], r: torch.Tensor, rule: str,
               g: torch.Generator) -> tuple[int, int]:
    """The first two tokens after `context`, drafting a tree of 3 children at the root and 2
    below each, verified by `rule` (`specinfer` on these without-replacement draws is the biased
    pairing)."""
    template = Tree.from_rank_paths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (1, 1)], "stand")
    out: list[int] = []
    while len(out) < 2:
        d.begin(context + out)
        drafted = fill_tree(template, (context + out)[-1], lambda s: d)
        tokens = drafted.tokens.tolist()
        q = [d.draft_probs.get(i) for i in range(drafted.tree.size)]
        check = sequoia if rule == "sequoia" else specinfer
        verdict = check(drafted.tree, tokens, r[torch.tensor(tokens)], q, g)
        out += [tokens[v] for v in verdict.path[1:]] + [verdict.bonus]
    return out[0], out[1]


def joint_pvalue(rule: str) -> float:
    g = torch.Generator().manual_seed(3)
    d, r = taught_drafter(g), markov_target()
    context = list(d.context)
    counts = np.zeros((W, W))
    for _ in range(SAMPLES):
        a, b = two_tokens(d, context, r, rule, g)
        counts[a, b] += 1
    expected = (r[context[-1]][:, None] * r).numpy() * SAMPLES
    return float(chisquare(counts.ravel(), expected.ravel()).pvalue)


def test_gumbel_children_verified_by_the_sequoia_rule_keep_the_target_distribution() -> None:
    assert joint_pvalue("sequoia") > 1e-3


def test_keeping_q_for_children_drawn_without_replacement_is_detected() -> None:
    assert joint_pvalue("specinfer") < 1e-6


def test_sampled_drafts_come_from_the_table_and_keep_q() -> None:
    d = taught_drafter(torch.Generator().manual_seed(0))
    ((kids, probs),) = d.propose([DraftNode(0, -1, d.context[-1], 0)], 3)
    q = d.draft_probs[0]
    assert len(set(kids)) == len(kids) == 3 and float(q.sum()) == pytest.approx(1.0)
    assert probs == q[kids].tolist() and all(p > 0 for p in probs)


def test_sampled_decoding_is_deterministic_for_a_seed(target, prompts) -> None:
    tree = Tree.from_rank_paths([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)], "stand")

    def run(seed: int) -> list[list[int]]:
        g = torch.Generator().manual_seed(seed)
        drafter = make_drafter("stand", V, sample="without", temperature=0.8, generator=g)
        return speculative_generate(target, drafter, static_method("t", tree, "t"), prompts[:4],
                                    MAX_NEW, "sequoia", 0.8, seed, threads=1).outputs

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_bad_options_are_input_errors() -> None:
    with pytest.raises(InputError, match="draft or stand"):
        make_drafter("ngram", V, sample="without", generator=torch.Generator())
    with pytest.raises(InputError, match="Generator"):
        make_drafter("stand", V, sample="without")
    with pytest.raises(InputError, match="sampling"):
        StandDrafter(V, sample="sometimes", generator=torch.Generator())


def test_the_default_horizon_covers_the_deepest_trees_the_executor_builds() -> None:
    assert HORIZON >= MAX_DEPTH
