"""transformers: assisted and prompt-lookup generation's settings for `model.generate`.

Read from transformers' source (5.x: `generation/configuration_utils.py`,
`generation/candidate_generator.py`, `generation/utils.py`):

- assisted generation drafts a chain with `assistant_model`; `AssistedCandidateGenerator` reads
  `num_assistant_tokens` (default 20), `num_assistant_tokens_schedule` ("constant",
  "heuristic": +2 after a fully accepted draft, else −1; "heuristic_transient") and
  `assistant_confidence_threshold` (default 0.4: drafting stops at a token the assistant gives
  less; 0 turns the stop off) from the assistant's own `generation_config`, not from
  `generate`'s keyword arguments. The exported chain is fixed: schedule "constant", threshold 0.
- prompt lookup (`prompt_lookup_num_tokens`, `max_matching_ngram_size`, read from `generate`'s
  arguments) proposes up to that many tokens following the longest matching n-gram.
"""

from __future__ import annotations

from typing import Any

from specscope.errors import InputError
from specscope.interop.engine import Export, Plan, Serving, is_count, method_for
from specscope.interop.families import best_chain
from specscope.tree import DEFAULT_SOURCE, Tree

ENGINE = "transformers"
METHODS = ("assisted", "prompt_lookup")
BY_SOURCE = {"ngram": "prompt_lookup", "draft": "assisted"}
SCHEDULES = ("constant", "heuristic", "heuristic_transient")
NGRAM_MATCH = 2
SERVING = Serving(("assisted",), {})


def export(plan: Plan) -> Export:
    """The best chain transformers runs at the plan's budget."""
    method = method_for(plan.source, plan.method, ENGINE, BY_SOURCE, METHODS)
    score = best_chain(plan.setup, plan.budget)
    target, draft = plan.served(ENGINE, method, SERVING)
    config = config_for(score.tree, method, draft)
    return Export(ENGINE, method, config, command(config, target), score,
                  "chains (assisted or prompt-lookup generation)")


def config_for(tree: Tree, method: str, draft: str | None) -> dict[str, Any]:
    """The settings drafting the chain `tree` with `method` (checked)."""
    if not tree.is_chain:
        raise InputError("transformers: assisted and prompt-lookup generation draft chains; "
                         "the tree branches")
    if method == "assisted":
        config: dict[str, Any] = {
            "generate": {"assistant_model": draft},
            "assistant_generation_config": {"num_assistant_tokens": tree.depth,
                                            "num_assistant_tokens_schedule": "constant",
                                            "assistant_confidence_threshold": 0.0},
        }
    else:
        config = {"generate": {"prompt_lookup_num_tokens": tree.depth,
                               "max_matching_ngram_size": NGRAM_MATCH}}
    check(config)
    return config


def command(config: dict[str, Any], target: str) -> str:
    """Python lines that load the models and generate with `config` (every name a Python
    literal, `repr`)."""
    kwargs = dict(config["generate"])
    lines = ["from transformers import AutoModelForCausalLM, AutoTokenizer",
             f"model = AutoModelForCausalLM.from_pretrained({target!r})",
             f"tokenizer = AutoTokenizer.from_pretrained({target!r})"]
    if "assistant_model" in kwargs:
        lines.append(f"assistant = AutoModelForCausalLM.from_pretrained("
                     f"{kwargs.pop('assistant_model')!r})")
        lines += [f"assistant.generation_config.{k} = {v!r}"
                  for k, v in config["assistant_generation_config"].items()]
        kwargs["assistant_model"] = "assistant"
    args = ", ".join(f"{k}={v}" if k == "assistant_model" else f"{k}={v!r}"
                     for k, v in kwargs.items())
    lines.append(f"out = model.generate(**tokenizer(prompt, return_tensors='pt'), {args}, "
                 "do_sample=False)")
    return "; ".join(lines)


def parse(config: dict[str, Any], source: str = DEFAULT_SOURCE) -> Tree:
    """The chain `config` drafts (checked first)."""
    check(config)
    settings = config.get("assistant_generation_config")
    length = (settings["num_assistant_tokens"] if settings is not None
              else config["generate"]["prompt_lookup_num_tokens"])
    return Tree.chain(length, source)


def check(config: dict[str, Any]) -> None:
    """The settings' rules (module docstring); one `InputError` naming the setting."""
    generate = config.get("generate")
    if not isinstance(generate, dict):
        raise InputError("transformers: config needs a generate object (generate's arguments)")
    settings = config.get("assistant_generation_config")
    if settings is None:
        _whole(generate.get("prompt_lookup_num_tokens"), "prompt_lookup_num_tokens")
        _whole(generate.get("max_matching_ngram_size", NGRAM_MATCH), "max_matching_ngram_size")
        return
    if not generate.get("assistant_model"):
        raise InputError("transformers: assisted generation needs generate's assistant_model")
    _whole(settings.get("num_assistant_tokens"), "num_assistant_tokens")
    if settings.get("num_assistant_tokens_schedule", "constant") not in SCHEDULES:
        raise InputError(f"transformers: num_assistant_tokens_schedule must be one of "
                         f"{', '.join(SCHEDULES)}")
    threshold = settings.get("assistant_confidence_threshold", 0.4)
    if not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
        raise InputError(f"transformers: assistant_confidence_threshold must lie in [0, 1], got "
                         f"{threshold!r}")


def _whole(value: object, name: str) -> None:
    if not is_count(value):
        raise InputError(f"transformers: {name} must be an integer ≥ 1, got {value!r}")
