"""Rich tables for terminal output (times in ms, every column says its unit)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from specscope.json_out import strict_json
from specscope.optimizers.run import ANY_SIZE, OptimizeResult

if TYPE_CHECKING:
    from specscope.interop.schedule_search import ScheduleResult
    from specscope.simulator.at_rate import RateChoice
    from specscope.tree import Tree


def optimize_table(result: OptimizeResult) -> Table:
    """One `optimize-tree` result, best predicted speedup first, the DP optimum marked."""
    scores, skipped = result.ranked, result.comparison.skipped
    replay = any(s.replay_tokens is not None for s in scores)
    table = Table(
        title=f"{result.target} on {result.hardware} · drafter {result.drafter} · source "
        f"{result.source} · context {result.context_len}",
        caption="expected / replayed: tokens per step under the acceptance model / over the "
        "trace · ★ exact DP optimum over the source's trees (Goose uses n-gram + recycling) · "
        "tok/s and speedup predicted from expected"
        + ("" if result.any_size is None else
           f" · any-size: the DP's best tree of at most {max(result.comparison.pareto)} nodes, "
           "faster than every method's tree of that size")
        + "".join(f"\nskipped {a}: {why}" for a, why in skipped.items()),
    )
    cols = ["method", "n", "d", "expected"]
    cols += ["replayed"] if replay else []
    cols += ["step ms", "tok/s", "speedup"]
    for col in cols:
        table.add_column(col, justify="left" if col == "method" else "right",
                         no_wrap=col == "method")
    for s in scores:
        mark = " ★" if s.algo in (result.reference, ANY_SIZE) else ""
        row = [s.algo + mark, _count(s.n), _count(s.depth), f"{s.expected_tokens:.3f}"]
        if replay:
            row.append(f"{s.replay_tokens:.3f}")
        row += [f"{s.step_time_s * 1e3:.3f}", f"{s.tokens_per_s:,.1f}", f"{s.speedup:.2f}×"]
        table.add_row(*row)
    return table


def rate_table(choice: RateChoice) -> Table:
    """`optimize-tree --rate`: each candidate served at the rate, the chosen one marked."""
    table = Table(title=f"served at {choice.rate:g} requests/s (simulated; trees optimised at "
                        f"batch {choice.batch})", box=box.SIMPLE_HEAD)
    for col in ("candidate", "tok/s", "TPOT ms", "TTFT ms", "latency s", "p99 latency s",
                "mean batch"):
        table.add_column(col, justify="left" if col == "candidate" else "right")
    best = choice.best
    for c in choice.candidates:
        s = c.summary
        table.add_row(c.name + (" ★" if c is best else ""), f"{s['throughput_tok_s']:,.1f}",
                      f"{s['mean_tpot_ms']:,.2f}", f"{s['mean_ttft_ms']:,.1f}",
                      f"{s['mean_latency_s']:,.3f}", f"{s['p99_latency_s']:,.3f}",
                      f"{s['mean_batch']:.1f}")
    return table


def pareto_table(result: OptimizeResult) -> Table:
    """Predicted speedup of each method at each budget (its best n ≤ budget and depth)."""
    pareto = result.comparison.pareto
    table = Table(title=f"Speedup vs budget · {result.target} on {result.hardware}")
    table.add_column("method")
    for b in pareto:
        table.add_column(f"n ≤ {b}", justify="right")
    for i, s in enumerate(next(iter(pareto.values()))):
        best = max(rows[i].speedup for rows in pareto.values())
        cells = [
            f"[bold]{rows[i].speedup:.2f}×[/]" if rows[i].speedup == best else
            f"{rows[i].speedup:.2f}×"
            for rows in pareto.values()
        ]
        table.add_row(s.algo + (" ★" if s.algo == result.reference else ""), *cells)
    return table


def _count(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def cost_table(report: dict[str, Any], title: str) -> Table:
    """The breakdown of `specscope cost`: each operator's device time, then the terms beyond
    the operators (device fixed time, host issue time, ...), whose rows add up to the step; the
    last row says what bounds the step."""
    table = Table(title=title, caption="rows add up to the step · bound: what limits the row; "
                  "on the step row, what limits the step")
    for col in ("operator", "GFLOP", "MB moved", "time ms", "bound"):
        table.add_column(col, justify="left" if col in ("operator", "bound") else "right")
    for op in report["operators"]:
        table.add_row(op["op"], f"{op['flops'] / 1e9:.3f}", f"{op['bytes'] / 1e6:.1f}",
                      f"{op['time_ms']:.4f}", op["bound"])
    table.add_section()
    for term in report["step_terms"]:
        table.add_row(term["what"], "", "", f"{term['time_ms']:.4f}", term["bound"])
    table.add_section()
    flops = sum(op["flops"] for op in report["operators"])
    moved = sum(op["bytes"] for op in report["operators"])
    table.add_row(f"step ({report['source']})", f"{flops / 1e9:.3f}", f"{moved / 1e6:.1f}",
                  f"{report['step_time_ms']:.4f}", f"{report['bound']}-bound", style="bold")
    return table


def generate_table(run: dict[str, Any]) -> Table:
    """A `specscope generate` result: speculative against autoregressive, phase breakdown."""
    table = Table(title=f"{run['target']} · drafter {run['drafter']} · {run['method']} "
                        f"({run['tree_origin']}) · {run['rule']} · {run['device']} "
                        f"{run['dtype']} {run['runtime']} · {run['threads']} threads")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [
        ("speculative tokens/s", f"{run['tokens_per_s']:,.1f}"),
        ("autoregressive tokens/s", f"{run['ar_tokens_per_s']:,.1f}"),
        ("speedup", f"{run['speedup']:.2f}×"),
        ("accepted drafts / step", f"{run['mean_accepted']:.3f}"),
        ("tokens / step", f"{run['tokens_per_step']:.3f}"),
        ("mean tree size", f"{run['mean_tree_size']:.1f}"),
        ("draft ms", f"{run['draft_ms']:,.1f}"),
        ("verify ms", f"{run['verify_ms']:,.1f}"),
        ("bookkeeping ms", f"{run['bookkeeping_ms']:,.1f}"),
        ("autoregressive ms", f"{run['ar_ms']:,.1f}"),
    ]
    if run["setup_s"]:
        rows.append(("compile / capture s (excluded)", f"{run['setup_s']:,.1f}"))
    if run.get("lossless") is not None:
        rows.append(("lossless", f"{run['lossless']} ({run['mismatches']} mismatches)"))
    for row in rows:
        table.add_row(*row)
    return table


def simulate_table(summary: dict[str, Any]) -> Table:
    """A `specscope simulate` summary: rates, latencies (ms and s), acceptance, batch and KV."""
    table = Table(title=f"{summary['target']} on {summary['hardware']} ({summary['runtime']}, "
                        f"tp {summary['tp']}) · policy {summary['policy']} · source "
                        f"{summary['source']} · {summary['arrivals']} arrivals at "
                        f"{summary['rate']:g}/s · {summary['workload']}")
    table.add_column("quantity")
    table.add_column("mean", justify="right")
    for q in ("p50", "p90", "p99"):
        table.add_column(q, justify="right")

    def row(label: str, key: str, fmt: str) -> None:
        cells = [summary.get(f"{p}_{key}") for p in ("mean", "p50", "p90", "p99")]
        table.add_row(label, *("–" if c is None else format(c, fmt) for c in cells))

    row("TTFT ms", "ttft_ms", ",.1f")
    row("TPOT ms", "tpot_ms", ",.2f")
    row("latency s", "latency_s", ",.3f")
    limits = [f"{name} ≤ {summary[key]:g} ms" for name, key in (("TTFT", "slo_ttft_ms"),
                                                                 ("TPOT", "slo_tpot_ms"))
              if summary.get(key) is not None]
    goodput = (f" ({' and '.join(limits)}: {summary['slo_met']:.0%} of requests)" if limits
               else "")
    cost = ("" if summary.get("usd_per_million_tokens") is None else
            f" · ${summary['usd_per_million_tokens']:,.3f} per million tokens at "
            f"${summary['gpu_hour_usd']:g}/GPU-hour")
    devices = "" if "gpus" not in summary else (
        f"\n{summary['gpus']} GPU{'s' if summary['gpus'] > 1 else ''}: "
        f"{summary['tokens_per_s_per_gpu']:,.1f} tok/s per GPU, "
        f"{summary['tokens_per_s_per_user']:,.1f} tok/s per user{cost}")
    table.caption = (
        f"throughput {summary['throughput_tok_s']:,.1f} tok/s · goodput "
        f"{summary['goodput_tok_s']:,.1f} tok/s{goodput} · {summary['generated_tokens']:,} "
        f"tokens in {summary['makespan_s']:,.2f} s{devices}\naccepted drafts/step "
        f"{summary['mean_accepted']:.3f} ({summary['acceptance']}: "
        f"{summary['replayed_steps']:,} replayed, {summary['sampled_steps']:,} sampled) · batch "
        f"mean {summary['mean_batch']:.1f}, peak {summary['peak_batch']} · peak KV "
        f"{summary['peak_kv_occupancy']:.1%} of {summary['kv_capacity_bytes'] / 1e9:,.1f} GB")
    plain = summary.get("plain")
    if plain is not None:
        table.caption += (f"\nplain decoding of the same arrivals: {plain['throughput_tok_s']:,.1f}"
                          f" tok/s, TPOT {plain['mean_tpot_ms']:,.2f} ms, latency "
                          f"{plain['mean_latency_s']:,.3f} s · {plain['verdict']}")
    return table


def reproduce_table(rows: list[Any]) -> Table:
    """`specscope reproduce`: per case, the terms that carry the prediction, predicted against
    published and the relative error; lossy systems and partial setups marked."""
    table = Table(title="seed systems: predicted against published", box=box.SIMPLE_HEAD,
                  caption="speedup over the case's baseline (autoregressive decoding of the same "
                  "target unless noted); τ: tokens per step, bonus counted; ms per step: target "
                  "verification, drafting, the loop's bookkeeping, other phases; base: the "
                  "baseline's ms per token; ⚠: lossy, accepts beyond the target's distribution; "
                  "†: partial setup, assumptions below")
    for col in ("case", "system, hw, engine", "τ", "target", "draft", "book", "other", "base",
                "predicted", "published", "rel err"):
        left = col in ("case", "system, hw, engine")
        table.add_column(col, justify="left" if left else "right", overflow="fold",
                         no_wrap=not left,
                         min_width={"case": 14, "system, hw, engine": 10}.get(col))
    for r in rows:
        p, case = r.prediction, r.case
        pred, pub = r.shown(0)
        name = case.name + (" †" if case.setup == "partial" else "")
        engine = case.engine or "specscope"
        if case.baseline_engine:
            engine += f" / {case.baseline_engine}"
        terms = [f"{v:.1f}" for v in r.terms_ms.values()]
        table.add_row(name, f"{case.system}{' ⚠' if p.lossy else ''}\n{case.hw}\n{engine}",
                      f"{p.tokens_per_step:.2f}", *terms, pred, pub, f"{r.rel_err:+.1%}")
    return table


def error_table(summaries: list[Any], by: str = "family") -> Table:
    """`specscope reproduce`: |relative error| per group (`by`: family or engine) and over
    every case."""
    table = Table(title=f"|relative error| by {by}", box=box.SIMPLE_HEAD)
    for col in (by, "cases", "median", "p90", "worst", "lossy"):
        table.add_column(col, justify="left" if col == by else "right")
    for s in summaries:
        table.add_row(s.group, str(s.cases), f"{s.median:.1%}", f"{s.p90:.1%}",
                      f"{s.worst:.1%}", str(s.lossy))
    return table


def export_lines(doc: dict[str, Any]) -> list[str]:
    """An export document as lines: the engine's configuration, the predicted speedup against
    the unconstrained optimum when known, its command (when it has one) and its notes."""
    lines = [f"[bold]{doc['engine']}[/] ({doc['method']}): " + strict_json(doc["config"], None)]
    if "family" in doc:
        lines.append(f"predicted {doc['predicted']:.3f}× against {doc['unconstrained']:.3f}× "
                     f"for the best tree of all ({doc['loss']:.1%} lost to what "
                     f"{doc['engine']} can express: {doc['family']})")
    elif doc.get("predicted") is not None:
        lines.append(f"optimize-tree predicted {doc['predicted']:.3f}× for this tree (the "
                     f"file's best: {doc['unconstrained']:.3f}×)")
    if doc["command"]:
        lines.append(f"command: {doc['command']}")
    lines += [f"note: {note}" for note in doc.get("notes", [])]
    return lines


def schedule_table(result: ScheduleResult) -> Table:
    """`optimize-tree --schedule`: one row per range of batch sizes, its choice, and what the
    schedule, the best constant and plain decoding yield at the range's last batch size."""
    table = Table(title=f"speculation schedule ({result.family} family); tok/s over the batch "
                        "and TPOT at each range's last batch size", box=box.SIMPLE_HEAD)
    contexts = any(b.context is not None for b in result.schedule.buckets)
    for col in (("context (priced at)",) if contexts else ()) + (
            "batch", "choice", "tok/s", "const tok/s", "plain tok/s", "TPOT ms",
            "plain TPOT ms"):
        table.add_column(col, justify="right" if "tok" in col or "TPOT" in col else "left")
    rows = {(r.context, r.batch): r for r in result.rows}
    for bucket in result.schedule.buckets:
        at = [r for (_, b), r in rows.items() if bucket.holds(b, r.context)]
        r = max(at, key=lambda row: row.batch)
        table.add_row(*([_contexts(bucket.context, r.context)] if contexts else []),
                      f"{bucket.batch[0]}–{bucket.batch[1]}", _choice(bucket.tree),
                      f"{r.schedule_tps:,.0f}", f"{r.constant_tps:,.0f}", f"{r.plain_tps:,.0f}",
                      f"{r.schedule_tpot * 1e3:.2f}", f"{r.plain_tpot * 1e3:.2f}")
    table.caption = (f"best constant: {_choice(result.constant)} (the speculating choice with "
                     "the highest geometric-mean speedup over the batch sizes)")
    return table


def _contexts(bounds: tuple[int, int] | None, priced: int) -> str:
    """A bucket's context range (open-ended: no upper end) and the context it was priced
    at."""
    if bounds is None:
        return f"any ({priced:,})"
    from specscope.schedule import OPEN_CONTEXT

    top = "" if bounds[1] >= OPEN_CONTEXT else f"{bounds[1]:,}"
    return f"{bounds[0]:,}–{top} ({priced:,})"


def _choice(tree: Tree | None) -> str:
    """A schedule's choice in words: off, a chain's length, a tree's size and depth."""
    if tree is None:
        return "off"
    return f"chain {tree.depth}" if tree.is_chain else f"tree n={tree.size} d={tree.depth}"


def front_table(rows: list[dict[str, Any]]) -> Table:
    """`simulate --front`: each choice at each rate, goodput per GPU and tokens/s per user, its
    cost, and ★ on the overall Pareto front (no point serves more of both at once)."""
    table = Table(title="goodput per GPU against tokens/s per user over the rate ladder (★: on "
                        "the Pareto front of every choice)", box=box.SIMPLE_HEAD)
    for col in ("choice", "rate /s", "goodput/GPU", "tok/s/user", "TTFT ms", "$/M tokens",
                "front"):
        table.add_column(col, justify="left" if col == "choice" else "right", no_wrap=True)

    def num(value: float | None, fmt: str) -> str:
        return "–" if value is None else format(value, fmt)

    for r in sorted(rows, key=lambda r: (r["choice"], r["rate"])):
        table.add_row(r["choice"], f"{r['rate']:.2f}", num(r["goodput_per_gpu"], ",.0f"),
                      num(r["tokens_per_s_per_user"], ",.1f"), num(r["mean_ttft_ms"], ",.0f"),
                      num(r["usd_per_million_tokens"], ".3f"), "★" if r["on_front"] else "")
    return table
