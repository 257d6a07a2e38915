"""The faster simulator (issue 42) simulates exactly what the simulator of commit dbb9a71 did:
for each case below, the summary, the per-request table, the event log and the time series
digest to the value that commit gave (computed by running this module's `digest` on it from a
`git worktree`). `benchmarks/simulator_cpu.py speed` checks the same on its own workload and
measures the speed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from specscope.hw_profiles.deployment import deployment
from specscope.optimizers.sequoia import SequoiaDP
from specscope.simulator.entities import KVSpace
from specscope.simulator.run import SimulateRequest, SimulationResult, run_simulation
from specscope.trace import Trace, synth_trace
from specscope.tree import Tree

SOURCE = "draft:llama-3.2-1b"
P = (0.72, 0.1, 0.04, 0.02, 0.01, 0.01)


@cache
def _trace() -> Trace:
    return synth_trace(16, 0, sources=(SOURCE, "ngram"), length=96, k=4)


def _tree_file(folder: Path, tree: Tree) -> Path:
    path = folder / "tree.json"
    path.write_text(tree.to_json())
    return path


def _sequoia(folder: Path) -> Path:
    return _tree_file(folder, SequoiaDP(np.array(P), 16, 8).tree(16, source=SOURCE))


def _static_sampled(folder: Path) -> SimulateRequest:
    return SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b"),
        policy="static", tree=_sequoia(folder), acceptance=P, rate=50.0, requests=300, seed=0)


def _static_replay_ngram(folder: Path) -> SimulateRequest:
    return SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="ngram"),
        trace=_trace(), policy="static", tree=_tree_file(folder, Tree.chain(4, "ngram")),
        rate=20.0, requests=40, output_len="120", seed=1)


def _dynamic(policy: str, requests: int = 24, **options: float
             ) -> Callable[[Path], SimulateRequest]:
    def build(_: Path) -> SimulateRequest:
        return SimulateRequest(
            deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                                  max_batch=8),
            trace=_trace(), source=SOURCE, policy=policy, budget=8, max_depth=6, rate=20.0,
            requests=requests, seed=2, options=options)
    return build


def _draft_window(folder: Path) -> SimulateRequest:
    return SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                              draft_window=300),
        policy="static", tree=_sequoia(folder), acceptance=P, rate=50.0, requests=60, seed=5)


def _padded_ngram(folder: Path) -> SimulateRequest:
    return SimulateRequest(
        deployment=deployment("cpu-2core", target="tiny-code", drafter="ngram", runtime="eager",
                              max_batch=4),
        policy="static", tree=_tree_file(folder, Tree.chain(4, "ngram")), acceptance=(0.6,),
        rate=2.0, requests=12, prompt_len="uniform:16:200", output_len="40", seed=6)


def _system(_: Path) -> SimulateRequest:
    return SimulateRequest(
        deployment=deployment("a100", target="llama-3.1-8b", drafter="llama-3.2-1b"),
        policy="dyspec", acceptance=(0.6, 0.2), rate=5.0, requests=12, output_len="48",
        prompt_len="64", seed=3, system="hydra", budget=6)


def _separate_chunked_forking(folder: Path) -> SimulateRequest:
    return SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                              max_batch=12),
        policy="static", tree=_sequoia(folder), acceptance=P, rate=30.0, requests=30,
        workload="forking", fork_branches=2, fork_levels=2, prompt_len="uniform:100:400",
        output_len="lognormal:60:0.4", arrivals="gamma", cv=2.0, chunked_prefill=128,
        token_budget=1024, draft_placement="separate", replicas=2, router="least-outstanding",
        drift=(0.8,), slo_tpot_ms=9.0, seed=4)


CASES: dict[str, Callable[[Path], SimulateRequest]] = {
    "static-sampled": _static_sampled,
    "static-replay-ngram": _static_replay_ngram,
    "dyspec": _dynamic("dyspec"),
    "specdecpp": _dynamic("specdecpp"),
    "smartspec": _dynamic("smartspec"),
    "ets-batch": _dynamic("ets-batch", requests=10, every=4),
    "static-draft-window": _draft_window,
    "static-padded-ngram": _padded_ngram,
    "system-hydra": _system,
    "separate-chunked-forking": _separate_chunked_forking,
}
"""Cases that cover every policy, replay and sampling, a seed system, and the server's other
paths (separate drafting, chunked prefill, forking, two replicas, drift, an SLO, a draft
window, a loop that pads every row to the longest context, a model-free drafter)."""

GOLDEN = {
    "dyspec": "ea144054a723ddeb09bb6dafdaea3381aa75101958e6db0b473f695325f79568",
    "ets-batch": "0110a115fa49945d50a6a7fca88638439747030dc06b0b97403431a2ace16913",
    "separate-chunked-forking": "9740957ff16a30ab3ae506a7ed4862c6e3a4e835334420c42db86677e1841f6a",
    "smartspec": "50db82b2ad6adaca2f9f58b5dee5fbe700c6f8b48999ddbcfcf860e3f872913d",
    "specdecpp": "715c9d71472385436e376410a24968d5e3d4349919eb7b623e23a18f3611d3e6",
    "static-replay-ngram": "978e3817a326b807511a55ab08633ff2d11141444b728f16aa254f1228c366c0",
    "static-sampled": "74eabe5ea37f387813590d8c42762aaf5bdd7a303eb919f11fd95a0e43c15ba7",
    "static-draft-window": "3531166d20db424498bad6541b89eeaadeef702ce32d49b89b059f037cc9ed96",
    "static-padded-ngram": "e5c2d85cd9d36b768b3de94f22de1d112ea96d7d29448bd951232f5ccc7776b3",
    "system-hydra": "05c1a4b6aab08e9aed4310c16335f812f13c5449349aa4527d6d18ef9abc666f",
}
"""`digest` of each case as commit dbb9a71 simulated it under today's pricing of a flash prompt's
attention (cost.py's one-line change of issue 43 applied in that commit's worktree: the simulator
itself unchanged)."""


MEASURED = ("requests", "generated_tokens", "makespan_s", "throughput_tok_s", "goodput_tok_s",
            "slo_met", "steps", "mean_accepted",
            *(f"{stat}_{name}" for name in ("ttft_ms", "tpot_ms", "latency_s")
              for stat in ("mean", "p50", "p90", "p99")),
            "mean_batch", "peak_batch", "peak_kv_bytes", "peak_kv_occupancy", "kv_capacity_bytes",
            "acceptance", "replayed_steps", "sampled_steps")
"""The summary's measurements (its other fields describe the setup)."""
PLAIN = ("throughput_tok_s", "goodput_tok_s", "mean_ttft_ms", "mean_tpot_ms", "p99_ttft_ms",
         "mean_latency_s", "p99_latency_s", "mean_batch", "max_batch", "latency_speedup",
         "throughput_ratio", "speculation_pays")
"""The plain-decoding comparison's measurements."""
TABLES = (("requests", ("request", "group", "level", "replica", "trace_request", "prompt_len",
                        "output_len", "tokens", "steps", "accepted", "start_s", "admitted_s",
                        "prefill_done_s", "first_token_s", "finish_s", "ttft_s", "latency_s",
                        "tpot_s", "mean_accepted")),
          ("events", ("time_s", "event", "replica", "group", "request", "batch", "tokens",
                      "kv_bytes")),
          ("timeseries", ("time_s", "replica", "batch", "kv_bytes", "kv_occupancy")))
"""Each table's columns."""


def digest(result: SimulationResult) -> str:
    """A hash of every measurement a run reports (`MEASURED`, `PLAIN`, `TABLES`: the fields of
    commit dbb9a71, so that fields added since leave it alone)."""
    summary = {k: result.summary[k] for k in MEASURED}
    if "plain" in result.summary:
        summary["plain"] = {k: result.summary["plain"][k] for k in PLAIN}
    h = hashlib.sha256(json.dumps(summary).encode())
    for table, columns in TABLES:
        frame = getattr(result, table)
        for name in columns:
            h.update(name.encode() + frame.get_column(name).to_physical().to_numpy().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_are_those_of_the_starting_commit(case: str, tmp_path: Path) -> None:
    assert digest(run_simulation(CASES[case](tmp_path))) == GOLDEN[case]


@pytest.mark.parametrize("case", ["static-sampled", "separate-chunked-forking"])
def test_inexact_kv_bytes_take_the_step_by_step_accounting_to_the_same_outputs(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Byte counts that are not whole numbers are summed per sequence per step, in batch
    order (`RunningBatch`); with whole numbers that accounting gives the same outputs."""
    monkeypatch.setattr(KVSpace, "exact", property(lambda _: False))
    assert digest(run_simulation(CASES[case](tmp_path))) == GOLDEN[case]
