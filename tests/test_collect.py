"""Trace collection: the trace validates, drives optimize-tree, replays the executor exactly,
and is the same for the same seed."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from tiny_pair import perturbed_pair, repeating_prompts, tiny_spec

from specscope.executor.collect import collect, collect_tokens
from specscope.executor.drafters import make_drafter
from specscope.executor.loop import decode_speculative
from specscope.executor.methods import static_method
from specscope.hw_profiles.deployment import deployment
from specscope.models.zoo import weights_path
from specscope.optimizers.baselines import best_first_tree
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.trace import read_trace, replay, write_trace
from specscope.tree import Tree

torch.set_num_threads(1)

V = 61
TARGET = tiny_spec("tiny-target", V, max_seq_len=96)
DRAFTERS = ("draft", "ngram", "suffix", "recycle")
MAX_NEW = 16
# optimize-tree prices a `draft:<name>` source by its catalogue entry, so the tiny draft borrows
# the name of the catalogue's draft model
DRAFT_NAME = "llama-68m"


@pytest.fixture(scope="module")
def models():
    return perturbed_pair(TARGET, DRAFT_NAME)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return repeating_prompts(V)


def trace_of(models, prompts, temperature: float = 0.0, seed: int = 0):
    target, draft = models
    drafters = [make_drafter(d, V, draft, temperature=temperature) for d in DRAFTERS]
    return collect_tokens(target, drafters, prompts, MAX_NEW, temperature, seed,
                          metadata={"prompt_set": "test"})


def test_collected_trace_validates_and_drives_optimize_tree(models, prompts, tmp_path) -> None:
    path = write_trace(trace_of(models, prompts), tmp_path / "trace.parquet")
    trace = read_trace(path)
    df = trace.df
    assert df.height == len(prompts) * MAX_NEW * len(DRAFTERS)
    assert set(df.get_column("source")) == {f"draft:{DRAFT_NAME}", "ngram", "suffix", "recycle"}
    longest = dict(df.group_by("source").agg(pl.col("proposal").list.len().max()).iter_rows())
    assert longest["ngram"] > 0 and longest["suffix"] > 0  # sequence drafters propose
    assert longest[f"draft:{DRAFT_NAME}"] == longest["recycle"] == 0
    assert trace.metadata["K"] == 8 and trace.metadata["temperature"] == 0.0
    assert trace.metadata["prompt_set"] == "test"
    drafts = df.filter(pl.col("source") == f"draft:{DRAFT_NAME}")
    assert (drafts.get_column("rank") == 0).mean() > 0.5  # the draft agrees with the target

    doc = run_optimize(OptimizeRequest(
        deployment=deployment("cpu-2core", target="llama-2-7b"),
        trace_path=path, budget=16)).to_dict()
    assert doc["source"] == f"draft:{DRAFT_NAME}"
    assert {r["algo"] for r in doc["results"]} >= {"sequoia", "chain"}
    assert all(r["n"] <= 16 and r["replay_tokens"] >= 1 for r in doc["results"])


@pytest.mark.parametrize("drafter", ["draft", "ngram"])
def test_replaying_the_trace_predicts_the_executors_steps_exactly(models, prompts,
                                                                   drafter: str) -> None:
    """docs/architecture.md#trace-schema: candidates on the true prefix replay any static tree
    exactly (greedy)."""
    target, draft = models
    trace = trace_of(models, prompts)
    chosen = make_drafter(drafter, V, draft)
    tree = (best_first_tree([0.6, 0.2, 0.1], 10, 5, chosen.source) if drafter == "draft"
            else Tree.chain(6, chosen.source))
    method = static_method("t", tree, "test")
    steps = sum(len(decode_speculative(target, chosen, method, p, MAX_NEW).accepted)
                for p in prompts)
    assert replay(trace, tree).steps == steps


def test_same_seed_same_trace_and_sampling_follows_the_seed(models, prompts) -> None:
    greedy = trace_of(models, prompts[:2])
    assert greedy.df.equals(trace_of(models, prompts[:2]).df)
    sampled = trace_of(models, prompts[:2], temperature=1.0, seed=3)
    assert sampled.df.equals(trace_of(models, prompts[:2], temperature=1.0, seed=3).df)
    other = trace_of(models, prompts[:2], temperature=1.0, seed=4)
    assert not sampled.df.get_column("token").equals(other.df.get_column("token"))


@pytest.mark.skipif(not weights_path("tiny-code").is_file(), reason="zoo model not trained yet")
def test_collect_by_name_writes_a_valid_trace_of_the_zoo_model(tmp_path) -> None:
    done = []
    trace = collect("tiny-code", "ngram,suffix,recycle", "builtin:stdlib-code", 2, 8,
                    tmp_path / "zoo.parquet", progress=lambda i, n: done.append((i, n)))
    assert done == [(1, 2), (2, 2)]
    again = read_trace(tmp_path / "zoo.parquet")
    assert again.df.equals(trace.df)
    assert again.metadata["target_model"] == "tiny-code"
    assert again.metadata["prompt_set"] == "builtin:stdlib-code"
