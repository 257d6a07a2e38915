"""SGLang: the speculative server arguments and their `sglang.launch_server` line.

Read from SGLang's released source (0.5.23: `sglang/srt/arg_groups/fields/spec.py` for the
fields, `sglang/srt/arg_groups/speculative_hook.py` for their checks;
`sglang/srt/speculative/spec_utils.py` `_select_top_k_tokens_*` and `eagle_utils.py`
`organize_draft_results` for the tree):

- `speculative_algorithm`: EAGLE, EAGLE3, NEXTN (EAGLE), STANDALONE (a separate draft model,
  on the EAGLE machinery), NGRAM, … (upper-cased before lookup).
- EAGLE family: `speculative_num_steps` S, `speculative_eagle_topk` K,
  `speculative_num_draft_tokens` N (root included); `speculative_draft_model_path` names the
  draft, except for NEXTN (the target's own MTP layer): `_handle_eagle_family` sets it to the
  target's path for DeepSeek-V3 and the other MTP architectures it lists, and
  `_resolve_speculative_algorithm_alias` runs NEXTN as EAGLE. With K = 1 SGLang sets N = S + 1 (a
  chain); N − 1 must not exceed the K + (S − 1)K² candidates (unchecked there: it fails at run
  time). The tree is the `topk` family (`families.topk_tree`): decided by the draft's
  probabilities at run time, so the exported (S, K, N) is the best setting under the positional
  acceptance standing for those probabilities.
- NGRAM: a trie match; `speculative_ngram_max_bfs_breadth` (and min) 1 makes it a chain of
  N − 1 tokens.
"""

from __future__ import annotations

import shlex
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.interop.engine import Export, Plan, Serving, is_count, method_for
from specscope.interop.families import TopK, best_chain, best_topk, contiguous, topk_tree
from specscope.tree import DEFAULT_SOURCE, Acceptance, Tree

ENGINE = "sglang"
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
METHODS = (*EAGLE_FAMILY, "NGRAM")
BY_SOURCE = {"ngram": "NGRAM", "draft": "STANDALONE", "mtp": "NEXTN", "eagle3": "EAGLE3",
             "eagle": "EAGLE"}
SERVING = Serving(EAGLE_FAMILY, {"EAGLE": "EAGLE", "EAGLE3": "EAGLE-3"}, ("NEXTN",))
TREE_NOTE = ("SGLang picks its N − 1 nodes by the draft's scores at run time: these settings' "
             "candidates hold the tree, which it verifies when the draft ranks them so")
MAX_TOPK = 8
"""Largest top-k searched (specscope's traces rank 8 candidates per position)."""


def valid(setting: TopK) -> bool:
    """SGLang's own rule: top-k 1 verifies the chain of its steps."""
    return setting.topk > 1 or setting.tokens == setting.steps + 1


def export(plan: Plan) -> Export:
    """The best setting SGLang can run at the plan's budget."""
    method = method_for(plan.source, plan.method, ENGINE, BY_SOURCE, METHODS)
    target, draft = plan.served(ENGINE, method, SERVING)
    if method == "NGRAM":
        score = best_chain(plan.setup, plan.budget)
        config = config_for(score.tree, method, None)
        family = "chains (an n-gram trie matched breadth 1)"
    else:
        width = min(MAX_TOPK, np.asarray(plan.setup.p).shape[-1])
        chosen, score = best_topk(plan.setup, plan.budget, 1 if plan.chains_only else width,
                                  valid)
        config = _eagle(method, draft, chosen)
        family = ("the N − 1 best of a top-k beam search of S steps (k + (S − 1)k² "
                  "candidates), chosen by the draft's scores at run time")
    return Export(ENGINE, method, config, command(config, target), score, family)


def config_for(tree: Tree, method: str, draft: str | None) -> dict[str, Any]:
    """The arguments (checked) under which SGLang can verify `tree`: NGRAM for a chain; for
    the EAGLE family the smallest (steps, top-k, tokens) whose candidates hold it (SGLang
    still picks its N − 1 nodes by the draft's scores at run time), for a tree its top-k
    builder can produce: every node's children its top ranks 0..c − 1 (a draft's top-k
    children of a node are its best c, so a verified rank r comes with ranks 0..r − 1)."""
    if method == "NGRAM":
        if not tree.is_chain:
            raise InputError("sglang: NGRAM (breadth 1) verifies chains; the tree branches")
        config = {"speculative_algorithm": method, "speculative_num_draft_tokens": tree.size,
                  "speculative_ngram_min_bfs_breadth": 1, "speculative_ngram_max_bfs_breadth": 1}
        check(config)
        return config
    why = contiguous(tree)
    if why is not None:
        raise InputError(f"sglang: {why}: SGLang's EAGLE tree keeps a node's top-k children by "
                         "the draft's scores, so it never verifies a rank without the ranks "
                         "above it; optimize-tree --to sglang solves for the best it runs")
    depths = tree.depths
    parents = [len({int(tree.parents[v]) for v in range(1, tree.size) if depths[v] == d})
               for d in range(1, tree.depth + 1)]
    topk = max([1, *parents, *(int(r) + 1 for r in tree.ranks[1:])])
    return _eagle(method, draft, TopK(max(1, tree.depth), topk, max(2, tree.size)))


def _eagle(method: str, draft: str | None, chosen: TopK) -> dict[str, Any]:
    """The EAGLE family's arguments for `chosen` (checked)."""
    config = {"speculative_algorithm": method, "speculative_draft_model_path": draft,
              "speculative_num_steps": chosen.steps, "speculative_eagle_topk": chosen.topk,
              "speculative_num_draft_tokens": chosen.tokens}
    if method in SERVING.own:  # SGLang reads the NextN layer from the target's own path
        del config["speculative_draft_model_path"]
    check(config)
    return config


def command(config: dict[str, Any], target: str) -> str:
    """The `python -m sglang.launch_server` line of `config`, every value shell-quoted."""
    flags = " ".join(f"--{key.replace('_', '-')} {shlex.quote(str(value))}"
                     for key, value in config.items())
    return f"python -m sglang.launch_server --model-path {shlex.quote(target)} {flags}"


def setting(config: dict[str, Any]) -> TopK:
    """The (steps, top-k, tokens) of an EAGLE-family `config` (checked first)."""
    check(config)
    if str(config["speculative_algorithm"]).upper() == "NGRAM":
        tokens = int(config["speculative_num_draft_tokens"])
        return TopK(tokens - 1, 1, tokens)
    return TopK(*(int(config[k]) for k in (
        "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")))


def parse(config: dict[str, Any], p: Acceptance, source: str = DEFAULT_SOURCE) -> Tree:
    """The tree SGLang verifies for `config` when the draft scores as `p` ranks."""
    return topk_tree(np.asarray(p), setting(config), source)


def check(config: dict[str, Any]) -> None:
    """SGLang's rules for these arguments (module docstring); one `InputError` naming the
    argument."""
    algorithm = str(config.get("speculative_algorithm", "")).upper()
    if algorithm not in METHODS:
        raise InputError(f"sglang: speculative_algorithm {config.get('speculative_algorithm')!r}"
                         f" is not one of {', '.join(METHODS)}")
    keys = (("speculative_num_draft_tokens",) if algorithm == "NGRAM" else
            ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"))
    for key in keys:
        value = config.get(key)
        if not is_count(value):
            raise InputError(f"sglang: {key} must be an integer ≥ 1, got {value!r}")
    if algorithm == "NGRAM":
        if config["speculative_num_draft_tokens"] < 2:
            raise InputError("sglang: speculative_num_draft_tokens must be ≥ 2 (root included)")
        return
    if algorithm not in SERVING.own and not config.get("speculative_draft_model_path"):
        raise InputError(f"sglang: {algorithm} needs speculative_draft_model_path")
    topk = TopK(*(int(config[k]) for k in keys))
    if not valid(topk):
        raise InputError(f"sglang: with speculative_eagle_topk 1, speculative_num_draft_tokens "
                         f"must be speculative_num_steps + 1 = {topk.steps + 1}, got "
                         f"{topk.tokens}")
    if not 2 <= topk.tokens <= topk.candidates + 1:
        raise InputError(f"sglang: speculative_num_draft_tokens {topk.tokens} must lie in "
                         f"2..{topk.candidates + 1} (the root and the {topk.candidates} "
                         "candidates of these steps and top-k)")
