"""Time of the Sequoia DP (table + tree) against a pure-Python implementation of the recurrence.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/optimizers.py [--ref-max 768]
Both run in this process on one core; the ratio column is reference time / specscope time.
The acceptance vector has 32 ranks with a strong top rank (p_1 = 0.9), so the depth cap of 19
binds and every level is computed (the slowest case for the DP's early stop).

The ETS tables time the integer program (candidate pool + CBC) against the ≤ 2 s target, and
compare one verification budget shared jointly by a batch of requests with an equal split.

The method tables time every method's tree construction at budgets 16…256 on a synthetic
trace (64 requests, seed 0), then run the matched-budget comparison (`optimize-tree --algo all
--budgets 8,16,32,64`) on h100 and cpu-2core: llama-2-7b target, llama-68m drafter for the
draft-model methods; Goose uses the trace's n-gram and recycling sources and pays no draft cost.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from specscope.optimizers.ets import candidate_pool, equal_split, ets_batch, ets_gap, ets_tree
from specscope.optimizers.sequoia import SequoiaDP

NEG = float("-inf")


def reference_dp(p: list[float], budget: int, levels: int) -> float:
    """The recurrence of docs/methods.md#sequoia as plain nested loops: best G for `budget`
    nodes."""
    ranks = len(p)
    best = [[NEG] * (budget + 1) for _ in range(levels + 1)]  # best[l][m]
    for lvl in range(1, levels + 1):
        prev = [NEG] * (budget + 1)
        prev[1] = 1.0
        row = prev[:]
        for b in range(1, ranks + 1):
            cur = [NEG] * (budget + 1)
            for m in range(2, budget + 1):
                top = NEG
                for y in range(1, m):
                    a, c = prev[y], best[lvl - 1][m - y]
                    if a == NEG or c == NEG:
                        continue
                    v = a + p[b - 1] * c
                    if v > top:
                        top = v
                cur[m] = top
            row = [max(x, y) for x, y in zip(row, cur, strict=True)]
            prev = cur
        best[lvl] = row
    return best[levels][budget]


def timed(fn, repeats: int = 3) -> tuple[float, object]:
    """Median wall time in seconds over `repeats` runs, and the last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ref-max", type=int, default=768, help="largest n for the reference")
    parser.add_argument("--depth", type=int, default=19)
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--only-comparison", action="store_true",
                        help="print only the matched-budget comparison")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not args.only_comparison:
        dp_table(args.ref_max, args.depth, args.ranks)
        ets_table()
        methods_table()
    matched_table()


def dp_table(ref_max: int, depth: int, ranks: int) -> None:
    """DP (table + tree) against the pure-Python recurrence, n = 16…768."""
    p = np.r_[0.9, np.full(ranks - 1, 0.09 / (ranks - 1))]
    table = Table(title=f"Sequoia DP, depth ≤ {depth}, {ranks} ranks (one core)")
    for col in ("n", "specscope ms", "pure Python ms", "ratio", "G(n)"):
        table.add_column(col, justify="right")
    for n in (16, 32, 64, 128, 256, 512, 768):
        fast_s, tree = timed(lambda n=n: SequoiaDP(p, n, depth).tree(n))
        g = tree.expected_tokens(p)
        if n <= ref_max:
            ref_s, ref_g = timed(lambda n=n: reference_dp(list(p), n, depth + 1), repeats=1)
            assert abs(ref_g - g) < 1e-9, (n, ref_g, g)
            ref, ratio = f"{ref_s * 1e3:,.0f}", f"{ref_s / fast_s:,.0f}×"
        else:
            ref, ratio = "not run", ""
        table.add_row(str(n), f"{fast_s * 1e3:.1f}", ref, ratio, f"{g:.4f}")
    Console().print(table)


def ets_table() -> None:
    """ETS solve time by pool size and budget, and joint batch allocation vs equal split."""
    p = 0.85 * 0.55 ** np.arange(16) / (0.55 ** np.arange(16)).sum()  # geometric ranks, Σ 0.85
    two = {"draft": p, "ngram": [0.3, 0.1]}
    table = Table(
        title=f"ETS integer program (PuLP + CBC), geometric p, p_1 = {p[0]:.2f} (one core)",
        caption="side terms: a 2nd source (n-gram, p = 0.3, 0.1), λ_cov = 0.5, λ_kv = 1, "
        "KV cap of budget/2 tokens",
    )
    for col in ("budget", "pool factor", "side terms", "pool nodes", "pool ms",
                "ETS ms (pool + CBC)", "G", "gap to DP"):
        table.add_column(col, justify="right")
    cases = [(b, f, False) for b, f in ((32, 4), (64, 2), (64, 4), (64, 8), (128, 4), (256, 4))]
    for budget, factor, side in [*cases, (64, 4, True), (256, 4, True)]:
        q = two if side else p
        kwargs = {"kv_penalty": 1.0, "coverage": 0.5, "kv_budget_bytes": budget // 2,
                  "kv_bytes_per_token": 1} if side else {}
        pool_s, pool = timed(lambda b=budget, f=factor, q=q: candidate_pool(q, b, pool_factor=f))
        ets_s, tree = timed(
            lambda b=budget, f=factor, q=q, kw=kwargs: ets_tree(q, b, pool_factor=f, **kw)
        )
        gap = "" if side else f"{ets_gap(p, budget, pool_factor=factor):.1e}"
        table.add_row(str(budget), str(factor), "all" if side else "none",
                      str(pool.size), f"{pool_s * 1e3:.0f}", f"{ets_s * 1e3:.0f}",
                      f"{tree.expected_tokens(q):.4f}", gap)
    Console().print(table)

    requests = [  # p_1 from a repetitive (0.9) to a hard (0.2) request
        [0.9, 0.05, 0.02],
        [0.7, 0.12, 0.05, 0.03],
        [0.45, 0.2, 0.1, 0.05, 0.03],
        [0.2, 0.15, 0.1, 0.08, 0.06, 0.05],
    ]
    batch = Table(title=f"Batch of {len(requests)} requests, p_1 = 0.9/0.7/0.45/0.2, one shared "
                        "budget (G = expected tokens/step)")
    for col in ("total n", "n per request", "Σ G joint", "Σ G equal split", "ratio", "ETS ms"):
        batch.add_column(col, justify="right")
    for total in (32, 64, 128, 256):
        ets_s, joint = timed(lambda t=total: ets_batch(requests, t), repeats=1)
        split = equal_split(requests, total)
        g_joint = sum(t.expected_tokens(q) for t, q in zip(joint, requests, strict=True))
        g_split = sum(t.expected_tokens(q) for t, q in zip(split, requests, strict=True))
        batch.add_row(str(total), "/".join(str(t.size) for t in joint), f"{g_joint:.3f}",
                      f"{g_split:.3f}", f"{g_joint / g_split:.3f}×", f"{ets_s * 1e3:.0f}")
    Console().print(batch)


def _synthetic_setup(hw: str):
    from specscope.hw_profiles import CostModel, load_profile
    from specscope.hw_profiles.pricing import Pricing
    from specscope.models import get_model
    from specscope.optimizers.compare import Setup
    from specscope.trace import AcceptanceModel, synth_trace

    trace = synth_trace(requests=64, seed=0)
    source = "draft:llama-68m"
    profile = load_profile(hw)
    pricing = Pricing(CostModel(profile, get_model("llama-2-7b")),
                      CostModel(profile, get_model("llama-68m")), trace.mean_context_len)
    return Setup(AcceptanceModel.from_trace(trace, source).p, source, pricing, 12, trace)


def methods_table() -> None:
    """Seconds to build each method's tree (SpecDec++: choose h and the cap) per budget."""
    from specscope.optimizers.compare import METHOD_NAMES, score_method

    setup = _synthetic_setup("h100")
    budgets = (16, 32, 64, 128, 256)
    table = Table(title="Time per method (ms, tree build + scoring, depth ≤ 12, h100 pricing)")
    table.add_column("method")
    for b in budgets:
        table.add_column(f"n={b}", justify="right")
    for algo in METHOD_NAMES:
        cells = [f"{timed(lambda b=b, a=algo: score_method(a, setup, b), repeats=1)[0] * 1e3:,.0f}"
                 for b in budgets]
        table.add_row(algo, *cells)
    Console().print(table)


def matched_table() -> None:
    """Speedup vs budget for every method (`optimize-tree --algo all --budgets 8,16,32,64`)."""
    from specscope.optimizers.compare import METHOD_NAMES, compare

    budgets = (8, 16, 32, 64)
    for hw in ("h100", "cpu-2core"):
        result = compare(_synthetic_setup(hw), METHOD_NAMES, budgets=budgets)
        table = Table(title=f"Matched budgets on {hw}: predicted speedup of each method's best "
                            "tree with n ≤ budget (synthetic trace, seed 0)")
        table.add_column("method")
        for b in budgets:
            table.add_column(f"n ≤ {b}", justify="right")
        table.add_column(f"n, d at {budgets[-1]}", justify="right")
        table.add_column("replay tok/step", justify="right")
        for i, s in enumerate(result.pareto[budgets[0]]):
            last = result.pareto[budgets[-1]][i]
            cells = [f"{rows[i].speedup:.2f}×" for rows in result.pareto.values()]
            table.add_row(s.algo, *cells, f"{last.n:.3g}, {last.depth:.2g}",
                          f"{last.replay_tokens:.3f}")
        Console().print(table)


if __name__ == "__main__":
    main()
