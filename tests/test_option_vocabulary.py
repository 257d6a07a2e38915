"""One option vocabulary across the command line (docs/glossary.md): a concept has one name on
every command, and one default within a family of commands.

Every command of the app is walked (groups included), so a new command's options are checked
without editing this file. `CONCEPTS` is the table of concepts: each one's canonical long name,
the spellings that would be synonyms of it, the fixed sets of values (`Choices` sources) that
identify it, and whether its default is one per family. The rules:

- **Names, across all commands.** An option named as one of a concept's synonyms (`--model` for
  the target, `--draft`, `--drafters`, `--max-new`, `--export`, ...), an option that takes a
  concept's values under another name (`optimize-tree --export vllm`), or an unknown option
  whose name looks like a concept's (its words hold one of `TRAP_WORDS`, or it is a concept's
  name in the plural) fails, unless `ALLOWED` lists that command and option with the reason it
  is another concept (`zoo train --model`: the zoo model to train).
- **Defaults, within a family.** Commands of one family (`FAMILIES`: the pricing commands, the
  commands that run real models) give a concept marked `FAMILY` the same default (a required
  option's default is "required"). Across families defaults may differ: `simulate
  --output-len` is a workload distribution defaulting to the trace's, real runs decode 64
  tokens. A concept whose default legitimately differs says why in its `defaults`. Commands
  in no family are checked for names only.
- **Deployment.** `optimize-tree` takes every deployment option (`DEPLOYMENT`), as `cost` and
  `simulate` do, so a deployment is stated the same way wherever it is priced.
- **Deprecated spellings** (`cli/deprecated.py`) are not options of their command: `--help`
  never shows them, and their successor is an option of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

import specscope.cli
from specscope.cli.checks import Choices, declared
from specscope.cli.deprecated import DEPRECATED

FAMILY = "family"
"""A concept's `defaults` when every command of a family must give it the same default."""


@dataclass(frozen=True)
class Concept:
    """One concept of the vocabulary: its canonical long option, spellings that would be
    synonyms of it, the `Choices` sources whose values name it, and `FAMILY` or why its
    default differs from command to command."""

    name: str
    synonyms: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    defaults: str = FAMILY


CONCEPTS = (
    # who and what is decoded
    Concept("--target", ("--model", "--target-model", "--base-model", "--verifier"),
            defaults="optimize-tree falls back to the trace's target; the others need one"),
    Concept("--drafter", ("--draft", "--drafters", "--draft-kind", "--proposer", "--speculator"),
            ("specscope.names:DRAFTERS", "specscope.names:COLLECT_DRAFTERS",
             "specscope.names:LOAD_DRAFTERS"),
            defaults="generate needs one, serving defaults to ngram, collect records several"),
    Concept("--draft-model", ("--draft-weights", "--draft-path")),
    Concept("--source", ("--trace-source",)),
    # the stack a step runs on
    Concept("--hw", ("--hardware", "--profile", "--gpu"),
            defaults="validate predicts on a profile; serve-bench prices only smartspec on one"),
    Concept("--engine", ("--stack", "--serving-engine", "--framework"),
            ("specscope.hw_profiles.engine:ENGINE_NAMES",)),
    Concept("--runtime", ("--mode", "--exec"), ("specscope.names:RUNTIMES",)),
    Concept("--draft-runtime", (), ("specscope.names:RUNTIMES",)),
    Concept("--tree-attention", ("--attention", "--attn"),
            ("specscope.hw_profiles.cost:TREE_ATTENTION",)),
    Concept("--weight-bits", ("--bits", "--wbits", "--quant", "--quantization"),
            ("specscope.models.ops:WEIGHT_BITS",)),
    Concept("--offload", ("--cpu-offload", "--offload-fraction")),
    Concept("--tp", ("--tensor-parallel", "--tensor-parallel-size", "--tp-size")),
    Concept("--draft-tp", ("--draft-tensor-parallel", "--draft-tp-size")),
    Concept("--stages", ("--pp", "--pipeline", "--pipeline-parallel", "--pipeline-stages")),
    Concept("--draft-window", ("--draft-context", "--window")),
    Concept("--draft-vocab", ("--draft-vocab-size",)),
    Concept("--device", ("--devices",), ("specscope.names:DEVICES",)),
    Concept("--dtype", ("--torch-dtype",), ("specscope.names:DTYPE_NAMES",)),
    # what a real run computes in (--dtype) is not the number format a target is priced in
    Concept("--precision", ("--quantization", "--quant", "--number-format"),
            ("specscope.models.precision:PRECISIONS",)),
    Concept("--expert-precision", ("--moe-precision", "--experts-precision"),
            ("specscope.models.precision:PRECISIONS",)),
    Concept("--kv-bits", ("--kv-cache-dtype", "--kv-dtype")),
    Concept("--ep", ("--expert-parallel",)),
    Concept("--threads", ("--num-threads", "--cpu-threads", "--nthreads")),
    # the tree and the load
    Concept("--budget", ("--tree-size", "--size", "--nodes", "--tree-budget")),
    Concept("--max-depth", ("--depth-cap",)),
    Concept("--batch", ("--batch-size", "--bs")),
    Concept("--max-batch", ("--max-num-seqs", "--max-seqs", "--max-batch-size",
                            "--max-running")),
    Concept("--prompt-len", ("--input-len", "--prompt-length", "--input-length")),
    Concept("--output-len", ("--max-new", "--max-new-tokens", "--max-tokens", "--gen-len",
                             "--output-length")),
    Concept("--rate", ("--qps", "--arrival-rate", "--request-rate"),
            defaults="optimize-tree simulates only when given one; simulate needs one"),
    Concept("--requests", ("--num-requests",),
            defaults="optimize-tree --rate serves each tree, so it fixes a count; simulate "
                     "asks for one"),
    Concept("--prompts", ("--prompt-set", "--dataset"),
            defaults="a run of chosen prompts needs them named; validate and serving have "
                     "their sets"),
    Concept("--n", ("--num-prompts", "--prompts-n"),
            defaults="each command's prompt count fits its purpose"),
    Concept("--temperature", ("--temp",)),
    Concept("--rule", ("--verify-rule", "--verification")),
    Concept("--seed", ("--random-seed", "--rng")),
    # acceptance
    Concept("--trace", ("--trace-file", "--traces")),
    Concept("--acceptance", ("--acceptance-rates", "--accept", "--alpha")),
    # the engines specscope writes for, and where a sweep runs
    Concept("--to", ("--export", "--export-engine", "--export-to"),
            ("specscope.names:EXPORT_ENGINES",)),
    Concept("--export-method", ("--engine-method",)),
    Concept("--backend", ("--executor", "--cluster"), ("specscope.sweeps.engines:ENGINES",)),
    # outputs
    Concept("--json", ("--as-json",)),
    Concept("--output", ("--out", "--output-file", "--out-dir", "--output-dir"),
            defaults="collect and trace synth must write their trace; the others choose"),
    Concept("--force", ("--overwrite", "--replace")),
)
"""The vocabulary: every concept more than one command could name."""

TRAP_WORDS = frozenset({"model", "draft", "drafter", "engine", "export", "new", "target",
                        "budget", "batch", "len", "length", "out", "backend", "source"})
"""Words that make an option not in `CONCEPTS` look like a synonym of one."""

ALLOWED: dict[tuple[str, str], str] = {
    ("zoo train", "--model"): "the zoo model to train, not a target",
    ("profile-hw", "--models"): "the catalogue models a profile measures",
    ("cost", "--new-tokens"): "tokens one forward takes, not a request's output",
    ("simulate", "--draft-placement"): "where the draft model runs",
    ("simulate", "--token-budget"): "tokens per step, not a tree size",
    ("serve-bench", "--token-budget"): "tokens per step, not a tree size",
    ("optimize-tree", "--goose-budget"): "Goose's own tree size, beside the compared budget",
    ("optimize-tree", "--budgets"): "the tree sizes to choose among",
    ("optimize-tree", "--engine-version"): "the release of the --to engine an export targets",
    ("export", "--engine-version"): "the release of the --to engine an export targets",
    ("trace import", "--draft-tokens"): "SGLang's --speculative-num-draft-tokens",
    ("trace synth", "--sources"): "the sources a synthetic trace holds",
    ("trace synth", "--length"): "a synthetic trace's positions per request",
    ("adapt", "--drift-out"): "the drift schedule's file, beside the report",
}
"""(command, option) → why an option that looks like a concept's synonym is another concept."""

FAMILIES = {
    "pricing": ("cost", "optimize-tree", "simulate"),
    "real runs": ("generate", "adapt", "validate", "collect", "serve-bench"),
}
"""Commands whose shared concepts take one default."""

DEPLOYMENT = ("--target", "--drafter", "--engine", "--runtime", "--draft-runtime",
              "--tree-attention", "--weight-bits", "--tp", "--draft-tp", "--stages",
              "--draft-window", "--draft-vocab", "--batch", "--max-batch", "--prompt-len",
              "--output-len", "--ep", "--precision", "--expert-precision", "--kv-bits")
"""The deployment option group every pricing command takes."""


def _commands(group: TyperGroup, prefix: tuple[str, ...] = ()
              ) -> Iterator[tuple[str, TyperCommand]]:
    for name, command in group.commands.items():
        if isinstance(command, TyperGroup):
            yield from _commands(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), command


COMMANDS = dict(_commands(typer.main.get_command(specscope.cli.app)))
BY_NAME = {c.name: c for c in CONCEPTS}
BY_SPELLING = {s: c for c in CONCEPTS for s in c.synonyms}
BY_CHOICES: dict[str, set[str]] = {}
for _concept in CONCEPTS:
    for _source in _concept.choices:
        BY_CHOICES.setdefault(_source, set()).add(_concept.name)


@dataclass(frozen=True)
class Seen:
    """One visible option of one command."""

    command: str
    name: str  # its long name
    default: str
    sources: tuple[str, ...]  # the `Choices` sources of its values


def _long(param: TyperOption) -> str:
    return max(param.opts, key=len)


def _seen() -> list[Seen]:
    out = []
    for path, command in COMMANDS.items():
        marks = declared(command)
        for param in command.params:
            if not isinstance(param, TyperOption) or param.hidden:
                continue
            sources = tuple(m.source for m in marks[param.name][1:] if isinstance(m, Choices))
            default = "required" if param.required else str(param.default)
            out.append(Seen(path, _long(param), default, sources))
    return out


SEEN = _seen()


def _words(name: str) -> set[str]:
    return set(re.split(r"[-_]", name.lstrip("-").lower()))


def _normal(name: str) -> str:
    return re.sub(r"[-_]", "", name.lstrip("-").lower()).removesuffix("s")


NORMAL = {_normal(spelling): c for c in CONCEPTS for spelling in (c.name, *c.synonyms)}


def vocabulary_problems(seen: list[Seen]) -> list[str]:
    """Every option named against the vocabulary: a synonym, a concept's values under another
    name, or a name that looks like a concept's."""
    problems = []
    for o in seen:
        if (o.command, o.name) in ALLOWED:
            continue
        where = f"{o.command} {o.name}"
        for source in o.sources:
            if source in BY_CHOICES and o.name not in BY_CHOICES[source]:
                problems.append(f"{where} takes the values of "
                                f"{' or '.join(sorted(BY_CHOICES[source]))}: name it so")
        if o.name in BY_NAME:
            continue
        if o.name in BY_SPELLING:
            problems.append(f"{where} is a synonym of {BY_SPELLING[o.name].name}")
        elif _normal(o.name) in NORMAL:
            problems.append(f"{where} looks like {NORMAL[_normal(o.name)].name}")
        elif _words(o.name) & TRAP_WORDS:
            problems.append(f"{where} looks like a synonym of a concept (its words "
                            f"{sorted(_words(o.name) & TRAP_WORDS)}): name it as the concept "
                            "or list it in ALLOWED with what it is")
    return problems


def default_problems(seen: list[Seen]) -> list[str]:
    """Every concept marked `FAMILY` given two defaults within one family."""
    problems = []
    for family, commands in FAMILIES.items():
        for concept in CONCEPTS:
            if concept.defaults != FAMILY:
                continue
            given = {o.command: o.default for o in seen
                     if o.command in commands and o.name == concept.name}
            if len(set(given.values())) > 1:
                problems.append(f"{concept.name} defaults differ among the {family} commands: "
                                + ", ".join(f"{c} {d}" for c, d in sorted(given.items())))
    return problems


def test_every_concept_has_one_name_on_every_command() -> None:
    assert vocabulary_problems(SEEN) == []


def test_a_concept_has_one_default_within_a_family() -> None:
    assert default_problems(SEEN) == []


@pytest.mark.parametrize("option", DEPLOYMENT)
def test_optimize_tree_takes_every_deployment_option(option: str) -> None:
    assert option in {o.name for o in SEEN if o.command == "optimize-tree"}


@pytest.mark.parametrize(("command", "old"), sorted(DEPRECATED), ids=" ".join)
def test_a_deprecated_spelling_is_hidden_and_its_successor_shown(command: str, old: str
                                                                 ) -> None:
    shown = {opt for param in COMMANDS[command].params if isinstance(param, TyperOption)
             and not param.hidden for opt in param.opts}
    assert old not in shown and DEPRECATED[command, old] in shown


def test_the_rules_catch_what_they_should() -> None:
    """The checks themselves: each kind of slip is reported, what ALLOWED lists is not."""
    slips = [Seen("generate", "--model", "required", ()),
             Seen("collect", "--drafters", "ngram", ()),
             Seen("new-command", "--max-new", "64", ()),
             Seen("optimize-tree", "--export", "None", ("specscope.names:EXPORT_ENGINES",)),
             Seen("sweep", "--engine", "local", ("specscope.sweeps.engines:ENGINES",)),
             Seen("new-command", "--draft-models", "None", ()),
             Seen("new-command", "--budget-tokens", "None", ())]
    assert all(vocabulary_problems([slip]) for slip in slips)
    assert vocabulary_problems([Seen("zoo train", "--model", "all", ())]) == []
    assert default_problems([Seen("generate", "--seed", "0", ()),
                             Seen("serve-bench", "--seed", "required", ()),
                             Seen("simulate", "--seed", "1", ())]) == [
        "--seed defaults differ among the real runs commands: generate 0, serve-bench required"]
