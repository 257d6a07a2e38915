"""Real speculative decoding: draft a tree, verify it in one target pass, commit, repeat.

The loop reads like gpt-fast's generate.py, one plain function per phase:

- `prefill`: the prompt into the target (and the drafter);
- `draft_static`, `draft_dyspec`, `draft_specdecpp`, `draft_goose`: the step's tree and tokens,
  grown level by level through the drafter (a static tree, a chain, or a per-step policy);
- `verify_step`: one target pass over the tree and a verification rule (`verify.py`);
- `commit`: keep the accepted path in the target's cache or state, feed the drafter;
- `decode_speculative` / `decode_autoregressive`: one request, speculative or plain;
- `speculative_generate`: many requests with per-phase timing and the autoregressive baseline
  in the same process; `generate`: the same from names (`specscope generate`).

Times are `time.perf_counter` seconds, with `torch.set_num_threads` set explicitly and recorded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path

import numpy as np
import polars as pl
import torch

from specscope.errors import InputError
from specscope.optimizers.compare import TREE_METHODS, Setup
from specscope.optimizers.dyspec import DraftedTree, DraftNode, DySpecPolicy, Proposal
from specscope.optimizers.goose import (
    BRANCH_DEPTH,
    BUDGET_RANGE,
    GoosePolicy,
    Split,
    branch_paths,
    spine_allowances,
    spine_tree,
)
from specscope.optimizers.specdecpp import (
    AUTHORS_THRESHOLD,
    MAX_LEN,
    MIN_LEN,
    AcceptancePredictor,
    ThresholdPolicy,
    candidate_features,
)
from specscope.trace import AcceptanceModel, Trace
from specscope.tree import ROOT_SOURCE, Tree
from specscope.validate.collect import DEFAULT_DRAFT_MODEL, K, collect_tokens, encode
from specscope.validate.drafters import (
    RECYCLE,
    Drafter,
    GooseDrafter,
    RecycleDrafter,
    make_drafter,
    propose_chain,
)
from specscope.validate.targets import Model, load_model
from specscope.validate.verify import RULES, SAMPLED_DRAFT_RULES, Verdict, next_token, verify
from specscope.validate.zoo_acceptance import stored_acceptance

DYNAMIC_METHODS = ("dyspec", "specdecpp", "goose")
"""Methods that build each step's tree from live drafter output."""
STATIC_METHODS = tuple(m for m in TREE_METHODS if m not in DYNAMIC_METHODS)
"""Static tree methods of `optimize-tree` (sequoia, ets, eagle2, best-first, kary, chain); its
dyspec and goose are run live here, per step."""
CANDIDATES = K
"""Candidates per node a dynamic method asks for (the trace's K)."""
MAX_DEPTH = 12
"""Depth cap of the trees built from a budget."""
SPINE = "spine"
"""Source label of Goose's spine nodes (whatever drafter proposed them)."""
CALIBRATION_PROMPTS = 4
"""Prompts of the calibration pass that shapes a tree when no statistics are stored."""


# ---- methods ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    """How a step's tree is grown: `build(drafter, root_token)`, at most `max_size` nodes.

    `origin` says where its shape or parameters came from (a file, a calibration pass, ...).
    `static` is True when every step uses the same tree (required by sampled-draft rules).
    """

    name: str
    build: Callable[[Drafter, int], DraftedTree]
    max_size: int
    origin: str
    static: bool = False
    observe: Callable[[DraftedTree, Verdict], None] | None = None
    """Called after every verification (a policy's running statistics)."""


def draft_static(drafter: Drafter, root_token: int, template: Tree) -> DraftedTree:
    """Fill `template` breadth-first: the r-th child of a node gets the node's r-th candidate.

    A node whose candidate is missing (the drafter had fewer) is left out with its subtree.
    Built node ids are tree indices, so the drafter's per-node records line up with the tree.
    """
    return fill_tree(template, root_token, lambda source: drafter)


def fill_tree(
    template: Tree,
    root_token: int,
    drafter_for: Callable[[str], Drafter],
    preset: Mapping[int, int] | None = None,
) -> DraftedTree:
    """Fill `template` level by level: node tokens from `preset` (template node → token) or
    from the drafter of the node's source, one proposal batch per (level, source)."""
    preset = preset or {}
    kids = template.children
    parents, ranks, sources = [-1], [-1], [ROOT_SOURCE]
    tokens, scores, depths = [root_token], [1.0], [0]
    built = {0: 0}
    level, forwards = [0], 0
    while level:
        wanted: dict[str, list[int]] = {}
        for v in level:
            for source in dict.fromkeys(template.sources[c] for c in kids[v] if c not in preset):
                wanted.setdefault(source, []).append(v)
        found: dict[tuple[int, str], Proposal] = {}
        for source, expand in wanted.items():
            nodes = [DraftNode(built[v], parents[built[v]], tokens[built[v]], depths[built[v]])
                     for v in expand]
            k = 1 + max(int(template.ranks[c]) for v in expand for c in kids[v]
                        if template.sources[c] == source)
            for v, proposal in zip(expand, drafter_for(source).propose(nodes, k), strict=True):
                found[v, source] = proposal
            forwards += 1
        nxt = []
        for v in level:
            for c in kids[v]:
                r = int(template.ranks[c])
                if c in preset:
                    token, prob = preset[c], 1.0
                else:
                    cand, probs = found[v, template.sources[c]]
                    if r >= len(cand):
                        continue
                    token, prob = int(cand[r]), float(probs[r])
                built[c] = len(parents)
                parents.append(built[v])
                ranks.append(r)
                sources.append(template.sources[c])
                tokens.append(token)
                scores.append(scores[built[v]] * prob)
                depths.append(depths[built[v]] + 1)
                nxt.append(c)
        level = nxt
    tree = Tree(np.array(parents), np.array(ranks), tuple(sources))
    return DraftedTree(tree, np.array(tokens), np.array(scores), forwards)


def draft_dyspec(drafter: Drafter, root_token: int, policy: DySpecPolicy) -> DraftedTree:
    """DySpec's greedy tree from the drafter's live probabilities, one proposal batch a level."""
    k = min(CANDIDATES, policy.budget - 1)
    return policy.build(lambda nodes: drafter.propose(nodes, k), root_token)


def draft_specdecpp(drafter: Drafter, root_token: int, policy: ThresholdPolicy) -> DraftedTree:
    """A chain of the drafter's top candidates, stopped by SpecDec++'s threshold rule."""
    tokens, scores, features = [root_token], [1.0], []
    node = DraftNode(0, -1, root_token, 0)
    while len(tokens) <= policy.max_len:
        ((cand, probs),) = drafter.propose([node], CANDIDATES)
        if not cand:
            break
        features.append(candidate_features(np.pad(probs, (0, CANDIDATES - len(probs))))[0])
        tokens.append(int(cand[0]))
        scores.append(scores[-1] * float(probs[0]))
        node = DraftNode(node.id + 1, node.id, int(cand[0]), node.depth + 1)
        if policy.should_stop(np.array(features)):
            break
    tree = Tree.chain(len(tokens) - 1, drafter.source)
    return DraftedTree(tree, np.array(tokens), np.array(scores), len(tokens) - 1)


def goose_template(split: Split, branch_p: np.ndarray, branch_source: str) -> Tree:
    """Goose's tree for a budget split: a spine chain, recycling branches shaped best-first
    under `branch_p` (the branch source's depth table) on the root and on spine nodes."""
    on_spine = spine_allowances(split.spine, split.spine_branches)
    return spine_tree(
        split.spine,
        branch_paths(branch_p, split.root_branches),
        [branch_paths(branch_p, n) for n in on_spine],
        SPINE,
        branch_source,
    )


def draft_goose(
    drafter: GooseDrafter,
    root_token: int,
    policy: GoosePolicy,
    template: Callable[[Split], Tree],
    budget: int | None = None,
) -> DraftedTree:
    """Goose's spine tree: the spine drafter's proposal under the root, recycling branches on
    the root and on spine nodes, split by the policy's running spine acceptance (`template`
    gives the shape of a split). `budget` None: the policy's 60–100 nodes by that acceptance."""
    size = budget or policy.total_budget(policy.acceptance)
    spine, _ = propose_chain(drafter.spine, root_token, policy.split(size, MAX_DEPTH).spine)
    tree = template(policy.split(size, len(spine)))
    preset, node = {}, 0
    for token in spine:
        node = next((c for c in tree.children[node] if tree.sources[c] == SPINE), None)
        if node is None:
            break
        preset[node] = token
    return fill_tree(tree, root_token, lambda source: drafter.branches, preset)


# ---- phases -------------------------------------------------------------------------------------


def prefill(target: Model, drafter: Drafter, prompt: Sequence[int], capacity: int) -> None:
    """Start a request: the prompt (all but its last token) into the target and the drafter."""
    tokens = torch.tensor(prompt)
    logits = target.prefill(tokens, capacity)
    drafter.start(prompt, capacity)
    drafter.update(tokens[:-1], logits)


def verify_step(
    target: Model,
    drafted: DraftedTree,
    drafter: Drafter,
    rule: str,
    temperature: float,
    generator: torch.Generator,
) -> tuple[Verdict, torch.Tensor, torch.Tensor]:
    """One target pass over the drafted tree and the rule's verdict; also (tokens, logits)."""
    tokens = torch.as_tensor(drafted.tokens)
    logits = target.verify(tokens, drafted.tree)
    draft_probs = None
    if rule in SAMPLED_DRAFT_RULES:
        draft_probs = [drafter.draft_probs.get(i) for i in range(drafted.tree.size)]
    verdict = verify(rule, drafted.tree, drafted.tokens.tolist(), logits, temperature,
                     draft_probs, generator)
    return verdict, tokens, logits


def commit(
    target: Model, drafter: Drafter, verdict: Verdict, tokens: torch.Tensor, logits: torch.Tensor
) -> list[int]:
    """Keep the accepted path in the target, tell the drafter; the step's new tokens."""
    target.commit(tokens, verdict.path)
    drafter.update(tokens, logits)
    accepted = tokens[verdict.path[1:]].tolist()
    drafter.accept(accepted)
    return [*accepted, verdict.bonus]


@dataclass
class PhaseTimes:
    """Seconds spent in each phase of speculative decoding, summed over steps and requests."""

    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    bookkeeping_s: float = 0.0

    @property
    def decode_s(self) -> float:
        """Seconds of the decoding steps (prefill excluded)."""
        return self.draft_s + self.verify_s + self.bookkeeping_s


@dataclass
class RequestRun:
    """One request's output, seconds spent decoding it (prefill excluded), and per step (for
    speculative decoding) the accepted drafts and the tree size."""

    output: list[int] = field(default_factory=list)
    decode_s: float = 0.0
    accepted: list[int] = field(default_factory=list)
    tree_sizes: list[int] = field(default_factory=list)


def decode_speculative(
    target: Model,
    drafter: Drafter,
    method: Method,
    prompt: Sequence[int],
    max_new: int,
    rule: str = "greedy",
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    times: PhaseTimes | None = None,
) -> RequestRun:
    """`max_new` tokens after `prompt` by speculative decoding (`times` accumulates phases)."""
    generator = generator or torch.Generator().manual_seed(0)
    times = times if times is not None else PhaseTimes()
    t0 = time.perf_counter()
    prefill(target, drafter, prompt, len(prompt) + max_new + method.max_size)
    context = list(prompt)
    run = RequestRun()
    t1 = start = time.perf_counter()
    times.prefill_s += t1 - t0
    while len(run.output) < max_new:
        drafter.begin(context)
        drafted = method.build(drafter, context[-1])
        t2 = time.perf_counter()
        verdict, tokens, logits = verify_step(target, drafted, drafter, rule, temperature,
                                              generator)
        t3 = time.perf_counter()
        new = commit(target, drafter, verdict, tokens, logits)
        if method.observe is not None:
            method.observe(drafted, verdict)
        context += new
        run.output += new
        run.accepted.append(verdict.accepted)
        run.tree_sizes.append(drafted.tree.size)
        t4 = time.perf_counter()
        times.draft_s += t2 - t1
        times.verify_s += t3 - t2
        times.bookkeeping_s += t4 - t3
        t1 = t4
    del run.output[max_new:]
    drafter.finish(run.output)
    run.decode_s = time.perf_counter() - start
    return run


def decode_autoregressive(
    target: Model,
    prompt: Sequence[int],
    max_new: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> RequestRun:
    """`max_new` tokens after `prompt`, one target forward each (argmax, or a sample)."""
    generator = generator or torch.Generator().manual_seed(0)
    target.prefill(torch.tensor(prompt), len(prompt) + max_new)
    start = time.perf_counter()
    token, out = prompt[-1], []
    for _ in range(max_new):
        token = next_token(target.decode(token), temperature, generator)
        out.append(token)
    return RequestRun(out, time.perf_counter() - start)


# ---- many requests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerateResult:
    """Speculative against autoregressive decoding of the same prompts in one process.

    runs / reference: per request, the speculative and the autoregressive run (outputs, decode
    seconds, per-step accepted drafts and tree sizes). Times in seconds, prefill excluded from
    both rates. lossless / mismatches: set when checked against autoregressive greedy output
    (mismatches counts differing positions over all requests).
    """

    target: str
    drafter: str
    method: str
    tree_origin: str
    rule: str
    temperature: float
    threads: int
    runs: list[RequestRun]
    reference: list[RequestRun]
    phases: PhaseTimes
    lossless: bool | None = None
    mismatches: int | None = None

    @property
    def requests(self) -> int:
        """Prompts decoded."""
        return len(self.runs)

    @property
    def new_tokens(self) -> int:
        """Tokens generated over all requests (each way)."""
        return sum(len(r.output) for r in self.runs)

    @property
    def outputs(self) -> list[list[int]]:
        """The speculative outputs, per request."""
        return [r.output for r in self.runs]

    @property
    def accepted(self) -> np.ndarray:
        """Accepted drafts of every step, all requests in order."""
        return np.array([a for r in self.runs for a in r.accepted])

    @property
    def tree_sizes(self) -> np.ndarray:
        """Tree size (root included) of every step, all requests in order."""
        return np.array([n for r in self.runs for n in r.tree_sizes])

    @property
    def steps(self) -> int:
        """Verification steps over all requests."""
        return int(self.accepted.size)

    @property
    def ar_decode_s(self) -> float:
        """Seconds of autoregressive decoding (prefill excluded)."""
        return sum(r.decode_s for r in self.reference)

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of speculative decoding."""
        return self.new_tokens / self.phases.decode_s

    @property
    def ar_tokens_per_s(self) -> float:
        """Generated tokens per second of autoregressive decoding."""
        return self.new_tokens / self.ar_decode_s

    @property
    def speedup(self) -> float:
        """Speculative over autoregressive tokens per second."""
        return self.tokens_per_s / self.ar_tokens_per_s

    @property
    def mean_accepted(self) -> float:
        """Accepted drafted tokens per step."""
        return float(self.accepted.mean())

    @property
    def tokens_per_step(self) -> float:
        """Tokens per step, bonus included (accepted + 1)."""
        return self.mean_accepted + 1.0

    @property
    def mean_tree_size(self) -> float:
        """Tokens per verification pass, root included."""
        return float(self.tree_sizes.mean())

    def to_dict(self) -> dict:
        """A JSON-ready summary (times in ms, rates in tokens/s)."""
        return {
            "target": self.target,
            "drafter": self.drafter,
            "method": self.method,
            "tree_origin": self.tree_origin,
            "rule": self.rule,
            "temperature": self.temperature,
            "threads": self.threads,
            "requests": self.requests,
            "new_tokens": self.new_tokens,
            "steps": self.steps,
            "tokens_per_s": self.tokens_per_s,
            "ar_tokens_per_s": self.ar_tokens_per_s,
            "speedup": self.speedup,
            "mean_accepted": self.mean_accepted,
            "tokens_per_step": self.tokens_per_step,
            "mean_tree_size": self.mean_tree_size,
            "draft_ms": 1e3 * self.phases.draft_s,
            "verify_ms": 1e3 * self.phases.verify_s,
            "bookkeeping_ms": 1e3 * self.phases.bookkeeping_s,
            "ar_ms": 1e3 * self.ar_decode_s,
            "lossless": self.lossless,
            "mismatches": self.mismatches,
        }


def speculative_generate(
    target: Model,
    drafter: Drafter,
    method: Method,
    prompts: Sequence[Sequence[int]],
    max_new: int,
    rule: str = "greedy",
    temperature: float = 0.0,
    seed: int = 0,
    verify_lossless: bool = False,
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> GenerateResult:
    """Decode every prompt autoregressively and speculatively, timing both.

    `rule` is one of `RULES`; greedy needs temperature 0, the others temperature > 0.
    `progress(done, total)` is called after each prompt.
    """
    _check_rule(rule, temperature, method)
    if verify_lossless and rule != "greedy":
        raise InputError("--verify-lossless compares token for token, so it needs temperature 0")
    if max_new < 1 or not prompts:
        raise InputError("give at least one prompt and --max-new ≥ 1")
    if any(len(p) < 2 for p in prompts):
        raise InputError("every prompt must hold at least 2 tokens")
    threads = threads or torch.get_num_threads()
    torch.set_num_threads(threads)

    reference, runs, times = [], [], PhaseTimes()
    for i, prompt in enumerate(prompts):
        # alternating keeps both rates exposed to the same drift in machine load
        ar_generator = torch.Generator().manual_seed(seed + i)
        reference.append(decode_autoregressive(target, prompt, max_new, temperature,
                                               ar_generator))
        generator = torch.Generator().manual_seed(seed + i)
        runs.append(decode_speculative(target, drafter, method, prompt, max_new, rule,
                                       temperature, generator, times))
        if progress:
            progress(i + 1, len(prompts))
    mismatches = None
    if verify_lossless:
        mismatches = sum(mismatched(r.output, ref.output) for r, ref in zip(runs, reference,
                                                                             strict=True))
    return GenerateResult(
        target=target.name,
        drafter=drafter.source,
        method=method.name,
        tree_origin=method.origin,
        rule=rule,
        temperature=temperature,
        threads=threads,
        runs=runs,
        reference=reference,
        phases=times,
        lossless=None if mismatches is None else mismatches == 0,
        mismatches=mismatches,
    )


def mismatched(output: Sequence[int], reference: Sequence[int]) -> int:
    """Positions where two outputs differ; a missing or extra token counts as a mismatch."""
    common = min(len(output), len(reference))
    differ = sum(a != b for a, b in zip(output[:common], reference[:common], strict=True))
    return differ + abs(len(output) - len(reference))


def _check_rule(rule: str, temperature: float, method: Method) -> None:
    if rule not in RULES:
        raise InputError(f"unknown verification rule {rule!r}; known: {', '.join(RULES)}")
    if (rule == "greedy") != (temperature == 0):
        raise InputError(f"rule {rule!r} does not fit --temperature {temperature}: greedy needs "
                         "temperature 0, the sampling rules temperature > 0")
    if temperature < 0:
        raise InputError(f"--temperature must be ≥ 0, got {temperature}")
    if rule in SAMPLED_DRAFT_RULES and not method.static:
        raise InputError(f"rule {rule!r} draws children from the draft and needs a static tree; "
                         f"method {method.name!r} picks children by their value")


# ---- methods by name ----------------------------------------------------------------------------


def static_method(name: str, tree: Tree, origin: str) -> Method:
    """Every step drafts `tree`."""
    return Method(name, partial(draft_static, template=tree), tree.size, origin, static=True)


def dyspec_method(budget: int) -> Method:
    """DySpec's greedy tree of `budget` nodes from the drafter's live probabilities."""
    policy = DySpecPolicy(budget, MAX_DEPTH)
    return Method("dyspec", partial(draft_dyspec, policy=policy), budget,
                  "dynamic: greedy on live draft probabilities")


def specdecpp_method(predictor: AcceptancePredictor, budget: int | None, origin: str,
                     threshold: float = AUTHORS_THRESHOLD) -> Method:
    """SpecDec++'s chain, stopped at `threshold` on `predictor`'s acceptance estimates."""
    max_len = MAX_LEN if budget is None else min(MAX_LEN, budget - 1)
    policy = ThresholdPolicy(predictor, threshold, min(MIN_LEN, max_len), max_len)
    return Method("specdecpp", partial(draft_specdecpp, policy=policy), max_len + 1, origin)


def goose_method(policy: GoosePolicy, branch_p: np.ndarray, budget: int | None,
                 origin: str) -> Method:
    """Goose's spine tree; `policy` follows the spine's acceptance from step to step."""
    template = cache(partial(goose_template, branch_p=branch_p, branch_source=RECYCLE))

    def observe(drafted: DraftedTree, verdict: Verdict) -> None:
        policy.update(sum(drafted.tree.sources[v] == SPINE for v in verdict.path[1:]))

    return Method("goose", partial(draft_goose, policy=policy, template=template, budget=budget),
                  budget or BUDGET_RANGE[1], origin, observe=observe)


def load_tree(path: str | Path) -> Tree:
    """A tree from a JSON file: a bare tree, or `optimize-tree -o` output (its best result)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such tree file") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict) and "results" in data:
        if not data["results"]:
            raise InputError(f"{path}: optimize-tree output without results")
        data = data["results"][0].get("tree")
    return Tree.from_dict(data)


def resolve_method(
    algo: str,
    budget: int | None,
    drafter: Drafter,
    calibrate: Callable[[Sequence[Drafter]], tuple[Trace, str]],
    stored: np.ndarray | None = None,
) -> Method:
    """The named method for `drafter` at `budget` (tree size, root included).

    Static methods shape their tree from the acceptance vector `stored` with the model when
    given, else from `calibrate([drafter])` (a trace and a description of the pass); SpecDec++
    fits its predictor and Goose its branch shapes on the calibration trace too.
    """
    if algo not in STATIC_METHODS + DYNAMIC_METHODS:
        raise InputError(f"--algo: unknown method {algo!r}; known: "
                         f"{', '.join(STATIC_METHODS + DYNAMIC_METHODS)}")
    if budget is None and algo != "goose":
        raise InputError(f"--algo {algo} needs --budget")
    if budget is not None and budget < 2:
        raise InputError(f"--budget must be ≥ 2 (tree size counts the root), got {budget}")
    if algo == "chain":
        return static_method("chain", Tree.chain(min(budget - 1, MAX_DEPTH), drafter.source),
                             f"chain of {min(budget - 1, MAX_DEPTH)}")
    if algo == "dyspec":
        return dyspec_method(budget)
    if algo == "goose":
        if not isinstance(drafter, GooseDrafter):
            raise InputError("--algo goose needs a Goose drafter (spine and recycling branches)")
        trace, how = calibrate([drafter.spine, drafter.branches])
        spine_p = AcceptanceModel.from_trace(trace, drafter.spine.source).p
        branch_p = AcceptanceModel.from_trace(trace, drafter.branches.source,
                                              depth_dependent=True, max_depth=BRANCH_DEPTH).p
        return goose_method(GoosePolicy(float(spine_p[0])), branch_p, budget,
                            f"branch shapes and initial spine acceptance from {how}")
    if algo == "specdecpp":
        trace, how = calibrate([drafter])
        predictor = AcceptancePredictor.fit(_as_ranked(trace), drafter.source)
        return specdecpp_method(predictor, budget, f"predictor fitted on {how}")
    if stored is not None:
        p, how = stored, "acceptance stored with the model"
    else:
        trace, how = calibrate([drafter])
        p = AcceptanceModel.from_trace(trace, drafter.source).p
    ranks = np.atleast_2d(p).shape[1]
    size = min(budget, sum(ranks**d for d in range(MAX_DEPTH + 1)))  # one rank: a chain
    tree = TREE_METHODS[algo](Setup(p, drafter.source, None, MAX_DEPTH), size, MAX_DEPTH)
    return static_method(algo, tree, f"{algo} tree from {how}")


def _as_ranked(trace: Trace) -> Trace:
    """The trace with proposals cleared: a sequence drafter's chain is its top candidate
    followed, so its rows train SpecDec++'s predictor like a ranked drafter's."""
    df = trace.df.with_columns(
        proposal=pl.lit([], dtype=pl.List(pl.Int32)), match_len=pl.lit(0, dtype=pl.Int16)
    )
    return Trace(df, trace.metadata)


def generate(
    model: str,
    drafter: str,
    prompts: str,
    n: int,
    max_new: int,
    draft_model: str | None = None,
    algo: str | None = None,
    budget: int | None = None,
    tree: str | Path | None = None,
    ssm_verify: str = "stree",
    temperature: float = 0.0,
    seed: int = 0,
    rule: str | None = None,
    verify_lossless: bool = False,
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> GenerateResult:
    """`specscope generate`: speculative decoding of `model` (zoo name or Hugging Face folder)
    with the named drafter on the first `n` prompts of `prompts`, against autoregressive
    decoding in the same process.

    The tree: `tree` (a JSON file), or `algo` at `budget` (static methods shaped by the greedy
    acceptance stored with a zoo target at temperature 0, else by a calibration pass on other
    prompts; dyspec, specdecpp, goose per step).
    `rule` defaults to greedy at temperature 0 and deterministic-candidate sampling above;
    "specinfer" and "sequoia" draw the draft model's children (static trees only).
    """
    from specscope.models.zoo.prompts import load_prompts

    if (tree is None) == (algo is None):
        raise InputError("give exactly one of --tree and --algo")
    if n < 1:
        raise InputError(f"--n must be ≥ 1, got {n}")
    threads = threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    rule = rule or ("greedy" if temperature == 0 else "deterministic")
    target, tokenizer = load_model(model, ssm_verify)
    texts = load_prompts(prompts)
    tokens = [encode(tokenizer, t, prompts) for t in texts]
    draft = load_model(draft_model or DEFAULT_DRAFT_MODEL)[0] if drafter == "draft" else None
    sample = {"specinfer": "with", "sequoia": "without"}.get(rule)
    generator = torch.Generator().manual_seed(seed)
    chosen = make_drafter(drafter, target.vocab_size, draft, sample, temperature, generator)
    if algo == "goose":
        chosen = with_branches(chosen, target.vocab_size)
    others = tokens[n:][:CALIBRATION_PROMPTS]
    use, how = (others, "other") if len(others) >= 2 else (tokens[:n], "the evaluated")
    calibrate = calibration(target, draft, use, max(8, min(max_new, 64)), temperature, seed,
                            f"{how} prompts")
    if tree is not None:
        method = static_method("file", load_tree(tree), f"file {tree}")
    else:
        stored = stored_acceptance(model, chosen.source) if temperature == 0 else None
        method = resolve_method(algo, budget, chosen, calibrate, stored)
    return speculative_generate(target, chosen, method, tokens[:n], max_new, rule, temperature,
                                seed, verify_lossless, threads, progress)


def with_branches(drafter: Drafter, vocab_size: int) -> GooseDrafter:
    """`drafter` as Goose's spine with recycling branches (a Goose drafter as it is)."""
    if isinstance(drafter, GooseDrafter):
        return drafter
    return GooseDrafter(drafter, RecycleDrafter(vocab_size))


def calibration(
    target: Model,
    draft: Model | None,
    prompts: Sequence[Sequence[int]],
    max_new: int,
    temperature: float,
    seed: int,
    what: str,
) -> Callable[[Sequence[Drafter]], tuple[Trace, str]]:
    """A calibration pass for `resolve_method`: a trace of fresh drafters of the given kinds
    (the draft model shared) over `prompts` (`what` describes them), and its description."""

    def calibrate(parts: Sequence[Drafter]) -> tuple[Trace, str]:
        fresh = [make_drafter(_kind(d), target.vocab_size, draft, None, temperature)
                 for d in parts]
        trace = collect_tokens(target, fresh, prompts, max_new, temperature, seed)
        return trace, f"a calibration pass on {len(prompts)} {what}"

    return calibrate


def _kind(drafter: Drafter) -> str:
    """The `make_drafter` name of a drafter."""
    return "draft" if drafter.source.startswith("draft:") else drafter.source
