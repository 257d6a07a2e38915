"""The export document: an engine's configuration of the best tree it can run, beside the best
tree of all (`optimize-tree --to`), or of a given tree (`specscope export`)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from specscope.errors import InputError
from specscope.interop import hf_transformers, sglang, tensorrt_llm, vllm
from specscope.interop.engine import Plan, chains_only, method_for, served
from specscope.interop.families import best_chain
from specscope.interop.schedule_search import ScheduleResult
from specscope.interop.schedules import schedule_config
from specscope.names import EXPORT_ENGINES, MODEL_FREE_SOURCES
from specscope.optimizers.compare import best_any_size
from specscope.optimizers.run import OptimizeResult
from specscope.trace.sources import NO_DRAFTER, draft_model
from specscope.tree import ROOT_SOURCE, read_tree_file

ENGINES: dict[str, ModuleType] = dict(zip(EXPORT_ENGINES, (vllm, sglang, tensorrt_llm,
                                                            hf_transformers), strict=True))


def engine_module(engine: str) -> ModuleType:
    """The exporter of `engine`; an `InputError` naming the option for an unknown one."""
    if engine not in ENGINES:
        raise InputError(f"--to {engine}: not one of {', '.join(ENGINES)}")
    return ENGINES[engine]


def schedule_export(result: OptimizeResult, found: ScheduleResult, engine: str,
                    method: str | None = None, release: str | None = None) -> dict[str, Any]:
    """`engine`'s configuration of the schedule `found` for `result`'s target and drafter: its
    own schedule keys where it (or the vLLM `release`) takes a schedule, else the best
    constant, and the notes saying which (`interop.schedules`)."""
    module = engine_module(engine)
    chosen = method_for(result.source, method, engine, module.BY_SOURCE, module.METHODS)
    named = draft_model(result.source) or (
        None if result.drafter in (NO_DRAFTER, *MODEL_FREE_SOURCES) else result.drafter)
    target_id, draft_id = served(engine, chosen, module.SERVING, result.target, named,
                                 ("--target", "the drafter priced"))
    exported = schedule_config(engine, found.schedule, chosen, draft_id, found.constant,
                               release)
    return {"engine": engine, "method": chosen, "config": exported.config,
            "command": module.command(exported.config, target_id) if exported.config else "",
            "notes": list(exported.notes)}


def optimized_export(result: OptimizeResult, engine: str, method: str | None = None,
                     release: str | None = None) -> dict[str, Any]:
    """The best configuration `engine` runs for `result`'s setup and largest budget, and the
    unconstrained optimum: the best of every method compared, the DP over every size up to the
    budget, and the engine's own best (a family is a subset of all trees). The loss is measured
    against the best choice, plain decoding included, which every engine runs."""
    module = engine_module(engine)
    setup = result.setup
    assert setup is not None
    budget = max(result.comparison.pareto)
    dp = None if chains_only(setup) else (result.optimum or best_any_size(setup, budget))
    best = max([result.best, dp or best_chain(setup, budget)],
               key=lambda s: s.speedup)
    exported = module.export(Plan(setup, budget, best, result.target, result.drafter, method,
                                  dp, release))
    if exported.score.speedup > best.speedup:
        best = exported.score
    predicted = exported.score.speedup
    notes = list(exported.notes)
    if predicted <= 1.0:
        notes.append(f"no speculation pays here: plain decoding beats every configuration "
                     f"{engine} can run at batch {result.batch} ({predicted:.2f}×)")
    return {
        "engine": engine, "method": exported.method, "config": exported.config,
        "command": exported.command, "predicted": predicted, "unconstrained": best.speedup,
        "loss": 1 - max(predicted, 1.0) / max(best.speedup, 1.0), "family": exported.family,
        "hardware": result.hardware, "target": result.target, "drafter": result.drafter,
        "source": result.source, "budget": budget,
        "tree": exported.score.to_dict(), "unconstrained_tree": best.to_dict(),
        "notes": notes,
    }


def tree_export(path: Path, engine: str, method: str | None = None, algo: str | None = None,
                target: str | None = None, drafter: str | None = None,
                release: str | None = None) -> dict[str, Any]:
    """`engine`'s configuration verifying the tree in `path` (a bare tree or optimize-tree
    output: its best result, or `algo`'s), when the engine (at `release`, None: its current
    one) can express it; optimize-tree's recorded speedups ride along when the file holds
    them."""
    module = engine_module(engine)
    found = read_tree_file(path, algo)
    tree = found.tree
    sources = sorted(set(tree.sources) - {ROOT_SOURCE})
    if len(sources) > 1:
        raise InputError(f"{path}: the tree mixes sources {sources}; an engine drafts from one "
                         "(pick a single-source method's tree with --algo)")
    source = sources[0] if sources else (found.source or "draft")
    chosen = method_for(source, method, engine, module.BY_SOURCE, module.METHODS)
    if target is None and found.target is None:
        raise InputError(f"{path} holds a bare tree: give --target (the served model)")
    if engine == vllm.ENGINE and not tree.is_chain and (
            vllm.release(release) > vllm.LAST_TREE_RELEASE):
        raise InputError(f"{path}: the tree branches; vLLM {release or 'after 0.20.2'} verifies "
                         "chains only (TREE_ATTN was removed in 0.21): give --engine-version "
                         "0.20.2, or export a chain (optimize-tree --to vllm solves for it)")
    # the draft served: --drafter, else the source's draft model, else the drafter recorded
    named, where = drafter, "--drafter"
    if named is None and draft_model(source):
        named, where = draft_model(source), f"{path}: {'tree sources' if sources else 'source'}"
    if named is None and found.drafter not in (None, NO_DRAFTER, *MODEL_FREE_SOURCES):
        named, where = found.drafter, f"{path}: drafter"
    target_id, draft_id = served(
        engine, chosen, module.SERVING, target or found.target, named,
        ("--target" if target else f"{path}: target", where))
    target = target or found.target
    config = module.config_for(tree, chosen, draft_id)
    named = named if draft_id else None
    return {
        "engine": engine, "method": chosen, "config": config,
        "command": module.command(config, target_id),
        "predicted": found.speedup, "unconstrained": found.best_speedup,
        "target": target, "drafter": named, "source": source, "tree": tree.to_dict(),
        "notes": [module.TREE_NOTE] if hasattr(module, "TREE_NOTE") else [],
    }
