"""What research speculative-decoding code pays the host per step beyond its forwards, on this CPU:
the measured source of the `research-hf`, `medusa-hf`, `hf-eager` and `sequoia` engines' loop
terms (specscope/hw_profiles/data/engines/). The fit, tables and clocks are benchmarks/loop_fit.py.

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
from dataclasses import asdict
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from loop_fit import (  # benchmarks/loop_fit.py (scripts run from benchmarks/)
    AGREE,
    Config,
    ForwardClock,
    Record,
    layer_us,
    summary,
    tables,
)
from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "research-loops.txt"

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


def run_eagle(model, tokens: int) -> float:
    """Runs `eagenerate` for `tokens` new tokens; returns mean tokens accepted per step."""
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
                run = partial(run_eagle, model, tokens)
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
        from specscope.atomic import write_text_atomic  # .venv's part: .venv-research has none

        write_text_atomic(RESULT, console.export_text())


if __name__ == "__main__":
    main()
