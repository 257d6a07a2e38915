"""What research speculative-decoding code pays the host per step beyond its forwards, on this CPU:
the measured source of the `research-hf` and `hf-eager` engines' loop terms
(specscope/hw_profiles/data/engines/), which otherwise assume specscope's own loop's.

Run: make research-loops (builds .venv-research, then runs both parts), or
     .venv/bin/python benchmarks/research_loops.py [--quick] [--repeats 7] [--steps 48]
       [--research-python .venv-research/bin/python]

Three loops, each on small random-weight Llama configs built from config objects (no downloads;
d = 64, so the time is operator dispatch, the host work a GPU's launches would hide nothing of):

- EAGLE-2 (SafeAILab/EAGLE at 79d6f79, the last EAGLE-2-only commit: eagle/model/ea_model.py
  `EaModel.eagenerate`, cnets.py `topK_genrate`), run in .venv-research (its copied Llama code needs
  transformers 4.x); the draft is its one-layer `cnets.Model`; varied: depth, top_k, total_token.
- Medusa (medusa-llm 0.1: medusa/model/medusa_model.py `MedusaModel.medusa_generate`) in the same
  env; varied: the heads and their choices (`medusa_choices`, a cartesian tree).
  Each EAGLE and Medusa configuration runs twice: on random weights (nothing accepted) and with the
  LM head zeroed (`AGREE`: every drafted token the tie-broken top-k keeps is accepted), so the
  fit can separate a per-accepted-token term.
- Hugging Face assisted generation (`generate(assistant_model=...)`, transformers of .venv) with a
  constant number of drafted tokens k, a draft of other weights (nothing accepted) and a copy of
  the target's weights (about 0.7 tokens accepted a step: a measured regressor, like all).

Each forward of the target (decoder stack, LM head), the draft (EAGLE's `ea_layer`, the LM head it
calls; HF's assistant) and Medusa's heads is wrapped with a perf_counter clock (CPU is synchronous,
so that is the forward's wall time); a step is the interval between two verifications' target
forwards, its host time that interval less the forwards begun in it. Per configuration the median
host time per step (a step the shared machine stalled does not count) is fitted by least squares,
one fit per repeat (configurations interleaved), to `LoopCosts` terms
(specscope/hw_profiles/loop.py); each term is reported as the median and min-max over repeats, as
a ratio to its stack's decoder-layer issue time (transformers' LlamaModel of that env, slope over 2
and 10 layers at d = 64: benchmarks/engine_overheads.py `hf_layer_step`) and as a ratio to
specscope's own Transformer layer measured the same way in .venv (`reference_layer_us`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "research-loops.txt"

TERMS = {
    "EAGLE-2": ("step_us", "level_us", "node_us", "tree_node_us", "accepted_us"),
    "Medusa": ("step_us", "level_us", "tree_node_us", "accepted_us"),
    "HF assisted": ("step_us", "level_us", "accepted_us"),
}
"""Each loop's fitted terms, in the order of its records' regressors (`Record.x`: a
configuration's `Config.x`, then the tokens accepted per step as measured): step_us per step;
level_us per draft level (EAGLE: its depth + 1 draft forwards; Medusa: per head; HF: per drafted
token, as counted); node_us per further node a level forwards (EAGLE: depth × (top_k − 1));
tree_node_us per verified tree node (EAGLE's total_token, Medusa's tree size: the per-node Python
building the tree mask, position ids and retrieve indices); accepted_us per token accepted."""

AGREE = "agreeing"
"""A configuration whose LM head (and Medusa's heads' last layer) is zeroed: every logit ties, the
target always predicts token 0 and the drafts propose it, so drafted tokens are accepted (random
weights accept none); the forwards and the loop's operations are the same, the acceptance not."""


@dataclass(frozen=True)
class Config:
    """One configuration of a loop: its name, its regressors per step (`TERMS`' order, the
    accepted tokens left out: they are measured) and the arguments that build it."""

    loop: str
    name: str
    x: tuple[float, ...]
    args: dict


@dataclass(frozen=True)
class Record:
    """A configuration's timed run in one repeat: its regressors (`TERMS`), steps, mean tokens
    accepted per step (drafted tokens kept, the bonus token not counted) and the median seconds
    per step in forwards and host work."""

    loop: str
    config: str
    repeat: int
    x: tuple[float, ...]
    steps: int
    accepted: float
    forward_s: float
    host_s: float


# ---------------------------------------------------------------- pure parts: fit and table


def fit_terms(records: Sequence[Record], n_terms: int) -> tuple[np.ndarray, float]:
    """(terms in µs, RMS residual in µs) of host seconds per step ≈ x · terms, by least squares
    over `records` (one per configuration)."""
    x = np.array([r.x for r in records], dtype=float)
    y = np.array([r.host_s * 1e6 for r in records])
    if len(records) < n_terms or np.linalg.matrix_rank(x) < n_terms:
        raise ValueError(f"{len(records)} configurations of rank {np.linalg.matrix_rank(x)} "
                         f"cannot fit {n_terms} terms")
    terms, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = float(np.sqrt(np.mean((x @ terms - y) ** 2)))
    return terms, residual


@dataclass(frozen=True)
class Fit:
    """A loop's terms over repeats: median, min and max µs of each, median RMS residual (µs)."""

    loop: str
    names: tuple[str, ...]
    median: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    residual_us: float
    configs: int

    def predict_us(self, x: Sequence[float]) -> float:
        """Host µs per step the median terms give regressors `x`."""
        return float(np.dot(self.median, x))


def fit_repeats(records: Sequence[Record], loop: str) -> Fit:
    """`loop`'s terms fitted once per repeat over its configurations, summarised over repeats."""
    names = TERMS[loop]
    mine = [r for r in records if r.loop == loop]
    fits = [fit_terms([r for r in mine if r.repeat == k], len(names))
            for k in sorted({r.repeat for r in mine})]
    terms = np.array([t for t, _ in fits])
    return Fit(loop, names, tuple(np.median(terms, axis=0)), tuple(terms.min(axis=0)),
               tuple(terms.max(axis=0)), float(np.median([res for _, res in fits])),
               len({r.config for r in mine}))


def tables(records: Sequence[Record], layers_us: dict[str, float], reference_us: float,
           extras: dict[str, tuple[float, float, float]], title: str) -> list[Table]:
    """The terms table (each loop's fit, as ratios to its stack's layer µs `layers_us[loop]` and
    to specscope's layer `reference_us`, plus `extras`: "loop/term" → (median, low, high) µs
    measured outside the fit) and the per-configuration table."""
    fits = [fit_repeats(records, loop) for loop in TERMS if any(r.loop == loop for r in records)]
    terms = Table(title=title)
    for col in ("loop", "term", "µs median", "spread (min–max)", "× its layer",
                "× specscope layer", "n configs", "fit RMS µs"):
        terms.add_column(col, justify="left" if col in ("loop", "term") else "right")
    for fit in fits:
        layer = layers_us.get(fit.loop)
        for name, med, low, high in zip(fit.names, fit.median, fit.low, fit.high, strict=True):
            terms.add_row(fit.loop, name, f"{med:.1f}", f"{low:.1f}–{high:.1f}",
                          f"{med / layer:.2f}" if layer else "-", f"{med / reference_us:.2f}",
                          str(fit.configs), f"{fit.residual_us:.1f}")
    for key, (med, low, high) in extras.items():
        loop, name = key.split("/")
        layer = layers_us.get(loop)
        terms.add_row(loop, name, f"{med:.1f}", f"{low:.1f}–{high:.1f}",
                      f"{med / layer:.2f}" if layer else "-", f"{med / reference_us:.2f}", "-",
                      "-")
    per = Table(title="Per configuration (medians over repeats; predicted: the fit's median terms)")
    for col in ("loop", "configuration", "steps", "accepted/step", "forward ms/step",
                "host ms/step", "predicted host ms"):
        per.add_column(col, justify="left" if col in ("loop", "configuration") else "right")
    for fit in fits:
        mine = [r for r in records if r.loop == fit.loop]
        for config in dict.fromkeys(r.config for r in mine):
            rows = [r for r in mine if r.config == config]
            per.add_row(fit.loop, config, str(rows[0].steps),
                        f"{statistics.median(r.accepted for r in rows):.2f}",
                        f"{statistics.median(r.forward_s for r in rows) * 1e3:.3f}",
                        f"{statistics.median(r.host_s for r in rows) * 1e3:.3f}",
                        f"{fit.predict_us(rows[0].x) / 1e3:.3f}")
    return [terms, per]


# ---------------------------------------------------------------- timing


class ForwardClock:
    """Wraps module forwards with a perf_counter clock; `calls` holds (kind, start, end)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, float]] = []

    def wrap(self, module, kind: str) -> None:
        """Time every later call of `module`'s forward as `kind`."""
        inner = module.forward

        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = inner(*args, **kwargs)
            self.calls.append((kind, start, time.perf_counter()))
            return out

        module.forward = timed

    def steps(self, boundary: str = "target") -> tuple[int, float, float, dict[str, float]]:
        """(steps, median forward s per step, median host s per step, mean calls per step of
        each kind) over the intervals between successive `boundary` calls after the first two
        (the first: a prefill, or a step with the prompt); the last interval, which ends at no
        verification, is left out. Medians: a step the shared machine stalled does not count."""
        starts = [s for kind, s, _ in self.calls if kind == boundary]
        if len(starts) < 4:
            raise ValueError(f"{len(starts)} verifications: too few steps to time")
        forward, host = [], []
        for lo, hi in pairwise(starts[1:]):
            spent = sum(e - s for _, s, e in self.calls if lo <= s < hi)
            forward.append(spent)
            host.append(hi - lo - spent)
        inside = [kind for kind, s, _ in self.calls if starts[1] <= s < starts[-1]]
        steps = len(starts) - 2
        counts = {kind: inside.count(kind) / steps for kind in set(inside)}
        return steps, statistics.median(forward), statistics.median(host), counts


def layer_us(make_step: Callable[[int], Callable[[], None]], repeats: int) -> float:
    """Host µs per decoder layer: the slope of the fastest of `repeats` one-token steps over 2 and
    10 layers (benchmarks/engine_overheads.py's table 2)."""
    times = {}
    for layers in (2, 10):
        step = make_step(layers)
        for _ in range(3):
            step()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            best = min(best, time.perf_counter() - start)
        times[layers] = best
    return (times[10] - times[2]) / 8 * 1e6


def summary(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


# ---------------------------------------------------------------- research loops (.venv-research)

PROMPT = 32


def eagle_configs(quick: bool) -> list[Config]:
    """EAGLE-2's (depth, top_k, total_token) grid, each also `AGREE`ing; regressors: 1, depth + 1
    draft forwards, depth × (top_k − 1) further nodes, total_token tree nodes."""
    grid = ([(2, 4, 12), (5, 4, 24), (2, 8, 24), (5, 8, 12), (3, 6, 40)] if quick else
            [(d, k, n) for d in (2, 4, 6) for k in (4, 8) for n in (12, 32)])
    return [Config("EAGLE-2", f"depth {d}, top_k {k}, total_token {n}" + (f", {AGREE}" * agree),
                   (1.0, d + 1.0, d * (k - 1.0), float(n)),
                   {"depth": d, "top_k": k, "total_token": n, "agree": agree})
            for agree in (False, True) for d, k, n in grid]


def medusa_configs(quick: bool) -> list[Config]:
    """Medusa's `medusa_choices` (1 for the base token, then each head's top-k), each also
    `AGREE`ing; regressors: 1, heads, tree nodes (Σ of the choices' cumulative products)."""
    choices = ([[1, 3], [1, 2, 2], [1, 5, 3], [1, 2, 2, 2]] if quick else
               [[1, 2], [1, 6], [1, 2, 2], [1, 4, 3], [1, 7, 6], [1, 2, 2, 2], [1, 4, 2, 2],
                [1, 2, 2, 2, 2], [1, 3, 2, 2, 1]])
    return [Config("Medusa", f"choices {c}" + (f", {AGREE}" * agree),
                   (1.0, len(c) - 1.0, float(np.cumprod(c).sum())),
                   {"choices": c, "agree": agree})
            for agree in (False, True) for c in choices]


def _tokenizer_dir(tmp: Path) -> str:
    """A folder AutoTokenizer loads offline (a slow BertTokenizer of a few words): the research
    classes' __init__ load the base model's tokenizer, which only its eos id is read from."""
    (tmp / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]))
    (tmp / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    (tmp / "config.json").write_text(json.dumps({"model_type": "bert"}))
    return str(tmp)


def build_eagle(tmp: Path, depth: int, top_k: int, total_token: int, agree: bool = False):
    """`EaModel` as its from_pretrained builds it, from config objects: its KV Llama target (2
    layers) and its one-layer draft (`cnets.Model`) of random weights (`agree`: `AGREE`)."""
    import torch
    from eagle.model.cnets import Model
    from eagle.model.ea_model import EaModel
    from eagle.model.modeling_llama_kv import LlamaForCausalLM as KVLlama
    from engine_overheads import tiny_llama_config

    torch.manual_seed(0)
    target = KVLlama(tiny_llama_config(2)).eval()
    draft_config = tiny_llama_config(1).to_dict() | {"bias": True}
    (tmp / "ea_config.json").write_text(json.dumps(draft_config))
    from eagle.model.configs import EConfig

    state = Model(EConfig.from_pretrained(str(tmp / "ea_config.json"))).state_dict()
    model = EaModel(target, _tokenizer_dir(tmp), str(tmp / "ea_config.json"), total_token,
                    depth, top_k, 1.0, state).eval()
    model.tokenizer = SimpleNamespace(eos_token_id=-1)  # no token ends the run
    if agree:  # the draft's head is the target's (topK_genrate's `head`)
        model.base_model.lm_head.weight.data.zero_()
    return model


def build_medusa(tmp: Path, heads: int, agree: bool = False):
    """`MedusaModel` as its from_pretrained builds it, from config objects: its KV Llama target
    (2 layers) and `heads` heads of one ResBlock (`agree`: `AGREE`)."""
    import torch
    from engine_overheads import tiny_llama_config
    from medusa.model.medusa_model import MedusaModel
    from medusa.model.modeling_llama_kv import LlamaForCausalLM as KVLlama

    torch.manual_seed(0)
    target = KVLlama(tiny_llama_config(2)).eval()
    if agree:  # its heads' last layer starts as a copy of the LM head
        target.lm_head.weight.data.zero_()
    model = MedusaModel(target, heads, 1, _tokenizer_dir(tmp)).eval()
    # no token ends the run, and the per-step text the generator streams is not decoded
    model.tokenizer = SimpleNamespace(eos_token_id=-1, decode=lambda *a, **k: "")
    return model


def run_eagle(model, steps: int, tokens: int) -> float:
    """Runs `eagenerate` for `tokens` new tokens (at least `steps` steps when every drafted
    token is accepted); returns mean tokens accepted per step."""
    import torch

    prompt = torch.arange(1, PROMPT + 1).unsqueeze(0)
    out, _, idx = model.eagenerate(prompt, max_new_tokens=tokens, max_length=480, log=True)
    return (out.shape[1] - PROMPT) / (idx + 1) - 1


def run_medusa(model, steps: int, choices: list[int]) -> float:
    """Runs `medusa_generate` for `steps` steps; returns mean tokens accepted per step."""
    import torch

    prompt = torch.arange(1, PROMPT + 1).unsqueeze(0)
    for _ in model.medusa_generate(prompt, max_steps=steps, medusa_choices=choices):
        pass
    return (int(model.current_length_data[0]) - PROMPT) / steps - 1


def research_part(repeats: int, steps: int, quick: bool) -> dict:
    """EAGLE-2 and Medusa records, EAGLE's own vanilla loop per token and transformers' layer of
    this env, as a JSON-able dict."""
    import torch
    import transformers
    from engine_overheads import hf_layer_step

    records, naive = [], []
    with tempfile.TemporaryDirectory() as tmp:
        built = {}
        for config in eagle_configs(quick) + medusa_configs(quick):
            clock = ForwardClock()
            if config.loop == "EAGLE-2":
                model = build_eagle(Path(tmp), **config.args)
                clock.wrap(model.base_model.model, "target")
                clock.wrap(model.base_model.lm_head, "head")
                clock.wrap(model.ea_layer, "draft")
                tokens = steps * (config.args["depth"] + 1 if config.args["agree"] else 1)
                run = partial(run_eagle, model, steps, tokens)
            else:
                choices = config.args["choices"]
                model = build_medusa(Path(tmp), len(choices) - 1, config.args["agree"])
                clock.wrap(model.base_model.model, "target")
                clock.wrap(model.base_model.lm_head, "head")
                for head in model.medusa_head:
                    clock.wrap(head, "medusa_head")
                run = partial(run_medusa, model, steps, choices)
            run()  # warm-up
            built[config.name] = (config, clock, run)
        naive_clock = ForwardClock()
        naive_model = build_eagle(Path(tmp), 2, 4, 12)
        naive_clock.wrap(naive_model.base_model, "target")

        def run_naive() -> None:
            naive_model.naivegenerate(torch.arange(1, PROMPT + 1).unsqueeze(0),
                                      max_new_tokens=steps, max_length=480)

        run_naive()
        for repeat in range(repeats):
            for config, clock, run in built.values():
                clock.calls.clear()
                accepted = run()
                n, forward, host, _ = clock.steps()
                records.append(Record(config.loop, config.name, repeat, (*config.x, accepted),
                                      n, accepted, forward, host))
            naive_clock.calls.clear()
            run_naive()
            naive.append(naive_clock.steps()[2] * 1e6)  # its host per token
    layer = [layer_us(hf_layer_step, 25) for _ in range(repeats)]
    return {"records": [asdict(r) for r in records], "naive_token_us": naive,
            "layer_us": layer, "torch": torch.__version__,
            "transformers": transformers.__version__}


# ---------------------------------------------------------------- HF assisted (.venv)


def hf_configs(quick: bool) -> list[Config]:
    """Assisted generation's drafted tokens k and draft (other weights: ≈ 0 accepted; the target's
    own weights: some accepted); regressors: 1, draft forwards per step (counted per run: the
    draft stops short near the length limit)."""
    ks = (1, 3, 6) if quick else (1, 2, 4, 6, 8)
    return [Config("HF assisted", f"k {k}, {draft} draft", (1.0, float(k)),
                   {"k": k, "draft": draft}) for draft in ("other", "same") for k in ks]


def hf_part(repeats: int, steps: int, quick: bool) -> dict:
    """HF assisted-generation records, `generate`'s own work per token (engine_overheads'
    `per_token`) and both stacks' layer µs, as a JSON-able dict."""
    import copy

    import torch
    import transformers
    from engine_overheads import hf_layer_step, hf_model, per_token, specscope_layer_step

    target = hf_model(2)
    others = {"same": copy.deepcopy(target), "other": None}
    torch.manual_seed(1)
    others["other"] = transformers.LlamaForCausalLM(target.config).eval()
    prompt = torch.arange(1, PROMPT + 1).unsqueeze(0)
    clock = ForwardClock()
    clock.wrap(target, "target")
    for model in (target, *others.values()):
        model.generation_config.eos_token_id = None  # no token ends the run
    for draft in others.values():
        clock.wrap(draft, "draft")

    def run(config: Config) -> float:
        draft = others[config.args["draft"]]
        draft.generation_config.num_assistant_tokens = config.args["k"]
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
        clock.calls.clear()
        same = config.args["draft"] == "same"
        with torch.inference_mode():
            out = target.generate(prompt, assistant_model=draft, do_sample=False,
                                  max_new_tokens=steps * (config.args["k"] + 1 if same else 1)
                                  + config.args["k"],
                                  pad_token_id=0)
        verifications = sum(1 for kind, *_ in clock.calls if kind == "target")
        return (out.shape[1] - PROMPT) / verifications - 1

    configs = hf_configs(quick)
    for config in configs:
        run(config)  # warm-up
    records, baseline, layers, ours = [], [], [], []
    for repeat in range(repeats):
        for config in configs:
            accepted = run(config)
            n, forward, host, calls = clock.steps()
            x = (1.0, calls["draft"], accepted)  # the drafted tokens the draft's generate ran
            records.append(Record(config.loop, config.name, repeat, x, n, accepted, forward,
                                  host))
        generate, loop = per_token(32 if quick else 64, 3 if quick else 5)
        baseline.append((generate - loop) * 1e6)
        layers.append(layer_us(hf_layer_step, 25))
        ours.append(layer_us(specscope_layer_step, 25))
    return {"records": [asdict(r) for r in records], "baseline_token_us": baseline,
            "layer_us": layers, "specscope_layer_us": ours, "torch": torch.__version__,
            "transformers": transformers.__version__}


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("all", "research", "hf"), default="all",
                        help="all: the HF part here and the research part in --research-python; "
                             "research / hf: one part, its JSON to --json")
    parser.add_argument("--research-python", default=str(ROOT / ".venv-research/bin/python"))
    parser.add_argument("--json", help="where a one-part mode writes its JSON")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--quick", action="store_true", help="a smoke test: fewer configurations, "
                        "2 repeats, 12 steps, no result file")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.steps = min(args.repeats, 2), min(args.steps, 12)
    import torch

    torch.set_num_threads(args.threads)
    part = {"research": research_part, "hf": hf_part}
    if args.mode != "all":
        Path(args.json).write_text(json.dumps(part[args.mode](args.repeats, args.steps,
                                                              args.quick)))
        return
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [args.research_python, __file__, "--mode", "research", "--json", out.name,
                   "--repeats", str(args.repeats), "--steps", str(args.steps),
                   "--threads", str(args.threads)] + (["--quick"] if args.quick else [])
        started = time.perf_counter()
        subprocess.run(command, check=True, cwd=Path(__file__).parent)
        research = json.loads(Path(out.name).read_text())
    hf = hf_part(args.repeats, args.steps, args.quick)
    elapsed = time.perf_counter() - started
    write(research, hf, args, elapsed)


def write(research: dict, hf: dict, args, elapsed: float) -> None:
    """Prints the tables and, unless --quick, writes them with provenance to RESULT."""
    records = [Record(**(r | {"x": tuple(r["x"])})) for r in research["records"] + hf["records"]]
    research_layer, hf_layer = (statistics.median(research["layer_us"]),
                                statistics.median(hf["layer_us"]))
    ours = summary(hf["specscope_layer_us"])
    layers = {"EAGLE-2": research_layer, "Medusa": research_layer, "HF assisted": hf_layer}
    extras = {"EAGLE-2/baseline_token_us": summary(research["naive_token_us"]),
              "HF assisted/baseline_token_us": summary(hf["baseline_token_us"])}
    title = (f"Host work per step beyond the forwards, fitted to LoopCosts terms ({args.repeats} "
             f"repeats × {args.steps} steps, {args.threads} thread)")
    console = Console(width=140, record=True)
    for table in tables(records, layers, ours[0], extras, title):
        console.print(table)
    lo, hi = summary(research["layer_us"])[1:], summary(hf["layer_us"])[1:]
    console.print(
        f"Layer issue time (slope 2 → 10 layers, d = 64, median over repeats, min–max):\n"
        f"  transformers {research['transformers']} LlamaModel (EAGLE-2, Medusa's env): "
        f"{research_layer:.1f} µs ({lo[0]:.1f}–{lo[1]:.1f})\n"
        f"  transformers {hf['transformers']} LlamaModel (HF assisted's env): {hf_layer:.1f} µs "
        f"({hi[0]:.1f}–{hi[1]:.1f})\n"
        f"  specscope Transformer (reference_layer_us): {ours[0]:.1f} µs "
        f"({ours[1]:.1f}–{ours[2]:.1f})\n"
        f"EAGLE-2 baseline_token_us: `EaModel.naivegenerate`'s host work per token beyond its "
        f"forward; Medusa ships no vanilla loop. HF baseline_token_us: engine_overheads' generate "
        f"less a hand loop of the same forwards.\n"
        f"torch {research['torch']} / {hf['torch']}; .venv-research transformers "
        f"{research['transformers']}, .venv transformers {hf['transformers']}; "
        f"{time.strftime('%Y-%m-%d')}, {elapsed:.0f} s")
    if not args.quick:
        RESULT.write_text(console.export_text())


if __name__ == "__main__":
    main()
