"""The continuous-batching executor: every sequence's output equals its own greedy autoregressive
output whatever shares its batches (sequences joining and leaving mid-run, prompt chunks
interleaved with decoding, n-gram and draft-model drafting, the policies run for real); the
event log is complete and ordered; `serve-bench` refuses bad inputs with one line and is
deterministic for a seed.

Models are tiny and random in float64 (a tree pass and a one-token pass then give the same
argmax). Runs go on a virtual clock (a millisecond per reading), so which requests share a step
is the same on every machine.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from functools import partial
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch
from tiny_pair import noisy_copy, self_repeating_prompts, tiny_spec

from specscope.errors import InputError
from specscope.executor.batched import PerRowModel, own_cache
from specscope.executor.batched_draft import BatchedDraft
from specscope.executor.batched_transformer import batch_target
from specscope.executor.drafters import DraftModelDrafter, NgramDrafter
from specscope.executor.loop import decode_autoregressive
from specscope.executor.methods import draft_static
from specscope.executor.targets import Model, wrap
from specscope.hw_profiles import CostModel, load_profile
from specscope.models import get_model
from specscope.models.torch import Transformer
from specscope.models.zoo import load_zoo_model, weights_path
from specscope.serving.bench import (
    ServeBenchRequest,
    arrivals,
    run_serve_bench,
    wall_estimate,
    with_prompts,
)
from specscope.serving.planners import PolicyPlanner, in_turn, make_planner
from specscope.serving.server import Server, ServeRun
from specscope.simulator.entities import Group, Request
from specscope.simulator.policies.base import Speculation
from specscope.simulator.pricing import BatchPricer
from specscope.simulator.scheduler import Limits
from specscope.trace import AcceptanceModel
from specscope.trace.synth import synth_trace
from specscope.tree import Tree

torch.set_num_threads(1)

V = 61
SPEC = tiny_spec("tiny-serve", V, max_seq_len=256)
ARRIVALS = (0.0, 0.004, 0.004, 0.03, 0.09, 0.2)
OUTPUTS = (9, 4, 12, 7, 10, 5)
ACCEPTANCE = AcceptanceModel.from_vector([0.6, 0.2, 0.1])
"""SmartSpec's acceptance shape (losslessness does not depend on it)."""


def target() -> Model:
    return wrap(Transformer.random(SPEC, seed=0, dtype=torch.float64, std=0.2))


def draft() -> Model:
    module = Transformer.random(SPEC, seed=0, dtype=torch.float64, std=0.2)
    return wrap(noisy_copy(module, SPEC, seed=1), "tiny-serve-draft")


def groups_of(prompts: Sequence[Sequence[int]], arrivals: Sequence[float] = ARRIVALS,
              outputs: Sequence[int] = OUTPUTS) -> list[Group]:
    """One single-sequence group per prompt, arriving at `arrivals`."""
    out = []
    for i, (prompt, at, n) in enumerate(zip(prompts, arrivals, outputs, strict=True)):
        group = Group(i, at, len(prompt), sequences=1, output_tokens=n)
        group.first.append(Request(i, group, len(prompt), n, 1, None, None, 1.0))
        out.append(group)
    return out


def serve(model: Model, prompts: list[list[int]], policy: str, drafter: str = "ngram",
          chunk: int | None = 5, max_batch: int = 3, budget: int = 6,
          tree: Tree | None = None, batched: bool = False) -> ServeRun:
    """Serve the prompts on a virtual clock with per-row `drafter`s under `policy`, on a
    `PerRowModel` of `model` or (`batched`) its one-forward `batch_target`; "shared-draft"
    drafts from one batched draft model, each level one forward for all rows."""
    source = "ngram" if drafter == "ngram" else "draft"
    shared = BatchedDraft(batch_target(draft(), max_batch)) if drafter == "shared-draft" else None
    # h100's prices: there, speculation pays for SmartSpec at these acceptances
    pricer = BatchPricer(CostModel(load_profile("h100"), get_model("tiny-code")), None, source)
    planner, max_tree = make_planner(policy, source, budget, 4, tree, acceptance=ACCEPTANCE,
                                     pricer=pricer,
                                     run=in_turn if shared is None else shared.run)
    if drafter == "ngram":
        drafters = [NgramDrafter() for _ in range(max_batch)]
    elif shared is not None:
        drafters = [DraftModelDrafter(shared.row(r)) for r in range(max_batch)]
    else:
        drafters = [DraftModelDrafter(draft()) for _ in range(max_batch)]
    ticks = itertools.count()
    rows = batch_target(model, max_batch) if batched else PerRowModel.replicate(model, max_batch)
    server = Server(rows, drafters.__getitem__, planner,
                    Limits(max_batch, 24, chunk, max_tree), clock=lambda: next(ticks) * 1e-3,
                    sleep=lambda s: None)
    return server.run(groups_of(prompts), prompts)


def reference(model: Model, prompts: list[list[int]]) -> list[list[int]]:
    return [decode_autoregressive(model, p, n).output for p, n in zip(prompts, OUTPUTS,
                                                                       strict=True)]


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return self_repeating_prompts(target(), len(ARRIVALS))


CASES = [("ngram", "none", 5), ("ngram", "static", 5), ("ngram", "dyspec", 5),
         ("ngram", "smartspec", 5), ("ngram", "dyspec", None), ("draft", "static", 5),
         ("draft", "dyspec", 3), ("shared-draft", "static", 5), ("shared-draft", "dyspec", None)]


@pytest.mark.parametrize(("drafter", "policy", "chunk"), CASES)
def test_batched_outputs_equal_autoregressive(prompts: list[list[int]], drafter: str,
                                              policy: str, chunk: int | None) -> None:
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 3]) if policy == "static" else None
    run = serve(target(), prompts, policy, drafter, chunk, tree=tree)
    assert run.outputs == reference(target(), prompts)
    steps = run.events.filter(pl.col("event") == "step_start")
    assert steps.get_column("batch").max() >= 2  # sequences did share steps
    if policy != "none":
        assert sum(s.request.accepted for s in run.sequences) > 0


@pytest.mark.parametrize(("drafter", "policy", "chunk"), [("ngram", "dyspec", 5),
                                                          ("draft", "static", None)])
def test_one_forward_batched_target(prompts: list[list[int]], drafter: str, policy: str,
                                    chunk: int | None) -> None:
    tree = Tree.from_parents([-1, 0, 0, 1]) if policy == "static" else None
    run = serve(target(), prompts, policy, drafter, chunk, tree=tree, batched=True)
    assert run.outputs == reference(target(), prompts)


@pytest.mark.skipif(not weights_path("tiny-ssm").is_file(), reason="tiny-ssm not trained")
def test_ssm_rows_keep_their_own_state(prompts: list[list[int]]) -> None:
    ssm = wrap(load_zoo_model("tiny-ssm", dtype=torch.float64)[0], "tiny-ssm")
    short = [p[:10] for p in prompts]
    run = serve(ssm, short, "dyspec")
    assert run.outputs == reference(own_cache(ssm), short)


def test_event_log_complete_and_ordered(prompts: list[list[int]]) -> None:
    run = serve(target(), prompts, "dyspec")
    times = run.events.get_column("time_s").to_numpy()
    assert np.all(np.diff(times) >= 0)
    for s in run.sequences:
        r = s.request
        assert len(s.output) == len(s.token_times) == r.output_len == r.generated
        assert r.start_s <= r.admitted_s <= r.prefill_done_s <= r.first_token_s
        assert s.token_times[0] == r.first_token_s and s.token_times[-1] == r.finish_s
        assert list(s.token_times) == sorted(s.token_times)
        mine = run.events.filter(pl.col("group") == r.group.id).get_column("event").to_list()
        assert mine == ["arrival", "admit", "prefill_done", "finish"]


def test_rows_are_reused_after_leaving(prompts: list[list[int]]) -> None:
    run = serve(target(), prompts, "none", max_batch=2)
    assert run.outputs == reference(target(), prompts)
    assert len({s.row for s in run.sequences}) == 2


def test_serve_bench_zoo_is_complete_and_deterministic() -> None:
    req = ServeBenchRequest("tiny-code", rate=50.0, requests=4, policy="dyspec", budget=8,
                            output_len="uniform:4:8", max_batch=2, chunked_prefill=64, seed=3)
    first, second = run_serve_bench(req), run_serve_bench(req)
    assert first.run.outputs == second.run.outputs
    columns = ["start_s", "output_len", "prompt_len"]
    assert first.requests.select(columns).equals(second.requests.select(columns))
    table = first.requests
    assert (table["tokens"] == table["output_len"]).all()
    assert (table["first_token_s"] >= table["start_s"]).all()
    assert (table["finish_s"] >= table["first_token_s"]).all()
    assert first.summary["throughput_tok_s"] > 0 and first.summary["mean_batch"] >= 1


def test_plain_decoding_runs_no_draft_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--policy none` is plain decoding, as `simulate` prices it: a draft model that the
    drafter names is never prefilled nor run."""
    ran: list[str] = []
    for name in ("start", "propose", "accept"):
        monkeypatch.setattr(DraftModelDrafter, name,
                            lambda self, *a, name=name: ran.append(name))
    req = ServeBenchRequest("tiny-code", rate=50.0, requests=3, drafter="draft",
                            policy="none", output_len="4", max_batch=2, seed=1)
    assert run_serve_bench(req).summary["decode_steps"] > 0
    assert ran == []


def test_a_shared_draft_stops_its_threads_when_the_run_ends() -> None:
    req = ServeBenchRequest("tiny-code", rate=50.0, requests=4, drafter="draft",
                            policy="dyspec", budget=8, output_len="4", max_batch=2, seed=2)
    assert run_serve_bench(req).summary["decode_steps"] > 0
    assert not [t for t in threading.enumerate() if t.name.startswith("draft-row")]


def test_workload_draws_as_simulate_does() -> None:
    from specscope.simulator.workload import LengthDist, WorkloadSpec, build_groups

    prompts = [[1, 2, 3], [4, 5, 6, 7]]
    req = ServeBenchRequest("unused", rate=2.0, requests=5, output_len="uniform:3:9", seed=7)
    ours = with_prompts(arrivals(req), prompts)
    spec = WorkloadSpec(5, 2.0, LengthDist("fixed", 100.0), LengthDist.parse("uniform:3:9", "o"))
    theirs = build_groups(spec, 7, lambda i: None, lambda r: (0, 0), lambda g: 1.0)
    assert [g.arrival_s for g in ours] == [g.arrival_s for g in theirs]
    assert [g.first[0].output_len for g in ours] == [g.first[0].output_len for g in theirs]
    assert [g.prompt_len for g in ours] == [3, 4, 3, 4, 3]


def _chunk(new: object, context: object) -> np.ndarray:
    """1 ms + 10 µs a new token + 1 µs a token of context: a forward's time in `_Linear`."""
    return 1e-3 + 1e-5 * np.asarray(new) + 1e-6 * np.asarray(context)


class _Linear:
    """A cost model pricing one sequence's forward at `_chunk`."""

    hw = SimpleNamespace(name="linear")

    @staticmethod
    def forward_time(batch: int, new: object, context: object) -> np.ndarray:
        return batch * _chunk(new, context)


def test_the_wall_estimate_prices_each_chunk_at_its_context_and_shares_decode() -> None:
    """Prompts of 10 tokens (twice) and 25, chunked by 10: chunks (new, context) (10, 0) ×2,
    (10, 0), (10, 10), (5, 20); unchunked one chunk each. Outputs 4, 4, 6 decode at their
    request's mean context (prompt + output / 2), shared by 2 rows."""
    est = wall_estimate(_Linear(), [10, 25, 10], [4, 6, 4], 3.0, 10, 2)
    assert est.prefill_s == pytest.approx(
        3 * _chunk(10, 0) + _chunk(10, 10) + _chunk(5, 20))
    assert est.decode_s == pytest.approx(
        (2 * 4 * _chunk(1, 12) + 6 * _chunk(1, 28)) / 2)
    whole = wall_estimate(_Linear(), [10, 25, 10], [4, 6, 4], 3.0, None, 2)
    assert whole.prefill_s == pytest.approx(2 * _chunk(10, 0) + _chunk(25, 0))
    assert whole.total_s == pytest.approx(max(3.0, whole.prefill_s + whole.decode_s))
    assert wall_estimate(_Linear(), [10], [4], 100.0, None, 1).total_s == 100.0


def test_trace_without_the_policy_source_is_refused() -> None:
    trace = synth_trace(4, 0, sources=("recycle",), length=16)
    with pytest.raises(InputError, match="ngram"):
        make_planner("smartspec", "ngram", 8, 4, trace=trace)
    with pytest.raises(InputError, match="--hw"):
        make_planner("smartspec", "ngram", 8, 4, acceptance=ACCEPTANCE)
    with pytest.raises(InputError, match="trace"):
        make_planner("specdecpp", "ngram", 8, 4)
    with pytest.raises(InputError, match="not run for real"):
        make_planner("ets-batch", "ngram", 8, 4)


@pytest.mark.parametrize(("args", "words"), [
    (["--rate", "0"], "--rate"),
    (["--rate", "-1"], "--rate"),
    (["--rate", "1", "--max-batch", "8", "--token-budget", "4"], "--token-budget"),
    (["--rate", "1", "--token-budget", "16"], "--token-budget"),
    (["--rate", "1", "--policy", "static"], "--tree"),
])
def test_bad_inputs_exit_2_with_one_line(cli: Callable[..., tuple[int, str, str]],
                                         args: list[str], words: str) -> None:
    code, _, err = cli("serve-bench", "--target", "tiny-code", "--requests", "2",
                         "--device", "cpu", *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and words in err


def test_a_shared_draft_runs_each_level_of_every_row_in_one_forward(
        prompts: list[list[int]]) -> None:
    """Three rows drafting chains of 3 from one batched draft: each level (after the
    catch-up) is one forward of all rows, and each row's drafts are its own draft's."""
    batched = batch_target(draft(), 3)
    calls: list[list[int]] = []
    verify = batched.verify
    batched.verify = lambda rows, tokens, trees: (calls.append(list(rows)),
                                                  verify(rows, tokens, trees))[1]
    shared = BatchedDraft(batched)
    rows = [DraftModelDrafter(shared.row(r)) for r in range(3)]
    alone = [DraftModelDrafter(draft()) for _ in range(3)]
    chain = Tree.chain(3)
    for d, p in zip([*rows, *alone], [*prompts[:3], *prompts[:3]], strict=True):
        d.start(p, len(p) + 8)
        d.begin(p)
    together = shared.run([partial(draft_static, d, p[-1], chain)
                           for d, p in zip(rows, prompts[:3], strict=True)])
    apart = [draft_static(d, p[-1], chain) for d, p in zip(alone, prompts[:3], strict=True)]
    assert [t.tokens.tolist() for t in together] == [t.tokens.tolist() for t in apart]
    # the catch-up (the root's logits propose level 1), then levels 2 and 3: all rows each
    assert calls == [[0, 1, 2]] * 3


def test_rows_that_draft_nothing_stay_out_of_the_drafting_threads() -> None:
    """A plain row of a step (SmartSpec's k = 0) is drafted in the calling thread; only the
    rows that draft go to `run` (a shared draft model's threads), so a step where none drafts
    starts no thread."""
    chain = Speculation.of(Tree.chain(2, "ngram"))
    plans = iter([[Speculation.none(), chain, Speculation.none(), chain],
                  [Speculation.none()] * 4])

    class Planned:
        def plan(self, view: object) -> list[Speculation]:
            return next(plans)

    handed: list[int] = []

    def run(jobs: Sequence[Callable[[], object]]) -> list[object]:
        handed.append(len(jobs))
        return in_turn(jobs)

    running = [SimpleNamespace(request=SimpleNamespace(id=i, context_len=3, generated=0,
                                                       remaining=8),
                               drafter=NgramDrafter(), context=[1, 2, 1])
               for i in range(4)]
    for served in running:
        served.drafter.begin(served.context)
    planner = PolicyPlanner(Planned(), ACCEPTANCE, "ngram", None, run)
    trees = planner.trees(running, 0)
    assert [t.tree.size for t in trees][::2] == [1, 1] and handed == [2]
    assert all(t.tree.size == 1 for t in planner.trees(running, 1))
    assert handed == [2, 0]
