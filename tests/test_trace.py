"""Trace schema, validation, acceptance statistics, exact replay and synthetic traces."""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope.errors import InputError
from specscope.trace import (
    SCHEMA,
    AcceptanceModel,
    RankedBehaviour,
    SequenceBehaviour,
    Trace,
    accepted_lengths,
    default_source,
    read_trace,
    replay,
    synth_trace,
    trace_sources,
    validate,
    write_trace,
)
from specscope.tree import Tree

DRAFT = "draft:llama-68m"
SOURCES = (DRAFT, "ngram", "recycle")
LIVELY = {
    DRAFT: RankedBehaviour(top1=0.7, decay=0.3, depth_decay=0.95),
    "recycle": RankedBehaviour(top1=0.4, decay=0.5),
    "ngram": SequenceBehaviour(mean_match=3.0, no_match=0.3, max_len=6),
}
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def small_trace() -> Trace:
    """A few short requests with high acceptance, for brute-force comparisons."""
    return synth_trace(3, seed=11, length=40, k=4, behaviour=LIVELY)


@cache
def big_trace() -> Trace:
    return synth_trace(64, seed=5)


# ---- brute force, written independently of specscope.trace.replay --------------------------


def brute_force_replay(trace: Trace, tree: Tree) -> tuple[int, int, list[int]]:
    """(steps, tokens, accepted per step) by walking the tree row by row in plain Python."""
    rows = {
        (r["request_id"], r["pos"], r["source"]): (r["rank"], r["match_len"], len(r["proposal"]))
        for r in trace.df.iter_rows(named=True)
    }
    sequence = {s for (_, _, s), (_, _, n) in rows.items() if n > 0}
    lengths: dict[int, int] = {}
    for req, pos, _ in rows:
        lengths[req] = max(lengths.get(req, 0), pos + 1)
    depth = tree.depths

    def anchor_depth(v: int) -> int:
        u = int(tree.parents[v])
        while u != 0 and tree.sources[u] == tree.sources[v]:
            u = int(tree.parents[u])
        return int(depth[u])

    def accepted(req: int, pos: int, v: int) -> bool:
        s = tree.sources[v]
        if pos + depth[v] - 1 >= lengths[req]:
            return False
        if s in sequence:
            da = anchor_depth(v)
            return rows.get((req, pos + da, s), (-1, 0, 0))[1] >= depth[v] - da
        return rows.get((req, pos + depth[v] - 1, s), (-1, 0, 0))[0] == tree.ranks[v]

    steps, tokens, per_step = 0, 0, []
    for req, length in sorted(lengths.items()):
        pos = 0
        while pos < length:
            best, stack = 0, [0]
            while stack:
                u = stack.pop()
                for v in tree.children[u]:
                    if accepted(req, pos, v):
                        stack.append(v)
                        if (depth[v], -v) > (depth[best], -best):
                            best = v
            a = int(depth[best])
            steps += 1
            tokens += min(a + 1, length - pos)
            per_step.append(a)
            pos += a + 1
    return steps, tokens, per_step


@st.composite
def trees(draw: st.DrawFn, max_nodes: int = 24) -> Tree:
    """Random mixed-source trees (ranked draft/recycle nodes and rank-0 n-gram nodes)."""
    n = draw(st.integers(1, max_nodes))
    parents, ranks, sources, seen = [-1], [-1], ["root"], set()
    for _ in range(1, n):
        parent = draw(st.integers(0, len(parents) - 1))
        source = draw(st.sampled_from(SOURCES))
        rank = 0 if source == "ngram" else draw(st.integers(0, 4))
        if (parent, source, rank) not in seen:
            seen.add((parent, source, rank))
            parents.append(parent)
            ranks.append(rank)
            sources.append(source)
    return Tree.from_parents(parents, ranks, sources)


def subtree(tree: Tree, keep: list[bool]) -> Tree:
    """The ancestor-closed subset of `tree` whose nodes have keep[v] and all ancestors kept."""
    kept = [0]
    index = {0: 0}
    for v in range(1, tree.size):
        if keep[v % len(keep)] and int(tree.parents[v]) in index:
            index[v] = len(kept)
            kept.append(v)
    parents = [-1] + [index[int(tree.parents[v])] for v in kept[1:]]
    return Tree.from_parents(
        parents, [int(tree.ranks[v]) for v in kept], [tree.sources[v] for v in kept]
    )


# ---- synthetic traces and round trip ---------------------------------------------------------


def test_round_trip_synth_write_read_validate_replay(tmp_path: Path) -> None:
    trace = synth_trace(8, seed=3, length=64)
    path = write_trace(trace, tmp_path / "t.parquet")
    back = read_trace(path)
    assert back.df.equals(trace.df)
    assert back.df.schema == pl.Schema(SCHEMA)
    assert back.metadata == trace.metadata
    assert back.path == path
    validate(back.df, path, back.metadata)
    tree = Tree.chain(4, DRAFT)
    assert replay(back, tree).tokens_per_step == replay(trace, tree).tokens_per_step
    assert list(tmp_path.iterdir()) == [path]  # atomic write leaves no temp file


def test_same_seed_identical_trace_and_other_seed_differs() -> None:
    a, b = synth_trace(4, seed=9, length=32), synth_trace(4, seed=9, length=32)
    assert a.df.equals(b.df) and a.metadata == b.metadata
    assert not synth_trace(4, seed=10, length=32).df.equals(a.df)


def test_adding_a_source_leaves_the_other_sources_rows_unchanged() -> None:
    one = synth_trace(4, seed=2, length=32, sources=(DRAFT,))
    two = synth_trace(4, seed=2, length=32, sources=(DRAFT, "suffix"))
    assert two.df.filter(pl.col("source") == DRAFT).equals(one.df)


@FAST
@given(
    requests=st.integers(1, 4),
    length=st.integers(1, 30),
    k=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_synth_rows_are_consistent(requests: int, length: int, k: int, seed: int) -> None:
    trace = synth_trace(
        requests, seed, sources=(DRAFT, "ngram", "recycle", "suffix"), length=length, k=k, vocab=50
    )
    df = trace.df
    validate(df, "synth", trace.metadata)
    assert df.height == requests * length * 4
    ranked = df.filter(pl.col("source").is_in([DRAFT, "recycle"]))
    assert (ranked.get_column("cand_tokens").list.len() == k).all()
    assert (ranked.get_column("cand_tokens").list.n_unique() == k).all()
    scores = np.array(ranked.get_column("cand_scores").to_list())
    assert np.all(np.diff(scores, axis=1) <= 0) and np.all(scores.sum(axis=1) <= 1 + 1e-6)
    tprobs = np.array(ranked.get_column("cand_target_probs").to_list())
    assert np.all(tprobs.max(axis=1) <= ranked.get_column("target_prob").to_numpy() + 1e-7)
    assert np.all(tprobs.sum(axis=1) <= 1 + 1e-6)
    first = df.group_by("request_id").agg((pl.col("context_len") - pl.col("pos")).n_unique())
    assert (first.get_column("context_len") == 1).all()
    truth = {(r, p): t for r, p, t in df.select("request_id", "pos", "token").iter_rows()}
    for r, p, prop, m in (
        df.filter(pl.col("source") == "ngram")
        .select("request_id", "pos", "proposal", "match_len")
        .iter_rows()
    ):
        assert len(prop) <= 10 and p + len(prop) <= length
        assert all(prop[j] == truth[r, p + j] for j in range(m))
        assert m == len(prop) or prop[m] != truth[r, p + m]


def test_synth_rejects_unknown_source_and_overfull_vector() -> None:
    with pytest.raises(InputError, match="draft:<model>"):
        synth_trace(2, 0, sources=("medusa",))
    with pytest.raises(InputError, match="sums to"):
        synth_trace(2, 0, sources=(DRAFT,), behaviour={DRAFT: RankedBehaviour(0.9, 0.9)})


# ---- validation --------------------------------------------------------------------------------


def set_cell(df: pl.DataFrame, row: int, col: str, value: object) -> pl.DataFrame:
    at = pl.int_range(pl.len()) == row
    return df.with_columns(
        pl.when(at).then(pl.lit(value, dtype=df.schema[col])).otherwise(pl.col(col)).alias(col)
    )


def first_row(df: pl.DataFrame, where: pl.Expr) -> int:
    return int(df.with_row_index().filter(where).get_column("index")[0])


def base_df() -> pl.DataFrame:
    return synth_trace(2, seed=1, length=8, k=4, behaviour=LIVELY).df


def ranked_hit(df: pl.DataFrame) -> int:
    return first_row(df, (pl.col("source") == DRAFT) & (pl.col("rank") == 0))


def ngram_row(df: pl.DataFrame) -> int:
    return first_row(df, (pl.col("source") == "ngram") & (pl.col("proposal").list.len() > 2))


Mutation = Callable[[pl.DataFrame], tuple[pl.DataFrame, int | None]]

MUTATIONS: dict[str, tuple[str, Mutation]] = {
    "null token": ("token", lambda df: (set_cell(df, 5, "token", None), 5)),
    "nan target_prob": ("target_prob", lambda df: (set_cell(df, 5, "target_prob", math.nan), 5)),
    "target_prob > 1": ("target_prob", lambda df: (set_cell(df, 5, "target_prob", 1.5), 5)),
    "cand_scores < 0": (
        "cand_scores",
        lambda df: (set_cell(df, 3, "cand_scores", [-0.1, 0.1, 0.1, 0.1]), 3),
    ),
    "nan cand_target_probs": (
        "cand_target_probs",
        lambda df: (set_cell(df, 3, "cand_target_probs", [0.1, math.nan, 0.1, 0.1]), 3),
    ),
    "short cand_scores": ("cand_scores", lambda df: (set_cell(df, 6, "cand_scores", [0.5]), 6)),
    "long cand_target_probs": (
        "cand_target_probs",
        lambda df: (set_cell(df, 6, "cand_target_probs", [0.1] * 5), 6),
    ),
    "rank < -1": ("rank", lambda df: (set_cell(df, 5, "rank", -2), 5)),
    "rank past the candidates": ("rank", lambda df: (set_cell(df, 3, "rank", 4), 3)),
    "cand_tokens[rank] != token": (
        "rank",
        lambda df: (set_cell(df, ranked_hit(df), "rank", 1), ranked_hit(df)),
    ),
    "match_len past the proposal": (
        "match_len",
        lambda df: (set_cell(df, ngram_row(df), "match_len", 99), ngram_row(df)),
    ),
    "negative match_len": ("match_len", lambda df: (set_cell(df, 4, "match_len", -1), 4)),
    "duplicate key": ("request_id,pos,source", lambda df: (pl.concat([df, df[5]]), df.height)),
    "token differs between sources": (
        "token",
        lambda df: (set_cell(set_cell(df, 4, "token", 7), 4, "rank", -1), 3),
    ),
    "missing column": ("rank", lambda df: (df.drop("rank"), None)),
    "wrong dtype": ("pos", lambda df: (df.with_columns(pl.col("pos").cast(pl.Int64)), None)),
    "empty": ("", lambda df: (df.head(0), None)),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_each_broken_trace_is_one_line_naming_file_column_row(tmp_path: Path, case: str) -> None:
    column, mutate = MUTATIONS[case]
    df, row = mutate(base_df())
    path = tmp_path / "bad.parquet"
    df.write_parquet(path, metadata={"schema_version": "1"})
    with pytest.raises(InputError) as err:
        read_trace(path)
    msg = str(err.value)
    assert str(path) in msg and "\n" not in msg
    assert f"'{column}'" in msg if column else "empty" in msg
    if row is not None:
        assert f"row {row}:" in msg


def test_schema_version_other_than_1_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "v2.parquet"
    base_df().write_parquet(path, metadata={"schema_version": "2"})
    with pytest.raises(InputError, match=r"v2\.parquet.*schema_version.*2"):
        read_trace(path)
    base_df().write_parquet(path)  # no metadata at all: read as version 1
    assert read_trace(path).metadata == {}
    base_df().write_parquet(path, metadata={"schema_version": "1", "K": '"eight"'})
    with pytest.raises(InputError, match="'K' must be an integer"):
        read_trace(path)


def test_missing_non_parquet_and_truncated_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such trace file"):
        read_trace(tmp_path / "absent.parquet")
    text = tmp_path / "notes.parquet"
    text.write_text("request_id,pos\n0,0\n")
    with pytest.raises(InputError, match=r"notes\.parquet: not a parquet file"):
        read_trace(text)
    good = write_trace(synth_trace(2, 0, length=16), tmp_path / "good.parquet")
    data = good.read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"cut\.parquet: truncated"):
        read_trace(cut)
    mangled = tmp_path / "mangled.parquet"
    mangled.write_bytes(data[:4] + b"\x00" * (len(data) - 8) + data[-4:])
    with pytest.raises(InputError, match=r"mangled\.parquet"):
        read_trace(mangled)


def test_write_trace_refuses_an_invalid_trace_and_writes_nothing(tmp_path: Path) -> None:
    trace = synth_trace(2, 0, length=8)
    bad = Trace(set_cell(trace.df, 2, "rank", -5), trace.metadata)
    with pytest.raises(InputError, match="'rank', row 2"):
        write_trace(bad, tmp_path / "x.parquet")
    assert not list(tmp_path.iterdir())


# ---- acceptance ---------------------------------------------------------------------------------


def test_sources_and_default_source() -> None:
    trace = synth_trace(2, 0, sources=("ngram", "recycle", DRAFT), length=8)
    assert trace_sources(trace) == ["ngram", "recycle", DRAFT]
    assert default_source(trace) == DRAFT
    assert default_source(synth_trace(2, 0, sources=("recycle", "ngram"), length=8)) == "recycle"
    with pytest.raises(InputError, match=r"'medusa'.*ngram, recycle, draft:llama-68m"):
        AcceptanceModel.from_trace(trace, "medusa")


def test_vector_recovers_generator_parameters_within_the_interval() -> None:
    draft, recycle = RankedBehaviour(0.55, 0.4), RankedBehaviour(0.3, 0.6)
    ngram = SequenceBehaviour(mean_match=2.0, no_match=0.4)
    trace = synth_trace(64, seed=21, behaviour={DRAFT: draft, "recycle": recycle, "ngram": ngram})
    for source, truth in [
        (DRAFT, draft.vector(8)),
        ("recycle", recycle.vector(8)),
        ("ngram", np.array([(1 - ngram.no_match) * ngram.q])),
    ]:
        m = AcceptanceModel.from_trace(trace, source, confidence=0.999)
        assert m.p.shape == truth.shape and np.all(m.n == 64 * 256)
        assert np.all((m.low <= truth) & (truth <= m.high)), (source, m.p, truth)
        assert np.all(m.high - m.low < 0.03)  # 16k rows pin each entry to a few percent


def test_depth_table_matches_the_generator_markov_chain() -> None:
    b = RankedBehaviour(top1=0.6, decay=0.3, depth_decay=0.85)
    k, length, depth = 4, 256, 5
    trace = synth_trace(64, seed=4, sources=(DRAFT,), length=length, k=k, behaviour={DRAFT: b})
    m = AcceptanceModel.from_trace(
        trace, k=k, depth_dependent=True, max_depth=depth, confidence=0.999
    )
    # Expected estimator: propagate the run-length distribution c_t from c_0 = 0.
    p, cmax = b.vector(k), 400
    hit = p.sum() * b.depth_decay ** np.arange(cmax)
    dist, weight = np.eye(cmax)[0], np.zeros(cmax)
    for _ in range(length):
        weight += dist
        dist = np.r_[(dist * (1 - hit)).sum(), (dist * hit)[:-1]]
    for d in range(1, depth + 1):
        w = weight[d - 1 :]
        expected = p * (w * b.depth_decay ** np.arange(d - 1, cmax)).sum() / w.sum()
        assert np.all((m.low[d - 1] <= expected) & (expected <= m.high[d - 1])), d
    assert np.all(np.diff(m.p[:, 0]) < 0)  # deeper runs accept less
    assert m.n[0, 0] == 64 * length and np.all(np.diff(m.n[:, 0]) < 0)


def test_rank_depth_table_equals_a_row_by_row_count() -> None:
    trace = small_trace()
    # Drop some positions to check that a gap breaks a run.
    df = trace.df.filter(~((pl.col("request_id") == 1) & pl.col("pos").is_in([7, 20])))
    trace = Trace(df, trace.metadata)
    k, depth = 3, 6
    m = AcceptanceModel.from_trace(trace, "recycle", k=k, depth_dependent=True, max_depth=depth)
    hits, n = np.zeros((depth, k)), np.zeros(depth)
    run, last = 0, (None, None)
    for req, pos, rank in (
        df.filter(pl.col("source") == "recycle")
        .sort("request_id", "pos")
        .select("request_id", "pos", "rank")
        .iter_rows()
    ):
        if last != (req, pos - 1):
            run = 0
        for d in range(min(run + 1, depth)):
            n[d] += 1
            if 0 <= rank < k:
                hits[d, rank] += 1
        run = run + 1 if 0 <= rank < k else 0
        last = (req, pos)
    rows = int(np.count_nonzero(n))
    np.testing.assert_allclose(m.p, hits[:rows] / n[:rows, None])
    np.testing.assert_array_equal(m.n, np.repeat(n[:rows, None], k, axis=1))


def test_sequence_depth_table_equals_conditional_match_lengths() -> None:
    trace = small_trace()
    m = AcceptanceModel.from_trace(trace, "ngram", depth_dependent=True)
    lens = trace.df.filter(pl.col("source") == "ngram").get_column("match_len").to_list()
    assert m.method == "match_len" and m.p.shape[1] == 1
    for d in range(1, m.p.shape[0] + 1):
        reach = sum(x >= d - 1 for x in lens)
        assert m.n[d - 1, 0] == reach
        assert m.p[d - 1, 0] == pytest.approx(sum(x >= d for x in lens) / reach)
    assert m.p[-1, 0] == 0 or m.p.shape[0] == 12  # the last row stops deeper nodes


def test_temperature_uses_mean_target_probability_with_normal_interval() -> None:
    base = small_trace()
    trace = Trace(base.df, {**base.metadata, "temperature": 0.7})
    m = AcceptanceModel.from_trace(trace, DRAFT, k=5)
    assert m.method == "target_prob"
    probs = trace.df.filter(pl.col("source") == DRAFT).get_column("cand_target_probs").to_list()
    z = statistics.NormalDist().inv_cdf(0.975)
    for k in range(5):
        xs = [float(row[k]) if k < len(row) else 0.0 for row in probs]
        mean, half = statistics.fmean(xs), z * statistics.stdev(xs) / math.sqrt(len(xs))
        assert m.p[k] == pytest.approx(mean, rel=1e-6)
        assert m.low[k] == pytest.approx(max(mean - half, 0.0), abs=1e-9)
        assert m.high[k] == pytest.approx(min(mean + half, 1.0), abs=1e-9)


def test_from_vector_is_validated_and_feeds_tree_scores() -> None:
    m = AcceptanceModel.from_vector([0.6, 0.2, 0.1, 0.05])
    assert not m.depth_dependent and np.all(m.n == 0) and np.array_equal(m.low, m.p)
    assert Tree.chain(2).expected_tokens(m.p) == pytest.approx(1 + 0.6 + 0.36)
    assert AcceptanceModel.from_vector([[0.5, 0.2], [0.4, 0.1]]).depth_dependent
    with pytest.raises(InputError, match="sum"):
        AcceptanceModel.from_vector([0.7, 0.5])
    with pytest.raises(InputError):
        AcceptanceModel.from_vector([1.2])
    frame = AcceptanceModel.from_trace(small_trace(), depth_dependent=True).to_frame()
    assert frame.columns == ["depth", "rank", "p", "low", "high", "n"]


# ---- replay ------------------------------------------------------------------------------------


def test_root_only_replay_is_exactly_one_token_per_step() -> None:
    res = replay(big_trace(), Tree.root())
    assert res.tokens_per_step == 1.0
    assert res.steps == res.tokens == 64 * 256


@pytest.mark.parametrize("k", [1, 3, 8])
def test_chain_replay_equals_brute_force(k: int) -> None:
    trace = big_trace()
    ranks = {
        req: np.array(group.sort("pos").get_column("rank").to_list())
        for (req,), group in trace.df.filter(pl.col("source") == DRAFT).group_by("request_id")
    }
    steps = tokens = 0
    for rank in ranks.values():
        pos = 0
        while pos < rank.size:
            a = 0
            while a < k and pos + a < rank.size and rank[pos + a] == 0:
                a += 1
            steps, tokens, pos = steps + 1, tokens + min(a + 1, rank.size - pos), pos + a + 1
    res = replay(trace, Tree.chain(k, DRAFT))
    assert (res.steps, res.tokens) == (steps, tokens)
    assert res.tokens_per_step == tokens / steps


@FAST
@given(tree=trees())
def test_replay_of_any_tree_equals_brute_force(tree: Tree) -> None:
    trace = small_trace()
    res = replay(trace, tree)
    steps, tokens, per_step = brute_force_replay(trace, tree)
    assert (res.steps, res.tokens) == (steps, tokens)
    np.testing.assert_array_equal(
        res.accepted_hist, np.bincount(per_step, minlength=tree.depth + 1)
    )
    assert res.node_accepts[0] == res.steps
    assert res.node_accepts.sum() - res.steps == sum(per_step)


@FAST
@given(tree=trees(), keep=st.lists(st.booleans(), min_size=1, max_size=24))
def test_a_wider_tree_accepts_at_least_as_much_at_every_position(
    tree: Tree, keep: list[bool]
) -> None:
    sub = subtree(tree, keep)
    wide, narrow = accepted_lengths(small_trace(), tree), accepted_lengths(small_trace(), sub)
    assert np.all(wide >= narrow)


def test_nested_trees_replay_monotonically_on_a_typical_trace() -> None:
    # Per-step acceptance is monotone (test above); tokens per step over a whole trace is too in
    # practice, though a longer accept can in principle shift later steps onto worse positions.
    trace = big_trace()
    p = AcceptanceModel.from_trace(trace).p
    # Best-first order of rank paths: every prefix of it is a tree, each inside the next.
    order, heap = [], [(-p[0], (0,))]
    while len(order) < 255:
        neg_f, path = heapq.heappop(heap)
        order.append(path)
        heapq.heappush(heap, (neg_f * p[0], (*path, 0)))
        if path[-1] + 1 < p.size:
            sibling = (*path[:-1], path[-1] + 1)
            heapq.heappush(heap, (-np.prod(p[list(sibling)]), sibling))
    previous = 0.0
    for n in (1, 4, 16, 64, 256):
        tree = Tree.from_rank_paths(order[: n - 1], DRAFT)
        value = replay(trace, tree).tokens_per_step
        assert value >= previous
        previous = value


def test_ngram_spine_replay_follows_match_lengths() -> None:
    trace = big_trace()
    ngram = {
        (r, p): m
        for r, p, m in trace.df.filter(pl.col("source") == "ngram")
        .select("request_id", "pos", "match_len")
        .iter_rows()
    }
    draft = {
        (r, p): k
        for r, p, k in trace.df.filter(pl.col("source") == DRAFT)
        .select("request_id", "pos", "rank")
        .iter_rows()
    }
    spine = Tree.chain(10, "ngram")
    under_draft = Tree.from_parents(
        [-1, 0, 1, 2, 3], [-1, 0, 0, 0, 0], ["root", DRAFT, "ngram", "ngram", "ngram"]
    )
    for tree, accept in [
        (spine, lambda r, p, left: min(ngram[r, p], 10, left)),
        (
            under_draft,
            lambda r, p, left: (
                0
                if draft[r, p] != 0 or left < 1
                else 1 + min(ngram.get((r, p + 1), 0), 3, left - 1)
            ),
        ),
    ]:
        steps = tokens = 0
        for r in range(64):
            pos = 0
            while pos < 256:
                a = accept(r, pos, 256 - pos)
                steps, tokens, pos = steps + 1, tokens + min(a + 1, 256 - pos), pos + a + 1
        res = replay(trace, tree)
        assert (res.steps, res.tokens) == (steps, tokens)
    assert replay(trace, spine).tokens_per_step > 1.5


def test_requests_of_different_lengths_replay_all_their_positions() -> None:
    base = small_trace()
    df = base.df.filter((pl.col("request_id") != 1) | (pl.col("pos") < 13))
    trace = Trace(df, base.metadata)
    tree = Tree.chain(6, DRAFT)
    res = replay(trace, tree)
    assert res.tokens == 40 + 13 + 40
    assert (res.steps, res.tokens) == brute_force_replay(trace, tree)[:2]
    lengths = accepted_lengths(trace, tree)
    assert lengths.shape == (3, 40) and np.all(lengths[1, 13:] == -1)
    assert np.all(lengths[1, :13] + np.arange(13) <= 13)


def test_replay_rejects_unknown_tree_sources_and_ranked_sequence_nodes() -> None:
    with pytest.raises(InputError, match=r"'draft' is not in the trace \(sources: draft:llama"):
        replay(small_trace(), Tree.chain(3))
    with pytest.raises(InputError, match="sequence source 'ngram' has rank 1"):
        replay(small_trace(), Tree.from_parents([-1, 0], [-1, 1], ["root", "ngram"]))
