"""TensorRT-LLM: the LLM API's `speculative_config` and its `trtllm-serve` line.

Read from TensorRT-LLM's source (`tensorrt_llm/llmapi/llm_args.py`, commit 0004396; the
PyTorch tree in `tensorrt_llm/_torch/speculative/spec_tree_manager.py`):

- `decoding_type` picks the config: `Eagle3` (`Eagle` is read as `Eagle3` on the PyTorch
  backend), `Draft_Target`, `NGram`, … Each needs `max_draft_len` > 0; `Eagle3` and
  `Draft_Target` need `speculative_model`; `NGram` takes `max_matching_ngram_size` (default 2).
- `eagle_choices` (Eagle/Eagle3, a static tree; deprecated upstream but still read): a list of
  paths of child ranks. `check_eagle_choices` removes duplicates, sorts by (length, ranks) and
  asserts that every path's parent is listed; `max_draft_len` becomes the depth and
  `max_total_draft_tokens` the number of paths. The tree manager drafts for each node as many
  top tokens as it lists children, so a node's children must hold ranks 0..c − 1 (the
  `paths` family, `families.contiguous`). Without `eagle_choices` the draft is a chain of
  `max_draft_len`.
- `MTP` (`MTPDecodingConfig`): the target's own multi-token-prediction layers draft a chain of
  `max_draft_len` > 0 ("max_draft_len must be > 0 for MTP"; `num_nextn_predict_layers` is
  read from the checkpoint, a user's value deprecated into `max_draft_len`), no
  `speculative_model` (the target's embedded mtp weights); a one-layer checkpoint (DeepSeek-V3)
  runs it as MTP-Eagle, the layer reused for every drafted token
  (`_torch/speculative/utils.py` `update_spec_config_from_model_config`).
- Medusa's `medusa_choices` left `llm_args.py` with the TensorRT engine backend; not exported.

`trtllm-serve MODEL --extra_llm_api_options FILE` reads FILE as YAML into the LLM arguments; the
file written here is JSON, which YAML reads as is.
"""

from __future__ import annotations

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
)
from specscope.interop.families import best_chain, best_paths, contiguous
from specscope.json_out import strict_json
from specscope.tree import DEFAULT_SOURCE, Tree

ENGINE = "tensorrt-llm"
METHODS = ("Eagle3", "Eagle", "Draft_Target", "NGram", "MTP")
TREE_METHODS = ("Eagle3", "Eagle")
BY_SOURCE = {"ngram": "NGram", "draft": "Draft_Target", "mtp": "MTP", "eagle3": "Eagle3",
             "eagle": "Eagle"}
SERVING = Serving(("Eagle3", "Eagle", "Draft_Target"), {"Eagle3": "EAGLE-3", "Eagle": "EAGLE"},
                  ("MTP",))
NGRAM_MATCH = 2
OPTIONS_FILE = "speculative.yaml"


def export(plan: Plan) -> Export:
    """The best configuration TensorRT-LLM can run at the plan's budget."""
    method = method_for(plan.source, plan.method, ENGINE, BY_SOURCE, METHODS)
    if method in TREE_METHODS and not plan.chains_only:
        assert plan.dp is not None  # trees are priced
        score = best_paths(plan.setup, plan.budget, plan.unconstrained, plan.dp)
        family = "static trees of paths, each node drafting its top ranks"
    else:
        score = best_chain(plan.setup, plan.budget)
        family = "chains (the --engine priced verifies chains only)" if plan.chains_only else (
            f"chains ({method} drafts one continuation)")
    target, draft = plan.served(ENGINE, method, SERVING)
    config = config_for(score.tree, method, draft)
    return Export(ENGINE, method, config, command(config, target), score, family)


def config_for(tree: Tree, method: str, draft: str | None) -> dict[str, Any]:
    """The `speculative_config` verifying `tree` with `method` (checked)."""
    config: dict[str, Any] = {"decoding_type": method, "max_draft_len": tree.depth}
    if method == "NGram":
        config["max_matching_ngram_size"] = NGRAM_MATCH
    elif method not in SERVING.own:
        config["speculative_model"] = draft
    if method in TREE_METHODS:
        config["eagle_choices"] = [list(p) for p in breadth_first(tree.rank_paths())]
    elif not tree.is_chain:
        raise InputError(f"tensorrt-llm: {method} verifies chains; the tree branches")
    check(config)
    return config


def command(config: dict[str, Any], target: str) -> str:
    """The options file of `config` and the `trtllm-serve` line that reads it, every value
    shell-quoted."""
    options = strict_json({"speculative_config": config}, None, separators=(",", ":"))
    return (f"echo {shlex.quote(options)} > {OPTIONS_FILE} && trtllm-serve "
            f"{shlex.quote(target)} --extra_llm_api_options {OPTIONS_FILE}")


def parse(config: dict[str, Any], source: str = DEFAULT_SOURCE) -> Tree:
    """The tree TensorRT-LLM verifies for `config` (checked first)."""
    check(config)
    choices = config.get("eagle_choices")
    if choices is None:
        return Tree.chain(config["max_draft_len"], source)
    return Tree.from_rank_paths(choices, source)


def check(config: dict[str, Any]) -> None:
    """TensorRT-LLM's rules for these fields (module docstring); one `InputError` naming the
    field."""
    method = config.get("decoding_type")
    if method not in METHODS:
        raise InputError(f"tensorrt-llm: decoding_type {method!r} is not one of "
                         f"{', '.join(METHODS)}")
    depth = config.get("max_draft_len")
    if not is_count(depth):
        raise InputError(f"tensorrt-llm: max_draft_len must be an integer > 0 for {method}, "
                         f"got {depth!r}")
    if method not in ("NGram", *SERVING.own) and not config.get("speculative_model"):
        raise InputError(f"tensorrt-llm: {method} needs speculative_model (the draft)")
    choices = config.get("eagle_choices")
    if choices is None:
        return
    if method not in TREE_METHODS:
        raise InputError(f"tensorrt-llm: eagle_choices needs decoding_type Eagle3, not {method}")
    if not (isinstance(choices, list) and choices and all(
            isinstance(c, list) and c and all(isinstance(r, int) and r >= 0 for r in c)
            for c in choices)):
        raise InputError("tensorrt-llm: eagle_choices must be a non-empty list of paths of "
                         "child ranks, such as [[0], [1], [0, 0]]")
    paths = breadth_first({tuple(c) for c in choices})
    lone = orphan(paths)
    if lone is not None:
        raise InputError(f"tensorrt-llm: eagle_choices path {list(lone)} is not connected "
                         f"(no {list(lone[:-1])})")
    if depth != max(map(len, paths)):
        raise InputError(f"tensorrt-llm: max_draft_len {depth} differs from the depth of "
                         f"eagle_choices ({max(map(len, paths))}), which replaces it")
    why = contiguous(Tree.from_rank_paths(paths))
    if why is not None:
        raise InputError(f"tensorrt-llm: eagle_choices: {why} (each node drafts its top ranks)")
