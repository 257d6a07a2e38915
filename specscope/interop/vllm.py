"""vLLM: the `--speculative-config` JSON and its `vllm serve` line.

Read from vLLM's released source (`vllm/config/speculative.py`, `SpeculativeConfig`; 0.20.2 and
0.33.0):

- `method` (ngram, suffix, draft_model, eagle, eagle3, mtp, …), `num_speculative_tokens` (> 0),
  `model` (the draft, for draft_model and eagle/eagle3), and for ngram `prompt_lookup_max` /
  `prompt_lookup_min` (≥ 1, min ≤ max).
- `speculative_token_tree` (vLLM ≤ 0.20.2 with `--attention-backend TREE_ATTN`; removed with
  tree attention in 0.21, vllm-project/vllm#42121, and rejected since, the config forbidding
  unknown keys): a string of a Python list of tuples, each a path of child ranks from the root,
  which `SpeculativeConfig.__post_init__` reads with `ast.literal_eval` and sorts by
  `(len(t), t)` (breadth-first, parents before children). The draft proposer
  (`vllm/v1/spec_decode/llm_base_proposer.py`) drafts level by level, each node of level L − 1
  taking its top n_L / n_{L−1} tokens, so a tree must give every node of a level the same
  children, ranks 0..b − 1; the scheduler and the per-position counters are sized by
  `num_speculative_tokens`, which must equal the number of paths (the upstream tests keep them
  equal); the attention mask (`vllm/v1/attention/backends/tree_attn.py`) looks up every
  path's parent. Only the draft-model proposers (draft_model, eagle, eagle3, mtp) take a tree.

A chain needs no `speculative_token_tree` (vLLM's default is the chain of
`num_speculative_tokens`), so it runs on every release.
"""

from __future__ import annotations

import ast
import shlex
from typing import Any

from specscope.errors import InputError
from specscope.interop.engine import (
    Export,
    Plan,
    Serving,
    breadth_first,
    is_count,
    method_for,
    orphan,
    shown,
)
from specscope.interop.families import best_chain, best_levels
from specscope.json_out import strict_json
from specscope.tree import DEFAULT_SOURCE, Tree

ENGINE = "vllm"
METHODS = ("ngram", "suffix", "draft_model", "eagle", "eagle3", "mtp")
TREE_METHODS = ("draft_model", "eagle", "eagle3", "mtp")
NEEDS_MODEL = ("draft_model", "eagle", "eagle3")
BY_SOURCE = {"ngram": "ngram", "suffix": "suffix", "draft": "draft_model", "mtp": "mtp",
             "eagle3": "eagle3", "eagle": "eagle"}
SERVING = Serving(NEEDS_MODEL, {"eagle": "EAGLE", "eagle3": "EAGLE-3"}, ("mtp",))
NGRAM_MATCH = (2, 5)
"""prompt_lookup_min and prompt_lookup_max exported (vLLM's default for both is 5; a 2-gram
match is what specscope's n-gram drafter looks up)."""
CURRENT_RELEASE = (0, 33, 0)
"""The newest release read: chains only, and a per-batch schedule (`interop.schedules`)."""
LAST_TREE_RELEASE = (0, 20, 2)
"""The last release taking `speculative_token_tree` (module docstring)."""
FIRST_SCHEDULE_RELEASE = (0, 24, 0)
"""The first release taking `num_speculative_tokens_per_batch_size` (`interop.schedules`)."""


def release(version: str | None) -> tuple[int, ...]:
    """A vLLM release ("0.20.2") as a comparable tuple; None: `CURRENT_RELEASE`."""
    if version is None:
        return CURRENT_RELEASE
    parts = version.split(".") if isinstance(version, str) else []
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise InputError(f"vllm release {shown(version)}: give it as X.Y.Z, such as 0.20.2")
    return (*map(int, parts), 0)[:3]


def export(plan: Plan) -> Export:
    """The best configuration vLLM can run at the plan's budget."""
    method = method_for(plan.source, plan.method, ENGINE, BY_SOURCE, METHODS)
    notes = []
    trees = release(plan.release) <= LAST_TREE_RELEASE
    if method in TREE_METHODS and not plan.chains_only and trees:
        branching, score = best_levels(plan.setup, plan.budget)
        family = ("trees with one branching per level (every node of depth d − 1 drafts its "
                  f"top b_d), vLLM {plan.release} with TREE_ATTN")
        if score.tree.size - 1 > len(branching):
            notes.append(f"a tree needs vLLM ≤ 0.20.2 with --attention-backend TREE_ATTN "
                         f"(removed in 0.21); the best chain for later releases is "
                         f"{best_chain(plan.setup, plan.budget).tree.depth} drafts")
    else:
        score = best_chain(plan.setup, plan.budget)
        family = "chains (the --engine priced verifies chains only)" if plan.chains_only else (
            f"chains ({method} proposes one continuation)" if method not in TREE_METHODS else
            f"chains (vLLM {'.'.join(map(str, release(plan.release)))} verifies chains only; "
            "--engine-version 0.20.2 for its trees)")
    target, draft = plan.served(ENGINE, method, SERVING)
    config = config_for(score.tree, method, draft)
    return Export(ENGINE, method, config, command(config, target), score, family, tuple(notes))


def config_for(tree: Tree, method: str, draft: str | None) -> dict[str, Any]:
    """The `--speculative-config` object verifying `tree` with `method` (checked)."""
    if not tree.is_chain and uniform_levels(tree) is None:
        raise InputError("vllm: the tree's levels do not branch alike (vLLM drafts the top b_d "
                         "tokens of every node at depth d − 1); optimize-tree --to vllm "
                         "solves for the best tree vLLM runs")
    config: dict[str, Any] = {"method": method}
    if method in NEEDS_MODEL:
        config["model"] = draft
    config["num_speculative_tokens"] = tree.size - 1
    if method == "ngram":
        config["prompt_lookup_min"], config["prompt_lookup_max"] = NGRAM_MATCH
    if not tree.is_chain:
        config["speculative_token_tree"] = str(breadth_first(tree.rank_paths()))
    check(config)
    return config


def command(config: dict[str, Any], target: str) -> str:
    """The `vllm serve` line of `config`, every value shell-quoted."""
    backend = (" --attention-backend TREE_ATTN" if "speculative_token_tree" in config else "")
    return (f"vllm serve {shlex.quote(target)}{backend} --speculative-config "
            f"{shlex.quote(strict_json(config, None, separators=(',', ':')))}")


def parse(config: dict[str, Any], source: str = DEFAULT_SOURCE) -> Tree:
    """The tree vLLM verifies for `config` (checked first), drafted by `source`."""
    check(config)
    text = config.get("speculative_token_tree")
    if text is None:
        return Tree.chain(config["num_speculative_tokens"], source)
    return Tree.from_rank_paths(ast.literal_eval(text), source)


def check(config: dict[str, Any]) -> None:
    """vLLM's rules for these keys (module docstring); one `InputError` naming the key."""
    method = config.get("method")
    if method not in METHODS:
        raise InputError(f"vllm: method {method!r} is not one of {', '.join(METHODS)}")
    k = config.get("num_speculative_tokens")
    if not is_count(k):
        raise InputError(f"vllm: num_speculative_tokens must be an integer > 0, got {k!r}")
    if method in NEEDS_MODEL and not config.get("model"):
        raise InputError(f"vllm: method {method} needs model (the draft)")
    if method == "ngram":
        low, high = config.get("prompt_lookup_min", 5), config.get("prompt_lookup_max", 5)
        if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
            raise InputError(f"vllm: prompt_lookup_min {low!r} and prompt_lookup_max {high!r} "
                             "must be integers with 1 ≤ min ≤ max")
    text = config.get("speculative_token_tree")
    if text is None:
        return
    if method not in TREE_METHODS:
        raise InputError(f"vllm: speculative_token_tree needs a draft-model method "
                         f"({', '.join(TREE_METHODS)}), not {method}")
    try:
        paths = ast.literal_eval(text) if isinstance(text, str) else None
    except (ValueError, SyntaxError):
        paths = None
    if not (isinstance(paths, list) and paths and all(
            isinstance(p, tuple) and p and all(isinstance(r, int) and r >= 0 for r in p)
            for p in paths)):
        raise InputError("vllm: speculative_token_tree must be a string of a non-empty list of "
                         "tuples of child ranks, such as '[(0,), (1,), (0, 0)]'")
    if paths != breadth_first(paths) or len(set(paths)) != len(paths):
        raise InputError("vllm: speculative_token_tree must list distinct paths breadth-first "
                         "(sorted by length, then ranks)")
    lone = orphan(paths)
    if lone is not None:
        raise InputError(f"vllm: speculative_token_tree path {lone} comes without its parent "
                         f"{lone[:-1]}")
    if len(paths) != k:
        raise InputError(f"vllm: speculative_token_tree holds {len(paths)} paths but "
                         f"num_speculative_tokens is {k}")
    levels: dict[int, list[tuple[int, ...]]] = {}
    for p in paths:
        levels.setdefault(len(p), []).append(p)
    above: list[tuple[int, ...]] = [()]
    for depth in range(1, max(levels) + 1):
        level = levels.get(depth, [])
        if not level or len(level) % len(above):
            raise InputError(f"vllm: speculative_token_tree level {depth} holds {len(level)} "
                             f"nodes, not a multiple of the {len(above)} above (one branching "
                             "per level)")
        b = len(level) // len(above)
        if sorted(level) != sorted((*p, r) for p in above for r in range(b)):
            raise InputError(f"vllm: speculative_token_tree level {depth} must give every node "
                             f"above the children of ranks 0..{b - 1}")
        above = level


def uniform_levels(tree: Tree) -> tuple[int, ...] | None:
    """The per-level branching (b_1, …, b_D) of `tree` when every node of each level has the
    children of ranks 0..b_d − 1, else None."""
    children = tree.children
    depths = tree.depths
    out = []
    for d in range(tree.depth):
        level = [v for v in range(tree.size) if depths[v] == d]
        ranks = {tuple(sorted(int(tree.ranks[c]) for c in children[v])) for v in level}
        if len(ranks) != 1 or next(iter(ranks)) != tuple(range(len(next(iter(ranks))))):
            return None
        out.append(len(next(iter(ranks))))
    return tuple(out)
