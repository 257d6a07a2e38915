"""Self-speculation: the target with some of its layers skipped drafts for itself.

The draft is a `skip_layers` view of the target (`specscope.models.torch.skip`): the target's own
weights, its own KV cache, run as a `DraftModelDrafter` (the tree logic is that class's). Three
modes choose the layers:

- fixed: a given set of layers is skipped on every step.
- SWIFT (Xia et al. 2025, "SWIFT: On-the-Fly Self-Speculative Decoding for LLM Inference
  Acceleration"): the skipped set is optimised on the fly on the first `search_requests`
  requests, then fixed. While they decode, the initial set drafts (`skip`, default the middle
  half of the layers); when the last of them ends, every candidate set is scored on the text those
  requests committed and the best one drafts from then on. A candidate's score is the match rate
  α of its argmax with the committed next token over the generated positions (SWIFT's "matchness"
  of draft and target on LLM-generated context), turned into DEL's tokens per layer (below) with
  k = the layers it keeps. Approximations: SWIFT proposes candidates by Bayesian optimisation
  (or random search) interleaved with decoding and skips attention and MLP sublayers separately
  at a fixed skip ratio; here whole layers are skipped, the candidates are every non-empty proper
  subset of the layers when there are at most `trials` of them (tiny-code's 4 layers: 14), else
  `trials` random subsets (seeded), all scored at once after the search requests, and the cost
  term replaces the fixed ratio. SWIFT's confidence-aware early stop of a draft is the tree
  method's job here.
- DEL (Zarch et al. 2025, "DEL: Context-Aware Dynamic Exit Layer for Efficient Self-Speculative
  Decoding"): the draft is the first E layers, the final norm and the LM head (LayerSkip's early
  exit), with E chosen per step among `exits` (default 1..L−1) to maximise DEL's tokens per
  layer TPL(E) = Σ_{i=0..γ} α_E^i / (γ·E + L), γ = `gamma`, the speculation length assumed. α_E
  is the match rate of exit E's argmax with the committed next token over the last `window`
  committed positions (ties: the smaller E). DEL estimates α_E from "shadow tokens", every
  exit's token from the hidden states cached during drafting and verification, counted up to the
  first mismatch of each round; here every exit's logits at the committed positions come from
  the draft's own pass over the committed tokens (the first max(exits) layers, one LM head per
  exit), and every committed position counts. That makes E a function of the committed text, so
  `collect` reproduces each position's choice (`truth_logits`). DEL also picks the speculation
  length and stops drafts on confidence; here the tree method shapes the tree.

Costs, said plainly: the view keeps its own KV cache, so its layers run on every committed token
(SWIFT and fixed: the kept layers once per token; DEL: the first max(exits) layers, with the
accepted path run again at the next step, since a drafted node ran only E of them). LayerSkip and
DEL reuse the target's cache and hidden states instead; TPL and optimize-tree's pricing count
drafting and verification only, as DEL does.

Exact greedy replay: a fixed set's candidates depend on the committed text and the node's path
only; SWIFT's set is a function of the committed text of earlier requests, the same in `collect`
and the executor. DEL's exit is chosen once per step, so a node below depth 1 drafts with the
exit of the step's root, where `collect` (given the true prefix at every position) uses the exit
of that position. So `collect` records DEL as a sequence source: at every position, besides the
exit's top-k, the chain DEL drafts greedily with that position as the root (`truth_proposals`).
Chains replay exactly from those proposals, the trees the optimizers build for a sequence source;
a branching tree replays along its main path only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from specscope.errors import InputError
from specscope.executor.drafters.draft_model import DraftModelDrafter
from specscope.executor.runtime import Runtime
from specscope.executor.targets import CachedModel, Model
from specscope.models.torch import Transformer
from specscope.models.torch.skip import layer_count, layer_label, skip_layers
from specscope.names import LAYERSKIP
from specscope.tree import Tree

MODES = ("fixed", "swift", "del")


@dataclass(frozen=True)
class LayerSkipOptions:
    """How the layer-skip drafter picks its layers (module docstring).

    skip: fixed: the layers skipped; SWIFT: those skipped while searching (default: the middle
    half). gamma: the speculation length TPL assumes. search_requests, trials, seed: SWIFT's
    search. window, exits: DEL's acceptance window (committed positions) and exit layers.
    """

    mode: str = "swift"
    skip: tuple[int, ...] = ()
    gamma: int = 4
    search_requests: int = 2
    trials: int = 16
    seed: int = 0
    window: int = 32
    exits: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError(f"--layer-skip mode must be one of {', '.join(MODES)}, "
                             f"got {self.mode!r}")
        if self.mode == "fixed" and not self.skip:
            raise InputError("--layer-skip: a fixed set needs the layers to skip")
        if min(self.gamma, self.search_requests, self.trials, self.window) < 1:
            raise InputError("--layer-skip: gamma, search requests, trials and window must "
                             "be ≥ 1")


def parse_layer_skip(text: str, seed: int = 0) -> LayerSkipOptions:
    """`--layer-skip`: "swift", "del", or comma-separated layer indices to skip (a fixed set)."""
    text = text.strip()
    if text in ("swift", "del"):
        return LayerSkipOptions(text, seed=seed)
    try:
        skip = tuple(int(i) for i in text.split(","))
    except ValueError:
        raise InputError(f"--layer-skip must be swift, del or layer indices to skip such as "
                         f"1,2; got {text!r}") from None
    return LayerSkipOptions("fixed", skip, seed=seed)


def tokens_per_layer(alpha: float, gamma: int, layers: int, total: int) -> float:
    """DEL's TPL: a round's expected tokens Σ_{i=0..γ} α^i over the layers it runs, γ drafts
    of `layers` layers and one verification of `total`."""
    return sum(alpha**i for i in range(gamma + 1)) / (gamma * layers + total)


def candidate_skips(layers: int, trials: int, seed: int,
                    first: tuple[int, ...]) -> list[tuple[int, ...]]:
    """SWIFT's candidate skip sets: `first`, then every other non-empty proper subset of the
    layers when there are at most `trials` in all, else distinct random subsets (each layer
    skipped with probability ½, seeded) up to `trials` candidates."""
    if 2**layers - 2 <= trials:
        every = [tuple(i for i in range(layers) if mask >> i & 1)
                 for mask in range(1, 2**layers - 1)]
        return [first, *(s for s in every if s != first)]
    rng = np.random.default_rng(seed)
    out, seen = [first], {first}
    while len(out) < trials:
        skip = tuple(np.flatnonzero(rng.integers(0, 2, layers)).tolist())
        if 0 < len(skip) < layers and skip not in seen:
            seen.add(skip)
            out.append(skip)
    return out


def choose_exit(hits: torch.Tensor, seen: int, exits: Sequence[int], gamma: int,
                total: int) -> int:
    """The index in `exits` of DEL's exit: the best TPL at α = hits / seen (hits (len(exits),)
    matches over `seen` positions; none seen: α = 0); ties go to the smaller exit."""
    alphas = [h / seen if seen else 0.0 for h in hits.tolist()]
    scores = [tokens_per_layer(a, gamma, e, total) for a, e in zip(alphas, exits, strict=True)]
    return max(range(len(exits)), key=scores.__getitem__)


def _cached(target: Model) -> CachedModel:
    if not isinstance(target, CachedModel):
        raise InputError(f"--drafter layerskip needs a Transformer or Hugging Face target; "
                         f"{target.name} is a {type(target).__name__}")
    return target


class _SelfDrafter(DraftModelDrafter):
    """What both layer-skip drafters share: their source and options, the target's layer count,
    and `mean_layers`, the mean layers a draft position ran over every one counted so far (steps,
    or collected positions; `start_layers` before any). The trace's metadata records the scalar
    attributes (`mean_layers` and `target_layers` price the drafter in optimize-tree) and
    `notes`."""

    def __init__(self, model: Model, options: LayerSkipOptions, target_layers: int,
                 start_layers: int, sample: str | None, temperature: float,
                 generator: torch.Generator | None) -> None:
        super().__init__(model, sample, temperature, generator)
        self.source = LAYERSKIP
        self.layer_skip, self.mode = options, options.mode
        self.target_layers = target_layers
        self.mean_layers = float(start_layers)
        self._drafts = 0

    @property
    def notes(self) -> dict:
        """What the trace's metadata records beyond the scalar settings: the options."""
        return {"options": asdict(self.layer_skip)}

    def _count(self, layers: int, drafts: int = 1) -> None:
        """`drafts` more positions that ran `layers` layers each."""
        if drafts:
            total = self._drafts + drafts
            self.mean_layers = (self.mean_layers * self._drafts + layers * drafts) / total
            self._drafts = total


class LayerSkipDrafter(_SelfDrafter):
    """The target with a set of layers skipped: a fixed set, or SWIFT's set optimised on the
    first requests (module docstring). `search` holds each scored candidate's match rate and
    TPL (keyed by its skipped layers), `skipped` the set drafting now. Under a compiled or
    captured runtime the set SWIFT picks is compiled on first use (in draft time: `models`
    lists the set drafting when decoding starts)."""

    def __init__(self, target: Model, options: LayerSkipOptions, sample: str | None = None,
                 temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        target = _cached(target)
        self._target, self._runtime, self._name = target.model, target.runtime, target.name
        self._vocab = target.vocab_size
        self.target_layers = layer_count(self._target)
        total = self.target_layers
        middle = (total - total // 2) // 2
        skip = tuple(sorted(set(options.skip))) or tuple(range(middle, middle + total // 2))
        if not skip or skip[0] < 0 or skip[-1] >= total or len(skip) == total:
            raise InputError(f"--layer-skip: skip {list(options.skip)} must be a non-empty "
                             f"proper subset of the target's layers 0..{total - 1}")
        super().__init__(self._view(skip), options, total, total - len(skip), sample,
                         temperature, generator)
        self.skipped = layer_label(skip)
        self.search: dict[str, dict[str, float]] = {}
        self._skip = skip
        self._texts: list[tuple[int, list[int]]] = []
        self._prompt: list[int] = []

    @property
    def notes(self) -> dict:
        """The options and SWIFT's search (every candidate's score)."""
        return {**super().notes, "search": self.search}

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        self._prompt = list(prompt)
        super().start(prompt, capacity)

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        self._count(self.target_layers - len(self._skip))

    def truth_logits(self, truth: Sequence[int]) -> torch.Tensor:
        self._count(self.target_layers - len(self._skip), len(truth) - len(self._prompt))
        return super().truth_logits(truth)

    def finish(self, output: Sequence[int]) -> None:
        if self.mode != "swift" or self.search:
            return
        self._texts.append((len(self._prompt), [*self._prompt, *output]))
        if len(self._texts) == self.layer_skip.search_requests:
            self._choose_set()

    def _view(self, skip: Sequence[int], padded: bool | None = None) -> CachedModel:
        """The target without layers `skip`, as a model on the target's runtime."""
        kept = [i for i in range(self.target_layers) if i not in skip]
        name = f"{self._name}/skip={layer_label(skip)}"
        return CachedModel(skip_layers(self._target, kept), name, self._vocab, self._runtime,
                           padded)

    def _choose_set(self) -> None:
        """SWIFT's search: score every candidate on the search requests' text, keep the best."""
        options, total = self.layer_skip, self.target_layers
        best, best_score = self._skip, -1.0
        for skip in candidate_skips(total, options.trials, options.seed, self._skip):
            view = self._view(skip, padded=False)
            hits = seen = 0
            for prompt_len, text in self._texts:
                logits = view.prefill(torch.tensor(text), len(text))[prompt_len - 1 :]
                hits += int((logits.argmax(-1).cpu() == torch.tensor(text[prompt_len:])).sum())
                seen += len(text) - prompt_len
            score = tokens_per_layer(hits / seen, options.gamma, total - len(skip), total)
            self.search[layer_label(skip)] = {"match": hits / seen, "tokens_per_layer": score}
            if score > best_score:
                best, best_score = skip, score
        self._skip, self.skipped = best, layer_label(best)
        self.model = self._view(best)


class EarlyExitModel:
    """DEL's draft as a `Model`: the first max(exits) layers of a Transformer target (a
    `skip_layers` view, its own KV cache), exiting after layer `exit` (set per step).

    `start` and `verify_exits` return every exit's logits (and run all max(exits) layers);
    `verify` runs the first `exit` layers only. Runs eager.
    """

    def __init__(self, target: Transformer, exits: Sequence[int], name: str,
                 runtime: Runtime) -> None:
        if runtime.kind != "eager":
            raise InputError(f"--layer-skip del runs eager, not --runtime {runtime.kind}")
        self.exits = tuple(exits)
        self.exit = self.exits[-1]
        self.view = skip_layers(target, range(self.exits[-1]))
        self.name, self.vocab_size, self.runtime = name, target.spec.vocab_size, runtime
        self.committed = 0
        self.setup_s = 0.0

    def prepare(self, max_tree: int) -> None:
        """Nothing to compile: the early-exit passes run eager."""

    def start(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        """Start a sequence (as `prefill`); every exit's logits (exits, t − 1, vocab)."""
        if self.view.max_seq_len < capacity:
            self.view.setup_caches(1, capacity)
        self.committed = 0
        logits = self.verify_exits(prompt[:-1], Tree.chain(prompt.numel() - 2))
        self.committed = prompt.numel() - 1
        return logits

    def prefill(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        return self.start(prompt, capacity)[self.exits.index(self.exit)]

    def verify_exits(self, tokens: torch.Tensor, tree: Tree,
                     exits: Sequence[int] | None = None) -> torch.Tensor:
        """Logits (len(exits), n, vocab) of the tree's nodes at each exit (default: all)."""
        return self.view.forward_exits(tokens.to(self.runtime.device), tree, self.committed,
                                       exits or self.exits)

    def verify(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        return self.verify_exits(tokens, tree, (self.exit,))[0]

    def commit(self, tokens: torch.Tensor, path: Sequence[int]) -> None:
        self.view.compact(self.committed, path)
        self.committed += len(path)

    def decode(self, token: int) -> torch.Tensor:
        logits = self.verify(torch.tensor([token]), Tree.root())[0]
        self.committed += 1
        return logits


class DynamicExitDrafter(_SelfDrafter):
    """DEL: the first E layers draft, E chosen per step from the committed positions' match
    rates (module docstring). `mean_layers` is the mean exit over the drafts so far."""

    def __init__(self, target: Model, options: LayerSkipOptions, sample: str | None = None,
                 temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        module = _cached(target).model
        if not isinstance(module, Transformer):
            raise InputError(f"--layer-skip del runs specscope's Transformer; {target.name} "
                             "runs through the Hugging Face adapter (use swift or a fixed set)")
        total = module.spec.n_layers
        exits = tuple(sorted(set(options.exits))) or tuple(range(1, total))
        if not exits or exits[0] < 1 or exits[-1] > total:
            raise InputError(f"--layer-skip del: exits {list(options.exits)} must lie in "
                             f"1..{total} (a {total}-layer target has none below {total})")
        model = EarlyExitModel(module, exits, f"{target.name}/exit", target.runtime)
        super().__init__(model, options, total, exits[-1], sample, temperature, generator)
        self._hits: deque[torch.Tensor] = deque(maxlen=options.window)
        self._prompt_len = 0

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        self._hits.clear()
        self._prompt_len = len(prompt)
        self._observe(self.model.start(torch.tensor(prompt), capacity), prompt[1:])

    def accept(self, tokens: Sequence[int]) -> None:
        """Nothing kept: drafted nodes ran the first `exit` layers only, so the next step's
        catch-up runs the accepted tokens through every exit."""

    def truth_logits(self, truth: Sequence[int]) -> torch.Tensor:
        """Per position, the logits of the exit the executor would choose with that position as
        the root (from the match rates of the `window` positions before it)."""
        logits = self.model.start(torch.tensor(truth), len(truth))
        chosen = self._root_exits(logits, truth)
        for e in chosen[self._prompt_len - 1 :]:
            self._count(self.model.exits[e])
        return logits[chosen, torch.arange(len(chosen))]

    def truth_proposals(self, truth: Sequence[int], prompt_len: int,
                        length: int) -> list[list[int]]:
        """Per generated position, the `length` tokens DEL drafts greedily with that position's
        last true token as the root: each level one pass of the chain so far at the exit
        `truth_logits` chose there, after the true prefix, as the executor's levels run."""
        model = self.model
        logits = model.start(torch.tensor(truth), len(truth) + length)
        chosen = self._root_exits(logits, truth)
        kv = model.view.kv_cache.kv
        chains = []
        for p in range(prompt_len - 1, len(truth) - 1):
            exit_ = model.exits[chosen[p]]
            saved = kv[..., p : p + length + 1, :].clone()
            model.committed = p
            chain = [int(logits[chosen[p], p].argmax())]
            while len(chain) < length:
                tokens = torch.tensor([truth[p], *chain])
                step = model.verify_exits(tokens, Tree.chain(len(chain)), (exit_,))[0, -1]
                chain.append(int(step.argmax()))
            kv[..., p : p + length + 1, :] = saved
            chains.append(chain)
        return chains

    def _root_exits(self, logits: torch.Tensor, truth: Sequence[int]) -> list[int]:
        """Per position p of `truth` but the last, the index of the exit the executor chooses
        with p as the step's root, from every exit's logits (exits, len(truth) − 1, vocab):
        the match rates over the `window` positions before p."""
        hits = (logits.argmax(-1).cpu() == torch.tensor(truth[1:])).long()
        cumulative = torch.nn.functional.pad(hits.cumsum(1), (1, 0))
        chosen = []
        for p in range(len(truth) - 1):
            lo = max(0, p - self.layer_skip.window)
            chosen.append(self._choose(cumulative[:, p] - cumulative[:, lo], p - lo))
        return chosen

    def _catch_up(self) -> None:
        """The committed tokens not yet run (the last step's root, accepted path and bonus)
        through every exit; their matches update the window, which picks this step's exit."""
        pending = torch.tensor(self.context[self.model.committed :])
        logits = self.model.verify_exits(pending, Tree.chain(pending.numel() - 1))
        self.model.commit(pending, list(range(pending.numel() - 1)))
        self._observe(logits[:, :-1], pending[1:].tolist())
        hits = torch.stack(list(self._hits)).sum(0) if self._hits else torch.zeros(
            len(self.model.exits), dtype=torch.long)
        e = self._choose(hits, len(self._hits))
        self.model.exit = self.model.exits[e]
        self._count(self.model.exit)
        self._set_forwarded(Tree.root(), [0], pending[-1:], logits[e, -1:])

    def _observe(self, logits: torch.Tensor, following: Sequence[int]) -> None:
        """Matches of every exit's argmax (logits (exits, m, vocab)) with the tokens that
        followed, one (exits,) row per position into the window."""
        hits = logits.argmax(-1).cpu() == torch.tensor(list(following), dtype=torch.long)
        self._hits.extend(hits.long().T)

    def _choose(self, hits: torch.Tensor, seen: int) -> int:
        return choose_exit(hits, seen, self.model.exits, self.layer_skip.gamma,
                           self.target_layers)


def layer_skip_drafter(target: Model, options: LayerSkipOptions, sample: str | None = None,
                       temperature: float = 0.0, generator: torch.Generator | None = None
                       ) -> LayerSkipDrafter | DynamicExitDrafter:
    """The layer-skip drafter of `options.mode` over `target`."""
    kind = DynamicExitDrafter if options.mode == "del" else LayerSkipDrafter
    return kind(target, options, sample, temperature, generator)
