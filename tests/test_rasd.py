"""RASD's drafter: pruning and fusion rules on hand-built cases, candidates that are a function of
the text up to a node, greedy losslessness, and exact replay of a collected rasd trace."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from tiny_pair import perturbed_pair, repeating_prompts, tiny_spec

from specscope.draft import DraftNode
from specscope.errors import InputError
from specscope.executor.collect import collect_tokens
from specscope.executor.drafters import (
    ROOT,
    DraftModelDrafter,
    RasdDrafter,
    SuffixDrafter,
    make_drafter,
)
from specscope.executor.generate import generate
from specscope.executor.loop import decode_speculative, speculative_generate
from specscope.executor.methods import draft_static, dyspec_method, static_method
from specscope.executor.targets import load_model
from specscope.hw_profiles.deployment import deployment
from specscope.models.zoo import weights_path
from specscope.models.zoo.prompts import load_prompts
from specscope.optimizers.baselines import best_first_tree
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.trace import accepted_lengths, write_trace
from specscope.tree import Tree

torch.set_num_threads(1)

V = 61
SPEC = tiny_spec("tiny-target", V)
# optimize-tree prices a `rasd:<name>` source as its draft model's catalogue entry
DRAFT_NAME = "llama-68m"
# "3" was followed by "5 7 8" earlier; the text before the root ("... 9 4") has no earlier match
CONTEXT = [1, 2, 3, 5, 7, 8, 9, 4, 3]
MAX_NEW = 16


@pytest.fixture(scope="module")
def models():
    return perturbed_pair(SPEC, DRAFT_NAME)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return repeating_prompts(V)


def rasd(models, prune_k: int = 2) -> RasdDrafter:
    return RasdDrafter(DraftModelDrafter(models[1]), SuffixDrafter(), prune_k)


def begun(models, context: list[int], prune_k: int = 2) -> RasdDrafter:
    d = rasd(models, prune_k)
    d.start(context, 128)
    d.begin(context)
    return d


def root(context: list[int]) -> DraftNode:
    return ROOT._replace(token=context[-1])


# ---- pruning and fusion, hand-built ----------------------------------------------------------


def test_a_new_retrieved_sequence_is_kept_first_only_inside_the_drafts_top_k(models) -> None:
    d = begun(models, CONTEXT)
    # what retrieval proposes here: "3" occurred twice, once followed by 5
    assert d.retrieval.lookup(CONTEXT, 8) == ([5], [0.5])
    # 5 within the draft's top prune_k = 2: first, scored r; the rest in draft order
    assert d.fuse(root(CONTEXT), ([6, 5, 0], [0.6, 0.3, 0.1]), 3) == ([5, 6, 0], [0.5, 0.6, 0.1])
    # ranked 3rd by the draft: pruned, so 5 stays a plain draft candidate at its rank
    assert d.fuse(root(CONTEXT), ([6, 0, 5], [0.5, 0.3, 0.1]), 3) == ([6, 0, 5], [0.5, 0.3, 0.1])
    assert d.fuse(root(CONTEXT), ([6, 0, 2], [0.5, 0.3, 0.1]), 2) == ([6, 0], [0.5, 0.3])


def test_a_node_continuing_a_retrieved_sequence_keeps_its_continuation_unpruned(models) -> None:
    d = begun(models, CONTEXT)
    on_path = DraftNode(1, 0, 5, 1)  # 5 was retrieved at the root
    off_path = DraftNode(2, 0, 9, 1)  # 9 was not ("9" was followed by "4" before: retrieved 4)
    d.register([on_path, off_path])
    far = ([6, 0, 1], [0.5, 0.3, 0.1])  # the draft ranks neither 7 nor 4 in its top 2
    assert d.fuse(on_path, far, 3) == ([7, 6, 0], [0.5, 0.5, 0.3])
    assert d.retrieval.lookup([*CONTEXT, 9], 8)[0] == [4]
    assert d.fuse(off_path, far, 3) == ([6, 0, 1], [0.5, 0.3, 0.1])


def test_a_token_from_both_sources_is_one_candidate_and_k_caps_the_list(models) -> None:
    d = begun(models, CONTEXT, prune_k=8)
    fused = d.fuse(root(CONTEXT), ([6, 0, 5, 1], [0.4, 0.3, 0.2, 0.1]), 2)
    assert fused == ([5, 6], [0.5, 0.4])
    tokens = d.fuse(root(CONTEXT), ([6, 0, 5, 1], [0.4, 0.3, 0.2, 0.1]), 8)[0]
    assert tokens == [5, 6, 0, 1] and len(set(tokens)) == len(tokens)


def test_rank_zero_follows_the_retrieved_continuation_the_draft_lets_start(models) -> None:
    """Longest-prefix fusion: a chain filled from rank 0 is the retrieved "5 7 8" once its first
    token passes pruning (prune_k = V passes every token), and the draft's own chain when it
    does not (prune_k = 1 keeps only a first token the draft ranks first)."""
    chain = Tree.chain(3, "rasd")
    kept = draft_static(begun(models, CONTEXT, prune_k=V), CONTEXT[-1], chain)
    assert kept.tokens[1:].tolist() == [5, 7, 8]
    draft = DraftModelDrafter(models[1])
    draft.start(CONTEXT, 128)
    draft.begin(CONTEXT)
    own = draft_static(draft, CONTEXT[-1], chain).tokens[1:].tolist()
    assert own[0] != 5  # the draft alone would not start the retrieved sequence
    assert draft_static(begun(models, CONTEXT, prune_k=1), CONTEXT[-1], chain).tokens[1:].tolist(
    ) == own


def test_continuing_a_retrieved_sequence_runs_no_draft_forward(models, monkeypatch) -> None:
    """The chain "5 7 8": the root starts a new sequence (pruning needs the draft there), the
    nodes below continue it with one candidate asked for each, so one draft pass in all; the
    draft alone runs one per level."""
    passes = []
    verify = models[1].verify
    monkeypatch.setattr(models[1], "verify",
                        lambda *args, **kw: (passes.append(1), verify(*args, **kw))[1])
    chain = Tree.chain(3, "rasd")
    d = begun(models, CONTEXT, prune_k=V)
    assert draft_static(d, CONTEXT[-1], chain).tokens[1:].tolist() == [5, 7, 8]
    assert len(passes) == 1
    draft = DraftModelDrafter(models[1])
    draft.start(CONTEXT, 128)
    draft.begin(CONTEXT)
    draft_static(draft, CONTEXT[-1], chain)
    assert len(passes) == 1 + 3


def trie_dump(trie) -> list:
    """Every node of a suffix trie as (path, count), children in their order."""
    out, stack = [], [((), trie.root)]
    while stack:
        path, node = stack.pop()
        out.append((path, node.count))
        stack += [((*path, t), c) for t, c in reversed(node.children.items())]
    return out


def test_retrieval_at_a_node_indexes_its_path_and_leaves_the_trie_as_it_was(models) -> None:
    """Retrieval below the root sees the node's path as if committed: "1 2" was followed by 8
    in the context and by 6 on the path, so both continue it; the trie is restored after."""
    context = [5, 1, 2, 8, 3]
    path = [1, 2, 6, 1, 2]
    d = begun(models, context, prune_k=V)
    before = trie_dump(d.retrieval.request)
    nodes = [DraftNode(i + 1, i, t, i + 1) for i, t in enumerate(path)]
    d.register(nodes)
    drafted = ([0], [0.5])
    got = d.fuse(nodes[-1], drafted, 4)
    assert got[0] == [8, 6, 0]
    assert trie_dump(d.retrieval.request) == before
    assert begun(models, context + path, prune_k=V).fuse(root(path), drafted, 4) == got


def test_candidates_at_a_node_are_those_of_a_step_committed_up_to_it(models) -> None:
    """The property that makes greedy replay exact: the fused candidates at every node of a
    tree equal the root candidates of a fresh drafter whose context is the node's text (its
    retrieval indexes the node's path, its draft runs one plain forward); and they are
    deterministic, distinct candidates (so deterministic-candidate sampling stays lossless by
    the rule's own tests in test_verify.py)."""
    context = [4, 5, 6, 7, 4, 5, 6, 8, 4, 5, 6, 7, 4, 5]
    d = begun(models, context, prune_k=3)
    drafted = draft_static(d, context[-1], best_first_tree([0.5, 0.3, 0.2], 12, 4, d.source))
    tree, tokens = drafted.tree, drafted.tokens.tolist()
    k = 3
    for v in range(tree.size):
        if not tree.children[v]:
            continue
        path = [tokens[u] for u in tree.path(v)[1:]]
        fresh = begun(models, context + path, prune_k=3)
        ((want, _),) = fresh.propose([root(context + path)], k)
        got = [tokens[c] for c in sorted(tree.children[v], key=lambda c: tree.ranks[c])]
        assert got == want[: len(got)]
        assert len(set(want)) == len(want)
    again = draft_static(begun(models, context, prune_k=3), context[-1], drafted.tree)
    assert again.tokens.tolist() == tokens


def test_rasd_refuses_sampled_drafts_and_a_missing_draft_model(models) -> None:
    with pytest.raises(InputError, match="sampled drafts"):
        make_drafter("rasd", V, models[1], sample="without", generator=torch.Generator())
    with pytest.raises(InputError, match="--draft-model"):
        make_drafter("rasd", V)


# ---- collect, replay, optimize-tree ----------------------------------------------------------


def rasd_trace(models, prompts):
    target, draft = models
    drafters = [make_drafter(name, V, draft) for name in ("draft", "rasd")]
    return collect_tokens(target, drafters, prompts, MAX_NEW, metadata={"prompt_set": "test"})


def test_replaying_a_rasd_trace_predicts_the_executors_steps_exactly(models, prompts) -> None:
    target, draft = models
    trace = rasd_trace(models, prompts)
    rows = trace.df.sort("request_id", "pos", "source")
    by = {s: rows.filter(pl.col("source") == s).get_column("cand_tokens").to_list()
          for s in (f"draft:{DRAFT_NAME}", f"rasd:{DRAFT_NAME}")}
    # retrieval changes the candidates somewhere, so the replay is not the draft's own
    assert by[f"draft:{DRAFT_NAME}"] != by[f"rasd:{DRAFT_NAME}"]
    drafter = make_drafter("rasd", V, draft)
    tree = best_first_tree([0.6, 0.2, 0.1], 10, 5, drafter.source)
    method = static_method("t", tree, "test")
    predicted = accepted_lengths(trace, tree)
    for i, prompt in enumerate(prompts):
        steps, pos = [], 0
        while pos < MAX_NEW:
            steps.append(int(predicted[i, pos]))
            pos += steps[-1] + 1
        accepted = decode_speculative(target, drafter, method, prompt, MAX_NEW).accepted
        # replay stops at the trace's last position: it caps the last step at the positions left
        left = MAX_NEW - sum(a + 1 for a in accepted[:-1])
        assert [*accepted[:-1], min(accepted[-1], left)] == steps


def test_optimize_tree_prices_a_rasd_source_as_its_draft_model(models, prompts, tmp_path) -> None:
    path = write_trace(rasd_trace(models, prompts[:3]), tmp_path / "rasd.parquet")
    doc = run_optimize(OptimizeRequest(
        deployment=deployment("cpu-2core", target="llama-2-7b"),
        trace_path=path, budget=16, source=f"rasd:{DRAFT_NAME}")).to_dict()
    assert doc["source"] == f"rasd:{DRAFT_NAME}" and doc["drafter"] == DRAFT_NAME
    assert {r["algo"] for r in doc["results"]} >= {"sequoia", "chain"}
    assert all(r["n"] <= 16 and r["replay_tokens"] >= 1 for r in doc["results"])


# ---- the zoo ---------------------------------------------------------------------------------

ZOO = weights_path("tiny-code").is_file() and weights_path("tiny-code-draft").is_file()


@pytest.mark.skipif(not ZOO, reason="zoo models tiny-code and tiny-code-draft not trained yet")
def test_rasd_greedy_equals_autoregressive_on_the_zoo_target() -> None:
    target, tokenizer = load_model("tiny-code")
    draft = load_model("tiny-code-draft")[0]
    prompts = [tokenizer.encode(t) for t in load_prompts("builtin:code-edit")[:2]]
    drafter = make_drafter("rasd", target.vocab_size, draft)
    for method in (static_method("best-first", best_first_tree([0.6, 0.15, 0.08], 16, 12,
                                                               drafter.source), "test"),
                   dyspec_method(16)):
        result = speculative_generate(target, drafter, method, prompts, 32, verify_lossless=True,
                                      threads=1)
        assert result.lossless, method.name
        assert result.tokens_per_step > 2.0  # retrieval copies the edited body


@pytest.mark.skipif(not ZOO, reason="zoo models tiny-code and tiny-code-draft not trained yet")
def test_sampled_rasd_decoding_by_name_follows_the_seed() -> None:
    runs = [generate("tiny-code", "rasd", "builtin:code-edit", 1, 12, algo="dyspec", budget=8,
                     temperature=1.0, seed=s, threads=1).outputs for s in (3, 3)]
    assert runs[0] == runs[1]
